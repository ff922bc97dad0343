"""The benchmark harness does not rot: tiny Sluice trials end to end, saved and rendered.

No timing is asserted; figures depend on the machine. `make bench-smoke` prints them.
"""

from __future__ import annotations

import json
import math
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from bench.common import Knobs, Postgres, for_variant
from bench.shapes import Workload


@pytest.fixture(scope="module")
def bench_postgres() -> Iterator[Postgres]:
    from bench.sluice_side import prepare_template

    pg = Postgres(statements=True)
    prepare_template(pg, Knobs())
    yield pg
    pg.stop()


@pytest.mark.db
@pytest.mark.parametrize(("replicas", "variant"), [(1, "like-for-like"), (2, "defaults")])
def test_a_tiny_sluice_trial_runs_every_task(
    bench_postgres: Postgres, replicas: int, variant: str
) -> None:
    from bench.sluice_side import run_trial

    workload = Workload("binary_tree", 3, 5)
    knobs = for_variant(replace(Knobs(), settle_s=0.5), variant, workload.dags)
    trial = run_trial(bench_postgres, workload, knobs, replicas, 0, timeout=120)
    assert trial.status == "ok"
    assert trial.errors == []
    assert trial.variant == variant
    assert trial.knobs["wake"] is (variant == "defaults")
    assert trial.tasks_done == workload.total_tasks
    assert sum(trial.per_replica) == workload.total_tasks
    assert trial.tasks_per_s > 0
    assert trial.cpu_window_s == pytest.approx(trial.makespan_s, abs=0.002)
    assert trial.total_cpu_ms_per_task > 0
    # pg_stat_statements loads in the embedded server: the replicas' statements, not the
    # harness's (its poll alone would be one a task here).
    assert bench_postgres.statements_unavailable == ""
    assert trial.statements_per_task > 1
    assert trial.statement_rows_per_task > 0
    # Where in its idle sleep the unpause found the replica: recorded, and within it.
    assert 0.5 <= trial.settle_s < 0.5 + knobs.settle_jitter_s
    assert -50 < trial.first_action_ms < 1000 * knobs.idle_sleep + 500
    assert 0 < trial.active_makespan_s <= trial.makespan_s + 0.05
    assert trial.statements_window_s >= trial.makespan_s
    assert math.isnan(trial.status_final_s)
    # What Postgres wrote, read once the replicas' connections closed (each hands its
    # counts over at its exit): every task instance queued, running, then ended.
    assert trial.wal_bytes_per_task > 0
    updates, hot, newpage = trial.updates["task_instance"]
    assert updates >= 3 * workload.total_tasks
    assert 0 <= hot + newpage <= updates
    assert trial.updates["task_try"][0] >= workload.total_tasks


@pytest.mark.db
def test_the_production_variant_publishes_every_run_and_says_when(
    bench_postgres: Postgres,
) -> None:
    """Status capture and a status publisher per replica against the stand-in API server:
    the trial waits for every DagRun object to show its run's end."""
    from bench.sluice_side import run_trial

    workload = Workload("linear", 3, 4)
    knobs = for_variant(replace(Knobs(), settle_s=0.5), "production", workload.dags)
    assert knobs.publish_status
    assert (knobs.wake, knobs.critical_batches) == (False, 1)
    trial = run_trial(bench_postgres, workload, knobs, 1, 0, timeout=120)
    assert trial.status == "ok", trial.errors
    assert trial.variant == "production"
    assert trial.status_final_s >= trial.makespan_s
    assert trial.cpu_after_makespan_s >= 0


@pytest.mark.db
def test_a_run_saves_its_trials_and_renders_them_for_the_readme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.run
    import bench.sluice_side

    monkeypatch.setattr(bench.run, "RESULTS", tmp_path)
    monkeypatch.setattr(bench.run, "PUBLISHED", tmp_path / "published")
    monkeypatch.setattr(bench.sluice_side, "RESULTS", tmp_path)
    # The chart is optional (matplotlib comes with the bench extra, not with `make test`).
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = bench.run.main(
            ["--quick", "--shapes", "linear", "--sizes", "2x3", "--tis", "16",
             "--replicas", "1", "--trials", "1", "--publish", "tiny"]
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 0
    assert "chart: none (no trials, or matplotlib missing" in capsys.readouterr().out
    saved = json.loads((tmp_path / "quick-latest.json").read_text())
    assert saved["complete"] is True
    assert saved == json.loads((tmp_path / "published" / "tiny.json").read_text())
    assert len(saved["commit"]) == 40
    assert saved["versions"]["postgres"]
    assert saved["machine"]["cores"] >= 1
    assert saved["arms"] == ["sluice:defaults"]
    assert [(t["shape"], t["tasks_done"]) for t in saved["trials"]] == [("linear", 6)]
    capsys.readouterr()
    assert bench.run.main(["--render", str(tmp_path / "quick-latest.json"), "--markdown"]) == 0
    table = capsys.readouterr().out
    assert "| linear | 2x3 | " in table
    # One side of a saved run, to render a new run of the other side against it.
    latest = tmp_path / "quick-latest.json"
    assert bench.run.main(["--render", f"{latest}:sluice", "--markdown"]) == 0
    assert "| linear | 2x3 | " in capsys.readouterr().out
    with pytest.raises(
        SystemExit, match="the side after ':' is one of sluice, airflow, airflow3, not 'other'"
    ):
        bench.run.main(["--render", f"{latest}:other"])


@pytest.mark.db
def test_the_steady_state_smoke_measures_a_burst_of_runs_and_renders_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.arrival
    import bench.sluice_side

    monkeypatch.setattr(bench.arrival, "RESULTS", tmp_path)
    monkeypatch.setattr(bench.sluice_side, "RESULTS", tmp_path)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = bench.arrival.main(["--smoke"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 0
    saved = json.loads((tmp_path / "arrival-latest.json").read_text())
    assert saved["complete"] is True
    assert len(saved["commit"]) == 40
    assert saved["schedule"] == "* * * * *"
    [trial] = saved["trials"]
    assert (trial["side"], trial["status"], trial["dags"], trial["tasks"]) == (
        "sluice", "ok", 3, 4,
    )  # fmt: skip
    # The three DAGs' first runs were due in the window, created by the scheduler from
    # the due time the harness gave them, and each run's four tasks ended (the drain
    # waits up to a minute for them; nothing timed is judged).
    assert (trial["runs_due"], trial["runs_created"], trial["runs_finished"]) == (3, 3, 3)
    assert trial["censored"] == 0
    assert trial["run_lag_p50_ms"] > 0
    assert trial["backlog_unfinished"] == [trial["backlog_unfinished"][0]]
    capsys.readouterr()
    assert (
        bench.arrival.main(["--render", str(tmp_path / "arrival-latest.json"), "--markdown"]) == 0
    )
    table = capsys.readouterr().out
    assert "| Sluice | like-for-like | 3 | #0 | ok |" in table
