"""`backfill.reprocess`: what a backfill does with a date whose run has ended.

`rerun_failed` could say only "run a failed one again"; a backfill may now
also run again a run that succeeded (`completed`, Airflow 3's
`--reprocess-behavior completed`). Rows already there say `failed` where
`rerun_failed` is set, else `none`; `rerun_failed` stays, set exactly when
`reprocess` is `failed`.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "backfill",
        sa.Column("reprocess", sa.Text(), server_default="none", nullable=False),
    )
    op.execute("UPDATE backfill SET reprocess = 'failed' WHERE rerun_failed")


def downgrade() -> None:
    op.drop_column("backfill", "reprocess")
