"""Figures of one steady-state trial (`python -m bench.arrival`), pure: from database
timestamps and CPU samples, the same way for every side.

The schedule: every DAG on `* * * * *`, so each minute boundary makes one run of
every DAG due at once (a burst of `dags` runs; a 5-field cron cannot fire
between minute boundaries on any of the three sides). The harness makes the
first run of every DAG due at `first_due` (a few seconds after t0, not on a
boundary), and the timetables take over from there: the next runs are due at
the following minute boundaries. The runs due before `window_start` are the
warm-up; the runs due in [`window_start`, `window_end`) are measured.

- **due**: a run's data-interval end (when its timetable made it due; the same
  column on every side);
- **run lag**: its first task's queued time minus its due time. A run that
  was never created, or none of whose tasks was queued by the end of
  observation, counts at the end of observation minus its due time (a lower
  bound: `censored` says how many);
- **task lag**: a task's queued time minus its latest upstream's end (tasks
  with upstreams only: a first task's wait is the run lag);
- **sustained tasks/s**: tasks that ended in the window over its length;
- **backlog** at an instant `b`: the runs due before `b` (every DAG at every
  boundary since `first_due`, by the schedule, created or not) that had not
  finished (every task ended) by `b`; sampled at each minute boundary in
  (window_start, window_end] and at window_end, just before that boundary's
  runs are due;
- **backlog slope** (issue 36): the backlog sampled at the window's start and
  at each of those instants (one sample a minute, each just before a minute's
  runs are due, so the sawtooth of the bursts is not in the fit), fitted by
  least squares against time: runs a minute by which the backlog grew, with
  its standard error and a one-sided 95% lower bound;
- **keeps up** (the `slope` criterion, since issue 36): the slope is not
  significantly above `SLOPE_TOLERANCE` (2%) of a minute's runs a minute: its
  lower bound is at most that (with fewer than `BOUND_POINTS` 5 samples, a
  window under 4 minutes, the slope itself). A backlog that is large but flat or shrinking
  keeps up (the side finishes as many runs a minute as fall due; its lag says
  how late); one that grows by more than 2% of the rate a minute, beyond the
  fit's noise, does not. Trials saved before issue 36 were judged by the
  `minute-end` criterion, which every trial still records beside it: the
  backlog at every minute-end sample at most `TOLERANCE` (1%) of a minute's
  runs (each minute's runs finished within the minute);
- **CPU**: the schedulers' and Postgres's CPU over the window only, per task
  that ended in it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bench.metrics import NAN, CpuSample, StatementTotals, cpu_window, percentile
from bench.shapes import Graph

OK = "ok"
TASKS_FAILED = "tasks-failed"
ERROR = "error"
TOLERANCE = 0.01  # of a minute's runs, at every backlog sample (the `minute-end` criterion)
# The `slope` criterion: fell behind when the backlog's growth, in runs a minute, is above
# this fraction of a minute's runs with 95% confidence (one-sided).
SLOPE_TOLERANCE = 0.02
# Samples a fit needs before its confidence bound counts (3 degrees of freedom, a window
# of at least 4 minutes): with 3 samples t is 6.3 and almost any growth is "noise".
# With fewer, the slope itself is held against the threshold.
BOUND_POINTS = 5
SLOPE = "slope"
MINUTE_END = "minute-end"
# Student's t, one-sided 95%, by degrees of freedom (no scipy in the bench's venv).
T95 = {
    1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860,
    9: 1.833, 10: 1.812, 12: 1.782, 15: 1.753, 20: 1.725, 30: 1.697, 60: 1.671,
}  # fmt: skip


def t95(df: int) -> float:
    """The one-sided 95% quantile of Student's t with `df` degrees of freedom (between the
    table's entries, the next smaller df's: a little wider, never narrower)."""
    if df < 1:
        return math.nan
    return T95[max(k for k in T95 if k <= df)]


@dataclass(frozen=True)
class Schedule:
    """When runs are due in a trial: `dags` runs at `first_due`, then at every
    `period` boundary after it; the warm-up and the measured window."""

    dags: int
    first_due: datetime
    period_s: float
    window_start: datetime
    window_end: datetime

    def due_times(self, before: datetime) -> list[datetime]:
        """Every instant runs fall due before `before`: `first_due`, then the period's
        boundaries (multiples of the period since the epoch) after it."""
        times = [self.first_due] if self.first_due < before else []
        step = timedelta(seconds=self.period_s)
        epoch = datetime(1970, 1, 1, tzinfo=self.first_due.tzinfo)
        boundary = epoch + step * (math.floor((self.first_due - epoch) / step) + 1)
        while boundary < before:
            times.append(boundary)
            boundary += step
        return times

    def in_window(self, due: datetime) -> bool:
        return self.window_start <= due < self.window_end

    @property
    def window_s(self) -> float:
        return (self.window_end - self.window_start).total_seconds()

    def samples(self) -> list[datetime]:
        """Where the backlog is sampled: each boundary in (window start, window end), and
        the window's end."""
        inside = [
            t for t in self.due_times(self.window_end) if self.window_start < t < self.window_end
        ]
        return [*inside, self.window_end]

    def slope_samples(self) -> list[datetime]:
        """Where the backlog's slope is fitted: the window's start (just before its first
        minute's runs are due: what the warm-up left) and every `samples()` instant."""
        return [self.window_start, *self.samples()]


