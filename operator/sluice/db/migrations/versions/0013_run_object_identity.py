"""`dag_run.object_namespace` and `dag_run.object_uid`: a run knows its object by uid.

A DagRun object's handlers found their run by the object's name, or by the run
id in an annotation of objects labelled as the scheduler's: anyone who can
create a DagRun in any namespace could write either. A run now records the
namespace and uid of the object that triggered it, and the handlers act only
on the run whose recorded uid is the object's (the scheduler's own objects:
`run_publication.uid`, indexed here for that look-up). ADR 0031.

Runs triggered before this revision get their object's namespace from their
DAG, and its uid from their publication when the publication's uid is the one
their run id was made from (`manual__<name>__<first 8 of the uid>`); the
handlers match the others by that run id.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dag_run", sa.Column("object_namespace", sa.Text(), nullable=True))
    op.add_column("dag_run", sa.Column("object_uid", sa.Text(), nullable=True))
    op.execute(
        "UPDATE dag_run r SET object_namespace = d.namespace FROM dag d"
        " WHERE d.dag_id = r.dag_id AND r.object_name IS NOT NULL"
    )
    op.execute(
        "UPDATE dag_run r SET object_uid = p.uid FROM run_publication p"
        " WHERE p.dag_run_id = r.id AND r.object_name IS NOT NULL AND p.uid IS NOT NULL"
        " AND r.run_id = 'manual__' || r.object_name || '__' || left(p.uid, 8)"
    )
    op.create_index(
        "uq_dag_run_object_uid",
        "dag_run",
        ["object_uid"],
        unique=True,
        postgresql_where=sa.text("object_uid IS NOT NULL"),
    )
    op.create_index(
        "ix_run_publication_uid",
        "run_publication",
        ["uid"],
        postgresql_where=sa.text("uid IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_run_publication_uid", table_name="run_publication")
    op.drop_index("uq_dag_run_object_uid", table_name="dag_run")
    op.drop_column("dag_run", "object_uid")
    op.drop_column("dag_run", "object_namespace")
