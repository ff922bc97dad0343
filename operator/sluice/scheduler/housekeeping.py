"""Phase 4 of the loop: heartbeats, adoption of dead replicas' tries, zombies, stuck queues.

A running try whose heartbeat is stale is looked at only when its owner
replica is this one or has stopped heartbeating. If the executor can see it
still running, a live replica adopts it (compare-and-set on the old owner) and
keeps watching it; if it ended unwatched, its recorded result is reported; only
if nobody can vouch for it is it a zombie (invariant 7), failed through the
same guarded update as any report, with the evidence recorded. Several
replicas sweeping at once therefore make one transition.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import ColumnElement, and_, func, insert, or_, select, text, tuple_, update
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, SchedulerJob, TaskInstance
from sluice.db.prepared import Prepared
from sluice.executors.base import Executor, Inspection, TaskEvent
from sluice.logs import first_line
from sluice.scheduler import pools
from sluice.scheduler.contact import DatabaseContact
from sluice.scheduler.critical import START_TASK
from sluice.scheduler.results import Applied, apply_task_events
from sluice.scheduler.transitions import lock_runs_of
from sluice.spec.states import TaskState

log = structlog.get_logger("sluice.scheduler")


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


# The replica's heartbeat (a replica that was paused past the threshold was marked dead:
# it is alive again) and the count of live replicas, itself included, in one round trip:
# the others as this statement's snapshot sees them, plus this one if its row was there.
_BEAT = Prepared(
    """
    WITH beat AS (
        UPDATE scheduler_job SET latest_heartbeat = :now, state = 'running', ended_at = NULL
        WHERE id = :job RETURNING id
    )
    SELECT (SELECT count(*) FROM beat)
         + (SELECT count(*) FROM scheduler_job
            WHERE id <> :job AND state = 'running' AND latest_heartbeat >= :since)
    """
)


def heartbeat_scheduler(
    session: Session,
    job_id: int,
    now: datetime,
    dead_after: float,
    contact: DatabaseContact | None = None,
) -> int:
    """Heartbeat this replica; the live replicas (heartbeating within `dead_after`, this
    one included)."""
    since = silent_before(now, dead_after, contact)
    return int(_BEAT(session, {"job": job_id, "now": now, "since": since}).scalar_one())


def silent_before(
    now: datetime, seconds: float, contact: DatabaseContact | None, *, tries: bool = False
) -> datetime:
    """The instant a heartbeat must be older than to have been silent for `seconds`,
    counting only time this replica could reach the database when its `contact` is
    known (ADR 0029), and for a try's heartbeats (`tries`) only time its task API could
    write them."""
    if contact is None:
        return now - timedelta(seconds=seconds)
    return contact.silent_before(now, seconds, tries=tries)


def _live(
    now: datetime, dead_after: float, contact: DatabaseContact | None
) -> tuple[ColumnElement[bool], ...]:
    """What makes a replica live: running, and heartbeating within `dead_after`."""
    return (
        SchedulerJob.state == "running",
        SchedulerJob.latest_heartbeat >= silent_before(now, dead_after, contact),
    )


def end_scheduler(session: Session, job_id: int, now: datetime) -> None:
    session.execute(
        update(SchedulerJob)
        .where(SchedulerJob.id == job_id)
        .values(state="ended", ended_at=now, latest_heartbeat=now)
    )


def mark_dead_schedulers(
    session: Session, now: datetime, dead_after: float, contact: DatabaseContact | None = None
) -> list[int]:
    """Replicas silent for `dead_after` (counted as `silent_before` does) are dead."""
    return list(
        session.execute(
            update(SchedulerJob)
            .where(
                SchedulerJob.state == "running",
                SchedulerJob.latest_heartbeat < silent_before(now, dead_after, contact),
            )
            .values(state="dead", ended_at=now)
            .returning(SchedulerJob.id)
        ).scalars()
    )


@dataclass(frozen=True)
class Fence:
    """Tries this replica must stop: killed (no longer wanted) or released (adopted).
    `stopping`: those killed because a clear, a mark or a run's end asked them to stop
    (`stopping_since`): their end is reported, which lets a next try start (`clearing`)."""

    kill: list[tuple[int, int]]
    release: list[tuple[int, int]]
    stopping: list[tuple[int, int]] = field(default_factory=list)


_HEARTBEAT = Prepared(
    """
    UPDATE task_instance t
       SET last_heartbeat_at = :now,
           external_id = COALESCE(t.external_id, v.ext),
           running_by_job_id = COALESCE(t.running_by_job_id, :job)
      FROM unnest(CAST(:ids AS bigint[]), CAST(:tries AS int[]), CAST(:exts AS text[]))
           AS v(id, try_number, ext)
     WHERE t.id = v.id AND t.try_number = v.try_number AND t.state = 'running'
       AND t.stopping_since IS NULL
       AND (t.running_by_job_id = :job OR t.running_by_job_id IS NULL)
    RETURNING t.id, t.try_number
    """
)


_CONFIRM = Prepared(
    """
    UPDATE task_instance t
       SET external_id = COALESCE(t.external_id, v.ext),
           running_by_job_id = COALESCE(t.running_by_job_id, :job)
      FROM unnest(CAST(:ids AS bigint[]), CAST(:tries AS int[]), CAST(:exts AS text[]))
           AS v(id, try_number, ext)
     WHERE t.id = v.id AND t.try_number = v.try_number AND t.state = 'running'
       AND t.stopping_since IS NULL
       AND (t.running_by_job_id = :job OR t.running_by_job_id IS NULL)
    RETURNING t.id, t.try_number
    """
)


def heartbeat_tries(
    session: Session,
    external_ids: dict[tuple[int, int], str],
    job_id: int,
    now: datetime,
    *,
    refresh: bool = True,
) -> Fence:
    """Refresh heartbeats (and external ids) of the tries this executor runs.

    With `refresh` False (tries that heartbeat themselves: task pods through
    the task API) the heartbeat is left alone and only ownership is confirmed:
    a scheduler that still watches a pod must not mask a pod that stopped
    heartbeating.

    A try the database no longer has running under this replica is fenced: if
    another replica adopted it (same try, still running, or since ended under
    that replica, which reported it and keeps its Job) or queued it again (same
    try: this replica was taken for dead before it started it) it is released,
    and a Job it did start goes on under its new owner; otherwise (newer try,
    timed-out run, zombie verdict while this replica still owned it) it is
    killed. The caller acts on the fence after committing.
    """
    if not external_ids:
        return Fence([], [])
    keys = list(external_ids)
    statement = _HEARTBEAT if refresh else _CONFIRM
    confirmed = {
        (row[0], row[1])
        for row in statement(
            session,
            {
                **({"now": now} if refresh else {}),
                "job": job_id,
                "ids": [k[0] for k in keys],
                "tries": [k[1] for k in keys],
                "exts": [external_ids[k] for k in keys],
            },
        )
    }
    lost = [key for key in keys if key not in confirmed]
    if not lost:
        return Fence([], [])
    rows = session.execute(
        select(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.state,
            TaskInstance.stopping_since,
            TaskInstance.running_by_job_id,
        ).where(tuple_(TaskInstance.id, TaskInstance.try_number).in_(lost))
    ).all()
    # Adopted: another replica runs it now (same try, still live), or saw it end (a
    # replica taken for dead that came back after its tries ran to the end elsewhere:
    # killing it would delete the Job of a try that other replica saw through). A try
    # asked to stop (cleared, marked, its run ended) is this replica's to kill.
    stopping = {
        (row.id, row.try_number)
        for row in rows
        if row.stopping_since is not None and row.running_by_job_id in (job_id, None)
    }
    adopted = {
        (row.id, row.try_number)
        for row in rows
        if (row.id, row.try_number) not in stopping
        and (
            row.state in (TaskState.RUNNING, TaskState.QUEUED)
            or (row.running_by_job_id is not None and row.running_by_job_id != job_id)
        )
    }
    return Fence(
        kill=[key for key in lost if key not in adopted],
        release=[key for key in lost if key in adopted],
        stopping=[key for key in lost if key in stopping],
    )


@dataclass(frozen=True)
class Adoption:
    key: tuple[int, int]
    previous_owner: int | None
    external_id: str
    elapsed: float
    timeout: float | None
    skip_on_exit_code: frozenset[int]


@dataclass(frozen=True)
class Restart:
    """A dead replica's try that provably never started: queued again, same try number."""

    key: tuple[int, int]
    previous_owner: int | None
    external_id: str