@dataclass(frozen=True)
class RunRow:
    key: str  # the run's id on its side
    dag_id: str
    due: datetime  # data-interval end


@dataclass(frozen=True)
class TaskRow:
    run: str
    task_id: str
    queued: datetime | None
    end: datetime | None
    state: str | None


@dataclass(frozen=True)
class RunTimes:
    """What one run's task rows say: its first queued time and when it finished."""

    due: datetime
    first_queued: datetime | None
    finished: datetime | None  # the last task's end, when every task ended


def run_times(runs: list[RunRow], tasks: list[TaskRow], tasks_per_run: int) -> list[RunTimes]:
    by_run: dict[str, list[TaskRow]] = defaultdict(list)
    for t in tasks:
        by_run[t.run].append(t)
    found = []
    for run in runs:
        rows = by_run.get(run.key, [])
        queued = [t.queued for t in rows if t.queued is not None]
        ends = [t.end for t in rows if t.end is not None]
        done = len(ends) == tasks_per_run == len(rows)
        found.append(
            RunTimes(
                due=run.due,
                first_queued=min(queued) if queued else None,
                finished=max(ends) if done else None,
            )
        )
    return found


def run_lags_ms(
    schedule: Schedule, runs: list[RunTimes], observed_until: datetime
) -> tuple[list[float], int]:
    """The window's run lags (ms), one per run the schedule made due in it, and how
    many are lower bounds (never created, or not started by `observed_until`)."""
    lags: list[float] = []
    started: Counter[datetime] = Counter()
    for run in runs:
        if not schedule.in_window(run.due) or run.first_queued is None:
            continue
        if run.first_queued > observed_until:
            continue
        started[run.due] += 1
        lags.append((run.first_queued - run.due).total_seconds() * 1000)
    censored = 0
    for due in schedule.due_times(schedule.window_end):
        if schedule.in_window(due):
            missing = schedule.dags - started[due]
            censored += missing
            lags += [(observed_until - due).total_seconds() * 1000] * missing
    return lags, censored


def task_lags_ms(
    graph: Graph, schedule: Schedule, runs: list[RunRow], tasks: list[TaskRow]
) -> list[float]:
    """Queued minus the latest upstream's end, for the window's runs' tasks with upstreams."""
    measured = {r.key for r in runs if schedule.in_window(r.due)}
    ends = {(t.run, t.task_id): t.end for t in tasks if t.run in measured}
    lags = []
    for t in tasks:
        ups = graph.get(t.task_id, [])
        if t.run not in measured or t.queued is None or not ups:
            continue
        up_ends = [ends.get((t.run, u)) for u in ups]
        if all(e is not None for e in up_ends):
            ready = max(e for e in up_ends if e is not None)
            lags.append((t.queued - ready).total_seconds() * 1000)
    return lags


def backlog(schedule: Schedule, runs: list[RunTimes], at: datetime) -> tuple[int, int]:
    """(unfinished, unstarted) at `at`: of the runs the schedule made due before `at`,
    how many had not finished, and how many had no task queued, by `at`."""
    due = schedule.dags * len(schedule.due_times(at))
    finished = sum(1 for r in runs if r.due < at and r.finished is not None and r.finished <= at)
    started = sum(
        1 for r in runs if r.due < at and r.first_queued is not None and r.first_queued <= at
    )
    return due - finished, due - started


def keeps_up(unfinished: list[int], dags: int, tolerance: float = TOLERANCE) -> bool:
    """Whether every backlog sample is within `tolerance` of a minute's runs: each
    minute's runs finished before the next minute's were due."""
    allowed = math.floor(tolerance * dags)
    return bool(unfinished) and all(n <= allowed for n in unfinished)


