"""A try's zombie evidence is kept with the try: `task_try.evidence`.

The zombie sweep's evidence (last heartbeat, threshold, owner, what the
executor said) was only on the task instance, which the next try overwrites;
a retried zombie then had no evidence left anywhere. The try's own history row
now keeps it, written in the same statement as the verdict. Evidence already
on a task instance whose current try is a zombie is copied to that try.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "task_try",
        sa.Column("evidence", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    op.execute(
        "UPDATE task_try tt SET evidence = ti.evidence FROM task_instance ti"
        " WHERE tt.task_instance_id = ti.id AND tt.try_number = ti.try_number"
        " AND ti.evidence IS NOT NULL AND ti.reason LIKE 'zombie%'"
    )


def downgrade() -> None:
    op.drop_column("task_try", "evidence")
