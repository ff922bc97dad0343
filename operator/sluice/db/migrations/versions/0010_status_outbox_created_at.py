"""`status_outbox.created_at`: when a change was enqueued.

`not_before` says when a row may be taken next, and moves with every lease
and retry, so it cannot tell how long a change has waited. `created_at` can:
the metrics sampler exports the age of the oldest row
(`sluice_status_outbox_oldest_age_seconds`, ADR 0020), which grows while the
API server refuses or a publisher is stuck. Rows already there get the time of
the migration (a constant default: no table rewrite).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "status_outbox",
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
    )


def downgrade() -> None:
    op.drop_column("status_outbox", "created_at")
