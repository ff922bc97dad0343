"""The benchmark's aggregation: every trial counts, medians of `ok` trials only, the tables.

Pure: trials are built by hand; nothing runs a scheduler or Postgres.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from bench.metrics import (
    DEFAULTS,
    LIKE_FOR_LIKE,
    CpuSample,
    StatementTotals,
    TaskTimes,
    Trial,
    Writes,
    failed_trial,
    lags_ms,
    median_trial,
    statuses,
    summarize,
    tasks_per_s_range,
    update_shares,
)
from bench.report import (
    cpu_floor_s,
    faster_peer,
    markdown,
    markdown_cpu,
    markdown_tables,
    medians,
    not_ok_lines,
    pairs,
    scaling_limit,
    target_verdict,
)
from bench.shapes import Workload

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)
# Cumulative CPU: the schedulers 5 s per second, Postgres 2.5 (a toy's rates), from t0 - 1 s.
SAMPLES = [
    CpuSample(T0 + k * 100 * MS, 0.5 * k, 0.25 * k, 40.0 * k, 100.0 * k) for k in range(-10, 20)
]


def _trial(side: str, tps: float, trial: int = 0, tis: int = 16) -> Trial:
    return Trial(
        side=side, shape="linear", dags=10, tasks=100, replicas=1, max_tis_per_query=tis,
        trial=trial, makespan_s=1000 / tps, tasks_per_s=tps, lag_p50_ms=20.0, lag_p95_ms=30.0,
        lag_max_ms=40.0, start_lag_p50_ms=21.0, start_lag_p95_ms=31.0, cpu_s=1.0,
        cpu_ms_per_task=1.0, pg_cpu_s=0.5, machine_busy=0.5, expected_tasks=1000,
        pg_cpu_ms_per_task=0.5, total_cpu_ms_per_task=1.5,
    )  # fmt: skip


def _rows(workload: Workload, ended: int, *, step_ms: int = 10) -> list[TaskTimes]:
    """`ended` of the workload's tasks ended, one every `step_ms` after t0; the rest queued."""
    rows = []
    for i, dag in enumerate(workload.dag_ids()):
        for j, task in enumerate(workload.graph()):
            n = i * workload.tasks + j
            end = T0 + (n + 1) * step_ms * MS if n < ended else None
            queued = T0 + n * step_ms * MS
            rows.append(TaskTimes(dag, task, queued, queued, end, T0, 1))
    return rows


