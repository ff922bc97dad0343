"""Status flows out: a status outbox filled by triggers, and what was last published.

Every statement that changes a run's state, start or end, creates a run, or
changes a task instance's state or try number writes one `status_outbox` row
per run it touched, in its own transaction: statement-level triggers with
transition tables, so no code path can forget it and a batch of a hundred task
reports is one insert, not a hundred. The rows are written only once a status
publisher has enabled them (`status_sink`), so `sluice standalone` and the
benchmarks' replicas leave nothing behind. A separate table, not `outbox`:
the dispatcher's hot claim scans `outbox` by id and must never wade through
status rows.

`run_publication` keeps, per run, the DagRun object it is published to and
what was published last (its resourceVersion, for a conditional patch, and a
summary to diff against for Events). `dag_run.object_name` is the name of a
user-created DagRun object (NULL: the scheduler names the object itself).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_ENQUEUE = "INSERT INTO status_outbox (dag_run_id) SELECT DISTINCT {select}"
_ENABLED = "IF NOT EXISTS (SELECT 1 FROM status_sink) THEN RETURN NULL; END IF;"

# (function, trigger, table, event, transition tables, the run ids to enqueue)
_TRIGGERS = [
    (
        "sluice_status_tasks_changed",
        "status_on_task_change",
        "task_instance",
        "UPDATE",
        "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        "n.dag_run_id FROM new_rows n JOIN old_rows o ON o.id = n.id"
        " WHERE n.state IS DISTINCT FROM o.state OR n.try_number <> o.try_number",
    ),
    (
        "sluice_status_runs_created",
        "status_on_run_insert",
        "dag_run",
        "INSERT",
        "NEW TABLE AS new_rows",
        "n.id FROM new_rows n",
    ),
    (
        "sluice_status_runs_changed",
        "status_on_run_change",
        "dag_run",
        "UPDATE",
        "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        "n.id FROM new_rows n JOIN old_rows o ON o.id = n.id"
        " WHERE n.state IS DISTINCT FROM o.state"
        " OR n.start_date IS DISTINCT FROM o.start_date"
        " OR n.end_date IS DISTINCT FROM o.end_date",
    ),
]


def upgrade() -> None:
    op.add_column("dag_run", sa.Column("object_name", sa.Text(), nullable=True))
    op.create_table(
        "status_sink",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "enabled_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_status_sink_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_status_sink")),
    )
    op.create_table(
        "status_outbox",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("dag_run_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "not_before",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_status_outbox")),
    )
    op.create_index("ix_status_outbox_ready", "status_outbox", ["not_before", "id"])
    op.create_table(
        "run_publication",
        sa.Column("dag_run_id", sa.BigInteger(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("object_name", sa.Text(), nullable=False),
        sa.Column("uid", sa.Text(), nullable=True),
        sa.Column("resource_version", sa.Text(), nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.Text(), nullable=True),
        sa.Column("summary", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("gone", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_run_publication_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dag_run_id", name=op.f("pk_run_publication")),
    )
    for function, trigger, table, event, transitions, select in _TRIGGERS:
        op.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"{_ENABLED} {_ENQUEUE.format(select=select)}; RETURN NULL; END $$"
        )
        op.execute(
            f"CREATE TRIGGER {trigger} AFTER {event} ON {table} REFERENCING {transitions}"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )


def downgrade() -> None:
    for function, trigger, table, *_ in reversed(_TRIGGERS):
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
        op.execute(f"DROP FUNCTION {function}()")
    op.drop_table("run_publication")
    op.drop_index("ix_status_outbox_ready", table_name="status_outbox")
    op.drop_table("status_outbox")
    op.drop_table("status_sink")
    op.drop_column("dag_run", "object_name")
