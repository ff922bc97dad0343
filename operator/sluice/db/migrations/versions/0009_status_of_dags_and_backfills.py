"""Status flows out for DAG and Backfill objects too.

`status_outbox` rows now say what changed: `kind` 'run' (with `dag_run_id`,
as before), 'dag' or 'backfill' (with `key`: the DAG id, the backfill id). A
run that is created or changes state also enqueues its DAG (active runs, last
run) and, if a backfill made it, that backfill (progress); a DAG row whose
pause, next run, version, activity or brokenness changes enqueues the DAG.
`object_publication` keeps, per DAG or Backfill object, the resourceVersion
and time of its last publication, as `run_publication` does for runs.
`backfill` records the Backfill object that created it (none for `sluice
backfill`).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_ENABLED = "IF NOT EXISTS (SELECT 1 FROM status_sink) THEN RETURN NULL; END IF;"

# A run's rows: the run itself, its DAG, and its backfill.
_RUN_ROWS = """
    INSERT INTO status_outbox (kind, dag_run_id, key)
    SELECT DISTINCT x.kind, x.run, x.key FROM changed c
      CROSS JOIN LATERAL (VALUES ('run', c.id, NULL::text),
                                 ('dag', NULL::bigint, c.dag_id),
                                 ('backfill', NULL::bigint, c.backfill_id::text))
           AS x(kind, run, key)
     WHERE x.kind <> 'backfill' OR c.backfill_id IS NOT NULL
"""

_FUNCTIONS = {
    "sluice_status_runs_created": (
        "WITH changed AS (SELECT n.id, n.dag_id, n.backfill_id FROM new_rows n)"
    ),
    "sluice_status_runs_changed": (
        "WITH changed AS (SELECT n.id, n.dag_id, n.backfill_id"
        " FROM new_rows n JOIN old_rows o ON o.id = n.id"
        " WHERE n.state IS DISTINCT FROM o.state"
        " OR n.start_date IS DISTINCT FROM o.start_date"
        " OR n.end_date IS DISTINCT FROM o.end_date"
        " OR n.backfill_id IS DISTINCT FROM o.backfill_id)"
    ),
}

_DAG_CHANGED = """
    INSERT INTO status_outbox (kind, key)
    SELECT DISTINCT 'dag', n.dag_id FROM new_rows n JOIN old_rows o ON o.dag_id = n.dag_id
     WHERE n.is_paused IS DISTINCT FROM o.is_paused
        OR n.next_logical_date IS DISTINCT FROM o.next_logical_date
        OR n.current_version_id IS DISTINCT FROM o.current_version_id
        OR n.is_active IS DISTINCT FROM o.is_active
        OR n.broken_reason IS DISTINCT FROM o.broken_reason
"""


def _function(name: str, body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"{_ENABLED} {body}; RETURN NULL; END $$"
    )


def upgrade() -> None:
    op.add_column(
        "status_outbox", sa.Column("kind", sa.Text(), server_default="run", nullable=False)
    )
    op.add_column("status_outbox", sa.Column("key", sa.Text(), nullable=True))
    op.alter_column("status_outbox", "dag_run_id", existing_type=sa.BigInteger(), nullable=True)
    op.add_column("backfill", sa.Column("object_namespace", sa.Text(), nullable=True))
    op.add_column("backfill", sa.Column("object_name", sa.Text(), nullable=True))
    op.add_column("backfill", sa.Column("object_uid", sa.Text(), nullable=True))
    op.create_index(
        "uq_backfill_object_uid",
        "backfill",
        ["object_uid"],
        unique=True,
        postgresql_where=sa.text("object_uid IS NOT NULL"),
    )
    op.create_table(
        "object_publication",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("object_name", sa.Text(), nullable=False),
        sa.Column("resource_version", sa.Text(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.PrimaryKeyConstraint("kind", "key", name=op.f("pk_object_publication")),
    )
    for name, changed in _FUNCTIONS.items():
        op.execute(_function(name, changed + _RUN_ROWS))
    op.execute(_function("sluice_status_dags_changed", _DAG_CHANGED))
    op.execute(
        "CREATE TRIGGER status_on_dag_change AFTER UPDATE ON dag"
        " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
        " FOR EACH STATEMENT EXECUTE FUNCTION sluice_status_dags_changed()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER status_on_dag_change ON dag")
    op.execute("DROP FUNCTION sluice_status_dags_changed()")
    op.execute(
        _function(
            "sluice_status_runs_created",
            "INSERT INTO status_outbox (dag_run_id) SELECT DISTINCT n.id FROM new_rows n",
        )
    )
    op.execute(
        _function(
            "sluice_status_runs_changed",
            "INSERT INTO status_outbox (dag_run_id) SELECT DISTINCT n.id FROM new_rows n"
            " JOIN old_rows o ON o.id = n.id WHERE n.state IS DISTINCT FROM o.state"
            " OR n.start_date IS DISTINCT FROM o.start_date"
            " OR n.end_date IS DISTINCT FROM o.end_date",
        )
    )
    op.drop_table("object_publication")
    op.drop_index("uq_backfill_object_uid", table_name="backfill")
    op.drop_column("backfill", "object_uid")
    op.drop_column("backfill", "object_name")
    op.drop_column("backfill", "object_namespace")
    op.execute("DELETE FROM status_outbox WHERE dag_run_id IS NULL")
    op.alter_column("status_outbox", "dag_run_id", existing_type=sa.BigInteger(), nullable=False)
    op.drop_column("status_outbox", "key")
    op.drop_column("status_outbox", "kind")
