"""Figures of one trial: times from database timestamps, CPU from /proc, statements from Postgres.

- status: `ok` when every run ended and every expected task succeeded;
  otherwise `timeout` (runs still active at the deadline), `tasks-failed`,
  `incomplete` (fewer task instances than expected) or `error` (the trial
  raised). Every trial is kept; only `ok` trials enter medians;
- makespan: from the unpause (t0, the database clock) to the last task's end;
- tasks/s: the expected tasks (DAGs x tasks) / makespan, for `ok` trials only;
- first action: from t0 to the side's earliest run's creation (Sluice's
  `dag_run.created_at`, the clock of the tick that created it; Airflow's
  `dag_run.queued_at`), which is where each scheduler was in its idle sleep
  when the unpause came; the active makespan runs from there to the last task's
  end, and active tasks/s is the expected tasks over it;
- settle: how long the schedulers idled before t0 (a base plus a random draw);
- scheduling lag: a task's queued time minus its latest upstream's end, or
  minus its run's start for tasks without upstreams;
- CPU over the makespan window only (t0 to the last task's end): the
  scheduler processes' CPU seconds and Postgres's (read in /proc every 50 ms
  and interpolated at both ends of the window), each and their total per
  expected task, and the machine's busy fraction over the same window;
- statements (`pg_stat_statements`, when the server loads it): calls, rows
  and execution plus planning time of the side's database, per expected
  task, less the harness's own (marked) statements, from t0 to the harness's
  read after its poll saw every run end (`statements_window_s`; past the
  makespan by the poll's 0.1 s on a side that ends a run with its last task,
  and by up to a loop more on a side that ends it in its next loop);
- start lag: as scheduling lag but to the time the try was handed to the
  executor (Sluice: the dispatch claim; Airflow: the no-op executor's update),
  a cross-check of the queued figure.
- tasks per replica: by the job id that queued each task.
"""

from __future__ import annotations

