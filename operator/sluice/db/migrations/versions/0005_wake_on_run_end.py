"""Wake the schedulers when a run ends: a queued run may now start.

A run that reaches `success` or `failed` frees a place under its DAG's (or
backfill's) `maxActiveRuns`. The replica that ended it looks at queued runs on
its next tick; this trigger tells the others too (see sluice.db.wakeups), so a
waiting run starts at once instead of at their next look at phase 1.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TRIGGER dag_run_end_wake AFTER UPDATE OF state ON dag_run FOR EACH ROW"
        " WHEN (NEW.state IN ('success', 'failed') AND OLD.state IS DISTINCT FROM NEW.state)"
        " EXECUTE FUNCTION sluice_wake()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER dag_run_end_wake ON dag_run")
