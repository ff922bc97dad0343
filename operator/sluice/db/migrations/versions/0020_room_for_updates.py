"""Room on `task_instance` and `task_try` pages for their rows' next versions (fillfactor).

A burst of runs inserts their task instances and tries densely, then updates each
one within seconds: a task instance three times or more (queued, running, ended),
a try once when it ends. On a full page every new version went to another page
(2,935 of 3,000 task instance updates and all 1,000 try updates, in a like-for-like
`no_structure` 10x100 trial at 512 tasks a query), so no try update was heap-only
(HOT) though only the primary key indexes `task_try`. With 30% of each task
instance page and half of each try page left free, the task instances' new
versions mostly stay on their page, and the tries' updates are HOT (bench/README.md,
"Room for the next version"; ADR 0053). Only pages written from now on keep the
room; existing rows are not rewritten.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# The values when this migration was written; the models' constants may move on.
_FILLFACTORS = {"task_instance": 70, "task_try": 50}


def upgrade() -> None:
    for table, percent in _FILLFACTORS.items():
        op.execute(f"ALTER TABLE {table} SET (fillfactor = {percent})")


def downgrade() -> None:
    for table in _FILLFACTORS:
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
