"""Tasks whose pool does not exist: they wait a while, then fail with the reason.

The critical section never queues a task whose pool has no `slot_pool` row,
and never lets one hold back the others. Airflow leaves such a task
`scheduled` for ever; here every run ends, so it waits up to the queued
timeout (its Pool may be on its way: a DAG and its Pool applied together,
a Pool deleted and created again) and then fails, without retries (a retry
would meet the same missing pool), the reason naming the pool and the fix.

The database keeps no time for when a task became `scheduled`, so the wait
counts from the latest of its run's creation and start, its last try's end and
its last queueing, each no later than that moment: a task that became ready late
in a long run may wait less than the full wait.

A failed task gets a try of its own (its try number moves on, as Airflow's
does when it schedules a task), opened and failed in one transaction through
the report path, so its try row, downstream tasks, run progress and alert are
those of any failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy import text
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.executors.base import TaskEvent
from sluice.scheduler.results import Applied, apply_task_events
from sluice.spec.states import TaskState

log = structlog.get_logger("sluice.scheduler")

# Scheduled tasks of unpaused DAGs whose pool has no row, waiting since before :before.
_WAITING_ON_MISSING_POOLS = text(
    """
    SELECT t.id, t.pool
    FROM task_instance t
    JOIN dag_run r ON r.id = t.dag_run_id
    JOIN dag d ON d.dag_id = t.dag_id
    WHERE t.state = 'scheduled' AND NOT d.is_paused
      AND NOT EXISTS (SELECT FROM slot_pool p WHERE p.name = t.pool)
      AND greatest(r.created_at, r.start_date, t.end_date, t.queued_at) < :before
    ORDER BY t.id
    LIMIT :limit
    """
)

# Open a try for each (the instance `queued`, its try number moved on, a try row), for
# the report path to fail; a pool created since the read above saves its tasks.
_OPEN_TRIES = text(
    """
    WITH opened AS (
        UPDATE task_instance t SET
            state = 'queued', try_number = try_number + 1, queued_at = NULL,
            queued_by_job_id = NULL, start_date = NULL, end_date = NULL, exit_code = NULL,
            reason = NULL, last_heartbeat_at = NULL
        WHERE t.id = ANY(:ids) AND t.state = 'scheduled'
          AND NOT EXISTS (SELECT FROM slot_pool p WHERE p.name = t.pool)
        RETURNING t.id, t.try_number
    ), tries AS (
        INSERT INTO task_try (task_instance_id, try_number, state)
        SELECT id, try_number, 'queued' FROM opened
    )
    SELECT id, try_number FROM opened
    """
)


def missing_pool_reason(pool: str) -> str:
    return (
        f"pool {pool!r} does not exist (named by the task's `pool` field): create a Pool"
        f" named {pool!r} or set the task's `pool` to an existing one, then run the task again"
    )


@dataclass(frozen=True)
class Waiting:
    ti_id: int
    pool: str


def waiting_on_missing_pools(
    session: Session, now: datetime, *, wait: float, limit: int = 100
) -> list[Waiting]:
    """Up to `limit` scheduled tasks whose pool has not existed for `wait` seconds."""
    rows = session.execute(
        _WAITING_ON_MISSING_POOLS, {"before": now - timedelta(seconds=wait), "limit": limit}
    )
    return [Waiting(row.id, row.pool) for row in rows]


def fail_waiting(
    session: Session, specs: SpecCache, waiting: list[Waiting], now: datetime
) -> list[Applied]:
    """Fail these tasks, each with a try of its own; the caller has locked their runs
    (lock order) and commits."""
    if not waiting:
        return []
    pools = {w.ti_id: w.pool for w in waiting}
    opened = session.execute(_OPEN_TRIES, {"ids": list(pools)}).all()
    events = [
        TaskEvent(row.id, row.try_number, TaskState.FAILED, reason=missing_pool_reason(pool))
        for row in opened
        for pool in [pools[row.id]]
    ]
    applied = apply_task_events(session, events, specs, now, retry=False)
    if applied:
        log.warning(
            "tasks failed: their pool does not exist",
            pools=sorted({pools[a.ti_id] for a in applied}),
            tasks=len(applied),
        )
    return applied
