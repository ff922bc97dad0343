"""`task_log.expired_at`: archived logs are deleted after `--log-retention-days`.

A log whose try ended longer ago than the retention has its object deleted
from the store and its row kept, `state` 'expired' with when (`expired_at`)
and under which setting (`reason`), so `sluice logs` can say why there is
nothing to read. `state` is free text (no constraint to widen). A partial
index holds only the archived rows, by when they were archived (never before
their try ended), so finding the next to expire does not wade through the
expired ones, which only grow.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("task_log", sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_task_log_to_expire",
        "task_log",
        ["archived_at", "task_instance_id", "try_number"],
        postgresql_where=sa.text("state = 'archived'"),
    )


def downgrade() -> None:
    op.drop_index("ix_task_log_to_expire", table_name="task_log")
    op.drop_column("task_log", "expired_at")
