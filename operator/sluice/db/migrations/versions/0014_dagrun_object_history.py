"""`run_publication.dag_id` and `ended_at`: a DAG's DagRun objects keep a bounded history.

The status publisher deletes the DagRun objects of a DAG's ended runs beyond
the newest `--dagrun-history-limit` by end time (ADR 0034). To find them
without reading the DAG's whole run history, a publication records its run's
DAG and, once the published state is an end, when the run ended; a partial
index holds only the publications whose object is still there. Publications
made before this revision get both from their run.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run_publication", sa.Column("dag_id", sa.Text(), nullable=True))
    op.add_column(
        "run_publication", sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.execute(
        "UPDATE run_publication p SET dag_id = r.dag_id,"
        " ended_at = CASE WHEN p.state IN ('success', 'failed')"
        " THEN coalesce(r.end_date, p.published_at) END"
        " FROM dag_run r WHERE r.id = p.dag_run_id"
    )
    op.create_index(
        "ix_run_publication_history",
        "run_publication",
        ["dag_id", "ended_at", "dag_run_id"],
        postgresql_where=sa.text("NOT gone AND uid IS NOT NULL AND ended_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_run_publication_history", table_name="run_publication")
    op.drop_column("run_publication", "ended_at")
    op.drop_column("run_publication", "dag_id")
