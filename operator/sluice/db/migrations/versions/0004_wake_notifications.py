"""Wake idle schedulers with NOTIFY when work appears (see sluice.db.wakeups).

A DAG registered or (un)paused, or a run inserted, commits one `pg_notify` on
the `sluice_wake` channel per statement. Triggers, not application code, so
every writer (the operator, the CLI, a hand-written UPDATE) wakes the schedulers.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION sluice_wake() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('sluice_wake', TG_TABLE_NAME);
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER dag_wake AFTER INSERT OR UPDATE OF is_paused ON dag"
        " FOR EACH STATEMENT EXECUTE FUNCTION sluice_wake()"
    )
    op.execute(
        "CREATE TRIGGER dag_run_wake AFTER INSERT ON dag_run"
        " FOR EACH STATEMENT EXECUTE FUNCTION sluice_wake()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER dag_run_wake ON dag_run")
    op.execute("DROP TRIGGER dag_wake ON dag")
    op.execute("DROP FUNCTION sluice_wake()")
