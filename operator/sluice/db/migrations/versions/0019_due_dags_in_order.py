"""`ix_dag_due` in phase 1's order: (next_run_after, dag_id), not next_run_after alone.

Phase 1 reads the DAGs due `ORDER BY next_run_after, dag_id LIMIT n` (`runs._DUE_DAGS`).
DAGs on one cron fall due at the same instant, so with the index on next_run_after
alone Postgres read every due DAG, counted each one's active runs, and sorted them
all to keep n: 13 ms a call with 11,000 DAGs due together, the scheduler's costliest
statement at the steady state's rates (bench/README.md, "The first sitting"). In
the read's own order the index hands over the first n and the scan stops: 0.04 ms.
Same predicate, same name.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_DUE = "NOT is_paused AND is_active AND next_run_after IS NOT NULL AND broken_reason IS NULL"


def upgrade() -> None:
    op.drop_index("ix_dag_due", table_name="dag")
    op.create_index(
        "ix_dag_due", "dag", ["next_run_after", "dag_id"], postgresql_where=sa.text(_DUE)
    )


def downgrade() -> None:
    op.drop_index("ix_dag_due", table_name="dag")
    op.create_index("ix_dag_due", "dag", ["next_run_after"], postgresql_where=sa.text(_DUE))
