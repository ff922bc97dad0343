"""The steady-state benchmark's pure parts: when runs are due, lags, backlog, the sweep and
the tables (`bench.arrival_figures`, `bench.arrival_report`).

Rows are built by hand; nothing runs a scheduler or Postgres.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import pytest
from bench.arrival import (
    CAPACITY_ARMS,
    Timing,
    arm_knobs,
    parse_arms,
    per_side,
    rate_round,
    search_step,
)
from bench.arrival_figures import (
    ERROR,
    MINUTE_END,
    SLOPE,
    ArrivalTrial,
    RunRow,
    RunTimes,
    Schedule,
    TaskRow,
    backlog,
    fit_slope,
    keeps_up,
    run_lags_ms,
    run_times,
    summarize,
    t95,
    task_lags_ms,
)
from bench.arrival_report import (
    Sitting,
    capacities,
    decided,
    group_keeps_up,
    markdown,
    next_dags,
    nice,
    paired_lines,
    ratio,
    target_verdict,
)
from bench.common import Knobs
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


def test_a_rate_is_kept_up_with_when_a_majority_of_its_ok_trials_kept_up() -> None:
    up, down = _trial("sluice", 10, up=True), _trial("sluice", 10, up=False)
    assert group_keeps_up([up, up])
    assert group_keeps_up([up, down, up])
    assert not group_keeps_up([down, up, down])
    assert not group_keeps_up([up, down])  # a tie is not a majority
    errored = _trial("sluice", 10, up=False, status=ERROR)
    assert group_keeps_up([up, errored])  # only ok trials vote
    assert not group_keeps_up([errored])


# A trial's outcome: kept up, fell behind, not ok (an `error`: it does not vote).
OUTCOMES = ("keep", "miss", "error")


def _outcomes(seq: tuple[str, ...]) -> list[ArrivalTrial]:
    return [
        _trial("sluice", 10, up=o == "keep", status=ERROR if o == "error" else "ok") for o in seq
    ]


@pytest.mark.parametrize("planned", [1, 2, 3, 4, 5])
def test_a_rate_is_decided_only_when_no_remaining_trials_can_change_its_verdict(
    planned: int,
) -> None:
    for ran in range(planned + 1):
        for prefix in itertools.product(OUTCOMES, repeat=ran):
            verdict = decided(_outcomes(prefix), planned)
            finals = {
                group_keeps_up(_outcomes(prefix + rest))
                for rest in itertools.product(OUTCOMES, repeat=planned - ran)
            }
            if ran == planned:
                assert verdict is not None, prefix
                assert verdict == group_keeps_up(_outcomes(prefix)), prefix
            elif verdict is not None:
                # Early: every completion of the remaining trials gives the same verdict,
                # and an `ok` trial has run (a rate with none decides nothing).
                assert finals == {verdict}, (prefix, planned)
                # The search records the trials that ran: their own verdict is the same.
                assert group_keeps_up(_outcomes(prefix)) == verdict, prefix
                assert any(o != "error" for o in prefix), prefix
            else:
                # ... and as early as that: undecided only while the verdict can still turn.
                assert finals == {True, False}, (prefix, planned)


def test_of_three_trials_two_that_agree_decide_a_rate() -> None:
    assert decided(_outcomes(("keep", "keep")), 3) is True
    assert decided(_outcomes(("miss", "miss")), 3) is False
    assert decided(_outcomes(("keep", "miss")), 3) is None
    assert decided(_outcomes(("keep", "error")), 3) is None  # a third keep: 2/2; a miss: 1/2
    assert decided(_outcomes(("miss", "error")), 3) is False  # at best a tie, 1/2
    assert decided(_outcomes(("keep",)), 3) is None
    assert decided([], 3) is None
    assert decided(_outcomes(("keep",)), 1) is True
    assert decided(_outcomes(("error",)), 1) is False  # no ok trial: the search skips the rate


def test_a_round_stops_an_arms_trials_at_a_rate_once_decided_and_the_others_take_turns() -> None:
    a, b, c = ("sluice", "like-for-like"), ("airflow", "defaults"), ("airflow3", "defaults")
    script = {a: ["keep", "keep", "miss"], b: ["keep", "miss", "keep"], c: ["miss", "miss"]}
    ran: list[tuple[tuple[str, str], int, int]] = []

    def run(arm: tuple[str, str], dags: int, n: int) -> ArrivalTrial:
        ran.append((arm, dags, n))
        return _outcomes((script[arm][n],))[0]

    done = rate_round({a: 100, b: 200, c: 300}, 3, run)
    assert ran == [(a, 100, 0), (b, 200, 0), (c, 300, 0), (a, 100, 1), (b, 200, 1), (c, 300, 1),
                   (b, 200, 2)]  # fmt: skip
    assert [len(done[arm]) for arm in (a, b, c)] == [2, 3, 2]
    assert [group_keeps_up(done[arm]) for arm in (a, b, c)] == [True, True, False]
    # One trial a rate (the sweep): every arm runs its one, as before.
    ran.clear()
    assert [len(g) for g in rate_round({a: 100, c: 300}, 1, run).values()] == [1, 1]
    assert ran == [(a, 100, 0), (c, 300, 0)]


def test_the_markdown_shows_every_trial_with_its_status_and_the_verdict() -> None:
    failed = _trial("airflow3", 100, up=False, status=ERROR)
    failed.errors = ["RuntimeError: scheduler exited 1"]
    table = markdown([_trial("sluice", 1000, up=True), _trial("airflow", 100, up=False), failed])
    lines = table.splitlines()
    assert lines[0].startswith("| side | variant | DAGs (runs/min) |")
    assert any(line.startswith("| Sluice | like-for-like | 1,000 | #0 | ok |") for line in lines)
    assert any("| error | RuntimeError: scheduler exited 1 |" in line for line in lines)
    assert any("| 5/9 | - | NO |" in line for line in lines)
    assert any(line.startswith("| Sluice | like-for-like | [1,000, ?) |") for line in lines)
    assert lines[-1].startswith("- target for Sluice like-for-like")
    assert "MISSED (rate: not shown" in lines[-1]
    sluice = _trial("sluice", 1000, up=True)
    sluice.top_statements = [{"query": "SELECT a | b", "calls": 1200, "rows": 5, "ms": 3456.7}]
    with_statements = markdown([sluice]).splitlines()
    assert "  - 3,457 ms, 1,200 calls, 5 rows: `SELECT a \\| b`" in with_statements


def test_dags_per_side() -> None:
    assert per_side("100", ["sluice", "airflow"]) == {"sluice": 100, "airflow": 100}
    both = per_side("sluice=2000,airflow=200", ["sluice", "airflow", "airflow3"])
    assert both == {"sluice": 2000, "airflow": 200, "airflow3": 2000}
    with pytest.raises(SystemExit, match="--dags 'spark=1': the side is one of"):
        per_side("spark=1", ["sluice"])
    with pytest.raises(SystemExit, match="--rates 'sluice=1,x': a number, or SIDE=N"):
        per_side("sluice=1,x", ["sluice"], "--rates")


def test_one_side_tries_one_rate_while_the_other_searches() -> None:
    """`--rates sluice=8,airflow=1 --dags sluice=8000,airflow=640`: the Airflow arm at
    640 only (its trials there, whatever they show); Sluice's search goes on."""
    sluice, airflow = ("sluice", "like-for-like"), ("airflow", "like-for-like")
    history: dict[tuple[str, str], list[tuple[int, bool]]] = {sluice: [], airflow: []}
    steps = {sluice: 0, airflow: 0}
    start, most = {"sluice": 8000, "airflow": 640}, {"sluice": 8, "airflow": 1}
    todo = search_step(history, steps, start, most, 2.0, 0.3)
    assert todo == {sluice: 8000, airflow: 640}
    steps = {sluice: 1, airflow: 1}
    history = {sluice: [(8000, True)], airflow: [(640, False)]}
    assert search_step(history, steps, start, most, 2.0, 0.3) == {sluice: 16000}
    # A step whose trials all failed is still a step: the cap bounds a failing arm.
    assert search_step({sluice: [], airflow: []}, steps, start, most, 2.0, 0.3) == {sluice: 8000}
    steps = {sluice: 8, airflow: 1}
    assert search_step(history, steps, start, most, 2.0, 0.3) == {}


