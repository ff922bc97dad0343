"""Phase 3 of the loop: the critical section that moves tasks from scheduled to queued.

Entry is `SELECT ... FROM slot_pool FOR UPDATE NOWAIT`: one replica at a time
counts free slots, and a replica that finds the lock busy skips this tick
rather than waiting (the holder is already doing the work). The same statement
says whether anything is scheduled, and in which pools with a free slot: when
none, the section ends there. Inside, scheduled
task instances are read by priority weight, logical date and id with
`FOR UPDATE SKIP LOCKED` and a batch limit, checked against pool slots and each
DAG's maxActiveTasks, moved to `queued` with their try number bumped.

The section claims for this replica what it queues (ADR 0047): up to `claim` of the
tries go on to `running` in the same statement, owned by this replica, and come back
with what their launch needs (the run, its DAG's namespace); the caller starts them
after the commit. Only the rest (beyond the claim's limit, or with a claim of 0) get
a `start_task` outbox row, for any replica's dispatcher.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from sluice.db import locks, plans
from sluice.db.prepared import Prepared
from sluice.spec.states import OCCUPYING_TASK_STATES, TaskState

START_TASK = "start_task"


# One round trip for the writes: each chosen instance `scheduled -> queued` with its try
# number bumped and a task_try row, those in :claim on to `running` for this replica at
# once (as the dispatcher's claim sets them, `dispatch._CLAIM`), and a `start_task` outbox
# row for each of the others; it returns what a launch needs, from the run and its DAG.
_QUEUE = Prepared(
    """
    WITH queued AS (
        UPDATE task_instance SET
            state = CASE WHEN id = ANY(:claim) THEN :running ELSE :queued END,
            try_number = try_number + 1, queued_at = :now, queued_by_job_id = :job_id,
            start_date = CASE WHEN id = ANY(:claim) THEN CAST(:now AS timestamptz) END,
            last_heartbeat_at = CASE WHEN id = ANY(:claim) THEN CAST(:now AS timestamptz) END,
            running_by_job_id = CASE
                WHEN id = ANY(:claim) THEN CAST(:job_id AS integer) ELSE running_by_job_id END,
            external_id = CASE WHEN id = ANY(:claim) THEN NULL ELSE external_id END,
            end_date = NULL, exit_code = NULL, reason = NULL, evidence = NULL
        WHERE id = ANY(:ids) AND state = :scheduled
        RETURNING id, try_number, state, dag_run_id, task_id
    ), tries AS (
        INSERT INTO task_try (task_instance_id, try_number, state, queued_at, start_date,
                              scheduler_job_id, external_id)
        SELECT id, try_number, state, :now,
               CASE WHEN state = :running THEN CAST(:now AS timestamptz) END, :job_id,
               CASE WHEN state = :running THEN CAST(:executor AS text) END
        FROM queued
    ), starts AS (
        INSERT INTO outbox (kind, payload, created_at, not_before, attempts)
        SELECT :kind, jsonb_build_object('ti_id', id, 'try_number', try_number), :now, :now, 0
        FROM queued WHERE state = :queued
    )
    SELECT q.id, q.try_number, q.state = :running AS claimed, q.task_id, r.dag_id, r.run_id,
           r.dag_version_id, r.logical_date, r.data_interval_start, r.data_interval_end,
           r.conf, d.namespace
    FROM queued q JOIN dag_run r ON r.id = q.dag_run_id JOIN dag d ON d.dag_id = r.dag_id
    ORDER BY q.id
    """
)


# The states that hold a pool slot, as SQL literals (the same text every time).
OCCUPYING_SQL = ", ".join(f"'{state.value}'" for state in sorted(OCCUPYING_TASK_STATES))

# The critical section's lock: every pool row, NOWAIT (a busy lock skips the tick); and
# whether anything is scheduled at all, so an idle tick never counts the tasks in flight.
# Only when something is, each pool's slots in use and whether tasks wait in it: when no
# pool with waiting tasks has a free slot (a full pool, the steady state of a busy
# cluster), nothing can be queued and the read below is not made.
_LOCK_POOLS = Prepared(
    f"""
    SELECT p.name, p.slots, s.work,
           CASE WHEN s.work THEN (
               SELECT COALESCE(sum(t.pool_slots), 0) FROM task_instance t
               WHERE t.pool = p.name AND t.state IN ({OCCUPYING_SQL}))
           END AS used,
           CASE WHEN s.work THEN EXISTS (
               SELECT FROM task_instance t WHERE t.pool = p.name AND t.state = 'scheduled')
           END AS waiting
    FROM slot_pool p
    CROSS JOIN (SELECT EXISTS (SELECT FROM task_instance WHERE state = 'scheduled') AS work) s
    ORDER BY p.id FOR UPDATE OF p NOWAIT
    """
)

# One read under that lock: slots in use per pool and tasks in flight per DAG (the
# rows with `candidate` false), then the scheduled instances by priority weight,
# logical date and id (`candidate` true), leaving out pools with no room left (or no
# row: `pools.py` fails their tasks after a wait), DAGs at maxActiveTasks, and paused
# or deleted DAGs, so a full pool or a busy DAG never starves the rest; locked SKIP
# LOCKED so two replicas never queue one twice.
_READ = Prepared(
    f"""
    WITH pools AS (
        SELECT * FROM unnest(CAST(:pools AS text[]), CAST(:slots AS int[])) AS p(name, slots)
    ), occupied AS (
        SELECT ti.pool, ti.dag_id, sum(ti.pool_slots) AS slots, count(*) AS n,
               d.max_active_tasks
        FROM task_instance ti JOIN dag d ON d.dag_id = ti.dag_id
        WHERE ti.state IN ({OCCUPYING_SQL})
        GROUP BY ti.pool, ti.dag_id, d.max_active_tasks
    ), open_pools AS (
        SELECT p.name FROM pools p
        LEFT JOIN (SELECT pool, sum(slots) AS used FROM occupied GROUP BY pool) u
               ON u.pool = p.name
        WHERE COALESCE(u.used, 0) < p.slots
    ), busy_dags AS (
        SELECT dag_id FROM occupied
        GROUP BY dag_id, max_active_tasks HAVING sum(n) >= max_active_tasks
    ), candidates AS (
        SELECT ti.id, ti.dag_id, ti.pool, ti.pool_slots, ti.priority_weight, ti.logical_date
        FROM task_instance ti
        WHERE ti.state = 'scheduled'
          AND ti.pool IN (SELECT name FROM open_pools)
          AND ti.dag_id NOT IN (SELECT dag_id FROM busy_dags)
          AND NOT EXISTS (
              SELECT FROM dag d
              WHERE d.dag_id = ti.dag_id AND (d.is_paused OR NOT d.is_active))
        ORDER BY ti.priority_weight DESC, ti.logical_date, ti.id
        LIMIT :limit
        FOR UPDATE OF ti SKIP LOCKED
    )
    SELECT false AS candidate, pool, dag_id, slots, n, max_active_tasks,
           CAST(NULL AS bigint) AS id, CAST(NULL AS int) AS weight,
           CAST(NULL AS timestamptz) AS logical_date
    FROM occupied
    UNION ALL
    SELECT true, c.pool, c.dag_id, c.pool_slots, NULL, d.max_active_tasks, c.id,
           c.priority_weight, c.logical_date
    FROM candidates c JOIN dag d ON d.dag_id = c.dag_id
    ORDER BY candidate, weight DESC, logical_date, id
    """
)


@dataclass
class CriticalSectionResult:
    entered: bool
    queued: list[tuple[int, int]] = field(default_factory=list)
    # The tries claimed for this replica (now `running`), each with what its launch needs
    # (`dispatch.launches_of`): the caller starts them after the commit.
    claimed: list[Row[Any]] = field(default_factory=list)
    starved_pools: set[str] = field(default_factory=set)
    room_left: bool = False  # a pool still had a free slot after the choice


def _choose(
    session: Session, pools: dict[str, int], waiting: set[str], limit: int
) -> tuple[CriticalSectionResult, list[int], int]:
    """Read up to `limit` candidates (locking them) and choose what the limits allow:
    (the result so far, the chosen ids, how many candidates were read). `room_left`:
    a pool in `waiting` (with scheduled tasks) still has a free slot."""
    pool_used: dict[str, int] = defaultdict(int)
    dag_active: dict[str, int] = defaultdict(int)
    candidates = []
    read = {"pools": list(pools), "slots": list(pools.values()), "limit": limit}
    for row in _READ(session, read):
        if row.candidate:
            candidates.append(row)
        else:
            pool_used[row.pool] += int(row.slots)
            dag_active[row.dag_id] += int(row.n)
    full_pools = {name for name, slots in pools.items() if pool_used[name] >= slots}
    chosen: list[int] = []
    result = CriticalSectionResult(entered=True, starved_pools=full_pools)
    for c in candidates:
        if pool_used[c.pool] + c.slots > pools[c.pool]:
            result.starved_pools.add(c.pool)
            continue
        if dag_active[c.dag_id] >= c.max_active_tasks:
            continue
        pool_used[c.pool] += c.slots
        dag_active[c.dag_id] += 1
        chosen.append(c.id)
    result.room_left = any(pool_used[name] < pools[name] for name in waiting)
    return result, chosen, len(candidates)


def queue_schedulable_task_instances(
    session: Session,
    now: datetime,
    *,
    job_id: int | None,
    max_tis: int,
    claim: int = 0,
    executor_name: str | None = None,
) -> CriticalSectionResult:
    """Queue what the limits allow, and claim the first `claim` of them for this replica;
    the caller commits (which releases the pool lock), then starts what it claimed."""
    try:
        locked = _LOCK_POOLS(session).all()
    except OperationalError as exc:
        if locks.is_lock_not_available(exc):
            session.rollback()
            return CriticalSectionResult(entered=False)
        raise
    if not any(row.work for row in locked):
        return CriticalSectionResult(entered=True)
    if not any(row.waiting and row.used < row.slots for row in locked):
        full = {row.name for row in locked if row.used >= row.slots}
        return CriticalSectionResult(entered=True, starved_pools=full)
    # The candidates are read walking ix_ti_scheduled in its order up to the limit: planned
    # from a table that had few scheduled rows, the read sorted every scheduled row instead
    # (2.4 ms a pass with 500 waiting, 23 ms with 7,000, for a window of 16).
    plans.through_indexes(session, in_index_order=True)
    pools: dict[str, int] = {row.name: row.slots for row in locked}
    # Most passes have a slot or two to fill (a try ended): read a window about that
    # size first, not `max_tis` rows read and locked to queue one. Choosing is greedy in
    # read order, so a window's choice is the start of the full read's; only when the
    # window was full and left a pool with room is the full read made.
    waiting = {row.name for row in locked if row.waiting}
    room = sum(max(0, row.slots - row.used) for row in locked if row.waiting)
    window = min(max_tis, 2 * max(room, 1))
    result, chosen, seen = _choose(session, pools, waiting, window)
    if window < max_tis and seen == window and result.room_left:
        result, chosen, seen = _choose(session, pools, waiting, max_tis)
    if not chosen:
        return result

    # Claimed in the order chosen (priority first), so a limit keeps the most urgent.
    rows = _QUEUE(
        session,
        {
            "ids": chosen,
            "claim": chosen[: max(claim, 0)],
            "now": now,
            "job_id": job_id,
            "executor": executor_name,
            "kind": START_TASK,
            "scheduled": TaskState.SCHEDULED.value,
            "queued": TaskState.QUEUED.value,
            "running": TaskState.RUNNING.value,
        },
    ).all()
    result.queued = [(row.id, row.try_number) for row in rows]
    result.claimed = [row for row in rows if row.claimed]
    return result
