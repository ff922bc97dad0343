"""The outbox dispatcher: hands queued tries to this replica's executor.

Any replica drains `start_task` rows with `FOR UPDATE SKIP LOCKED`. Claiming a
try is a compare-and-set `queued -> running` on (task instance, try number)
committed together with the outbox row's delete, and the executor is called
only after that commit: a try is started at most once, and a replica that dies
between the commit and the start leaves a running try with no heartbeat, which
the zombie sweep settles (invariants 1 and 3). When the executor knows a try's
external id before starting it (a Job's deterministic name), the claim records
it, so another replica can always find (and adopt) a try that did start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Row
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.prepared import Prepared
from sluice.executors.base import TaskEvent, TaskLaunch
from sluice.logs import first_line
from sluice.scheduler.critical import START_TASK
from sluice.scheduler.results import ALERT, apply_task_events
from sluice.spec.states import TaskState

log = structlog.get_logger("sluice.scheduler")

# Lock (SKIP LOCKED, oldest first) and delete up to :limit ready outbox rows of one :kind;
# the statements below add what they return.
_TAKE_OUTBOX = """
    DELETE FROM outbox WHERE id IN (
        SELECT id FROM outbox
        WHERE kind = :kind AND not_before <= :now
        ORDER BY id LIMIT :limit
        FOR UPDATE SKIP LOCKED)