# --- the capacity measurement (issue 36): slope, bisection, ranges, verdict ---


def test_t95_is_students_t_one_sided_and_never_too_small_between_entries() -> None:
    assert t95(4) == 2.132
    assert t95(11) == t95(10) == 1.812  # the next smaller df's: a wider bound
    assert t95(1000) == 1.671
    assert math.isnan(t95(0))


def test_a_flat_or_shrinking_backlog_keeps_up_however_large() -> None:
    minutes = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    flat = fit_slope(minutes, [0] * 6, dags=1000)
    assert (flat.slope, flat.se, flat.threshold, flat.points) == (0.0, 0.0, 20.0, 6)
    assert flat.keeps_up
    stable = fit_slope(minutes, [500, 510, 490, 505, 495, 500], dags=1000)
    assert abs(stable.slope) < 5
    assert stable.keeps_up
    # Airflow 2.10.5 at 640 runs a minute (arrival-2026-12-05-limits.json): 270, then 200.
    shrinking = fit_slope([1.0, 2.0], [270, 200], dags=640)
    assert shrinking.slope == -70.0
    assert math.isnan(shrinking.se)
    assert shrinking.keeps_up


def test_a_backlog_growing_faster_than_the_tolerance_beyond_its_noise_falls_behind() -> None:
    minutes = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # 60 runs a minute more than finish, at 1,000 runs a minute: 6% > 2%.
    growing = fit_slope(minutes, [100 + 60 * k for k in range(6)], dags=1000)
    assert growing.slope == pytest.approx(60.0)
    assert growing.se == pytest.approx(0.0, abs=1e-9)
    assert not growing.keeps_up
    # Growing, but by less than 2% of the rate a minute: kept up.
    slow = fit_slope(minutes, [10 * k for k in range(6)], dags=1000)
    assert slow.slope == pytest.approx(10.0)
    assert slow.keeps_up
    # Up on average, but the fit's noise covers the tolerance: not significant, kept up.
    noisy = fit_slope(minutes, [0, 400, 0, 300, 0, 500], dags=1000)
    assert noisy.slope > noisy.threshold
    assert noisy.lower == pytest.approx(noisy.slope - 2.132 * noisy.se)
    assert noisy.lower <= noisy.threshold
    assert noisy.keeps_up
    # The same growth with a steadier backlog is significant.
    steady = fit_slope(minutes, [0, 70, 110, 190, 240, 300], dags=1000)
    assert steady.lower > steady.threshold
    assert not steady.keeps_up
    # A bigger tolerance lets it through.
    assert fit_slope(minutes, [0, 70, 110, 190, 240, 300], 1000, tolerance=0.1).keeps_up


