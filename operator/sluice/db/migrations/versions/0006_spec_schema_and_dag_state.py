"""Stored specs carry their schema version; a DAG can be broken; the manifest's pause is kept.

`dag_version.spec_schema_version` says which shape `spec` has, so a release
whose spec model changed upgrades old specs on read (sluice.spec.upgrades)
instead of failing to validate them. Every version stored before this
migration is schema version 1. The column has no default afterwards: whoever
stores a spec says which shape it wrote.

`dag.broken_reason` and `broken_at`: the scheduler marks a DAG whose current
version cannot be loaded, and the due-runs scan (`ix_dag_due`) leaves it out,
so such DAGs cannot take the places of the others in a tick's batch.

`dag.manifest_paused`: the manifest's `paused` at the last sync, so that a
sync changes `is_paused` only when the manifest's value changed (ADR 0011).
Existing DAGs get the value from their current version's stored spec (schema
1 has `paused`), so a DAG unpaused by hand stays unpaused.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "dag_version",
        sa.Column("spec_schema_version", sa.Integer(), nullable=False, server_default="1"),
    )
    op.alter_column("dag_version", "spec_schema_version", server_default=None)
    op.add_column("dag", sa.Column("broken_reason", sa.Text(), nullable=True))
    op.add_column("dag", sa.Column("broken_at", sa.DateTime(timezone=True), nullable=True))
    op.drop_index("ix_dag_due", table_name="dag")
    op.create_index(
        "ix_dag_due",
        "dag",
        ["next_run_after"],
        postgresql_where=sa.text(_DUE + " AND broken_reason IS NULL"),
    )
    op.add_column(
        "dag",
        sa.Column("manifest_paused", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.execute(
        "UPDATE dag SET manifest_paused = COALESCE("
        "(SELECT (v.spec ->> 'paused')::boolean FROM dag_version v"
        " WHERE v.id = dag.current_version_id), is_paused)"
    )
    op.alter_column("dag", "manifest_paused", server_default=None)


def downgrade() -> None:
    op.drop_index("ix_dag_due", table_name="dag")
    op.create_index("ix_dag_due", "dag", ["next_run_after"], postgresql_where=sa.text(_DUE))
    op.drop_column("dag", "manifest_paused")
    op.drop_column("dag", "broken_at")
    op.drop_column("dag", "broken_reason")
    op.drop_column("dag_version", "spec_schema_version")


_DUE = "NOT is_paused AND is_active AND next_run_after IS NOT NULL"