@dataclass
class StalePlan:
    """What to do about running tries whose heartbeat went stale."""

    events: list[TaskEvent] = field(default_factory=list)
    evidence: dict[int, dict[str, Any]] = field(default_factory=dict)
    adoptions: list[Adoption] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    # Zombies whose process still runs (it stopped heartbeating), with their external
    # ids: stopped once the verdict is committed, tracked by this executor or not.
    kill: dict[tuple[int, int], str | None] = field(default_factory=dict)


def plan_stale_tries(
    session: Session,
    specs: SpecCache,
    executor: Executor,
    now: datetime,
    *,
    job_id: int,
    threshold: float,
    dead_after: float,
    kill_after: float | None = None,
    limit: int = 100,
    contact: DatabaseContact | None = None,
) -> StalePlan:
    """Decide, for each stale running try: leave it, adopt it, report its end, or zombie.

    Read-only: the events go through `apply_task_events` and the adoptions
    through `adopt_tries`, each in its own transaction (lock order). A try is a
    zombie only if its heartbeat is stale AND no executor can vouch for it
    (invariant 7); the evidence says what was seen. An executor that cannot
    see right now ("unreachable": its watches lost the API server) vouches
    for everything: a stale heartbeat alone is never enough. With tries that
    heartbeat themselves, one whose process still runs but whose heartbeat is
    older than `kill_after` is a zombie too, and is stopped (`plan.kill`).
    A try whose task spec cannot be loaded is judged all the same, without
    its skip codes and timeout (one bad spec must not stop the sweep).
    Silence (`threshold`, `kill_after`, `dead_after`) counts only time this
    replica could reach the database, when its `contact` is given (ADR 0029).
    """
    live_jobs = set(
        session.execute(select(SchedulerJob.id).where(*_live(now, dead_after, contact))).scalars()
    )
    self_beating = executor.pods_heartbeat
    # Tries this replica's executor still runs, whose heartbeat it refreshes itself.
    ours = [] if self_beating else list(executor.alive())
    quiet_before = silent_before(now, threshold, contact, tries=True)
    candidates = session.execute(
        select(
            TaskInstance.id,
            TaskInstance.try_number,
            TaskInstance.task_id,
            TaskInstance.running_by_job_id,
            TaskInstance.last_heartbeat_at,
            TaskInstance.start_date,
            TaskInstance.external_id,
            DagRun.dag_version_id,
        )
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .where(
            TaskInstance.state == TaskState.RUNNING,
            or_(
                TaskInstance.last_heartbeat_at < quiet_before,
                # Tries that heartbeat themselves stay fresh while their owner is dead:
                # they are adopted as soon as the owner is, not once they end.
                *([TaskInstance.running_by_job_id.not_in(live_jobs)] if self_beating else []),
            ),
            # Left out before the limit, so that however many there are they cannot
            # take the places of the tries that need this replica (a dead one's): another
            # live replica's tries (it heartbeats, reports or fences them itself) ...
            or_(
                TaskInstance.running_by_job_id.is_(None),
                TaskInstance.running_by_job_id.not_in(live_jobs - {job_id}),
            ),
            # ... and those our executor still runs (their heartbeat will catch up).
            *(
                [
                    ~and_(
                        TaskInstance.running_by_job_id.is_not_distinct_from(job_id),
                        tuple_(TaskInstance.id, TaskInstance.try_number).in_(ours),
                    )
                ]
                if ours
                else []
            ),
        )
        # Other replicas' tries first: this replica's own (pods still starting) can wait
        # for the next sweep, a dead replica's have nobody else.
        .order_by(TaskInstance.running_by_job_id.is_not_distinct_from(job_id), TaskInstance.id)
        .limit(limit)
    ).all()
    plan = StalePlan()
    for row in candidates:
        key = (row.id, row.try_number)
        owner = row.running_by_job_id
        skip_codes, timeout = _task_limits(specs, session, row.dag_version_id, row.task_id)
        seen = executor.inspect(key, row.external_id)
        if seen.state == "unreachable":
            continue  # cannot look now: never a zombie on a stale heartbeat alone
        assert row.last_heartbeat_at is not None
        stale_for = (now - row.last_heartbeat_at).total_seconds()
        # Silent since its last heartbeat, or since its process started if that is later:
        # a pod that took long to start (a busy node, a slow pull) is not a silent one.
        silent_since = max(row.last_heartbeat_at, seen.running_since or row.last_heartbeat_at)
        silent_for = (now - silent_since).total_seconds()
        if seen.state == "alive" and row.external_id is not None:
            if owner != job_id:
                plan.adoptions.append(
                    Adoption(
                        key,
                        owner,
                        row.external_id,
                        elapsed=(now - (row.start_date or now)).total_seconds(),
                        timeout=timeout,
                        skip_on_exit_code=skip_codes,
                    )
                )
            elif (
                self_beating
                and seen.running
                and kill_after is not None
                and silent_since <= silent_before(now, kill_after, contact, tries=True)
            ):
                verdict = f"its process runs but sent no heartbeat for {silent_for:.0f}s" + (
                    " since it started" if silent_since > row.last_heartbeat_at else ""
                )
                _zombie(plan, row, now, job_id, threshold, owner, live_jobs, seen, verdict)
                plan.evidence[row.id]["kill_after_seconds"] = kill_after
                plan.kill[key] = row.external_id
            continue
        if seen.state == "gone" and (seen.exit_code is not None or seen.failed):
            plan.events.append(_ended_while_unwatched(key, seen, skip_codes, owner))
            continue
        if _never_started(row, seen, now, job_id, live_jobs):
            assert row.external_id is not None
            plan.restarts.append(Restart(key, owner, row.external_id))
            continue
        if seen.stops_within is not None and stale_for < seen.stops_within:
            continue  # it may still run (or start) out of sight, but stops itself by then
        if row.last_heartbeat_at >= quiet_before:
            # A dead replica's try (a candidate for adoption) that heartbeated lately:
            # gone to the executor's eye, but a zombie takes both signals (invariant 7),
            # so it waits out the threshold like any other (the third cluster soak: a
            # pod deleted 2.7 s after its last heartbeat was judged at once).
            continue
        verdict = _verdict(owner == job_id, row.external_id, seen)
        _zombie(plan, row, now, job_id, threshold, owner, live_jobs, seen, verdict)
    return plan


