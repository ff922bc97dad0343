"""Drop `ix_ti_running_heartbeat`, so that a running try's heartbeat writes no index entry.

A heartbeat moves `last_heartbeat_at` only, and task pods heartbeat every few seconds
(the scheduler does it for the tries of an in-process executor). With that column
indexed (migration 0003), every heartbeat was a new row version with an entry in each
of the table's indexes that holds a running row (five); without it, and with room on
the page (migration 0020), Postgres updates the row in place (heap-only, HOT). On
100,000 task instances with 2,000 running, 10,000 heartbeats in batches of 200: none
HOT and 310-339 ms with the index, 83% HOT and 214-255 ms without it.

The stale-tries sweep (`housekeeping.plan_stale_tries`) read stale ones through the
index; it now reads the running ones through `ix_ti_occupying` (queued and running
instances, as many as the pools' slots) and keeps the stale ones: 2,000 running
rows, 0.6-1.0 ms, once per `zombie_check_interval`. With tries that heartbeat
themselves it already read every running try's row, as its condition is an OR with
the owner's liveness (ADR 0053).

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