def test_with_fewer_than_five_samples_the_slope_itself_is_held_against_the_threshold() -> None:
    # A 120 s window (3 samples; Sluice throttled to one task a tick, 640 runs a minute):
    # with t = 6.3 for one degree of freedom the bound would call this growth noise.
    short = fit_slope([0.0, 1.0, 2.0], [0, 0, 291], dags=640)
    assert short.slope == pytest.approx(145.5)
    assert short.se == pytest.approx(84.0, abs=0.1)
    assert short.lower == short.slope
    assert not short.keeps_up
    four = fit_slope([0.0, 1.0, 2.0, 3.0], [0, 0, 291, 0], dags=640)
    assert four.lower == four.slope
    # From five samples the bound counts.
    five = fit_slope([0.0, 1.0, 2.0, 3.0, 4.0], [0, 0, 291, 0, 100], dags=640)
    assert five.lower == pytest.approx(five.slope - 2.353 * five.se)
    assert five.keeps_up


def test_no_slope_from_fewer_than_two_instants_never_keeps_up() -> None:
    one = fit_slope([0.0], [0], dags=10)
    assert math.isnan(one.slope)
    assert not one.keeps_up
    assert not fit_slope([], [], dags=10).keeps_up


def test_summarize_fits_the_backlog_from_the_window_start_at_each_minute_end() -> None:
    # A window of five minutes; one DAG whose runs each take 90 s: a run more every two
    # minutes is left unfinished (the backlog grows by half a run a minute: 50% > 2%).
    start = B2
    end = B2 + 300 * S
    schedule = Schedule(dags=1, first_due=FIRST, period_s=60.0, window_start=start, window_end=end)
    dues = schedule.due_times(end)
    runs = [RunRow(str(i), "d0", due) for i, due in enumerate(dues)]
    tasks = [
        TaskRow(str(i), "t0", due, due + 90 * S * (i + 1), "success") for i, due in enumerate(dues)
    ]
    trial = ArrivalTrial("sluice", "like-for-like", "linear", 1, 1, 1, 0)
    done = summarize(
        trial=trial, graph=linear(1), schedule=schedule, runs=runs, tasks=tasks,
        observed_until=end + 3600 * S, samples=_samples(), statements=None,
    )  # fmt: skip
    assert done.criterion == SLOPE
    assert done.backlog_fit_s == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0]
    assert done.backlog_fit_runs == [
        backlog(schedule, run_times(runs, tasks, 1), t)[0] for t in schedule.slope_samples()
    ]
    assert done.backlog_fit_runs[-1] > done.backlog_fit_runs[0]
    assert done.backlog_slope_per_min > done.slope_threshold_per_min == 0.02
    assert not done.keeps_up
    assert not done.minute_end_keeps_up  # the old criterion, recorded beside it


