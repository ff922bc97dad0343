"""The benchmark's plan: arms in turn within a scenario, and each variant's knobs."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.common import Knobs, for_variant
from bench.run import ARMS, parse_arms, plan


def test_like_for_like_is_one_batch_no_wake_and_every_run_examined() -> None:
    knobs = for_variant(Knobs(max_tis_per_query=512), "like-for-like", dags=100)
    assert (knobs.critical_batches, knobs.wake, knobs.runs_examined) == (1, False, 100)
    assert knobs.max_tis_per_query == 512
    # Fewer runs than Airflow's default: its default stays (it examines them all anyway).
    assert for_variant(Knobs(), "like-for-like", dags=10).runs_examined == 20
    defaults = for_variant(Knobs(), "defaults", dags=100)
    assert (defaults.critical_batches, defaults.wake, defaults.runs_examined) == (8, True, 20)
    with pytest.raises(ValueError, match="unknown variant 'fast'"):
        for_variant(Knobs(), "fast", dags=1)


def test_arms_take_turns_trial_by_trial_within_a_scenario() -> None:
    arms = parse_arms("sluice:like-for-like,airflow:like-for-like,sluice:defaults")
    steps = plan(["linear"], ["10x100"], [16], [1, 2], 2, arms)
    assert [(s.replicas, s.trial, s.side, s.variant) for s in steps] == [
        (1, 0, "sluice", "like-for-like"),
        (1, 0, "airflow", "like-for-like"),
        (1, 0, "sluice", "defaults"),
        (1, 1, "sluice", "like-for-like"),
        (1, 1, "airflow", "like-for-like"),
        (1, 1, "sluice", "defaults"),
        (2, 0, "sluice", "like-for-like"),
        (2, 0, "airflow", "like-for-like"),
        (2, 0, "sluice", "defaults"),
    ]


def test_an_arm_names_a_side_and_a_variant() -> None:
    assert parse_arms("sluice,airflow:defaults") == [
        ("sluice", "like-for-like"),
        ("airflow", "defaults"),
    ]
    with pytest.raises(SystemExit, match="--arms 'sluice:fast'"):
        parse_arms("sluice:fast")
    with pytest.raises(SystemExit, match="SIDE one of sluice, airflow, airflow3"):
        parse_arms("airflow4")


def test_compare_runs_both_airflows_at_both_settings_beside_sluice_in_turn() -> None:
    steps = plan(["grid"], ["100x10"], [512], [1], 1, parse_arms(ARMS["compare"]))
    assert [(s.side, s.variant) for s in steps] == [
        ("sluice", "like-for-like"),
        ("airflow", "like-for-like"),
        ("airflow3", "like-for-like"),
        ("airflow", "defaults"),
        ("airflow3", "defaults"),
        ("sluice", "defaults"),
    ]


def test_an_airflow_arm_with_the_same_settings_as_an_earlier_one_runs_once() -> None:
    # 10 DAGs: both variants examine 20 runs per loop, so Airflow's defaults arm would
    # repeat its like-for-like arm; Sluice's arms differ (batches, wake-up) and both run.
    arms = parse_arms(ARMS["compare"])
    steps = plan(["linear"], ["10x100"], [16], [1], 1, arms)
    assert [(s.side, s.variant) for s in steps] == [
        ("sluice", "like-for-like"),
        ("airflow", "like-for-like"),
        ("airflow3", "like-for-like"),
        ("sluice", "defaults"),
    ]
    assert len(plan(["linear"], ["100x10"], [16], [1], 1, arms)) == 6


def test_publish_refuses_scheduler_code_from_outside_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bench import run

    assert run.scheduler_code() == run.REPO / "operator" / "sluice"  # this checkout's
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    # A worktree of another commit, run without PYTHONPATH=operator:., imports main's.
    monkeypatch.setattr(run, "scheduler_code", lambda: Path("/elsewhere/operator/sluice"))
    with pytest.raises(SystemExit, match="PYTHONPATH=operator:"):
        run.main(["--smoke", "--publish", "x"])


def test_an_ab_arm_names_a_code_tree_given_by_code(tmp_path: Path) -> None:
    from bench.run import code_trees, parse_codes

    (tmp_path / "operator" / "sluice").mkdir(parents=True)
    codes = parse_codes([f"before={tmp_path}"])
    assert codes == {"before": tmp_path.resolve()}
    arms = parse_arms("sluice:like-for-like@before,sluice:like-for-like", codes)
    assert arms == [("sluice", "like-for-like@before"), ("sluice", "like-for-like")]
    steps = plan(["grid"], ["100x10"], [16], [1], 2, arms)
    assert [s.variant for s in steps] == ["like-for-like@before", "like-for-like"] * 2
    with pytest.raises(SystemExit, match="@after names a code tree"):
        parse_arms("sluice:like-for-like@after", codes)
    with pytest.raises(SystemExit, match="@before names a code tree, for a Sluice arm"):
        parse_arms("airflow:like-for-like@before", codes)
    with pytest.raises(SystemExit, match="--code 'x=/nonexistent'"):
        parse_codes(["x=/nonexistent"])
    assert set(code_trees(codes)["before"]) == {"path", "commit", "dirty"}


def test_an_ab_arms_replicas_import_its_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replicas of an arm with a code tree import its `sluice` (PYTHONPATH), and the
    harness's own `bench.replica`; they write their stats where the trial reads them."""
    import subprocess

    from bench import sluice_side

    started: list[dict[str, object]] = []

    class Recorded:
        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            started.append({"cmd": cmd, **kwargs})

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    knobs = Knobs(code=str(tmp_path))
    sluice_side.start_replicas("postgresql://x", knobs, 2, tmp_path / "logs")
    env = started[0]["env"]
    assert isinstance(env, dict)
    assert env["PYTHONPATH"].split(":") == [str(tmp_path / "operator"), str(sluice_side.REPO)]
    assert started[0]["cwd"] == sluice_side.REPO
    stats = tmp_path / "logs" / "sluice-replica-1.stats.json"
    assert f"--stats={stats}" in started[1]["cmd"]  # type: ignore[operator]
    (tmp_path / "logs" / "sluice-replica-0.stats.json").write_text('{"busy_ticks": 3}')
    assert sluice_side.replica_stats(tmp_path / "logs", 2) == [{"busy_ticks": 3}]
