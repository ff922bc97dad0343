"""`task_try.pod` and `task_try.node`: where a try's process ran, as its executor saw it end.

The Job executor reports the pod of a try that ended (namespace/name) and its
node; the log archiver then reads that pod's log by name, without first
listing the try's pods: one request per try, not two (issue 30: the log
archive's API budget). Null where it is not known (a try that never started, a
zombie's, the local executor's, rows from before): the archiver lists then.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("task_try", sa.Column("pod", sa.Text(), nullable=True))
    op.add_column("task_try", sa.Column("node", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("task_try", "node")
    op.drop_column("task_try", "pod")