def test_a_trial_saved_before_the_slope_criterion_keeps_its_minute_end_verdict() -> None:
    old = ArrivalTrial("airflow", "like-for-like", "linear", 640, 10, 1, 0).as_dict()
    for key in ("criterion", "minute_end_keeps_up", "backlog_fit_s", "backlog_slope_per_min"):
        del old[key]
    old["keeps_up"], old["backlog_unfinished"] = False, [270, 200]
    loaded = ArrivalTrial.from_dict(old)
    assert loaded.criterion == MINUTE_END
    assert (loaded.keeps_up, loaded.minute_end_keeps_up) == (False, False)
    assert math.isnan(loaded.backlog_slope_per_min)
    table = markdown([loaded])
    assert "| 270/200 | - | NO (minute-end) |" in table
    assert "- 1 of these trials were judged by the minute-end criterion" in table


def test_rates_are_rounded_to_two_significant_figures() -> None:
    assert [nice(x) for x in (0.4, 7.07, 45.3, 452.5, 11_313.7)] == [1, 7, 45, 450, 11_000]


def _search(capacity: float, start: int, resolution: float | None, rates: int = 20) -> list[int]:
    """The rates the search tries against a side that keeps up below `capacity`."""
    history: list[tuple[int, bool]] = []
    while len(history) < rates:
        nxt = next_dags(history, start, 2.0, resolution)
        if nxt is None:
            break
        history.append((nxt, nxt < capacity))
    return [d for d, _ in history]


def test_capacity_search_brackets_by_doubling_then_bisects_to_the_resolution() -> None:
    # Sluice-like: kept up at 8,000, behind at 16,000; then the geometric middles.
    assert _search(9_000, 8_000, 0.15) == [8_000, 16_000, 11_000, 9_400, 8_700]
    # Airflow-like, from below its limit: 320, 640, then 450, 380, 410.
    tried = _search(400, 320, 0.15)
    assert tried == [320, 640, 450, 380, 410]
    history = [(d, d < 400) for d in tried]
    lo = max(d for d, ok in history if ok)
    hi = min(d for d, ok in history if not ok)
    assert (lo, hi) == (380, 410)
    assert hi <= lo * 1.15
    # From above: halving, then bisecting.
    assert _search(300, 640, 0.2) == [640, 320, 160, 230, 270]
    # Without a resolution: the old sweep, done once bracketed.
    assert _search(400, 320, None) == [320, 640]
    # Small rates: the integer middle when two figures cannot fall between.
    assert _search(12, 10, 0.05) == [10, 20, 14, 12, 11]


@pytest.mark.parametrize("capacity", [3.5, 17.0, 123.0, 999.0, 4_321.0, 13_000.0])
@pytest.mark.parametrize("start", [10, 320, 8_000])
def test_capacity_search_always_ends_with_the_limit_inside_a_narrow_bracket(
    capacity: float, start: int
) -> None:
    tried = _search(capacity, start, 0.15)
    history = [(d, d < capacity) for d in tried]
    lo = max(d for d, ok in history if ok)
    hi = min(d for d, ok in history if not ok)
    assert lo < capacity <= hi
    assert hi <= lo * 1.15 or hi - lo <= 1
    assert len(tried) == len(set(tried))


def test_capacity_search_leaves_a_noisy_rate_out_of_the_bracket() -> None:
    # Behind at 450 but kept up at 640 (noise): the bracket is 320-450, bisected.
    history = [(320, True), (640, True), (1280, False), (450, False)]
    assert next_dags(history, 320, 2.0, 0.15) == 380
    # Behind at every rate below one it kept up with: down by the factor.
    assert next_dags([(100, False), (200, True)], 100, 2.0, 0.15) == 50
    assert next_dags([(100, False), (200, True)], 100, 2.0, None) is None


