"""Applying how tries ended: guarded updates, retries, and downstream propagation.

Reports come from executors (and from the zombie sweep). Each is a
compare-and-set on (task instance, try number, a live state): a late,
duplicate or out-of-order report matches no row and changes nothing. A failed
try with retries left becomes `up_for_retry` with its next time computed from
`retryDelay` and backoff; otherwise the state is final and the downstream
counters move in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, or_, select, update
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, Outbox, TaskInstance, TaskTry
from sluice.executors.base import TaskEvent
from sluice.scheduler.transitions import Settled, lock_runs_of, propagate
from sluice.spec.retries import retry_delay
from sluice.spec.states import TaskState

LIVE_STATES = (TaskState.QUEUED, TaskState.RUNNING)
ALERT = "alert"
_TRY_COLUMNS = ("b_id", "b_try", "try_state", "end_date", "exit_code", "reason")


@dataclass(frozen=True)
class Applied:
    ti_id: int
    try_number: int
    state: TaskState


def apply_task_events(
    session: Session,
    events: Sequence[TaskEvent],
    specs: SpecCache,
    now: datetime,
    *,
    evidence: dict[int, dict[str, Any]] | None = None,
) -> list[Applied]:
    """Apply executor reports; returns the transitions that took effect.

    The caller commits. Reports for tries that are no longer live are dropped.
    """
    if not events:
        return []
    by_key = {e.key: e for e in events}
    ti_ids = sorted({e.ti_id for e in events})
    lock_runs_of(session, ti_ids)
    rows = session.execute(
        select(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.max_tries,
            TaskInstance.state,
            TaskInstance.task_id,
            TaskInstance.dag_run_id,
            TaskInstance.downstream_task_ids,
            DagRun.dag_version_id,
        )
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(TaskInstance.id.in_(ti_ids))
        .order_by(TaskInstance.id)
        .with_for_update(of=TaskInstance)
    ).all()

    updates: list[dict[str, Any]] = []
    settled: list[Settled] = []
    applied: list[Applied] = []
    for row in rows:
        event = by_key.get((row.id, row.try_number))
        if event is None or row.state not in LIVE_STATES:
            continue  # a report for an older try, or for a try already settled
        state = event.state
        next_retry_at = None
        if state is TaskState.FAILED and row.try_number <= row.max_tries:
            task = specs.get(session, row.dag_version_id).tasks[row.task_id]
            state = TaskState.UP_FOR_RETRY
            next_retry_at = now + retry_delay(
                row.try_number,
                task.retry_delay,
                exponential=task.retry_exponential_backoff,
                max_delay=task.max_retry_delay,
            )
        updates.append(
            {
                "b_id": row.id,
                "b_try": row.try_number,
                "state": state.value,
                "try_state": event.state.value,
                "end_date": now,
                "exit_code": event.exit_code,
                "reason": event.reason,
                "next_retry_at": next_retry_at,
                "evidence": (evidence or {}).get(row.id),
            }
        )
        applied.append(Applied(row.id, row.try_number, state))
        if state is not TaskState.UP_FOR_RETRY:
            settled.append(Settled(row.dag_run_id, row.task_id, row.downstream_task_ids, state))
    if not updates:
        return []
    # Executed on the connection: a Core executemany, not the ORM's bulk-by-primary-key.
    connection = session.connection()
    connection.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == bindparam("b_id"),
            TaskInstance.try_number == bindparam("b_try"),
            # Spelled out: an IN list would be an expanding parameter, which executemany refuses.
            or_(*(TaskInstance.state == s for s in LIVE_STATES)),
        )
        .values(
            state=bindparam("state"),
            end_date=bindparam("end_date"),
            exit_code=bindparam("exit_code"),
            reason=bindparam("reason"),
            next_retry_at=bindparam("next_retry_at"),
            evidence=bindparam("evidence"),
        ),
        updates,
    )
    connection.execute(
        update(TaskTry)
        .where(
            TaskTry.task_instance_id == bindparam("b_id"),
            TaskTry.try_number == bindparam("b_try"),
        )
        .values(
            state=bindparam("try_state"),
            end_date=bindparam("end_date"),
            exit_code=bindparam("exit_code"),
            reason=bindparam("reason"),
        ),
        [{k: u[k] for k in _TRY_COLUMNS} for u in updates],
    )
    propagate(session, settled)
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
