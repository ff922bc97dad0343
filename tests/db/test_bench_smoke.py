"""The benchmark harness does not rot: shapes, metrics, and one tiny Sluice trial end to end.

No timing is asserted; figures depend on the machine. `make bench-smoke` prints them.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bench.common import Knobs, Postgres
from bench.metrics import TaskTimes, Trial, lags_ms
from bench.report import cpu_floor_s, markdown, scaling_limit, target_verdict
from bench.shapes import Workload


def _trial(side: str, tps: float, trial: int = 0, tis: int = 16) -> Trial:
    return Trial(
        side=side, shape="linear", dags=10, tasks=100, replicas=1, max_tis_per_query=tis,
        trial=trial, makespan_s=1000 / tps, tasks_per_s=tps, lag_p50_ms=20.0, lag_p95_ms=30.0,
        lag_max_ms=40.0, start_lag_p50_ms=21.0, start_lag_p95_ms=31.0, cpu_s=1.0,
        cpu_ms_per_task=1.0, pg_cpu_s=0.5, machine_busy=0.5,
    )  # fmt: skip


def test_the_readme_table_quotes_medians_and_their_ratio() -> None:
    trials = [_trial("sluice", tps, i) for i, tps in enumerate([300.0, 500.0, 400.0])]
    trials += [_trial("airflow", tps, i) for i, tps in enumerate([20.0, 25.0, 10.0])]
    lines = markdown(trials).splitlines()
    assert lines[0] == "| shape | size | tis 16: Sluice | Airflow | ratio |"
    assert lines[2] == "| linear | 10x100 | 400 (1.00, 20) | 20 (1.00, 20) | 20.0x |"


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
    t = datetime(2026, 1, 1, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    rows = [
        TaskTimes("r", "t0", t + 5 * ms, t + 6 * ms, t + 7 * ms, t, 1),
        TaskTimes("r", "t1", t + 8 * ms, t + 9 * ms, t + 10 * ms, t, 1),
        TaskTimes("r", "t2", t + 9 * ms, t + 10 * ms, t + 11 * ms, t, 1),
    ]
    graph = {"t0": [], "t1": ["t0"], "t2": ["t0"]}
    assert lags_ms(graph, rows) == [5.0, 1.0, 2.0]


@pytest.fixture(scope="module")
def bench_postgres() -> Iterator[Postgres]:
    from bench.sluice_side import prepare_template

    pg = Postgres()
    prepare_template(pg, Knobs())
    yield pg
    pg.stop()


@pytest.mark.db
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_tiny_sluice_trial_runs_every_task(bench_postgres: Postgres, replicas: int) -> None:
    from bench.sluice_side import run_trial

    workload = Workload("binary_tree", 3, 5)
    trial = run_trial(bench_postgres, workload, Knobs(), replicas, 0, timeout=120)
    assert trial.errors == []
    assert trial.tasks_done == workload.total_tasks
    assert sum(trial.per_replica) == workload.total_tasks
    assert trial.tasks_per_s > 0


@pytest.mark.db
def test_a_run_saves_its_trials_and_renders_them_for_the_readme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.run
    import bench.sluice_side

    monkeypatch.setattr(bench.run, "RESULTS", tmp_path)
    monkeypatch.setattr(bench.sluice_side, "RESULTS", tmp_path)
    # The chart is optional (matplotlib comes with the bench extra, not with `make test`).
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = bench.run.main(
            ["--quick", "--shapes", "linear", "--sizes", "2x3", "--tis", "16",
             "--replicas", "1", "--trials", "1"]
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 0
    assert "chart: none (no trials, or matplotlib missing" in capsys.readouterr().out
    saved = json.loads((tmp_path / "quick-latest.json").read_text())
    assert saved["complete"] is True
    assert [(t["shape"], t["tasks_done"]) for t in saved["trials"]] == [("linear", 6)]
    capsys.readouterr()
    assert bench.run.main(["--render", str(tmp_path / "quick-latest.json"), "--markdown"]) == 0
    table = capsys.readouterr().out
    assert "| linear | 2x3 | " in table
    # One side of a saved run, to render a new run of the other side against it.
    latest = tmp_path / "quick-latest.json"
    assert bench.run.main(["--render", f"{latest}:sluice", "--markdown"]) == 0
    assert "| linear | 2x3 | " in capsys.readouterr().out
    with pytest.raises(SystemExit, match="the side after ':' is sluice or airflow, not 'other'"):
        bench.run.main(["--render", f"{latest}:other"])
