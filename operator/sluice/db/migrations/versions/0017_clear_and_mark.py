"""Clearing and marking tasks (ADR 0038): `task_instance.restarting_since` and `task_action`.

`restarting_since`: a running try that a clear asked to stop.

Airflow's RESTARTING: clearing a task whose try is running does not start the
next try at once. The try stays `running` (its pool slot and its place under
maxActiveTasks held, so no limit is passed while its process still runs) with
the time the clear asked it to stop; its heartbeats are refused (the pod stops
itself), its replica's fence kills it, and once it has ended, however it ended,
the instance goes back to `none` with its retries again (`scheduler.clearing`).
Null for every other row: adding it rewrites nothing.

`task_action`: each TaskAction object done, by uid, with what it did: the
operator acts on an object once, whatever retries or restarts replay it.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "task_instance",
        sa.Column("restarting_since", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "task_action",
        sa.Column("uid", sa.Text(), primary_key=True),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "dag_run_id",
            sa.BigInteger(),
            sa.ForeignKey("dag_run.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("outcome", postgresql.JSONB(), nullable=False),
        sa.Column(
            "done_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )


def downgrade() -> None:
    op.drop_table("task_action")
    op.drop_column("task_instance", "restarting_since")
