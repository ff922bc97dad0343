"""A run as its DagRun object shows it: the object, its status and its Events, without I/O.

The status is bounded whatever the DAG's size: counts by state for every
task, and one entry per task for at most `MAX_TASK_ENTRIES` tasks, the ones a
user looks for first (failed, retrying, running, ...), each reason cut to
`MAX_REASON` characters; `taskInstancesOmitted` says how many were left out
(`sluice dags runs DAG --run ID` lists them all). A 2,000-task run's status
stays under 60 KB (tests/unit/test_status_render.py), far below the API
server's 1.5 MB object limit.

Events are what changed between the last published summary and this one:
run started, succeeded, failed or timed out; a task failed, was found a
zombie, or is retried. Publishing is coalesced (at most one patch per run per
second), so a change that came and went between two publications makes no
Event; a try number that jumped still says the try failed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sluice.handlers.objects import (
    ORIGIN_LABEL,
    ORIGIN_SCHEDULER,
    RUN_ID_ANNOTATION,
    scheduler_object_name,
)
from sluice.spec.states import RunState, TaskState

GROUP = "sluice.io"
API_VERSION = f"{GROUP}/v1alpha1"
DAG_LABEL = f"{GROUP}/dag"
RUN_TYPE_LABEL = f"{GROUP}/run-type"

MAX_TASK_ENTRIES = 100
MAX_REASON = 300
MAX_EVENTS = 20  # per publication; the rest are summed up in one Event
MAX_EVENT_MESSAGE = 1000

# Which tasks a user wants to see first when not all of them fit.
_FIRST = {
    TaskState.FAILED: 0,
    TaskState.UPSTREAM_FAILED: 1,
    TaskState.UP_FOR_RETRY: 2,
    TaskState.RUNNING: 3,
    TaskState.QUEUED: 4,
    TaskState.SCHEDULED: 5,
    TaskState.SKIPPED: 6,
    TaskState.NONE: 7,
    TaskState.SUCCESS: 8,
}


@dataclass(frozen=True)
class TaskView:
    name: str
    state: str
    try_number: int
    job: str | None = None
    reason: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True)
class RunView:
    id: int
    dag_id: str
    namespace: str
    run_id: str
    run_type: str
    state: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    created_at: datetime
    start_date: datetime | None
    end_date: datetime | None
    tasks_total: int
    tasks_done: int
    object_name: str | None = None  # a user's DagRun object; None: the scheduler names it
    object_uid: str | None = None  # that object's uid (None: triggered before migration 0013)
    tasks: list[TaskView] = field(default_factory=list)


@dataclass(frozen=True)
class EventSpec:
    type: str  # Normal or Warning
    reason: str  # CamelCase
    message: str


def object_name(run: RunView) -> str:
    """The DagRun object a run is published to: the user's, or `<dag>-<run id>-<hash>`,
    the same on every replica (two creates make one object)."""
    if run.object_name:
        return run.object_name
    return scheduler_object_name(run.dag_id, run.run_id)


def timestamp(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    """Like kubectl's ages: 45s, 3m5s, 2h4m, 3d4h."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def new_object(run: RunView, dag_uid: str | None) -> dict[str, Any]:
    """The DagRun object the scheduler creates for a run it made (no user object)."""
    metadata: dict[str, Any] = {
        "name": object_name(run),
        "namespace": run.namespace,
        "labels": {
            DAG_LABEL: run.dag_id,
            RUN_TYPE_LABEL: run.run_type,
            ORIGIN_LABEL: ORIGIN_SCHEDULER,
            "app.kubernetes.io/managed-by": "sluice",
        },
        "annotations": {RUN_ID_ANNOTATION: run.run_id},
    }
    if dag_uid is not None:
        # `kubectl delete dag` garbage-collects its DagRun objects (the history stays in
        # the database).
        metadata["ownerReferences"] = [
            {"apiVersion": API_VERSION, "kind": "DAG", "name": run.dag_id, "uid": dag_uid}
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "DagRun",
        "metadata": metadata,
        "spec": {"dagName": run.dag_id, "logicalDate": timestamp(run.logical_date)},
    }


