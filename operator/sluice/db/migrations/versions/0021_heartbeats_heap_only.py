"""Drop `ix_ti_running_heartbeat`, so that a running try's heartbeat writes no index entry.

A heartbeat moves `last_heartbeat_at` only, and task pods heartbeat every few seconds
(the scheduler does it for the tries of an in-process executor). With that column
indexed (migration 0003), every heartbeat was a new row version with an entry in each
of the table's indexes that holds a running row (five); without it, and with room on
the page (migration 0020), Postgres updates the row in place (heap-only, HOT).
`python -m bench.heartbeat_writes` (100,000 task instances, 2,000 running, 10,000
heartbeats in batches of 200, 3 trials an arm): with the index none was HOT, 641 WAL
bytes a heartbeat, 453-494 ms; without it 81% HOT, 259 bytes, 277-305 ms.

The stale-tries sweep (`housekeeping.plan_stale_tries`) read the stale ones through
the index; it now reads the running ones through `ix_ti_occupying` (queued and
running instances, as many as the pools' slots) and keeps the stale ones: with
nothing stale, 2.9-3.0 ms a sweep against 2.3-2.6 ms with the index, once per
`zombie_check_interval`, for an in-process executor's tries. For tries that
heartbeat themselves (task pods) the condition is an OR with the owner's liveness,
so the sweep read every running try's row either way: 3.1-3.5 ms in both arms
(bench/README.md, "Heartbeats out of every index"; ADR 0053).

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_ti_running_heartbeat", table_name="task_instance")


def downgrade() -> None:
    op.create_index(
        "ix_ti_running_heartbeat",
        "task_instance",
        ["last_heartbeat_at"],
        postgresql_where=sa.text("state = 'running'"),
    )