def _never_started(
    row: Any, seen: Inspection, now: datetime, job_id: int, live_jobs: set[int]
) -> bool:
    """A dead replica's try that left no trace: its replica died between the claim and
    the start. It is queued again under the same try number (invariant 5: a dead
    replica's work is taken over, not failed), which is safe only when the executor
    proves that no attempt exists (`restartable_within`) and the try never
    heartbeated (a try that did is a zombie, as ever)."""
    return (
        seen.state == "gone"
        and seen.restartable_within is not None
        and row.external_id is not None
        and row.running_by_job_id != job_id
        and row.running_by_job_id not in live_jobs
        and row.start_date is not None
        and row.last_heartbeat_at is not None
        and row.last_heartbeat_at <= row.start_date
        and (now - row.start_date).total_seconds() < seen.restartable_within
    )


def _task_limits(
    specs: SpecCache, session: Session, version_id: int, task_id: str
) -> tuple[frozenset[int], float | None]:
    """The task's skip codes and execution timeout; none when its spec cannot be loaded."""
    try:
        task = specs.get(session, version_id).tasks[task_id]
    except Exception as exc:  # a stored spec this version cannot read, a task it lacks
        log.error(
            "task spec cannot be loaded; judging its try without skip codes or timeout",
            dag_version=version_id,
            task=task_id,
            error=first_line(exc),
        )
        return frozenset(), None
    timeout = task.execution_timeout
    return frozenset(task.skip_on_exit_code), timeout.total_seconds() if timeout else None


