"""Figures of one trial, from database timestamps only.

- status: `ok` when every run ended and every expected task succeeded;
  otherwise `timeout` (runs still active at the deadline), `tasks-failed`,
  `incomplete` (fewer task instances than expected) or `error` (the trial
  raised). Every trial is kept; only `ok` trials enter medians;
- makespan: from the unpause (t0, the database clock) to the last task's end;
- tasks/s: the expected tasks (DAGs x tasks) / makespan, for `ok` trials only;
- scheduling lag: a task's queued time minus its latest upstream's end, or
  minus its run's start for tasks without upstreams;
- CPU per task: the scheduler processes' CPU seconds from t0 to the end
  (read in /proc), divided by the tasks; Postgres's CPU and the machine's
  busy fraction over the same time say which one was the limit;
- start lag: as scheduling lag but to the time the try was handed to the
  executor (Sluice: the dispatch claim; Airflow: the no-op executor's update),
  a cross-check of the queued figure.
- tasks per replica: by the job id that queued each task.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from bench.shapes import Graph, Workload

NAN = math.nan


@dataclass(frozen=True)
class TaskTimes:
    run: str  # the run's key (one run per DAG: the dag id will do)
    task_id: str
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    run_start: datetime | None
    job: int | None


OK = "ok"
TIMEOUT = "timeout"
TASKS_FAILED = "tasks-failed"
INCOMPLETE = "incomplete"
ERROR = "error"
FAILED_OLD = "failed"  # a saved trial from before `status`, with errors


@dataclass
class Trial:
    side: str
    shape: str
    dags: int
    tasks: int
    replicas: int
    max_tis_per_query: int
    trial: int
    makespan_s: float
    tasks_per_s: float
    lag_p50_ms: float
    lag_p95_ms: float
    lag_max_ms: float
    start_lag_p50_ms: float
    start_lag_p95_ms: float
    cpu_s: float
    cpu_ms_per_task: float
    pg_cpu_s: float
    machine_busy: float
    per_replica: list[int] = field(default_factory=list)
    tasks_done: int = 0
    errors: list[str] = field(default_factory=list)
    status: str = OK
    expected_tasks: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Trial:
        """A saved trial; files from before `status` kept only trials that did not raise."""
        saved = dict(saved)
        saved.setdefault("status", OK if not saved.get("errors") else FAILED_OLD)
        saved.setdefault("expected_tasks", saved["dags"] * saved["tasks"])
        return cls(**saved)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def key(self) -> tuple[str, str, int, int, int, int]:
        return (self.side, self.shape, self.dags, self.tasks, self.replicas, self.max_tis_per_query)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def lags_ms(graph: Graph, rows: list[TaskTimes], *, at_start: bool = False) -> list[float]:
    ends = {(r.run, r.task_id): r.end_date for r in rows}
    lags: list[float] = []
    for row in rows:
        when = row.start_date if at_start else row.queued_at
        if when is None:
            continue
        ups = graph.get(row.task_id, [])
        ready: datetime | None
        if ups:
            up_ends = [ends.get((row.run, u)) for u in ups]
            ready = None if any(e is None for e in up_ends) else max(e for e in up_ends if e)
        else:
            ready = row.run_start
        if ready is not None:
            lags.append((when - ready).total_seconds() * 1000)
    return lags


def trial_status(*, timed_out: bool, failed: int, done: int, expected: int) -> str:
    if timed_out:
        return TIMEOUT
    if failed:
        return TASKS_FAILED
    if done < expected:
        return INCOMPLETE
    return OK


def summarize(
    *,
    side: str,
    workload: Workload,
    replicas: int,
    max_tis_per_query: int,
    trial: int,
    t0: datetime,
    rows: list[TaskTimes],
    cpu: tuple[float, float, float],
    timed_out: bool = False,
    failed: int = 0,
    errors: list[str] | None = None,
) -> Trial:
    """One trial's figures; per-task figures are over the expected tasks, and only
    an `ok` trial has them (a trial that ended early or timed out has none)."""
    cpu_s, pg_cpu_s, busy = cpu
    ends = [r.end_date for r in rows if r.end_date is not None]
    makespan = (max(ends) - t0).total_seconds() if ends else float("nan")
    lags = lags_ms(workload.graph(), rows)
    start_lags = lags_ms(workload.graph(), rows, at_start=True)
    done = len(ends)
    expected = workload.total_tasks
    status = trial_status(timed_out=timed_out, failed=failed, done=done, expected=expected)
    counted = status == OK and makespan > 0
    jobs = Counter(r.job for r in rows if r.job is not None)
    return Trial(
        side=side,
        shape=workload.shape,
        dags=workload.dags,
        tasks=workload.tasks,
        replicas=replicas,
        max_tis_per_query=max_tis_per_query,
        trial=trial,
        makespan_s=round(makespan, 3),
        tasks_per_s=round(expected / makespan, 1) if counted else NAN,
        lag_p50_ms=round(percentile(lags, 50), 1),
        lag_p95_ms=round(percentile(lags, 95), 1),
        lag_max_ms=round(max(lags), 1) if lags else NAN,
        start_lag_p50_ms=round(percentile(start_lags, 50), 1),
        start_lag_p95_ms=round(percentile(start_lags, 95), 1),
        cpu_s=round(cpu_s, 2),
        cpu_ms_per_task=round(cpu_s * 1000 / expected, 3) if counted else NAN,
        pg_cpu_s=round(pg_cpu_s, 2),
        machine_busy=round(busy, 2),
        per_replica=sorted(jobs.values(), reverse=True),
        tasks_done=done,
        errors=list(errors or []),
        status=status,
        expected_tasks=expected,
    )


def failed_trial(
    *, side: str, workload: Workload, replicas: int, max_tis_per_query: int, trial: int, error: str
) -> Trial:
    """A trial that raised: kept, shown, and never in a median."""
    return Trial(
        side=side,
        shape=workload.shape,
        dags=workload.dags,
        tasks=workload.tasks,
        replicas=replicas,
        max_tis_per_query=max_tis_per_query,
        trial=trial,
        makespan_s=NAN,
        tasks_per_s=NAN,
        lag_p50_ms=NAN,
        lag_p95_ms=NAN,
        lag_max_ms=NAN,
        start_lag_p50_ms=NAN,
        start_lag_p95_ms=NAN,
        cpu_s=NAN,
        cpu_ms_per_task=NAN,
        pg_cpu_s=NAN,
        machine_busy=NAN,
        errors=[error],
        status=ERROR,
        expected_tasks=workload.total_tasks,
    )


def median_trial(trials: list[Trial]) -> Trial | None:
    """The `ok` trial with the median throughput (its other figures come with it);
    the lower middle one of an even count. None when no trial is `ok`."""
    ordered = sorted((t for t in trials if t.ok), key=lambda t: t.tasks_per_s)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def tasks_per_s_range(trials: list[Trial]) -> tuple[float, float]:
    """Min and max tasks/s of the `ok` trials (NaN, NaN without one)."""
    values = [t.tasks_per_s for t in trials if t.ok]
    return (min(values), max(values)) if values else (NAN, NAN)


def statuses(trials: list[Trial]) -> str:
    """`3/3 ok`, or `2/3 ok, 1 timeout`: every trial counted."""
    counts = Counter(t.status for t in trials)
    ok = counts.pop(OK, 0)
    rest = "".join(f", {n} {status}" for status, n in sorted(counts.items()))
    return f"{ok}/{len(trials)} ok{rest}"


def read_task_times(engine: Engine, query: str) -> tuple[list[TaskTimes], int]:
    """Task timestamps from a side's own schema, and how many tasks did not succeed.

    `query` selects dag_id, task_id, queued, start_date, end_date, run_start and job.
    """
    with engine.connect() as conn:
        rows = [TaskTimes(*row) for row in conn.execute(text(query))]
        failed = conn.execute(
            text("SELECT count(*) FROM task_instance WHERE state IS DISTINCT FROM 'success'")
        ).scalar_one()
    return rows, int(failed)
