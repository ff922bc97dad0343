"""Index running task instances by heartbeat: the stale-tries sweep reads only stale ones.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_ti_running_heartbeat",
        "task_instance",
        ["last_heartbeat_at"],
        postgresql_where=sa.text("state = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("ix_ti_running_heartbeat", table_name="task_instance")