def _at(
    side: str, dags: int, ups: list[bool], p99s: list[float], variant: str = "like-for-like"
) -> list[ArrivalTrial]:
    found = []
    for n, (up, p99) in enumerate(zip(ups, p99s, strict=True)):
        t = _trial(side, dags, up=up, p99=p99)
        t.variant, t.trial, t.run_lag_p50_ms = variant, n, p99 / 2
        found.append(t)
    return found


def _measured() -> list[ArrivalTrial]:
    return [
        *_at("sluice", 8_000, [True, True, True], [30_000, 35_000, 32_000]),
        *_at("sluice", 8_700, [False, True, False], [60_000, 40_000, 70_000]),
        *_at("sluice", 9_400, [False, False, False], [90_000] * 3),
        *_at("sluice", 4_000, [True] * 3, [800, 900, 950]),
        *_at("airflow", 320, [True] * 3, [25_000] * 3),
        *_at("airflow", 350, [False] * 3, [40_000] * 3),
        *_at("airflow", 380, [True, True, False], [30_000] * 3, variant="defaults+tuned"),
        *_at("airflow", 410, [False] * 3, [30_000] * 3, variant="defaults+tuned"),
        *_at("airflow3", 300, [True] * 3, [28_000] * 3),
        *_at("airflow3", 330, [False] * 3, [50_000] * 3),
    ]


def test_capacity_per_arm_is_the_range_between_kept_up_and_fallen_behind() -> None:
    found = {c.arm: c for c in capacities(_measured())}
    sluice = found[("sluice", "like-for-like")]
    assert (sluice.kept, sluice.behind) == (8_000, 8_700)
    assert sluice.width == pytest.approx(0.0875)
    assert str(sluice.tally(8_700)) == "8,700 (1/3)"
    # Run lag at the capacity rate: the median trial's and the worst trial's p99.
    assert (sluice.lag_p99_ms, sluice.lag_p99_worst_ms, sluice.lag_trials) == (32_000, 35_000, 3)
    assert sluice.lag_p50_ms == 16_000
    assert sluice.p99_under_target == 4_000
    tuned = found[("airflow", "defaults+tuned")]
    assert (tuned.kept, tuned.behind) == (380, 410)  # 2 of 3 kept up at 380


def test_the_ratio_is_a_range_against_the_best_of_every_airflow_arm() -> None:
    found = capacities(_measured())
    sluice = next(c for c in found if c.arm[0] == "sluice")
    r = ratio(sluice, found)
    # The faster Airflow: its capacity lies in [380, 410) (Airflow 2.10.5 defaults+tuned).
    assert (r.airflow_low, r.airflow_high) == (380, 410)
    assert r.low == pytest.approx(8_000 / 410)
    assert r.high == pytest.approx(8_700 / 380)
    # An Airflow arm that never fell behind leaves Airflow's capacity unbounded above.
    open_arm = [*_measured(), *_at("airflow3", 500, [True] * 3, [1] * 3, variant="defaults")]
    r2 = ratio(sluice, capacities(open_arm))
    assert r2.low is None
    assert r2.open_arms == (("airflow3", "defaults"),)
    assert r2.high == pytest.approx(8_700 / 500)


def test_the_target_is_met_only_when_the_ratio_floor_and_the_lag_both_are() -> None:
    found = capacities(_measured())
    sluice = next(c for c in found if c.arm[0] == "sluice")
    missed = target_verdict(ratio(sluice, found))
    assert "MISSED" in missed
    assert "rate: the ratio's lower bound is 19.5x < 20x" in missed
    assert "lag: p99 35,000 ms in the worst of 3 trials at 8,000 runs/min" in missed

    def sluice_at(kept: int, p99s: list[float]) -> list[ArrivalTrial]:
        return [
            *_at("sluice", kept, [True] * 3, p99s),
            *_at("sluice", int(kept * 1.1), [False] * 3, [90_000] * 3),
        ]

    airflow = [t for t in _measured() if t.side != "sluice"]
    fast = capacities([*sluice_at(8_400, [700, 800, 990]), *airflow])
    verdict = target_verdict(ratio(next(c for c in fast if c.arm[0] == "sluice"), fast))
    assert ": met (rate: the ratio's lower bound is 20.5x; lag: p99 990 ms" in verdict
    # One trial over 1 s at the capacity rate: the lag half misses, and so the target.
    slow = capacities([*sluice_at(8_400, [700, 800, 1_200]), *airflow])
    verdict = target_verdict(ratio(next(c for c in slow if c.arm[0] == "sluice"), slow))
    assert "MISSED (lag: p99 1,200 ms" in verdict
    assert "holds: rate" in verdict
    # Without an upper bound on Airflow's capacity the rate half is not shown: missed.
    open_airflow = [*sluice_at(8_400, [700] * 3), *_at("airflow", 320, [True] * 3, [1] * 3)]
    found = capacities(open_airflow)
    verdict = target_verdict(ratio(next(c for c in found if c.arm[0] == "sluice"), found))
    assert "MISSED (rate: not shown" in verdict