def _entry(task: TaskView) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": task.name, "state": task.state, "tryNumber": task.try_number}
    if task.job:
        entry["job"] = task.job
    if task.reason:
        entry["reason"] = _clip(task.reason, MAX_REASON)
    for key, value in (("startedAt", task.started_at), ("endedAt", task.ended_at)):
        if value is not None:
            entry[key] = timestamp(value)
    return entry


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _conditions(run: RunView, generation: int | None) -> list[dict[str, Any]]:
    """Running, Succeeded and Failed, as Kubernetes conventions use them; each condition's
    lastTransitionTime is the database's time of that transition."""
    ended = run.end_date or run.start_date or run.created_at
    started = run.start_date or run.created_at
    table = [
        (
            "Running",
            run.state == RunState.RUNNING,
            {
                RunState.QUEUED: ("Queued", "waiting for a free run slot (maxActiveRuns)"),
                RunState.RUNNING: ("Started", "tasks are being scheduled"),
                RunState.SUCCESS: ("Ended", "the run ended"),
                RunState.FAILED: ("Ended", "the run ended"),
            },
            started if run.state == RunState.RUNNING else ended,
        ),
        (
            "Succeeded",
            run.state == RunState.SUCCESS,
            {RunState.SUCCESS: ("AllTasksDone", "every task ended as its trigger rule asks")},
            ended,
        ),
        (
            "Failed",
            run.state == RunState.FAILED,
            {RunState.FAILED: ("TasksFailed", _failure(run))},
            ended,
        ),
    ]
    out = []
    for type_, ok, reasons, since in table:
        reason, message = reasons.get(RunState(run.state), ("NotYet", f"the run is {run.state}"))
        if not ok and type_ != "Running":
            reason, message = "NotYet", f"the run is {run.state}"
        condition: dict[str, Any] = {
            "type": type_,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": _clip(message, 1000),
            "lastTransitionTime": timestamp(since),
        }
        if generation is not None:
            condition["observedGeneration"] = generation
        out.append(condition)
    return out


def _failure(run: RunView) -> str:
    failed = [t for t in run.tasks if t.state in (TaskState.FAILED, TaskState.UPSTREAM_FAILED)]
    if failed:
        names = ", ".join(t.name for t in failed[:10])
        more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
        first = next((t for t in failed if t.reason), None)
        why = f"; {first.name}: {first.reason}" if first is not None else ""
        return f"failed: {names}{more}{why}"
    ended_early = next(
        (t.reason for t in run.tasks if t.state == TaskState.SKIPPED and t.reason), None
    )
    return ended_early or "the run failed"


def status_of(run: RunView, generation: int | None = None) -> dict[str, Any]:
    """The DagRun's status: the run's state, counts, bounded task entries, conditions."""
    counts = Counter(t.state for t in run.tasks)
    chosen = sorted(run.tasks, key=lambda t: (_FIRST.get(TaskState(t.state), 9), t.name))
    shown = chosen[:MAX_TASK_ENTRIES]
    status: dict[str, Any] = {
        "runId": run.run_id,
        "runType": run.run_type,
        "state": run.state,
        "logicalDate": timestamp(run.logical_date),
        "dataInterval": {
            "start": timestamp(run.data_interval_start),
            "end": timestamp(run.data_interval_end),
        },
        "startedAt": timestamp(run.start_date),
        "endedAt": timestamp(run.end_date),
        "duration": duration((run.end_date - run.start_date).total_seconds())
        if run.end_date is not None and run.start_date is not None
        else None,
        "tasksDone": run.tasks_done,
        "tasksTotal": run.tasks_total,
        "tasks": f"{run.tasks_done}/{run.tasks_total}",
        # Every state, zeros included: a merge patch keeps keys it does not name.
        "taskCounts": {state.value: counts.get(state.value, 0) for state in TaskState},
        "taskInstances": [_entry(t) for t in sorted(shown, key=lambda t: t.name)],
        "taskInstancesOmitted": len(chosen) - len(shown),
        "conditions": _conditions(run, generation),
    }
    # The condition that describes the run's state, lifted for `kubectl get dagruns`' Reason
    # and Message columns (a printer column cannot pick the condition that is True).
    current = _STATE_CONDITION.get(RunState(run.state), "Running")
    shown_condition = next(c for c in status["conditions"] if c["type"] == current)
    status["reason"] = shown_condition["reason"]
    status["message"] = shown_condition["message"]
    if generation is not None:
        status["observedGeneration"] = generation
    return status


# Which of the run's conditions says why it is in its state (queued and running: Running).
_STATE_CONDITION = {RunState.SUCCESS: "Succeeded", RunState.FAILED: "Failed"}


def summary_of(run: RunView) -> dict[str, Any]:
    """What the next publication diffs against: the run's state and each task's state and
    try (stored with the publication, never shown)."""
    return {"state": run.state, "tasks": {t.name: [t.state, t.try_number] for t in run.tasks}}