import itertools
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


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds at a moment (wall clock: the database's clock on this machine)."""

    at: datetime
    scheduler_s: float
    postgres_s: float
    busy_jiffies: float  # all CPUs, /proc/stat
    total_jiffies: float


@dataclass(frozen=True)
class CpuWindow:
    seconds: float
    scheduler_s: float
    postgres_s: float
    machine_busy: float  # fraction of all CPUs


@dataclass(frozen=True)
class StatementTotals:
    """pg_stat_statements of one database: statements, rows, execution + planning ms."""

    calls: int
    rows: int
    ms: float


@dataclass(frozen=True)
class Writes:
    """What a database wrote, from one point to another: WAL bytes (the server's, so
    everything running on it then) and, per table, its row updates, those that were
    heap-only (HOT: no index entry written) and those whose new version went to
    another page (pg_stat_user_tables' n_tup_upd, n_tup_hot_upd, n_tup_newpage_upd)."""

    wal_bytes: int
    updates: dict[str, tuple[int, int, int]]

    def since(self, before: Writes) -> Writes:
        """The difference from `before`, keeping the tables that were updated."""
        zero = (0, 0, 0)
        updates = {
            table: delta
            for table, now in self.updates.items()
            if (delta := _minus(now, before.updates.get(table, zero)))[0] > 0
        }
        return Writes(wal_bytes=self.wal_bytes - before.wal_bytes, updates=updates)


def _minus(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def update_shares(updates: dict[str, Any]) -> tuple[float, float]:
    """Over every table: the share of row updates that were HOT, and that went to a new
    page, each in percent; NaN for a trial without the counts (or without updates)."""
    total = sum(u[0] for u in updates.values())
    if not total:
        return NAN, NAN
    return (
        100 * sum(u[1] for u in updates.values()) / total,
        100 * sum(u[2] for u in updates.values()) / total,
    )


def cpu_at(samples: list[CpuSample], at: datetime) -> CpuSample:
    """The cumulative CPU at `at`, linear between the samples around it (clamped to
    the first and last sample)."""
    if not samples:
        raise ValueError("no CPU samples")
    if at <= samples[0].at:
        return samples[0]
    for before, after in itertools.pairwise(samples):
        if before.at <= at <= after.at:
            span = (after.at - before.at).total_seconds()
            w = (at - before.at).total_seconds() / span if span > 0 else 1.0
            return CpuSample(
                at,
                *(
                    a + (b - a) * w
                    for a, b in (
                        (before.scheduler_s, after.scheduler_s),
                        (before.postgres_s, after.postgres_s),
                        (before.busy_jiffies, after.busy_jiffies),
                        (before.total_jiffies, after.total_jiffies),
                    )
                ),
            )
    return samples[-1]


def cpu_window(samples: list[CpuSample], start: datetime, end: datetime) -> CpuWindow:
    """CPU between `start` and `end` only (the makespan), whenever the samples began and ended."""
    a, b = cpu_at(samples, start), cpu_at(samples, end)
    jiffies = b.total_jiffies - a.total_jiffies
    return CpuWindow(
        seconds=(end - start).total_seconds(),
        scheduler_s=b.scheduler_s - a.scheduler_s,
        postgres_s=b.postgres_s - a.postgres_s,
        machine_busy=(b.busy_jiffies - a.busy_jiffies) / jiffies if jiffies > 0 else NAN,
    )


# The two configurations a trial runs in (`common.for_variant` sets their knobs).
LIKE_FOR_LIKE = "like-for-like"
DEFAULTS = "defaults"
# Sluice only: like for like, plus what a chart install pays on top (status capture and
# a status publisher against a stand-in API server, `common.for_variant`).
PRODUCTION = "production"
VARIANTS = (LIKE_FOR_LIKE, DEFAULTS, PRODUCTION)

# The sides a trial runs on: Sluice, and each Airflow peer by its side name (a trial's
# `side`; "airflow" is 2.10.5, as in every results file from before Airflow 3).
AIRFLOW_SIDES = {"airflow": "2.10.5", "airflow3": "3.3.2"}
SIDES = ("sluice", *AIRFLOW_SIDES)


def side_label(side: str) -> str:
    """`Sluice`, `Airflow 2.10.5`, `Airflow 3.3.2`."""
    return f"Airflow {AIRFLOW_SIDES[side]}" if side in AIRFLOW_SIDES else side.capitalize()


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
    # Over the makespan window (cpu_s, pg_cpu_s and machine_busy are too, from 2026-12-04).
    cpu_window_s: float = NAN
    pg_cpu_ms_per_task: float = NAN
    total_cpu_ms_per_task: float = NAN
    # pg_stat_statements per expected task; NaN, with the reason, when unavailable.
    statements_per_task: float = NAN
    statement_rows_per_task: float = NAN
    statement_ms_per_task: float = NAN
    statements_unavailable: str = ""
    variant: str = DEFAULTS
    knobs: dict[str, Any] = field(default_factory=dict)
    # From 2026-12-06 (issue 36): the settle drawn, the first action and what follows it.
    settle_s: float = NAN
    first_action_ms: float = NAN
    active_makespan_s: float = NAN
    active_tasks_per_s: float = NAN
    statements_window_s: float = NAN
    # The production variant: from t0 until every DagRun object showed its run's end, and
    # the scheduler's CPU from the last task's end to then (publishing after the makespan).
    status_final_s: float = NAN
    cpu_after_makespan_s: float = NAN
    # Sluice only, from 2026-12-06: each replica's own counts (`bench.replica.LoopStats`:
    # ticks, transactions and statements of its busy ticks, the pool lock's hold times).
    replica_stats: list[dict[str, Any]] = field(default_factory=list)
    # From 2026-12-07 (issue 36), `Writes` from the unpause until the schedulers stopped:
    # WAL bytes per expected task, and each table's [updates, HOT, to a new page].
    wal_bytes_per_task: float = NAN
    updates: dict[str, list[int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Trial:
        """A saved trial; files from before `status` kept only trials that did not raise."""
        saved = dict(saved)
        saved.setdefault("status", OK if not saved.get("errors") else FAILED_OLD)
        saved.setdefault("expected_tasks", saved["dags"] * saved["tasks"])
        # Before variants, both sides ran at their defaults (Airflow's 20 runs per loop).
        saved.setdefault("variant", DEFAULTS)
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
    samples: list[CpuSample],
    first_action: datetime | None = None,
    settle_s: float = NAN,
    statements_end: datetime | None = None,
    published_at: datetime | None = None,
    statements: StatementTotals | None = None,
    statements_unavailable: str = "",
    writes: Writes | None = None,
    timed_out: bool = False,
    failed: int = 0,
    errors: list[str] | None = None,
    variant: str = DEFAULTS,
    knobs: dict[str, Any] | None = None,
) -> Trial:
    """One trial's figures; per-task figures are over the expected tasks, and only
    an `ok` trial has them (a trial that ended early or timed out has none)."""
    ends = [r.end_date for r in rows if r.end_date is not None]
    makespan = (max(ends) - t0).total_seconds() if ends else float("nan")
    window = cpu_window(samples, t0, max(ends) if ends else samples[-1].at)
    lags = lags_ms(workload.graph(), rows)
    start_lags = lags_ms(workload.graph(), rows, at_start=True)
    done = len(ends)
    expected = workload.total_tasks
    status = trial_status(timed_out=timed_out, failed=failed, done=done, expected=expected)
    counted = status == OK and makespan > 0

    def per_task(total: float, digits: int = 3) -> float:
        return round(total / expected, digits) if counted else NAN

    jobs = Counter(r.job for r in rows if r.job is not None)
    active = (max(ends) - first_action).total_seconds() if ends and first_action else NAN
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
        cpu_s=round(window.scheduler_s, 3),
        cpu_ms_per_task=per_task(window.scheduler_s * 1000),
        pg_cpu_s=round(window.postgres_s, 3),
        machine_busy=round(window.machine_busy, 2),
        per_replica=sorted(jobs.values(), reverse=True),
        tasks_done=done,
        errors=list(errors or []),
        status=status,
        expected_tasks=expected,
        cpu_window_s=round(window.seconds, 3),
        pg_cpu_ms_per_task=per_task(window.postgres_s * 1000),
        total_cpu_ms_per_task=per_task((window.scheduler_s + window.postgres_s) * 1000),
        statements_per_task=per_task(statements.calls, 2) if statements else NAN,
        statement_rows_per_task=per_task(statements.rows, 2) if statements else NAN,
        statement_ms_per_task=per_task(statements.ms) if statements else NAN,
        statements_unavailable="" if statements else statements_unavailable,
        wal_bytes_per_task=per_task(writes.wal_bytes, 1) if writes else NAN,
        updates={t: list(u) for t, u in writes.updates.items()} if writes else {},
        variant=variant,
        knobs=dict(knobs or {}),
        settle_s=round(settle_s, 3),
        first_action_ms=(
            round((first_action - t0).total_seconds() * 1000, 1) if first_action else NAN
        ),
        active_makespan_s=round(active, 3),
        active_tasks_per_s=round(expected / active, 1) if counted and active > 0 else NAN,
        status_final_s=(round((published_at - t0).total_seconds(), 3) if published_at else NAN),
        cpu_after_makespan_s=(
            round(cpu_window(samples, max(ends), published_at).scheduler_s, 3)
            if published_at and ends and published_at > max(ends)
            else NAN
        ),
        statements_window_s=(
            round((statements_end - t0).total_seconds(), 3) if statements_end else NAN
        ),
    )


def failed_trial(
    *,
    side: str,
    workload: Workload,
    replicas: int,
    max_tis_per_query: int,
    trial: int,
    error: str,
    variant: str = DEFAULTS,
    knobs: dict[str, Any] | None = None,
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
        variant=variant,
        knobs=dict(knobs or {}),
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