def _summarize(workload: Workload, rows: list[TaskTimes], **kwargs: object) -> Trial:
    return summarize(
        side="sluice", workload=workload, replicas=1, max_tis_per_query=16, trial=0, t0=T0,
        rows=rows, samples=SAMPLES, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_tasks_per_s_is_the_expected_tasks_over_the_makespan() -> None:
    workload = Workload("no_structure", 2, 5)
    trial = _summarize(workload, _rows(workload, 10))
    assert trial.status == "ok"
    assert trial.makespan_s == pytest.approx(0.1)
    assert trial.tasks_per_s == pytest.approx(100.0)
    assert trial.expected_tasks == 10
    # CPU of the 100 ms makespan only, though the samples run from 1 s before to 1.9 s after.
    assert trial.cpu_window_s == pytest.approx(0.1)
    assert trial.cpu_s == pytest.approx(0.5)
    assert trial.cpu_ms_per_task == pytest.approx(50.0)
    assert trial.pg_cpu_ms_per_task == pytest.approx(25.0)
    assert trial.total_cpu_ms_per_task == pytest.approx(75.0)
    assert trial.machine_busy == pytest.approx(0.4)
    assert math.isnan(trial.statements_per_task)


def test_statements_are_per_expected_task_or_unavailable_with_the_reason() -> None:
    workload = Workload("no_structure", 2, 5)
    rows = _rows(workload, 10)
    counted = _summarize(workload, rows, statements=StatementTotals(calls=45, rows=30, ms=12.5))
    assert (counted.statements_per_task, counted.statement_rows_per_task) == (4.5, 3.0)
    assert counted.statement_ms_per_task == pytest.approx(1.25)
    assert counted.statements_unavailable == ""
    missing = _summarize(workload, rows, statements_unavailable="not loaded")
    assert math.isnan(missing.statements_per_task)
    assert missing.statements_unavailable == "not loaded"


def test_what_postgres_wrote_is_the_difference_since_t0_per_expected_task() -> None:
    workload = Workload("no_structure", 2, 5)
    before = Writes(wal_bytes=1_000, updates={"task_instance": (7, 1, 2), "dag": (3, 3, 0)})
    after = Writes(
        wal_bytes=21_480,
        updates={"task_instance": (37, 1, 12), "dag": (3, 3, 0), "task_try": (10, 10, 0)},
    )
    writes = after.since(before)
    # The tables updated since t0 only, with their counts since then.
    assert writes.updates == {"task_instance": (30, 0, 10), "task_try": (10, 10, 0)}
    trial = _summarize(workload, _rows(workload, 10), writes=writes)
    assert trial.wal_bytes_per_task == 2048.0
    assert trial.updates == {"task_instance": [30, 0, 10], "task_try": [10, 10, 0]}
    # 40 updates: 10 HOT, 10 to a new page.
    assert update_shares(trial.updates) == (25.0, 25.0)
    timed_out = _summarize(workload, _rows(workload, 6), writes=writes, timed_out=True)
    assert math.isnan(timed_out.wal_bytes_per_task)  # per task only for an ok trial
    without = _summarize(workload, _rows(workload, 10))
    assert math.isnan(without.wal_bytes_per_task)
    assert without.updates == {}
    assert all(math.isnan(x) for x in update_shares(without.updates))


def test_a_timed_out_trial_is_kept_with_what_it_finished_and_no_rate() -> None:
    workload = Workload("no_structure", 2, 5)
    trial = _summarize(workload, _rows(workload, 6), timed_out=True, errors=["timed out"])
    assert trial.status == "timeout"
    assert trial.tasks_done == 6
    # 6 tasks in 60 ms would read as 100 tasks/s: a rate over finished tasks is not given.
    assert math.isnan(trial.tasks_per_s)
    assert math.isnan(trial.cpu_ms_per_task)


def test_failed_or_missing_tasks_are_not_ok() -> None:
    workload = Workload("no_structure", 2, 5)
    assert _summarize(workload, _rows(workload, 10), failed=1).status == "tasks-failed"
    assert _summarize(workload, _rows(workload, 10)[:9]).status == "incomplete"


def test_medians_are_of_ok_trials_only_and_every_trial_is_counted() -> None:
    workload = Workload("linear", 10, 100)
    good = [_trial("sluice", tps, i) for i, tps in enumerate([300.0, 500.0, 400.0])]
    raised = failed_trial(
        side="sluice", workload=workload, replicas=1, max_tis_per_query=16, trial=3,
        error="RuntimeError: replica exited with 1",
    )  # fmt: skip
    late = replace(_trial("sluice", 9000.0, 4), status="timeout", tasks_done=10)
    group = [*good, raised, late]
    assert median_trial(group) == good[2]
    assert tasks_per_s_range(group) == (300.0, 500.0)
    assert statuses(group) == "3/5 ok, 1 error, 1 timeout"
    assert median_trial([raised, late]) is None
    assert not_ok_lines(group) == [
        "sluice defaults linear 10x100 tis=16 x1 #3: error, 0/1000 tasks ended:"
        " RuntimeError: replica exited with 1",
        "sluice defaults linear 10x100 tis=16 x1 #4: timeout, 10/1000 tasks ended",
    ]
    # A scenario with no ok trial has no median, in the tables or the ratios.
    assert medians([raised, late]) == {}


def test_an_old_saved_trial_loads_with_a_status() -> None:
    saved = _trial("sluice", 100.0).as_dict()
    del saved["status"], saved["expected_tasks"]
    assert Trial.from_dict(saved).status == "ok"
    assert Trial.from_dict(saved).expected_tasks == 1000
    assert Trial.from_dict({**saved, "errors": ["timed out"]}).status == "failed"


def test_the_readme_table_quotes_medians_and_their_ratio() -> None:
    trials = [_trial("sluice", tps, i) for i, tps in enumerate([300.0, 500.0, 400.0])]
    trials += [_trial("airflow", tps, i) for i, tps in enumerate([20.0, 25.0, 10.0])]
    lines = markdown(trials, DEFAULTS).splitlines()
    assert lines[0] == "| shape | size | tis 16: Sluice | Airflow 2.10.5 | ratio |"
    assert lines[2] == (
        "| linear | 10x100 | 400 [300-500] (1.50, 20) | 20 [10-25] (1.50, 20) | 20.0x |"
    )


def test_the_readme_tables_have_a_row_only_for_the_scenarios_measured() -> None:
    # Runs published one shape and size at a time are rendered together: a shape measured
    # at one size has no row at the other.
    trials = [_trial(side, 100.0) for side in ("sluice", "airflow")]
    trials += [replace(t, shape="star") for t in trials] + [
        replace(t, shape="star", dags=100, tasks=10) for t in trials
    ]
    rows = [line.split(" | ")[:2] for line in markdown(trials, DEFAULTS).splitlines()[2:]]
    assert rows == [["| star", "100x10"], ["| linear", "10x100"], ["| star", "10x100"]]
    cpu_rows = [line.split(" | ")[:2] for line in markdown_cpu(trials, DEFAULTS).splitlines()[2:]]
    assert cpu_rows == rows


def test_the_readme_table_shows_trials_that_are_not_ok() -> None:
    trials = [_trial("sluice", 400.0), replace(_trial("sluice", 900.0, 1), status="timeout")]
    trials += [replace(_trial("airflow", 20.0), status="error")]
    lines = markdown(trials, DEFAULTS).splitlines()
    assert lines[2] == (
        "| linear | 10x100 | 400 (1.50, 20) [1/2 ok, 1 timeout] | - [0/1 ok, 1 error] | - |"
    )


def test_a_missed_target_says_whether_cpu_or_waiting_is_in_the_way() -> None:
    airflow = _trial("airflow", 100.0)  # 10 s for 1,000 tasks: 20x allows 500 ms
    fast = replace(_trial("sluice", 2500.0), cpu_s=0.3, pg_cpu_s=0.2)
    assert target_verdict(fast, airflow, cores=2) == "met"
    # An Airflow trial that finished nothing gives no budget (and no division by zero).
    stalled = replace(airflow, tasks_per_s=0.0)
    assert target_verdict(fast, stalled, cores=2) == "no Airflow figure to compare with"
    # One replica waits for each statement, so its CPU and Postgres's add up: 700 ms.
    busy = replace(_trial("sluice", 1400.0), cpu_s=0.4, pg_cpu_s=0.3)
    assert cpu_floor_s(busy, cores=2) == pytest.approx(0.7)
    assert target_verdict(busy, airflow, cores=2) == (
        "MISSED: 20x allows 500 ms, CPU floor 700 ms (needs 1.4x less CPU per task)"
    )
    # Two replicas overlap on two cores (350 ms), not on one core (700 ms).
    assert cpu_floor_s(replace(busy, replicas=2), cores=2) == pytest.approx(0.35)
    assert cpu_floor_s(replace(busy, replicas=2), cores=1) == pytest.approx(0.7)
    idle = replace(_trial("sluice", 1000.0), cpu_s=0.1, pg_cpu_s=0.1)
    assert target_verdict(idle, airflow, cores=2) == (
        "MISSED: 20x allows 500 ms, CPU floor 200 ms (the rest is waiting)"
    )


def test_the_scaling_limit_is_the_cpus_only_when_they_are_busy() -> None:
    # _trial: 1 s of scheduler CPU; makespan 1 s at 1,000 tasks/s.
    busy = replace(_trial("sluice", 1000.0), machine_busy=0.93, pg_cpu_s=0.5)
    assert scaling_limit(busy, cores=2) == (
        "CPUs (schedulers+Postgres 1.50 of 2 cores, machine 93% busy)"
    )
    # The processes' own CPU says the cores were busy, whatever /proc/stat saw.
    assert scaling_limit(replace(busy, machine_busy=0.6, pg_cpu_s=0.9), cores=2).startswith(
        "CPUs (schedulers+Postgres 1.90 of 2 cores"
    )
    # Postgres used more CPU than the scheduler, but half the machine was idle.
    idle = replace(busy, machine_busy=0.5, cpu_s=0.3, pg_cpu_s=0.6)
    assert scaling_limit(idle, cores=2).startswith(
        "waiting, not CPU (schedulers+Postgres 0.90 of 2 cores, machine 50% busy)"
    )


def test_lag_is_measured_from_the_latest_upstream_end() -> None:
    rows = [
        TaskTimes("r", "t0", T0 + 5 * MS, T0 + 6 * MS, T0 + 7 * MS, T0, 1),
        TaskTimes("r", "t1", T0 + 8 * MS, T0 + 9 * MS, T0 + 10 * MS, T0, 1),
        TaskTimes("r", "t2", T0 + 9 * MS, T0 + 10 * MS, T0 + 11 * MS, T0, 1),
    ]
    graph = {"t0": [], "t1": ["t0"], "t2": ["t0"]}
    assert lags_ms(graph, rows) == [5.0, 1.0, 2.0]


def test_each_airflow_is_judged_at_the_faster_of_its_arms_in_each_scenario() -> None:
    like = [replace(_trial("sluice", 600.0), variant=LIKE_FOR_LIKE)]
    like += [replace(_trial("airflow", 30.0), variant=LIKE_FOR_LIKE)]
    defaults = [_trial("sluice", 900.0)]
    tables = markdown_tables(like + defaults)
    headline, second = tables.split("**defaults**")
    assert headline.startswith("**like-for-like** (Like for like: Sluice runs one")
    assert "Against Airflow 2.10.5's like-for-like trials." in headline
    assert "| linear | 10x100 | 600 (1.50, 20) | 30 (1.50, 20) | 20.0x |" in headline
    # Sluice's defaults are judged against the same Airflow trials.
    assert "Against Airflow 2.10.5's like-for-like trials." in second
    assert "| linear | 10x100 | 900 (1.50, 20) | 30 (1.50, 20) | 30.0x |" in second
    # The CPU table: scheduler+Postgres=total per side, statements n/a without the extension.
    assert "| linear | 10x100 | 16 | 1.00+0.50=1.50 | n/a | 1.00+0.50=1.50 | n/a |" in second
    # With Airflow at its defaults too (faster here), both tables judge against those,
    # and the cell says which arm it is.
    faster_defaults = [_trial("airflow", 45.0)]
    tables = markdown_tables(like + defaults + faster_defaults)
    headline, second = tables.split("**defaults**")
    assert "Airflow 2.10.5 at the faster of its like-for-like trials (L" in headline
    assert "| linear | 10x100 | 600 (1.50, 20) | 45 (1.50, 20) D | 13.3x |" in headline
    assert "| 900 (1.50, 20) | 45 (1.50, 20) D | 20.0x |" in second
    assert "| 16 | 1.00+0.50=1.50 | n/a | 1.00+0.50=1.50 D | n/a |" in headline
    ((_, _, _, peers), _) = pairs(like + defaults + faster_defaults)
    assert peers["airflow"].variant == DEFAULTS
    # Slower at its defaults: its like-for-like arm judges.
    slower_defaults = [_trial("airflow", 15.0)]
    headline = markdown_tables(like + defaults + slower_defaults).split("**defaults**")[0]
    assert "| 600 (1.50, 20) | 30 (1.50, 20) L | 20.0x |" in headline
    # An arm whose trials all failed never judges; the other one does, and the cell
    # still shows the failed arm's trials.
    failed_defaults = [replace(_trial("airflow", 90.0), status="timeout")]
    headline = markdown_tables(like + defaults + failed_defaults).split("**defaults**")[0]
    assert "| 600 (1.50, 20) | 30 (1.50, 20) L; D [0/1 ok, 1 timeout] | 20.0x |" in headline
    assert "(`; L [...]` or `; D [...]`: the Airflow arm that does not judge)" in headline


def test_both_airflows_are_in_every_table_and_the_faster_one_judges() -> None:
    def arm(side: str, tps: float, variant: str = LIKE_FOR_LIKE) -> Trial:
        return replace(_trial(side, tps), variant=variant)

    trials = [arm("sluice", 600.0), arm("airflow", 20.0), arm("airflow3", 30.0)]
    trials += [arm("sluice", 900.0, DEFAULTS)]
    lines = markdown(trials, LIKE_FOR_LIKE).splitlines()
    assert lines[0] == (
        "| shape | size | tis 16: Sluice | Airflow 2.10.5 | Airflow 3.3.2"
        " | ratio (faster Airflow) |"
    )
    # 600 / 30: against 3.3.2, the faster, not 2.10.5's 30x.
    assert lines[2] == (
        "| linear | 10x100 | 600 (1.50, 20) | 20 (1.50, 20) | 30 (1.50, 20) | 20.0x (3.3.2) |"
    )
    tables = markdown_tables(trials)
    headline, second = tables.split("**defaults**")
    assert (
        "Against Airflow 2.10.5's like-for-like trials and Airflow 3.3.2's like-for-like trials."
        in headline
    )
    assert "Sluice / the faster Airflow (which one in brackets)" in headline
    assert "| linear | 10x100 | 16 | 1.00+0.50=1.50 | n/a | 1.00+0.50=1.50 | n/a" in headline
    assert "| 30 (1.50, 20) | 30.0x (3.3.2) |" in second
    # A scenario where 2.10.5 is the faster one is judged against 2.10.5.
    swapped = [arm("sluice", 600.0), arm("airflow", 40.0), arm("airflow3", 30.0)]
    assert markdown(swapped, LIKE_FOR_LIKE).splitlines()[2].endswith("| 15.0x (2.10.5) |")
    ((variant, _, sluice, peers),) = pairs(swapped)
    assert variant == LIKE_FOR_LIKE
    assert sluice.tasks_per_s == 600.0
    assert faster_peer(peers) == "airflow"
    assert target_verdict(sluice, peers["airflow"], cores=2).startswith("MISSED")
    # Only one Airflow with trials: its column alone, and the plain ratio.
    only3 = [arm("sluice", 600.0), arm("airflow3", 30.0)]
    assert markdown(only3, LIKE_FOR_LIKE).splitlines()[0] == (
        "| shape | size | tis 16: Sluice | Airflow 3.3.2 | ratio |"
    )
    assert faster_peer({}) is None


def test_a_peer_with_no_ok_trial_does_not_judge() -> None:
    trials = [replace(_trial("sluice", 600.0), variant=LIKE_FOR_LIKE)]
    trials += [replace(_trial("airflow", 20.0), variant=LIKE_FOR_LIKE)]
    trials += [replace(_trial("airflow3", 90.0), variant=LIKE_FOR_LIKE, status="timeout")]
    line = markdown(trials, LIKE_FOR_LIKE).splitlines()[2]
    assert line == (
        "| linear | 10x100 | 600 (1.50, 20) | 20 (1.50, 20)"
        " | - [0/1 ok, 1 timeout] | 30.0x (2.10.5) |"
    )


def test_a_rendered_run_names_the_machine_it_was_measured_on() -> None:
    from bench.run import measured_on

    saved = {
        "when": "20261205T152506Z",
        "cores": 2,
        "machine": {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2},
        "commit": "1971becef3aa",
        "complete": True,
    }
    assert measured_on(saved) == (
        "20261205T152506Z, 2 cores Intel(R) Xeon(R) Processor, commit 1971becef3"
    )
    # Older files carry no machine or commit; an interrupted run says so.
    assert measured_on({"when": "T", "cores": 2, "complete": False}) == "T, 2 cores, interrupted"
