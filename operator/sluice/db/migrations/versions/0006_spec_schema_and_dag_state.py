"""Stored specs carry the schema version they were written in.

`dag_version.spec_schema_version` says which shape `spec` has, so a release
whose spec model changed upgrades old specs on read (sluice.spec.upgrades)
instead of failing to validate them. Every version stored before this
migration is schema version 1. The column has no default afterwards: whoever
stores a spec says which shape it wrote.

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


def downgrade() -> None:
    op.drop_column("dag_version", "spec_schema_version")
