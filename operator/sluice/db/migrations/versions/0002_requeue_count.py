"""Task instances count how often they were put back from queued (queued timeout).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "task_instance",
        sa.Column("requeue_count", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index(
        "ix_ti_queued",
        "task_instance",
        ["queued_at"],
        postgresql_where=sa.text("state = 'queued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_ti_queued", table_name="task_instance")
    op.drop_column("task_instance", "requeue_count")
