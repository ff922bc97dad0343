"""Applying how tries ended: guarded updates, retries, and downstream propagation.

Reports come from executors (and from the zombie sweep). Each is a
compare-and-set on (task instance, try number, a live state): a late,
duplicate or out-of-order report matches no row and changes nothing. A failed
try with retries left becomes `up_for_retry` with its next time computed from
`retryDelay` and backoff; otherwise the state is final and the downstream
counters move in the same transaction, where the tasks that makes ready are
decided too (`examine.follow_up`), not at their run's next turn in phase 2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from sluice.db import plans
from sluice.db.dags import SpecCache
from sluice.db.models import Outbox
from sluice.db.prepared import Prepared
from sluice.executors.base import TaskEvent
from sluice.scheduler import past
from sluice.scheduler.clearing import RESET_COLUMNS
from sluice.scheduler.examine import follow_up
from sluice.scheduler.transitions import Settled, lock_runs_of, propagate, run_progress
from sluice.spec.retries import retry_delay
from sluice.spec.states import TaskState

LIVE_STATES = (TaskState.QUEUED, TaskState.RUNNING)
_LIVE = [state.value for state in LIVE_STATES]
ALERT = "alert"

# The reported instances with their runs' versions, locked (their runs are locked first).
_READ = Prepared(
    """
    SELECT ti.id, ti.try_number, ti.max_tries, ti.state, ti.task_id, ti.dag_run_id,
           ti.downstream_task_ids, ti.stopping_since, r.dag_version_id
    FROM task_instance ti JOIN dag_run r ON r.id = ti.dag_run_id
    WHERE ti.id = ANY(:ids)
    ORDER BY ti.id
    FOR UPDATE OF ti
    """
)

# One round trip: each report a compare-and-set on (instance, try number, a live state),
# the try's own row, and the runs' progress; one array per column. The rows were read
# under lock just before, so every compare-and-set here matches.
_SETTLE = Prepared(
    """
    WITH v AS (
        SELECT * FROM unnest(
            CAST(:b_id AS bigint[]), CAST(:b_try AS int[]), CAST(:state AS text[]),
            CAST(:try_state AS text[]), CAST(:exit_code AS int[]), CAST(:reason AS text[]),
            CAST(:next_retry_at AS timestamptz[]), CAST(:evidence AS text[]),
            CAST(:pod AS text[]), CAST(:node AS text[])
        ) AS v(id, try_number, state, try_state, exit_code, reason, next_retry_at, evidence,
               pod, node)
    ), settled AS (
        UPDATE task_instance ti SET
            state = v.state, end_date = :now, exit_code = v.exit_code, reason = v.reason,
            next_retry_at = v.next_retry_at, evidence = CAST(v.evidence AS jsonb)
        FROM v
        WHERE ti.id = v.id AND ti.try_number = v.try_number AND ti.state = ANY(:live)
        RETURNING ti.id, ti.try_number
    ), progress AS (
        UPDATE dag_run SET tasks_done = tasks_done + p.delta
        FROM unnest(CAST(:runs AS bigint[]), CAST(:deltas AS int[])) AS p(id, delta)
        WHERE dag_run.id = p.id
    )
    UPDATE task_try tt SET
        state = v.try_state, end_date = :now, exit_code = v.exit_code, reason = v.reason,
        evidence = CAST(v.evidence AS jsonb), pod = v.pod, node = v.node
    FROM settled JOIN v ON v.id = settled.id AND v.try_number = settled.try_number
    WHERE tt.task_instance_id = settled.id AND tt.try_number = settled.try_number
    """
)
# A try a clear asked to stop (`clearing`) has ended, however: its instance goes back to
# `none` (its retries were given back by the clear) and the try's row says why it ended.
_RESTARTED = Prepared(
    f"""
    WITH v AS (
        SELECT * FROM unnest(
            CAST(:ids AS bigint[]), CAST(:tries AS int[]), CAST(:exit_codes AS int[]),
            CAST(:reasons AS text[])
        ) AS v(id, try_number, exit_code, reason)
    ), reset AS (
        UPDATE task_instance ti SET {RESET_COLUMNS}
        FROM v
        WHERE ti.id = v.id AND ti.try_number = v.try_number AND ti.state = 'running'
          AND ti.stopping_since IS NOT NULL
        RETURNING ti.id, ti.try_number
    )
    UPDATE task_try tt SET state = 'failed', end_date = :now, exit_code = v.exit_code,
        reason = v.reason
    FROM reset JOIN v ON v.id = reset.id AND v.try_number = reset.try_number
    WHERE tt.task_instance_id = reset.id AND tt.try_number = reset.try_number
    """
)
# A try ended under its process has stopped: its instance may be decided again (it was
# held back if a clear put it back to `none` meanwhile: `examine`).
_STOPPED = Prepared(
    """
    UPDATE task_instance SET stopping_since = NULL, needs_eval = needs_eval OR state = 'none'
    WHERE id = ANY(:ids)
    """
)
_COLUMNS = (
    "b_id",
    "b_try",
    "state",
    "try_state",
    "exit_code",
    "reason",
    "next_retry_at",
    "evidence",
    "pod",
    "node",
)


@dataclass(frozen=True)
class Applied:
    ti_id: int
    try_number: int
    state: TaskState
    # The run, when it has dependsOnPast/waitForDownstream tasks and something in it may
    # have settled for good: the next run may wait on it (`past.wake_next_runs`, after
    # the commit). None otherwise.
    wakes_run: int | None = None


def apply_task_events(
    session: Session,
    events: Sequence[TaskEvent],
    specs: SpecCache,
    now: datetime,
    *,
    evidence: dict[int, dict[str, Any]] | None = None,
    retry: bool = True,
) -> list[Applied]:
    """Apply executor reports; returns the transitions that took effect.

    The caller commits. Reports for tries that are no longer live are dropped.
    With `retry=False` a failed try fails its task instance, retries left or not.
    """
    if not events:
        return []
    plans.through_indexes(session)
    by_key = {e.key: e for e in events}
    ti_ids = sorted({e.ti_id for e in events})
    lock_runs_of(session, ti_ids)
    rows = _READ(session, {"ids": ti_ids}).all()

    updates: list[dict[str, Any]] = []
    settled: list[Settled] = []
    applied: list[Applied] = []
    restarted: list[tuple[TaskEvent, datetime]] = []
    stopped: list[int] = []
    for row in rows:
        event = by_key.get((row.id, row.try_number))
        if event is None:
            continue  # a report for an older try
        if row.state not in LIVE_STATES:
            if row.stopping_since is not None:
                # Ended under its process (a mark, a run's end, then maybe a clear): the
                # process has stopped now, so a next try may start.
                stopped.append(row.id)
                applied.append(Applied(row.id, row.try_number, TaskState.NONE))
            continue  # otherwise a report for a try already settled
        if row.stopping_since is not None:
            restarted.append((event, row.stopping_since))
            applied.append(Applied(row.id, row.try_number, TaskState.NONE))
            continue
        state = event.state
        next_retry_at = None
        if state is TaskState.FAILED and retry and row.try_number <= row.max_tries:
            task = specs.get(session, row.dag_version_id).tasks[row.task_id]
            state = TaskState.UP_FOR_RETRY
            next_retry_at = now + retry_delay(
                row.try_number,
                task.retry_delay,
                exponential=task.retry_exponential_backoff,
                max_delay=task.max_retry_delay,
            )
        found = (evidence or {}).get(row.id)
        updates.append(
            {
                "b_id": row.id,
                "b_try": row.try_number,
                "state": state.value,
                "try_state": event.state.value,
                "exit_code": event.exit_code,
                "reason": event.reason,
                "next_retry_at": next_retry_at,
                "evidence": None if found is None else json.dumps(found),
                "pod": event.pod,
                "node": event.node,
            }
        )
        wakes = state in past.OK and past.has_waiters(specs, session, row.dag_version_id)
        applied.append(Applied(row.id, row.try_number, state, row.dag_run_id if wakes else None))
        if state is not TaskState.UP_FOR_RETRY:
            settled.append(Settled(row.dag_run_id, row.task_id, row.downstream_task_ids, state))
    _restart(session, restarted, now)
    if stopped:
        _STOPPED(session, {"ids": stopped})
    if not updates:
        return applied
    columns = {name: [u[name] for u in updates] for name in _COLUMNS}
    moved = run_progress(settled)
    _SETTLE(
        session,
        {"now": now, "live": _LIVE, "runs": list(moved), "deltas": list(moved.values()), **columns},
    )
    follow_up(session, propagate(session, settled, progress=False).downstream, now)
    failures = [u for u in updates if u["try_state"] == TaskState.FAILED.value]
    if failures:
        # One alert per failed try, written with the transition itself (invariant 8).
        session.execute(
            insert(Outbox),
            [
                {
                    "kind": ALERT,
                    "payload": {
                        "ti_id": u["b_id"],
                        "try_number": u["b_try"],
                        "state": u["state"],
                        "reason": u["reason"],
                    },
                    "created_at": now,
                    "not_before": now,
                    "attempts": 0,
                }
                for u in failures
            ],
        )
    return applied


def _restart(session: Session, ended: Sequence[tuple[TaskEvent, datetime]], now: datetime) -> None:
    """Tries a clear asked to stop, now ended: their instances back to `none`."""
    if not ended:
        return
    _RESTARTED(
        session,
        {
            "now": now,
            "ids": [event.ti_id for event, _ in ended],
            "tries": [event.try_number for event, _ in ended],
            "exit_codes": [event.exit_code for event, _ in ended],
            "reasons": [
                f"cleared while running (at {since.isoformat()}); the try then ended: "
                + (event.reason or event.state.value)
                for event, since in ended
            ],
        },
    )