def test_the_markdown_has_the_capacity_table_ratio_and_verdict() -> None:
    lines = markdown(_measured()).splitlines()
    assert "| Sluice | like-for-like | [8,000, 8,700) | 1,333.3-1,450.0 | 9% |" in "\n".join(lines)
    assert any("4,000 (3/3), 8,000 (3/3), 8,700 (1/3), 9,400 (0/3)" in line for line in lines)
    assert any(
        line.startswith("- ratio, Sluice like-for-like / the faster Airflow: 19.5x to 22.9x")
        for line in lines
    )
    assert any(line.startswith("- target for Sluice like-for-like") for line in lines)
    assert any(
        "run lag p99 < 1 s in every trial up to 4,000 runs/min (9.8x" in line for line in lines
    )


def _sluice_between(kept: int, behind: int, p99: float = 30_000) -> list[ArrivalTrial]:
    return [
        *_at("sluice", kept, [True] * 2, [p99] * 2),
        *_at("sluice", behind, [False] * 2, [1] * 2),
    ]


def _airflow_between(side: str, variant: str, kept: int, behind: int) -> list[ArrivalTrial]:
    return [
        *_at(side, kept, [True] * 2, [1] * 2, variant=variant),
        *_at(side, behind, [False] * 2, [1] * 2, variant=variant),
    ]


LFL_TUNED = "like-for-like+tuned"


def test_across_sittings_the_ratio_is_the_smallest_of_each_sittings_ratio() -> None:
    # ADR 0050: each sitting pairs Sluice with one Airflow arm on its own machine.
    one = Sitting(
        "a", [*_sluice_between(8_000, 11_000), *_airflow_between("airflow", LFL_TUNED, 320, 400)]
    )
    two = Sitting(
        "b", [*_sluice_between(9_400, 11_000), *_airflow_between("airflow3", LFL_TUNED, 300, 380)]
    )
    lines = paired_lines([one, two])
    # a: [8,000/400, 11,000/320] = [20.0, 34.4]; b: [24.7, 36.7]; the smallest of each end.
    assert lines[0].startswith(
        "ratio across 2 sitting(s), Sluice like-for-like / the faster Airflow: 20.0x to 34.4x"
    )
    assert "a: 20.0x to 34.4x (Sluice [8,000, 11,000), Airflow [320, 400))" in lines[0]
    assert lines[-1].startswith("target for Sluice like-for-like")
    assert "holds: rate: the ratio's lower bound is 20.0x" in lines[-1]
    # One sitting whose Airflow never fell behind: no lower end across the sittings.
    open_two = Sitting(
        "b",
        [
            *_sluice_between(9_400, 11_000),
            *_at("airflow3", 300, [True] * 2, [1] * 2, variant=LFL_TUNED),
        ],
    )
    assert ": ? to 34.4x," in paired_lines([one, open_two])[0]


def test_across_sittings_the_rate_is_not_judged_until_every_airflow_arm_is_measured() -> None:
    one = Sitting(
        "a", [*_sluice_between(8_000, 11_000), *_airflow_between("airflow", LFL_TUNED, 320, 400)]
    )
    expected = (("airflow", LFL_TUNED), ("airflow3", LFL_TUNED))
    verdict = paired_lines([one], expected)[-1]
    assert "MISSED (rate: not judged, 1 Airflow arm(s) not measured yet: Airflow 3.3.2" in verdict
    # An Airflow arm measured without Sluice beside it is left out of the ratio, and named.
    alone = Sitting("c", _airflow_between("airflow3", LFL_TUNED, 300, 380))
    lines = paired_lines([one, alone], expected)
    assert (
        "left out of Sluice like-for-like's ratio (no Sluice like-for-like beside them):"
        in lines[1]
    )
    assert "not measured yet: Airflow 3.3.2" in lines[-1]
    # The same within one file: a capacity file with one Airflow arm names it, and the
    # target's rate half waits for the others.
    text = markdown(one.trials, expected)
    assert f"- ratio, Sluice like-for-like / Airflow 2.10.5 {LFL_TUNED}: 20.0x to 34.4x" in text
    assert "rate: not judged, 1 Airflow arm(s) not measured yet" in text