@dataclass(frozen=True)
class SlopeFit:
    """The backlog fitted by least squares against time: `slope` runs a minute (its
    standard error `se`, NaN with two points), `lower` the one-sided 95% lower bound
    (slope - t95(n - 2) x se from `BOUND_POINTS` 5 points on; the slope itself with
    fewer), `threshold` the tolerance in runs a minute; kept up when `lower` <=
    `threshold`."""

    slope: float
    intercept: float
    se: float
    lower: float
    threshold: float
    points: int

    @property
    def keeps_up(self) -> bool:
        return not math.isnan(self.lower) and self.lower <= self.threshold


def fit_slope(
    minutes: list[float], backlog: list[int], dags: int, tolerance: float = SLOPE_TOLERANCE
) -> SlopeFit:
    """Least squares of `backlog` (runs) on `minutes`; the threshold is `tolerance` of a
    minute's runs (`dags`) a minute. Fewer than two distinct times: no slope (NaN),
    which never keeps up."""
    n = len(minutes)
    threshold = tolerance * dags
    mx = sum(minutes) / n if n else math.nan
    sxx = sum((x - mx) ** 2 for x in minutes)
    if n < 2 or sxx == 0:
        return SlopeFit(math.nan, math.nan, math.nan, math.nan, threshold, n)
    my = sum(backlog) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(minutes, backlog, strict=True)) / sxx
    intercept = my - slope * mx
    if n == 2:
        return SlopeFit(slope, intercept, math.nan, slope, threshold, n)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(minutes, backlog, strict=True))
    se = math.sqrt(residual / (n - 2) / sxx)
    lower = slope - t95(n - 2) * se if n >= BOUND_POINTS else slope
    return SlopeFit(slope, intercept, se, lower, threshold, n)


@dataclass
class ArrivalTrial:
    """One trial of one arm at one arrival rate; every figure over the window."""

    side: str
    variant: str
    shape: str
    dags: int
    tasks: int
    replicas: int
    trial: int
    status: str = OK
    errors: list[str] = field(default_factory=list)
    period_s: float = 60.0
    warmup_s: float = NAN  # first due to window start
    window_s: float = NAN
    drain_s: float = NAN  # observed past the window's end
    offered_tasks_per_s: float = NAN  # dags x tasks per period
    runs_due: int = 0  # in the window, by the schedule
    runs_created: int = 0
    runs_started: int = 0  # by the end of observation
    runs_finished: int = 0
    tasks_ended: int = 0  # in the window
    sustained_tasks_per_s: float = NAN
    run_lag_p50_ms: float = NAN
    run_lag_p95_ms: float = NAN
    run_lag_p99_ms: float = NAN
    run_lag_max_ms: float = NAN
    censored: int = 0  # run lags that are lower bounds
    task_lag_p50_ms: float = NAN
    task_lag_p95_ms: float = NAN
    task_lag_p99_ms: float = NAN
    backlog_unfinished: list[int] = field(default_factory=list)
    backlog_unstarted: list[int] = field(default_factory=list)
    # What decided `keeps_up`: `slope` (since issue 36) or `minute-end` (older JSON).
    criterion: str = SLOPE
    keeps_up: bool = False
    minute_end_keeps_up: bool = False  # every minute-end sample <= 1% of a minute's runs
    # The slope's fit: unfinished runs at each of `Schedule.slope_samples()` (seconds
    # from the window's start), slope and its standard error in runs a minute, the
    # one-sided 95% lower bound and the threshold it is held against.
    backlog_fit_s: list[float] = field(default_factory=list)
    backlog_fit_runs: list[int] = field(default_factory=list)
    backlog_slope_per_min: float = NAN
    backlog_slope_se: float = NAN
    backlog_slope_lower: float = NAN
    backlog_intercept: float = NAN
    slope_threshold_per_min: float = NAN
    trial_s: float = NAN  # the trial's wall time, setup to teardown
    cpu_s: float = NAN
    pg_cpu_s: float = NAN
    machine_busy: float = NAN
    cpu_ms_per_task: float = NAN
    pg_cpu_ms_per_task: float = NAN
    total_cpu_ms_per_task: float = NAN
    statements_per_task: float = NAN
    statement_ms_per_task: float = NAN
    statements_unavailable: str = ""
    first_due: str = ""
    window_start: str = ""
    knobs: dict[str, Any] = field(default_factory=dict)
    # The window's statements that took the most time (pg_stat_statements).
    top_statements: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> ArrivalTrial:
        if "criterion" not in saved:  # saved before issue 36: judged at the minute ends
            saved = {
                **saved,
                "criterion": MINUTE_END,
                "minute_end_keeps_up": saved.get("keeps_up", False),
            }
        return cls(**saved)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def runs_per_minute(self) -> float:
        return self.dags * 60.0 / self.period_s


