"""`dag_run.deadline`: when phase 2 must end a running run, so the look finds it.

A run's `dagrunTimeout` lived only in its DAG version's spec, so no statement
could tell that a run had passed it: phase 2 found such runs by examining
quiet runs round-robin once per tick interval. Phase 1 now writes the deadline
when it starts a run (its start plus the timeout; its start for a run whose
version cannot be loaded), and a run past its deadline, or of a deleted DAG,
is work that the loop's one look and phase 2's runs with work find through
the two partial indexes below (ADR 0024). Runs started before this revision
have no deadline; the quiet round, now rare, still catches their timeouts.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dag_run", sa.Column("deadline", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_dag_run_deadline",
        "dag_run",
        ["deadline"],
        postgresql_where=sa.text("state = 'running' AND deadline IS NOT NULL"),
    )
    op.create_index("ix_dag_deleted", "dag", ["dag_id"], postgresql_where=sa.text("NOT is_active"))


def downgrade() -> None:
    op.drop_index("ix_dag_deleted", table_name="dag")
    op.drop_index("ix_dag_run_deadline", table_name="dag_run")
    op.drop_column("dag_run", "deadline")
