"""Phase 4 of the loop: scheduler heartbeats, zombie tries, and the executor's reports.

A try is a zombie when its heartbeat is stale past the threshold AND no live
executor can vouch for it: either this replica owns it and its executor has no
such process, or its owner replica has stopped heartbeating (invariant 7). The
evidence is recorded on the task instance, and the failure goes through the
same guarded update as any report, so several replicas sweeping at once make
one transition.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from sqlalchemy import insert, select, tuple_, update
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.models import SchedulerJob, TaskInstance
from sluice.executors.base import TaskEvent
from sluice.scheduler.results import Applied, apply_task_events
from sluice.spec.states import TaskState


def register_scheduler(session: Session, now: datetime) -> int:
    return int(
        session.execute(
            insert(SchedulerJob)
            .values(
                hostname=socket.gethostname(),
                pid=os.getpid(),
                state="running",
                started_at=now,
                latest_heartbeat=now,
            )
            .returning(SchedulerJob.id)
        ).scalar_one()
    )


def heartbeat_scheduler(session: Session, job_id: int, now: datetime) -> None:
    session.execute(
        update(SchedulerJob).where(SchedulerJob.id == job_id).values(latest_heartbeat=now)
    )


def end_scheduler(session: Session, job_id: int, now: datetime) -> None:
    session.execute(
        update(SchedulerJob)
        .where(SchedulerJob.id == job_id)
        .values(state="ended", ended_at=now, latest_heartbeat=now)
    )


def mark_dead_schedulers(session: Session, now: datetime, dead_after: float) -> list[int]:
    return list(
        session.execute(
            update(SchedulerJob)
            .where(
                SchedulerJob.state == "running",
                SchedulerJob.latest_heartbeat < now - timedelta(seconds=dead_after),
            )
            .values(state="dead", ended_at=now)
            .returning(SchedulerJob.id)
        ).scalars()
    )


def heartbeat_tries(
    session: Session, alive: list[tuple[int, int]], now: datetime
) -> list[tuple[int, int]]:
    """Refresh heartbeats of the tries this executor runs; returns the fenced ones.

    A try the database no longer has running (timed out run, newer try, a
    zombie verdict) is fenced off: the caller kills it after committing.
    """
    if not alive:
        return []
    confirmed = set(
        session.execute(
            update(TaskInstance)
            .where(
                tuple_(TaskInstance.id, TaskInstance.try_number).in_(alive),
                TaskInstance.state == TaskState.RUNNING,
            )
            .values(last_heartbeat_at=now)
            .returning(TaskInstance.id, TaskInstance.try_number)
            .execution_options(synchronize_session=False)
        )
    )
    return [key for key in alive if key not in confirmed]


def sweep_zombies(
    session: Session,
    specs: SpecCache,
    now: datetime,
    *,
    job_id: int,
    alive: set[tuple[int, int]],
    threshold: float,
    dead_after: float,
    limit: int = 100,
) -> list[Applied]:
    stale_before = now - timedelta(seconds=threshold)
    live_jobs = set(
        session.execute(
            select(SchedulerJob.id).where(
                SchedulerJob.state == "running",
                SchedulerJob.latest_heartbeat >= now - timedelta(seconds=dead_after),
            )
        ).scalars()
    )
    candidates = session.execute(
        select(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.running_by_job_id,
            TaskInstance.last_heartbeat_at,
        )
        .where(
            TaskInstance.state == TaskState.RUNNING,
            TaskInstance.last_heartbeat_at < stale_before,
        )
        .order_by(TaskInstance.id)
        .limit(limit)
    ).all()
    events: list[TaskEvent] = []
    evidence: dict[int, dict[str, object]] = {}
    for row in candidates:
        owner = row.running_by_job_id
        if owner == job_id:
            if (row.id, row.try_number) in alive:
                continue  # our executor still runs it: the heartbeat will catch up
            verdict = "the owning scheduler's executor has no process for this try"
        elif owner in live_jobs:
            continue  # its owner is alive and will either heartbeat or report it
        else:
            verdict = f"the owning scheduler (job {owner}) stopped heartbeating"
        assert row.last_heartbeat_at is not None
        events.append(
            TaskEvent(
                row.id,
                row.try_number,
                TaskState.FAILED,
                reason=f"zombie: no heartbeat since {row.last_heartbeat_at.isoformat()}",
            )
        )
        evidence[row.id] = {
            "last_heartbeat": row.last_heartbeat_at.isoformat(),
            "threshold_seconds": threshold,
            "detected_by_job": job_id,
            "owner_job": owner,
            "verdict": verdict,
            "detected_at": now.isoformat(),
        }
    return apply_task_events(session, events, specs, now, evidence=evidence)


def requeue_stuck_tasks(
    session: Session, now: datetime, *, queued_timeout: float, max_requeues: int
) -> int:
    """Tries queued too long go back to `scheduled` (at most `max_requeues` times).

    Task rows only, no run lock: nothing here settles a task. The stale try's
    outbox row, if any, can no longer claim the instance, because the
    dispatcher's compare-and-set expects `queued` and that try number.
    """
    result = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.state == TaskState.QUEUED,
            TaskInstance.queued_at < now - timedelta(seconds=queued_timeout),
            TaskInstance.requeue_count < max_requeues,
        )
        .values(
            state=TaskState.SCHEDULED,
            requeue_count=TaskInstance.requeue_count + 1,
            queued_by_job_id=None,
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def fail_stuck_tasks(
    session: Session,
    specs: SpecCache,
    now: datetime,
    *,
    queued_timeout: float,
    max_requeues: int,
    limit: int = 100,
) -> list[Applied]:
    """Tries still stuck after `max_requeues` requeues fail, through the guarded report path."""
    stuck = session.execute(
        select(TaskInstance.id, TaskInstance.try_number, TaskInstance.requeue_count)
        .where(
            TaskInstance.state == TaskState.QUEUED,
            TaskInstance.queued_at < now - timedelta(seconds=queued_timeout),
            TaskInstance.requeue_count >= max_requeues,
        )
        .order_by(TaskInstance.id)
        .limit(limit)
    ).all()
    events = [
        TaskEvent(
            row.id,
            row.try_number,
            TaskState.FAILED,
            reason=f"stuck in queued: waited over {queued_timeout:g}s after "
            f"{row.requeue_count} requeue(s); check that scheduler replicas are running",
        )
        for row in stuck
    ]
    return apply_task_events(session, events, specs, now)