def summarize(
    *,
    trial: ArrivalTrial,
    graph: Graph,
    schedule: Schedule,
    runs: list[RunRow],
    tasks: list[TaskRow],
    observed_until: datetime,
    samples: list[CpuSample],
    statements: StatementTotals | None,
    statements_unavailable: str = "",
    slope_tolerance: float = SLOPE_TOLERANCE,
) -> ArrivalTrial:
    """Fill in `trial`'s figures from the side's rows and the CPU samples."""
    times = run_times(runs, tasks, trial.tasks)
    lags, censored = run_lags_ms(schedule, times, observed_until)
    task_lags = task_lags_ms(graph, schedule, runs, tasks)
    points = [backlog(schedule, times, at) for at in schedule.samples()]
    ended = sum(
        1
        for t in tasks
        if t.end is not None and schedule.window_start <= t.end < schedule.window_end
    )
    window = cpu_window(samples, schedule.window_start, schedule.window_end)
    failed = sum(1 for t in tasks if t.state in ("failed", "upstream_failed"))

    def per_task(total: float, digits: int = 3) -> float:
        return round(total / ended, digits) if ended else NAN

    in_window = [r for r in times if schedule.in_window(r.due)]
    trial.status = TASKS_FAILED if failed else trial.status
    if failed:
        trial.errors.append(f"{failed} task instances failed")
    trial.warmup_s = round((schedule.window_start - schedule.first_due).total_seconds(), 3)
    trial.window_s = round(schedule.window_s, 3)
    trial.drain_s = round((observed_until - schedule.window_end).total_seconds(), 3)
    trial.offered_tasks_per_s = round(trial.dags * trial.tasks / schedule.period_s, 2)
    trial.runs_due = schedule.dags * sum(
        1 for due in schedule.due_times(schedule.window_end) if schedule.in_window(due)
    )
    trial.runs_created = len(in_window)
    trial.runs_started = sum(
        1 for r in in_window if r.first_queued is not None and r.first_queued <= observed_until
    )
    trial.runs_finished = sum(1 for r in in_window if r.finished is not None)
    trial.tasks_ended = ended
    trial.sustained_tasks_per_s = round(ended / schedule.window_s, 1)
    trial.run_lag_p50_ms = round(percentile(lags, 50), 1)
    trial.run_lag_p95_ms = round(percentile(lags, 95), 1)
    trial.run_lag_p99_ms = round(percentile(lags, 99), 1)
    trial.run_lag_max_ms = round(max(lags), 1) if lags else NAN
    trial.censored = censored
    trial.task_lag_p50_ms = round(percentile(task_lags, 50), 1)
    trial.task_lag_p95_ms = round(percentile(task_lags, 95), 1)
    trial.task_lag_p99_ms = round(percentile(task_lags, 99), 1)
    trial.backlog_unfinished = [p[0] for p in points]
    trial.backlog_unstarted = [p[1] for p in points]
    trial.minute_end_keeps_up = keeps_up(trial.backlog_unfinished, trial.dags)
    at = schedule.slope_samples()
    trial.backlog_fit_s = [round((t - schedule.window_start).total_seconds(), 3) for t in at]
    trial.backlog_fit_runs = [backlog(schedule, times, t)[0] for t in at]
    fit = fit_slope(
        [s / 60.0 for s in trial.backlog_fit_s], trial.backlog_fit_runs, trial.dags, slope_tolerance
    )
    trial.backlog_slope_per_min = round(fit.slope, 2)
    trial.backlog_slope_se = round(fit.se, 2)
    trial.backlog_slope_lower = round(fit.lower, 2)
    trial.backlog_intercept = round(fit.intercept, 2)
    trial.slope_threshold_per_min = round(fit.threshold, 2)
    trial.criterion = SLOPE
    trial.keeps_up = fit.keeps_up
    trial.cpu_s = round(window.scheduler_s, 3)
    trial.pg_cpu_s = round(window.postgres_s, 3)
    trial.machine_busy = round(window.machine_busy, 2)
    trial.cpu_ms_per_task = per_task(window.scheduler_s * 1000)
    trial.pg_cpu_ms_per_task = per_task(window.postgres_s * 1000)
    trial.total_cpu_ms_per_task = per_task((window.scheduler_s + window.postgres_s) * 1000)
    trial.statements_per_task = per_task(statements.calls, 2) if statements else NAN
    trial.statement_ms_per_task = per_task(statements.ms) if statements else NAN
    trial.statements_unavailable = "" if statements else statements_unavailable
    trial.first_due = schedule.first_due.isoformat()
    trial.window_start = schedule.window_start.isoformat()
    return trial