def test_across_sittings_the_lag_half_is_judged_in_every_sitting() -> None:
    fast = Sitting(
        "a",
        [
            *_sluice_between(8_000, 11_000, p99=900),
            *_airflow_between("airflow", LFL_TUNED, 320, 400),
        ],
    )
    slow = Sitting(
        "b",
        [
            *_sluice_between(9_400, 11_000, p99=1_500),
            *_airflow_between("airflow3", LFL_TUNED, 300, 380),
        ],
    )
    verdict = paired_lines([fast, slow])[-1]
    assert "MISSED" in verdict
    assert "lag: p99 1,500 ms in the worst trial at the sittings' capacity rates" in verdict
    assert "900 at 8,000, 1,500 at 9,400" in verdict
    met = paired_lines(
        [
            fast,
            Sitting(
                "b",
                [
                    *_sluice_between(9_400, 11_000, p99=900),
                    *_airflow_between("airflow3", LFL_TUNED, 300, 380),
                ],
            ),
        ]
    )
    assert ": met (rate: the ratio's lower bound is 20.0x; lag: p99 900 ms" in met[-1]


def test_capacity_arms_are_each_airflow_at_both_runs_examined_settings_and_tuned() -> None:
    arms = parse_arms(CAPACITY_ARMS)
    assert arms[0] == ("sluice", "like-for-like")
    assert sorted(arms[1:]) == sorted(
        (side, f"{variant}{tuned}")
        for side in ("airflow", "airflow3")
        for variant in ("like-for-like", "defaults")
        for tuned in ("", "+tuned")
    )
    with pytest.raises(SystemExit):
        parse_arms("airflow:fastest")


def test_tuned_arms_create_a_whole_minutes_runs_in_one_loop() -> None:
    base = Knobs(max_tis_per_query=512)
    plain = arm_knobs(base, "like-for-like", 400)
    assert (plain.runs_examined, plain.runs_created) == (400, 10)
    tuned = arm_knobs(base, "like-for-like+tuned", 400)
    assert (tuned.runs_examined, tuned.runs_created, tuned.variant) == (
        400, 400, "like-for-like+tuned",
    )  # fmt: skip
    defaults = arm_knobs(base, "defaults+tuned", 400)
    assert (defaults.runs_examined, defaults.runs_created) == (20, 400)
    assert arm_knobs(base, "defaults", 400).runs_created is None  # Airflow's own 10
    assert arm_knobs(base, "defaults+tuned", 5).runs_created == 10


def test_an_untuned_arms_check_at_one_rate_bounds_the_ratio_from_below() -> None:
    """ADR 0050's check that an untuned arm is no faster than its tuned twin: Sluice at
    the rate it kept up with beside the twin, the untuned arm at the twin's upper bound,
    3 trials each at most (`--rates sluice=1,airflow=1`). Fallen behind there, it bounds
    the ratio's lower end as the twin does, and counts as measured; the sitting adds no
    upper end."""
    tuned = Sitting(
        "a", [*_sluice_between(11_000, 13_000), *_airflow_between("airflow", LFL_TUNED, 540, 640)]
    )
    check = Sitting(
        "b",
        [
            *_at("sluice", 11_000, [True] * 2, [1] * 2),
            *_at("airflow", 640, [False] * 2, [1] * 2, variant="like-for-like"),
        ],
    )
    expected = (("airflow", LFL_TUNED), ("airflow", "like-for-like"))
    lines = paired_lines([tuned, check], expected)
    assert lines[0].startswith(
        "ratio across 2 sitting(s), Sluice like-for-like / the faster Airflow: 17.2x to 24.1x"
    )
    assert "b: 17.2x to ? (Sluice [11,000, ?), Airflow [?, 640))" in lines[0]
    assert "not measured yet" not in lines[-1]
    assert "rate: the ratio's lower bound is 17.2x < 20x" in lines[-1]
    # Kept up with at the twin's upper bound: it may be the faster, and nothing bounds it.
    faster = Sitting(
        "b",
        [
            *_at("sluice", 11_000, [True] * 2, [1] * 2),
            *_at("airflow", 640, [True] * 2, [1] * 2, variant="like-for-like"),
        ],
    )
    assert ": ? to 24.1x," in paired_lines([tuned, faster], expected)[0]


