"""`python -m bench.ab`: the A/B table of two code trees from a run's JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench import ab


def _trial(variant: str, tasks_per_s: float, *, status: str = "ok", **more: Any) -> dict[str, Any]:
    return {
        "side": "sluice",
        "shape": "grid",
        "dags": 100,
        "tasks": 10,
        "max_tis_per_query": 16,
        "replicas": 1,
        "variant": variant,
        "status": status,
        "tasks_per_s": tasks_per_s,
        "active_tasks_per_s": 2 * tasks_per_s,
        "total_cpu_ms_per_task": 1.0,
        "statements_per_task": 10.0,
        "replica_stats": [
            {
                "busy_ticks": 10,
                "busy_transactions": 40,
                "busy_statements": 125,
                "busy_full_collections": 1,
                "lock_hold_ms_p50": 1.5,
            },
        ],
        **more,
    }


def test_each_arm_is_a_row_of_medians_over_its_ok_trials_with_every_trial_counted() -> None:
    trials = [
        _trial("like-for-like", 300),
        _trial("like-for-like@before", 200),
        _trial("like-for-like", 100),
        _trial("like-for-like", 200),
        _trial("like-for-like@before", 0, status="timeout"),
    ]
    lines = ab.table(trials).splitlines()
    assert lines[0].startswith("| scenario | tis | arm | ok/trials | tasks/s (unpause)")
    before, after = lines[2], lines[3]  # the arm with a code tree first
    assert before.startswith("| grid 100x10 | 16 | like-for-like@before | 1/2 | 200 (200-200)")
    assert after.startswith("| grid 100x10 | 16 | like-for-like | 3/3 | 200 (100-300) | 400")
    assert after.endswith(
        "| 4.00 (4.00-4.00) | 12.50 (12.50-12.50) | 1.0 (1.0-1.0) | 1.50 (1.50-1.50)"
        " | n/a | n/a | n/a | n/a | n/a |"
    )


def test_a_replica_of_an_older_harness_shows_na_for_what_it_did_not_count() -> None:
    older = {"busy_ticks": 10, "busy_transactions": 40, "lock_hold_ms_p50": 1.5}
    row = ab.table([_trial("like-for-like", 100, replica_stats=[older])]).splitlines()[2]
    assert row.endswith(
        "| 4.00 (4.00-4.00) | n/a | n/a | 1.50 (1.50-1.50) | n/a | n/a | n/a | n/a | n/a |"
    )


def test_a_trial_without_replica_stats_shows_na() -> None:
    trial = _trial("like-for-like", 100, replica_stats=[])
    assert math.isnan(ab.FIGURES[4][1](trial))
    assert ab.table([trial]).splitlines()[2].endswith("| n/a | n/a |")


def test_what_postgres_wrote_is_wal_per_task_and_the_shares_of_hot_and_new_page_updates() -> None:
    # [updates, HOT, to a new page] per table: 300 updates, 150 HOT, 30 to a new page.
    updates = {"task_instance": [200, 50, 30], "task_try": [100, 100, 0]}
    trials = [
        _trial("like-for-like", 100, wal_bytes_per_task=2048.0, updates=updates),
        _trial("like-for-like", 100, wal_bytes_per_task=4096.0, updates=updates),
    ]
    head, _, row = ab.table(trials).splitlines()
    assert "| WAL KB/task | HOT % of updates | new-page % of updates |" in head
    assert row.endswith("| 3.00 (2.00-4.00) | 50 (50-50) | 10 (10-10) | n/a | n/a |")


def test_the_production_arm_shows_when_its_dagruns_were_final() -> None:
    trials = [
        _trial("production", 100, status_final_s=1.25, cpu_after_makespan_s=0.04),
        _trial("production", 120, status_final_s=1.75, cpu_after_makespan_s=0.06),
        _trial("like-for-like", 130, status_final_s=None),
    ]
    rows = ab.table(trials).splitlines()
    assert rows[0].endswith("| DagRuns final, s after t0 | replica CPU after makespan, s |")
    (production,) = [r for r in rows if "| production |" in r]
    assert production.endswith("| 1.50 (1.25-1.75) | 0.050 (0.040-0.060) |")
    (bare,) = [r for r in rows if "| like-for-like |" in r]
    assert bare.endswith("| n/a | n/a |")


def test_a_labelled_file_s_arms_are_rows_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, rate in (("off", 100), ("on", 300)):
        saved = {"command": "bench.run", "when": "now", "commit": "0" * 40, "dirty": False}
        (tmp_path / f"{name}.json").write_text(
            json.dumps({**saved, "trials": [_trial("production", rate)]})
        )
    assert ab.main([f"off={tmp_path / 'off.json'}", f"on={tmp_path / 'on.json'}"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| grid")]
    assert [r.split(" | ")[2:5] for r in rows] == [
        ["production [off]", "1/1", "100 (100-100)"],
        ["production [on]", "1/1", "300 (300-300)"],
    ]


def test_a_file_name_with_an_equals_sign_is_a_file() -> None:
    assert ab.labelled("runs/a=b.json") == ("", "runs/a=b.json")
    assert ab.labelled("off=runs/a.json") == ("off", "runs/a.json")
