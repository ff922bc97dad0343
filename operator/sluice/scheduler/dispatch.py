"""The outbox dispatcher: hands queued tries to this replica's executor.

Any replica drains `start_task` rows with `FOR UPDATE SKIP LOCKED`. Claiming a
try is a compare-and-set `queued -> running` on (task instance, try number)
committed together with the outbox row's delete, and the executor is called
only after that commit: a try is started at most once, and a replica that dies
between the commit and the start leaves a running try with no heartbeat, which
the zombie sweep settles (invariants 1 and 3).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, tuple_, update
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, Outbox, TaskInstance, TaskTry
from sluice.executors.base import TaskLaunch
from sluice.scheduler.critical import START_TASK
from sluice.scheduler.results import ALERT
from sluice.spec.states import TaskState


def claim_task_starts(
    session: Session,
    specs: SpecCache,
    now: datetime,
    *,
    job_id: int | None,
    executor_name: str,
    limit: int,
) -> list[TaskLaunch]:
    """Claim up to `limit` queued tries for this replica; the caller commits, then starts them."""
    effects = take_outbox(session, START_TASK, now, limit=limit)
    if not effects:
        return []
    keys = [(e["ti_id"], e["try_number"]) for e in effects]
    claimed = session.execute(
        update(TaskInstance)
        .where(
            tuple_(TaskInstance.id, TaskInstance.try_number).in_(keys),
            TaskInstance.state == TaskState.QUEUED,
        )
        .values(
            state=TaskState.RUNNING,
            start_date=now,
            last_heartbeat_at=now,
            running_by_job_id=job_id,
            external_id=None,
        )
        .returning(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.dag_run_id,
            TaskInstance.task_id,
        )
    ).all()
    if not claimed:
        return []
    session.execute(
        update(TaskTry)
        .where(
            tuple_(TaskTry.task_instance_id, TaskTry.try_number).in_(
                [(c.id, c.try_number) for c in claimed]
            )
        )
        .values(
            state=TaskState.RUNNING,
            start_date=now,
            scheduler_job_id=job_id,
            external_id=executor_name,
        )
    )
    runs = {
        run.id: run
        for run in session.execute(
            select(DagRun).where(DagRun.id.in_({c.dag_run_id for c in claimed}))
        ).scalars()
    }
    return [
        _launch(specs, session, runs[c.dag_run_id], c.task_id, c.id, c.try_number) for c in claimed
    ]


def _launch(
    specs: SpecCache, session: Session, run: DagRun, task_id: str, ti_id: int, try_number: int
) -> TaskLaunch:
    task = specs.get(session, run.dag_version_id).tasks[task_id]
    return TaskLaunch(
        ti_id=ti_id,
        try_number=try_number,
        dag_id=run.dag_id,
        task_id=task_id,
        run_id=run.run_id,
        logical_date=run.logical_date,
        data_interval_start=run.data_interval_start,
        data_interval_end=run.data_interval_end,
        conf=dict(run.conf),
        image=task.image,
        command=list(task.command),
        args=list(task.args),
        env={e.name: e.value for e in task.env},
        execution_timeout=task.execution_timeout,
        skip_on_exit_code=frozenset(task.skip_on_exit_code),
        resources={k: dict(v) for k, v in task.resources.items()},
        pod_template=task.pod_template,
    )


def claim_alerts(session: Session, now: datetime, *, limit: int) -> list[dict[str, Any]]:
    """Take up to `limit` failure alerts off the outbox; the caller commits, then delivers.

    Delivery is after the commit, so an alert is delivered at most once by this
    path; each carries (ti_id, try_number) for receivers that deduplicate.
    """
    return take_outbox(session, ALERT, now, limit=limit)


def take_outbox(session: Session, kind: str, now: datetime, *, limit: int) -> list[dict[str, Any]]:
    """Lock (SKIP LOCKED, oldest first) and delete up to `limit` ready rows of one kind."""
    rows = session.execute(
        select(Outbox.id, Outbox.payload)
        .where(Outbox.kind == kind, Outbox.not_before <= now)
        .order_by(Outbox.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    if rows:
        session.execute(delete(Outbox).where(Outbox.id.in_([r.id for r in rows])))
    return [dict(r.payload) for r in rows]