def _zombie(
    plan: StalePlan,
    row: Any,
    now: datetime,
    job_id: int,
    threshold: float,
    owner: int | None,
    live_jobs: set[int],
    seen: Inspection,
    verdict: str,
) -> None:
    """Fail the try as a zombie, with both signals (heartbeat, executor) in its evidence."""
    plan.events.append(
        TaskEvent(
            row.id,
            row.try_number,
            TaskState.FAILED,
            reason=f"zombie: no heartbeat since {row.last_heartbeat_at.isoformat()}; {verdict}",
        )
    )
    plan.evidence[row.id] = {
        "last_heartbeat": row.last_heartbeat_at.isoformat(),
        "threshold_seconds": threshold,
        "detected_by_job": job_id,
        "detected_at": now.isoformat(),
        "owner_job": owner,
        "owner_alive": owner in live_jobs,
        "external_id": row.external_id,
        "executor_says": seen.state,
        "verdict": verdict,
        **({"seen": seen.evidence} if seen.evidence else {}),
        **({"stops_within_seconds": seen.stops_within} if seen.stops_within is not None else {}),
    }


def _verdict(own: bool, external_id: str | None, seen: Inspection) -> str:
    if external_id is None:
        return "the try was claimed but never reported started (its replica died first)"
    lease = (
        f"; it stops itself {seen.stops_within:g}s after its last heartbeat"
        if seen.stops_within is not None
        else ""
    )
    if seen.state == "gone" and seen.evidence.get("started") is False:
        return "the try was claimed but its process never started (its replica died first)" + lease
    if seen.state == "gone":
        return "the process is gone and left no result"
    if own:
        return "the owning scheduler's executor has no process for this try"
    return (
        "the owning scheduler stopped heartbeating and the try cannot be checked from here" + lease
    )