"""

# One round trip: take the outbox rows, compare-and-set each try `queued -> running`,
# record the try, and read what the launch needs from the run and its DAG (its namespace).
_CLAIM = Prepared(
    f"""
    WITH taken AS ({_TAKE_OUTBOX}
        RETURNING CAST(payload->>'ti_id' AS bigint) AS ti_id,
                  CAST(payload->>'try_number' AS integer) AS try_number
    ), claimed AS (
        UPDATE task_instance ti SET
            state = :running, start_date = :now, last_heartbeat_at = :now,
            running_by_job_id = :job_id, external_id = NULL
        FROM taken
        WHERE ti.id = taken.ti_id AND ti.try_number = taken.try_number AND ti.state = :queued
        RETURNING ti.id, ti.try_number, ti.dag_run_id, ti.task_id
    ), tries AS (
        UPDATE task_try tt SET
            state = :running, start_date = :now, scheduler_job_id = :job_id,
            external_id = :executor
        FROM claimed
        WHERE tt.task_instance_id = claimed.id AND tt.try_number = claimed.try_number
    )
    SELECT c.id, c.try_number, c.task_id, r.dag_id, r.run_id, r.dag_version_id,
           r.logical_date, r.data_interval_start, r.data_interval_end, r.conf, d.namespace
    FROM claimed c JOIN dag_run r ON r.id = c.dag_run_id JOIN dag d ON d.dag_id = r.dag_id
    ORDER BY c.id
    """
)


def claim_task_starts(
    session: Session,
    specs: SpecCache,
    now: datetime,
    *,
    job_id: int | None,
    executor_name: str,
    limit: int,
    planned_id: Callable[[TaskLaunch], str | None] | None = None,
) -> list[TaskLaunch]:
    """Claim up to `limit` queued tries for this replica; the caller commits, then starts them.

    An outbox row whose try is no longer queued (requeued, failed, claimed by a
    fenced-off replica) is dropped: the try it named will never start. A try
    whose task spec cannot be loaded fails at once, with the reason.
    """
    claimed = _CLAIM(
        session,
        {
            "kind": START_TASK,
            "now": now,
            "limit": limit,
            "job_id": job_id,
            "executor": executor_name,
            "queued": TaskState.QUEUED.value,
            "running": TaskState.RUNNING.value,
        },
    ).all()
    return launches_of(session, specs, now, claimed, planned_id)


def launches_of(
    session: Session,
    specs: SpecCache,
    now: datetime,
    claimed: Sequence[Row[Any]],
    planned_id: Callable[[TaskLaunch], str | None] | None = None,
) -> list[TaskLaunch]:
    """The launches of tries just claimed for this replica (in this transaction, still
    open): a try whose task spec cannot be loaded fails at once, with the reason, and
    the external id of each try whose id is known in advance is recorded.

    Shared by the dispatcher's claim and the critical section's (ADR 0047).
    """
    launches: list[TaskLaunch] = []
    unlaunchable: list[TaskEvent] = []
    for c in claimed:
        try:
            launches.append(_launch(specs, session, c))
        except Exception as exc:  # a stored spec this version cannot read, a task it lacks
            reason = f"the task's spec could not be loaded: {first_line(exc)}"
            log.error("try cannot be started", ti=c.id, try_number=c.try_number, reason=reason)
            unlaunchable.append(TaskEvent(c.id, c.try_number, TaskState.FAILED, None, reason))
    # Failed in the same transaction, without retries (they would fail the same way): one
    # bad spec must not hold back every other try in the batch, on every replica (inv. 6).
    if unlaunchable:
        apply_task_events(session, unlaunchable, specs, now, retry=False)
    if planned_id is not None:
        _record_planned_ids(session, launches, planned_id)
    return launches


_PLANNED = Prepared(
    """
    UPDATE task_instance t SET external_id = v.ext
      FROM unnest(CAST(:ids AS bigint[]), CAST(:tries AS int[]), CAST(:exts AS text[]))
           AS v(id, try_number, ext)
     WHERE t.id = v.id AND t.try_number = v.try_number
    """
)


def _record_planned_ids(
    session: Session, launches: list[TaskLaunch], planned_id: Callable[[TaskLaunch], str | None]
) -> None:
    """One statement: the external id of every claimed try whose id is known in advance."""
    known = [(launch, planned_id(launch)) for launch in launches]
    rows = [(launch, ext) for launch, ext in known if ext is not None]
    if rows:
        _PLANNED(
            session,
            {
                "ids": [launch.ti_id for launch, _ in rows],
                "tries": [launch.try_number for launch, _ in rows],
                "exts": [ext for _, ext in rows],
            },
        )


def _launch(specs: SpecCache, session: Session, c: Row[Any]) -> TaskLaunch:
    # The run's own DAG version: its params are the ones the run's conf overrides.
    compiled = specs.get(session, c.dag_version_id)
    task = compiled.tasks[c.task_id]
    return TaskLaunch(
        ti_id=c.id,
        try_number=c.try_number,
        dag_id=c.dag_id,
        task_id=c.task_id,
        run_id=c.run_id,
        logical_date=c.logical_date,
        data_interval_start=c.data_interval_start,
        data_interval_end=c.data_interval_end,
        conf=dict(c.conf),
        image=task.image,
        command=list(task.command),
        args=list(task.args),
        env={e.name: e.value for e in task.env},
        execution_timeout=task.execution_timeout,
        skip_on_exit_code=frozenset(task.skip_on_exit_code),
        resources={k: dict(v) for k, v in task.resources.items()},
        pod_template=task.pod_template,
        namespace=c.namespace,
        dag_params=dict(compiled.spec.params),
    )


def claim_alerts(session: Session, now: datetime, *, limit: int) -> list[dict[str, Any]]:
    """Take up to `limit` failure alerts off the outbox; the caller commits, then delivers.

    Delivery is after the commit, so an alert is delivered at most once by this
    path; each carries (ti_id, try_number) for receivers that deduplicate.
    """
    return take_outbox(session, ALERT, now, limit=limit)


_TAKE = Prepared(_TAKE_OUTBOX + "RETURNING id, payload")


def take_outbox(session: Session, kind: str, now: datetime, *, limit: int) -> list[dict[str, Any]]:
    """Lock (SKIP LOCKED, oldest first) and delete up to `limit` ready rows of one kind."""
    rows = _TAKE(session, {"kind": kind, "now": now, "limit": limit}).all()
    return [dict(payload) for _, payload in sorted(rows, key=lambda r: r[0])]
