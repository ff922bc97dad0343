"""Clearing and marking tasks (ADR 0038): `task_instance.stopping_since` and `task_action`.

`stopping_since`: a try the database no longer wants that may still run.

Airflow's RESTARTING: clearing a task whose try is running does not start the
next try at once. The try stays `running` (its pool slot and its place under
maxActiveTasks held, so no limit is passed while its process still runs) with
the time the clear asked it to stop; its heartbeats are refused (the pod stops
itself), its replica's fence kills it, and once it has ended, however it ended,
the instance goes back to `none` with its retries again (`scheduler.clearing`).
A running try ended under its process (a mark, a run's mark or timeout) is
stopping too: a clear that follows gets no next try until it has stopped.
Null for every other row: adding it rewrites nothing; a partial index finds the
few that are set (`housekeeping.release_stopped`).

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
        sa.Column("stopping_since", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_ti_stopping",
        "task_instance",
        ["id"],
        postgresql_where=sa.text("stopping_since IS NOT NULL"),
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
    op.drop_index("ix_ti_stopping", table_name="task_instance")
    op.drop_column("task_instance", "stopping_since")