def _ended_while_unwatched(
    key: tuple[int, int], seen: Inspection, skip_codes: frozenset[int], owner: int | None
) -> TaskEvent:
    note = f"(ended while its scheduler, job {owner}, was gone)"
    code = seen.exit_code
    if seen.failed and code is None:
        return TaskEvent(key[0], key[1], TaskState.FAILED, None, f"{seen.reason} {note}")
    if code == 0:
        return TaskEvent(key[0], key[1], TaskState.SUCCESS, 0, note)
    why = seen.reason or f"exit code {code}"
    if code in skip_codes:
        return TaskEvent(key[0], key[1], TaskState.SKIPPED, code, f"exit code {code} {note}")
    return TaskEvent(key[0], key[1], TaskState.FAILED, code, f"{why} {note}")


def adopt_tries(
    session: Session, adoptions: list[Adoption], job_id: int, now: datetime
) -> list[Adoption]:
    """Take over live tries of dead replicas: compare-and-set on the previous owner. The
    adopter's silence window starts at `now`, but a heartbeat never moves back: a tick
    whose `now` was taken before a long stall (its API calls blocked through an API server
    outage) must not overwrite the pods' newer heartbeats with it (the fourth cluster run
    of issue 29 killed two healthy pods a second after adopting them so)."""
    taken = []
    for adoption in adoptions:
        ti_id, try_number = adoption.key
        row = session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.id == ti_id,
                TaskInstance.try_number == try_number,
                TaskInstance.state == TaskState.RUNNING,
                TaskInstance.running_by_job_id.is_not_distinct_from(adoption.previous_owner),
            )
            .values(
                running_by_job_id=job_id,
                last_heartbeat_at=func.greatest(TaskInstance.last_heartbeat_at, now),
            )
            .returning(TaskInstance.id)
        ).first()
        if row is not None:
            taken.append(adoption)
    return taken


_RESTART = Prepared(
    """
    WITH back AS (
        UPDATE task_instance SET
            state = :queued, queued_at = :now, queued_by_job_id = :job_id,
            start_date = NULL, last_heartbeat_at = NULL, running_by_job_id = NULL,
            external_id = NULL
        WHERE id = :ti_id AND try_number = :try_number AND state = :running
          AND running_by_job_id IS NOT DISTINCT FROM :owner
        RETURNING id, try_number
    ), tries AS (
        UPDATE task_try tt SET
            state = :queued, queued_at = :now, start_date = NULL,
            scheduler_job_id = :job_id, external_id = NULL, reason = :reason
        FROM back WHERE tt.task_instance_id = back.id AND tt.try_number = back.try_number
    ), starts AS (
        INSERT INTO outbox (kind, payload, created_at, not_before, attempts)
        SELECT :kind, jsonb_build_object('ti_id', id, 'try_number', try_number), :now, :now, 0
        FROM back
    )
    SELECT id, try_number FROM back
    """
)