def test_two_untuned_checks_of_different_sides_share_one_sitting_and_its_sluice() -> None:
    """ADR 0050: the checks of two untuned arms on different sides may run as one sitting,
    Sluice at a rate it kept up with beside both twins and each arm at its own twin's
    upper bound (`--dags sluice=11000,airflow=640,airflow3=550 --rates
    sluice=1,airflow=1,airflow3=1`). Both fallen behind, the sitting's lower end is
    Sluice's rate over the larger of the two bounds, and both arms count as measured."""
    twins = [
        Sitting(
            "a",
            [*_sluice_between(11_000, 13_000), *_airflow_between("airflow", LFL_TUNED, 540, 640)],
        ),
        Sitting(
            "b",
            [*_sluice_between(13_000, 16_500), *_airflow_between("airflow3", LFL_TUNED, 450, 550)],
        ),
    ]
    check = Sitting(
        "c",
        [
            *_at("sluice", 11_000, [True] * 2, [1] * 2),
            *_at("airflow", 640, [False] * 2, [1] * 2),
            *_at("airflow3", 550, [False] * 2, [1] * 2),
        ],
    )
    expected = (
        ("airflow", LFL_TUNED),
        ("airflow", "like-for-like"),
        ("airflow3", LFL_TUNED),
        ("airflow3", "like-for-like"),
    )
    lines = paired_lines([*twins, check], expected)
    # a: [17.2, 24.1]; b: [23.6, 36.7]; c: [11,000/640, ?) = [17.2, ?).
    assert lines[0].startswith(
        "ratio across 3 sitting(s), Sluice like-for-like / the faster Airflow: 17.2x to 24.1x"
    )
    assert "c: 17.2x to ? (Sluice [11,000, ?), Airflow [?, 640))" in lines[0]
    assert "not measured yet" not in lines[-1]
    # One of them kept up at its twin's bound: it may be the faster; the check bounds nothing.
    faster = Sitting(
        "c",
        [
            *_at("sluice", 11_000, [True] * 2, [1] * 2),
            *_at("airflow", 640, [False] * 2, [1] * 2),
            *_at("airflow3", 550, [True] * 2, [1] * 2),
        ],
    )
    assert "c: ? to ?" in paired_lines([*twins, faster], expected)[0]


def test_a_search_stands_in_for_the_check_its_arm_kept_up_in() -> None:
    """ADR 0050: an untuned arm that kept up at its check needs a search of its own. Once
    a sitting bounds it, the check's open arm is left out of the check's ratio (named),
    and the check still bounds the ratio through its other arm, fallen behind."""
    twin = Sitting(
        "a", [*_sluice_between(11_000, 13_000), *_airflow_between("airflow", LFL_TUNED, 540, 640)]
    )
    check = Sitting(
        "b",
        [
            *_at("sluice", 11_000, [True] * 2, [1] * 2),
            *_at("airflow", 450, [False] * 2, [1] * 2, variant="defaults"),
            *_at("airflow3", 300, [True] * 2, [1] * 2, variant="defaults"),
        ],
    )
    expected = (("airflow", LFL_TUNED), ("airflow", "defaults"), ("airflow3", "defaults"))
    assert ": ? to 24.1x," in paired_lines([twin, check], expected)[0]
    search = Sitting(
        "c", [*_sluice_between(8_666, 11_000), *_airflow_between("airflow3", "defaults", 240, 300)]
    )
    lines = paired_lines([twin, check, search], expected)
    # a: [17.2, 24.1]; b, without Airflow 3.3.2: [11,000/450, ?) = [24.4, ?); c: [28.9, 45.8].
    assert lines[0].startswith(
        "ratio across 3 sitting(s), Sluice like-for-like / the faster Airflow: 17.2x to 24.1x"
    )
    assert "b: 24.4x to ? (Sluice [11,000, ?), Airflow [?, 450))" in lines[0]
    assert "c: 28.9x to 45.8x" in lines[0]
    assert lines[1] == (
        "left out of a sitting's ratio (it never fell behind there, and another sitting"
        " bounds it): Airflow 3.3.2 defaults (b)"
    )
    assert "rate: the ratio's lower bound is 17.2x < 20x" in lines[-1]