def events_between(previous: dict[str, Any] | None, run: RunView) -> list[EventSpec]:
    """The Events a user must see for what changed since `previous` (None: never published)."""
    before_state = (previous or {}).get("state")
    before_tasks: dict[str, list[Any]] = (previous or {}).get("tasks") or {}
    events: list[EventSpec] = []
    started = run.state != RunState.QUEUED and before_state in (None, RunState.QUEUED)
    if started and run.start_date is not None:
        events.append(EventSpec("Normal", "RunStarted", f"run {run.run_id} started"))
    task_events: list[EventSpec] = []
    for task in sorted(run.tasks, key=lambda t: t.name):
        old_state, old_try = (before_tasks.get(task.name) or [None, 0])[:2]
        if (task.state, task.try_number) == (old_state, old_try):
            continue
        task_events.extend(_task_events(task, old_state, int(old_try or 0)))
    if len(task_events) > MAX_EVENTS:
        rest = len(task_events) - MAX_EVENTS + 1
        more = EventSpec(
            "Warning",
            "MoreTaskEvents",
            f"{rest} more task events; `sluice dags runs {run.dag_id} --run {run.run_id}`"
            " lists every task",
        )
        task_events = [*task_events[: MAX_EVENTS - 1], more]
    events.extend(task_events)
    if run.state != before_state:
        if run.state == RunState.SUCCESS:
            took = events_duration(run)
            events.append(EventSpec("Normal", "RunSucceeded", f"run {run.run_id} succeeded{took}"))
        elif run.state == RunState.FAILED:
            timed_out = any(
                t.state == TaskState.SKIPPED and t.reason == "dagrun timeout" for t in run.tasks
            )
            if timed_out:
                events.append(
                    EventSpec(
                        "Warning", "RunTimedOut", f"run {run.run_id} passed its dagrunTimeout"
                    )
                )
            events.append(
                EventSpec("Warning", "RunFailed", f"run {run.run_id} failed: {_failure(run)}")
            )
    return [EventSpec(e.type, e.reason, _clip(e.message, MAX_EVENT_MESSAGE)) for e in events]


def events_duration(run: RunView) -> str:
    if run.start_date is None or run.end_date is None:
        return ""
    return f" in {duration((run.end_date - run.start_date).total_seconds())}"


def _task_events(task: TaskView, old_state: str | None, old_try: int) -> list[EventSpec]:
    reason = task.reason or "no reason recorded"
    zombie = reason.startswith("zombie")
    if task.state == TaskState.FAILED:
        what = "ZombieDetected" if zombie else "TaskFailed"
        return [EventSpec("Warning", what, f"{task.name} try {task.try_number} failed: {reason}")]
    if task.state == TaskState.UP_FOR_RETRY:
        what = "ZombieDetected" if zombie else "RetryScheduled"
        return [
            EventSpec(
                "Warning",
                what,
                f"{task.name} try {task.try_number} failed: {reason}; "
                f"try {task.try_number + 1} is scheduled",
            )
        ]
    if task.try_number > old_try and old_try > 0 and old_state != TaskState.UP_FOR_RETRY:
        # The retry came and went between two publications: its failure is still news.
        return [
            EventSpec(
                "Warning",
                "RetryScheduled",
                f"{task.name} try {old_try} ended and try {task.try_number} is {task.state}",
            )
        ]
    return []


@dataclass(frozen=True)
class DagView:
    dag_id: str
    namespace: str
    version: int | None
    paused: bool
    active: bool
    active_runs: int
    next_logical_date: datetime | None
    broken_reason: str | None
    last_run_id: str | None = None
    last_run_state: str | None = None
    last_run_logical_date: datetime | None = None
    last_run_ended_at: datetime | None = None


def dag_status(dag: DagView) -> dict[str, Any]:
    """What the scheduler knows of a DAG, merged beside the operator's `conditions` (this
    patch never carries conditions, so the Ready condition stays the operator's)."""
    last = (
        None
        if dag.last_run_id is None
        else {
            "runId": dag.last_run_id,
            "state": dag.last_run_state,
            "logicalDate": timestamp(dag.last_run_logical_date),
            "endedAt": timestamp(dag.last_run_ended_at),
        }
    )
    return {
        "version": dag.version,
        "paused": dag.paused,
        "activeRuns": dag.active_runs,
        "lastRun": last,
        "nextRun": timestamp(dag.next_logical_date)
        if dag.active and not dag.broken_reason
        else None,
        "broken": _clip(dag.broken_reason, 1000) if dag.broken_reason else None,
    }


@dataclass(frozen=True)
class BackfillView:
    id: int
    dag_id: str
    namespace: str
    object_name: str
    runs: dict[str, int]  # run state -> how many of the backfill's runs
    object_uid: str | None = None  # its Backfill object's: published onto that one only


def backfill_status(backfill: BackfillView) -> dict[str, Any]:
    """Progress: the backfill's runs by state; `running` while any is queued or running,
    then `failed` if any failed, else `success` (a backfill with no runs to make is done)."""
    total = sum(backfill.runs.values())
    active = backfill.runs.get(RunState.QUEUED, 0) + backfill.runs.get(RunState.RUNNING, 0)
    done = total - active
    if active:
        state = "running"
    elif backfill.runs.get(RunState.FAILED, 0):
        state = "failed"
    else:
        state = "success"
    return {
        "state": state,
        "runsTotal": total,
        "runsDone": done,
        "progress": f"{done}/{total}",
        # Every state, zeros included: a merge patch keeps keys it does not name.
        "runs": {state.value: backfill.runs.get(state.value, 0) for state in RunState},
    }