def restart_tries(
    session: Session, restarts: list[Restart], job_id: int, now: datetime
) -> list[Restart]:
    """Queue never-started tries of dead replicas again, same try number (compare-and-set
    on the previous owner, so several replicas sweeping at once queue each try once).

    The next claim starts it under the same external id: a Job the dead replica
    creates late is the same Job (`AlreadyExists`, adopted), never a second one.
    Slots are unchanged: `queued` occupies its pool like `running`.
    """
    taken = []
    for restart in restarts:
        ti_id, try_number = restart.key
        row = _RESTART(
            session,
            {
                "ti_id": ti_id,
                "try_number": try_number,
                "owner": restart.previous_owner,
                "job_id": job_id,
                "now": now,
                "kind": START_TASK,
                "queued": TaskState.QUEUED.value,
                "running": TaskState.RUNNING.value,
                "reason": (
                    f"queued again: scheduler job {restart.previous_owner} died after claiming"
                    f" this try and before starting it ({restart.external_id} never existed)"
                ),
            },
        ).first()
        if row is not None:
            taken.append(restart)
    return taken


def release_stopped(
    session: Session,
    now: datetime,
    *,
    threshold: float,
    dead_after: float,
    contact: DatabaseContact | None = None,
) -> list[int]:
    """Tries ended under their process (`stopping_since`, no longer `running`) whose
    replica is dead: nobody is left to stop them and report it. Once their heartbeat has
    been silent for `threshold` (a zombie's two signals: a pod's heartbeats are refused
    since the end, so it has stopped itself; a local process dies with its replica) they
    count as stopped, and a next try may start. Returns the runs to examine again.

    Locks the instances only (no run lock is needed: nothing but the flag and
    `needs_eval` move, as a report's `results._STOPPED` does).
    """
    live = select(SchedulerJob.id).where(*_live(now, dead_after, contact))
    quiet_before = silent_before(now, threshold, contact, tries=True)
    return list(
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.stopping_since.is_not(None),
                TaskInstance.state != TaskState.RUNNING,
                or_(
                    TaskInstance.last_heartbeat_at.is_(None),
                    TaskInstance.last_heartbeat_at < quiet_before,
                ),
                or_(
                    TaskInstance.running_by_job_id.is_(None),
                    TaskInstance.running_by_job_id.not_in(live),
                ),
            )
            .values(
                stopping_since=None,
                needs_eval=or_(TaskInstance.needs_eval, TaskInstance.state == TaskState.NONE),
            )
            .returning(TaskInstance.dag_run_id)
        ).scalars()
    )


def requeue_stuck_tasks(
    session: Session, now: datetime, *, queued_timeout: float, max_requeues: int
) -> int:
    """Tries queued too long go back to `scheduled` (at most `max_requeues` times).

    Task rows only, no run lock: nothing here settles a task. The stale try's
    outbox row, if any, can no longer claim the instance, because the
    dispatcher's compare-and-set expects `queued` and that try number. The try
    ends in `task_try` as `scheduled`, with the reason; the next queueing is a
    new try.
    """
    return int(
        session.execute(
            _REQUEUE,
            {
                "now": now,
                "before": now - timedelta(seconds=queued_timeout),
                "max_requeues": max_requeues,
                "reason": f"requeued: queued for over {queued_timeout:g}s",
                "fix": "check that scheduler replicas are running",
            },
        ).scalar_one()
    )


_REQUEUE = text(
    """
    WITH requeued AS (
        UPDATE task_instance SET state = 'scheduled', requeue_count = requeue_count + 1,
            queued_by_job_id = NULL
        WHERE state = 'queued' AND queued_at < :before AND requeue_count < :max_requeues
        RETURNING id, try_number, requeue_count
    ), tries AS (
        UPDATE task_try tt SET state = 'scheduled', end_date = :now,
            reason = :reason || ' (requeue ' || r.requeue_count || ' of at most '
                     || CAST(:max_requeues AS text) || '); ' || :fix
        FROM requeued r
        WHERE tt.task_instance_id = r.id AND tt.try_number = r.try_number
    )
    SELECT count(*) FROM requeued
    """
)


def fail_stuck_tasks(
    session: Session,
    specs: SpecCache,
    now: datetime,
    *,
    queued_timeout: float,
    max_requeues: int,
    limit: int = 100,
) -> list[Applied]:
    """Tries still stuck after `max_requeues` requeues fail, through the guarded report path;
    so do tasks that waited as long on a pool that does not exist (`pools`), without retries.

    Every run concerned is locked first, in one lock order.
    """
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
    waiting = pools.waiting_on_missing_pools(session, now, wait=queued_timeout, limit=limit)
    lock_runs_of(session, [row.id for row in stuck] + [w.ti_id for w in waiting])
    failed = apply_task_events(session, events, specs, now)
    return failed + pools.fail_waiting(session, specs, waiting, now)
