"""The steady-state benchmark's pure parts: when runs are due, lags, backlog, the sweep and
the tables (`bench.arrival_figures`, `bench.arrival_report`).

Rows are built by hand; nothing runs a scheduler or Postgres.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from bench.arrival import Timing, parse_dags
from bench.arrival_figures import (
    ERROR,
    ArrivalTrial,
    RunRow,
    RunTimes,
    Schedule,
    TaskRow,
    backlog,
    keeps_up,
    run_lags_ms,
    run_times,
    summarize,
    task_lags_ms,
)
from bench.arrival_report import (
    group_keeps_up,
    markdown,
    next_dags,
    sustained,
    target_verdict,
)
from bench.metrics import CpuSample, StatementTotals
from bench.shapes import linear

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)
# The first runs are due at 12:00:31.5, between two minute boundaries.
FIRST = datetime(2026, 1, 1, 12, 0, 31, 500000, tzinfo=UTC)
B1 = datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
B2, B3, B4 = B1 + 60 * S, B1 + 120 * S, B1 + 180 * S


def _schedule(dags: int = 2) -> Schedule:
    # Warm-up: the runs due at FIRST and B1; the window: the runs due at B2 and B3.
    return Schedule(dags=dags, first_due=FIRST, period_s=60.0, window_start=B2, window_end=B4)


def test_runs_fall_due_at_the_first_due_time_then_at_every_minute_boundary() -> None:
    schedule = _schedule()
    assert schedule.due_times(B4) == [FIRST, B1, B2, B3]
    assert schedule.due_times(B2 + MS) == [FIRST, B1, B2]
    assert schedule.due_times(FIRST) == []
    assert [schedule.in_window(t) for t in (B1, B2, B3, B4)] == [False, True, True, False]
    # The backlog is looked at before each minute's runs inside the window, and at its end.
    assert schedule.samples() == [B3, B4]
    assert schedule.window_s == 120.0


def test_the_window_starts_at_the_first_minute_boundary_after_the_warm_up() -> None:
    now = datetime(2026, 1, 1, 12, 0, 29, tzinfo=UTC)
    schedule = Timing(lead_s=2.5, warmup_s=30.0, window_s=120.0).schedule(5, now)
    assert schedule.first_due == FIRST
    assert (schedule.window_start, schedule.window_end) == (B2, B4)
    # A boundary exactly at the end of the warm-up is the window's start.
    exact = Timing(lead_s=0.0, warmup_s=28.5, window_s=60.0).schedule(5, FIRST)
    assert exact.window_start == B1
    smoke = Timing(lead_s=1.0, warmup_s=0.0, window_s=6.0, window_at_first_due=True)
    quick = smoke.schedule(3, now)
    assert quick.window_start == quick.first_due == now + S
    assert quick.window_end == now + 7 * S
    assert quick.samples() == [now + 7 * S]
    # Ending before the next minute's runs are due: the first runs only.
    late = smoke.schedule(3, B1 - 3 * S)
    assert (late.window_start, late.window_end) == (B1 - 2 * S, B1)
    assert late.due_times(late.window_end) == [B1 - 2 * S]


def test_a_run_has_finished_only_when_every_task_ended() -> None:
    runs = [RunRow("1", "d0", B2), RunRow("2", "d1", B2), RunRow("3", "d2", B2)]
    tasks = [
        TaskRow("1", "t0", B2 + S, B2 + 2 * S, "success"),
        TaskRow("1", "t1", B2 + 3 * S, B2 + 4 * S, "success"),
        TaskRow("2", "t0", B2 + 5 * S, B2 + 6 * S, "success"),
        TaskRow("2", "t1", None, None, None),
    ]
    found = run_times(runs, tasks, tasks_per_run=2)
    assert found == [
        RunTimes(B2, B2 + S, B2 + 4 * S),
        RunTimes(B2, B2 + 5 * S, None),
        RunTimes(B2, None, None),
    ]


def test_run_lag_is_first_queued_minus_due_and_a_run_not_started_is_a_lower_bound() -> None:
    schedule = _schedule(dags=2)
    end = B4 + 10 * S
    measured = [
        RunTimes(B1, B1 + 50 * MS, B1 + S),  # warm-up: not measured
        RunTimes(B2, B2 + 100 * MS, B2 + S),
        RunTimes(B2, B2 + 300 * MS, B2 + S),
        RunTimes(B3, B3 + 200 * MS, B3 + S),
    ]
    # B3's second run: queued after observation ended, created and never queued, or
    # never created. Each counts at the end of observation minus its due time.
    for second in ([RunTimes(B3, end + S, None)], [RunTimes(B3, None, None)], []):
        lags, censored = run_lags_ms(schedule, measured + second, observed_until=end)
        assert sorted(lags) == [100.0, 200.0, 300.0, 70_000.0]
        assert censored == 1


def test_task_lag_runs_from_the_latest_upstream_end_to_queued_in_the_window_only() -> None:
    schedule = _schedule()
    graph = {"t0": [], "t1": ["t0"], "t2": ["t0", "t1"]}
    runs = [RunRow("w", "d0", B1), RunRow("m", "d0", B2)]
    tasks = [
        TaskRow("w", "t0", B1, B1 + S, "success"),
        TaskRow("w", "t1", B1 + 9 * S, B1 + 10 * S, "success"),  # warm-up run: left out
        TaskRow("m", "t0", B2 + 5 * S, B2 + 6 * S, "success"),  # first task: run lag's
        TaskRow("m", "t1", B2 + 6 * S + 40 * MS, B2 + 7 * S, "success"),
        TaskRow("m", "t2", B2 + 7 * S + 15 * MS, None, None),
    ]
    assert task_lags_ms(graph, schedule, runs, tasks) == pytest.approx([40.0, 15.0])


def test_a_side_that_finishes_each_minutes_runs_within_the_minute_keeps_up() -> None:
    schedule = _schedule(dags=2)
    runs = [RunTimes(due, due + S, due + 20 * S) for due in (FIRST, B1, B2, B3) for _ in range(2)]
    points = [backlog(schedule, runs, at) for at in schedule.samples()]
    assert points == [(0, 0), (0, 0)]
    assert keeps_up([p[0] for p in points], schedule.dags)


def test_a_side_that_needs_more_than_a_minute_per_minutes_runs_falls_behind() -> None:
    schedule = _schedule(dags=2)
    # Each minute's runs take 90 s to finish, and B3's second run is never created.
    runs = [RunTimes(due, due + S, due + 90 * S) for due in (FIRST, B1, B2, B3)] * 2
    runs = runs[:-1]
    assert backlog(schedule, runs, B3) == (2, 0)  # B2's runs, unfinished at B3
    assert backlog(schedule, runs, B4) == (2, 1)  # B3's; the second never started
    assert not keeps_up([2, 2], schedule.dags)


def test_keeping_up_allows_one_percent_of_a_minutes_runs_and_needs_a_sample() -> None:
    assert keeps_up([0, 10, 3], dags=1000)
    assert not keeps_up([0, 11], dags=1000)
    assert not keeps_up([1], dags=99)  # 1% of 99 runs is less than one run
    assert not keeps_up([], dags=1000)


def _samples() -> list[CpuSample]:
    # The schedulers use 0.5 s of CPU per second, Postgres 0.25, the machine half busy.
    return [CpuSample(B1 + k * S, 0.5 * k, 0.25 * k, 50.0 * k, 100.0 * k) for k in range(-60, 240)]


def test_summarize_counts_the_window_only() -> None:
    schedule = _schedule(dags=1)
    runs = [RunRow(str(i), "d0", due) for i, due in enumerate((FIRST, B1, B2, B3))]
    tasks = []
    for i, due in enumerate((FIRST, B1, B2, B3)):
        tasks += [
            TaskRow(str(i), "t0", due + 100 * MS, due + 200 * MS, "success"),
            TaskRow(str(i), "t1", due + 250 * MS, due + 300 * MS, "success"),
        ]
    trial = ArrivalTrial("sluice", "like-for-like", "linear", 1, 2, 1, 0)
    done = summarize(
        trial=trial,
        graph=linear(2),
        schedule=schedule,
        runs=runs,
        tasks=tasks,
        observed_until=B4,
        samples=_samples(),
        statements=StatementTotals(calls=40, rows=10, ms=2.0),
    )
    assert done.ok
    assert done.keeps_up
    assert (done.runs_due, done.runs_created, done.runs_started, done.runs_finished) == (2, 2, 2, 2)
    assert done.tasks_ended == 4  # B2's and B3's; the warm-up's are outside the window
    assert done.sustained_tasks_per_s == pytest.approx(4 / 120, abs=0.05)
    assert done.run_lag_p50_ms == done.run_lag_p99_ms == 100.0
    assert done.task_lag_p99_ms == 50.0
    assert done.censored == 0
    # 120 s of window: 60 s of scheduler CPU and 30 of Postgres's, over 4 tasks.
    assert done.cpu_s == pytest.approx(60.0)
    assert done.total_cpu_ms_per_task == pytest.approx(90_000 / 4)
    assert done.machine_busy == 0.5
    assert done.statements_per_task == 10.0
    assert done.warmup_s == pytest.approx(88.5)
    assert done.offered_tasks_per_s == pytest.approx(2 / 60, abs=0.01)


def test_a_failed_task_makes_the_trial_tasks_failed() -> None:
    schedule = _schedule(dags=1)
    runs = [RunRow("1", "d0", B2)]
    tasks = [TaskRow("1", "t0", B2 + S, B2 + 2 * S, "failed")]
    trial = ArrivalTrial("airflow", "like-for-like", "linear", 1, 1, 1, 0)
    done = summarize(
        trial=trial, graph=linear(1), schedule=schedule, runs=runs, tasks=tasks,
        observed_until=B4, samples=_samples(), statements=None, statements_unavailable="off",
    )  # fmt: skip
    assert done.status == "tasks-failed"
    assert not done.ok
    assert math.isnan(done.statements_per_task)
    assert done.statements_unavailable == "off"


def test_the_sweep_goes_up_while_keeping_up_and_down_while_behind_until_bracketed() -> None:
    assert next_dags([], 100) == 100
    assert next_dags([(100, True)], 100) == 200
    assert next_dags([(100, True), (200, True)], 100) == 400
    assert next_dags([(100, True), (200, False)], 100) is None
    assert next_dags([(100, False)], 100) == 50
    assert next_dags([(100, False), (50, True)], 100) is None
    assert next_dags([(1, False)], 1) is None
    assert next_dags([(100, True)], 100, factor=1.5) == 150
    # Kept up above a rate it fell behind at: noise; stop rather than go round.
    assert next_dags([(100, False), (50, False), (200, True)], 100) is None


def _trial(
    side: str, dags: int, *, up: bool, p99: float = 500.0, status: str = "ok"
) -> ArrivalTrial:
    t = ArrivalTrial(side, "like-for-like", "linear", dags, 10, 1, 0)
    t.status, t.keeps_up, t.run_lag_p99_ms = status, up, p99
    t.backlog_unfinished = [0, 0] if up else [5, 9]
    return t


def test_a_rate_is_kept_up_with_when_every_ok_trial_kept_up() -> None:
    assert group_keeps_up([_trial("sluice", 10, up=True), _trial("sluice", 10, up=True)])
    assert not group_keeps_up([_trial("sluice", 10, up=True), _trial("sluice", 10, up=False)])
    errored = _trial("sluice", 10, up=False, status=ERROR)
    assert group_keeps_up([_trial("sluice", 10, up=True), errored])
    assert not group_keeps_up([errored])


def test_the_target_is_twenty_times_the_faster_airflows_sustained_rate_with_p99_under_1s() -> None:
    trials = [
        _trial("airflow", 100, up=True, p99=9000),
        _trial("airflow", 200, up=False),
        _trial("airflow3", 50, up=True, p99=9000),
        _trial("airflow3", 100, up=False),
        _trial("sluice", 1000, up=True, p99=400),
        _trial("sluice", 2000, up=True, p99=1500),
        _trial("sluice", 4000, up=False),
    ]
    found = {s.arm[0]: s for s in sustained(trials)}
    assert (found["airflow"].kept, found["airflow"].behind) == (100, 200)
    assert (found["sluice"].kept, found["sluice"].p99_under_target) == (2000, 1000)
    verdict = target_verdict(list(found.values()))
    assert verdict.startswith("target: >= 20x Airflow 2.10.5's highest sustained rate")
    assert "= 2,000 runs/min" in verdict
    assert "MISSED at the rates tried" in verdict
    assert "p99 < 1 s at up to 1,000 runs/min (10.0x)" in verdict
    met = [*trials, _trial("sluice", 3000, up=True, p99=900)]
    assert ": met (Sluice 3,000 runs/min" in target_verdict(sustained(met))
    # Against an Airflow that never fell behind, 20x its rate is 20x a lower bound.
    open_airflow = [t for t in met if t.side == "sluice" or t.keeps_up]
    assert "not judged (met against a lower bound" in target_verdict(sustained(open_airflow))
    assert "not met at the rates tried" in target_verdict(sustained(open_airflow[:-1]))
    behind_everywhere = [_trial("airflow", 100, up=False), _trial("sluice", 1000, up=True)]
    assert "no Airflow arm kept up" in target_verdict(sustained(behind_everywhere))


def test_the_markdown_shows_every_trial_with_its_status_and_the_verdict() -> None:
    failed = _trial("airflow3", 100, up=False, status=ERROR)
    failed.errors = ["RuntimeError: scheduler exited 1"]
    table = markdown([_trial("sluice", 1000, up=True), _trial("airflow", 100, up=False), failed])
    lines = table.splitlines()
    assert lines[0].startswith("| side | variant | DAGs (runs/min) |")
    assert any(line.startswith("| Sluice | like-for-like | 1,000 | #0 | ok |") for line in lines)
    assert any("| error | RuntimeError: scheduler exited 1 |" in line for line in lines)
    assert any("| 5/9 | NO |" in line for line in lines)
    assert lines[-1].startswith("- target: no Airflow arm kept up")
    sluice = _trial("sluice", 1000, up=True)
    sluice.top_statements = [{"query": "SELECT a | b", "calls": 1200, "rows": 5, "ms": 3456.7}]
    with_statements = markdown([sluice]).splitlines()
    assert "  - 3,457 ms, 1,200 calls, 5 rows: `SELECT a \\| b`" in with_statements


def test_dags_per_side() -> None:
    assert parse_dags("100", ["sluice", "airflow"]) == {"sluice": 100, "airflow": 100}
    both = parse_dags("sluice=2000,airflow=200", ["sluice", "airflow", "airflow3"])
    assert both == {"sluice": 2000, "airflow": 200, "airflow3": 2000}
    with pytest.raises(SystemExit, match="the side is one of"):
        parse_dags("spark=1", ["sluice"])
