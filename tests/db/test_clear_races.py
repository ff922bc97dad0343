"""Clears and marks landing while three replicas (separate processes) run the same DAGs.

The replicas are the race test's (`race_worker`: the real loop, an in-process
executor that logs every start and end). While they work, this process clears
random tasks of random runs (with their downstream, running ones included) and
marks some success, each in a transaction of its own, as `sluice tasks` does.
Then it lets the runs end and replays the logs: no try started twice, tries of
one task instance never overlapped (a cleared running try is stopped before the
next starts), every run succeeded, and every counter a clear moved is what a
recount gives.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun
from sluice.scheduler import clearing
from sluice.scheduler.reconcile import COUNTER_FIXES, read_metric, reconcile_counters
from sluice.spec.states import RunState, TaskState
from tests.support import manifest, register

REPLICAS = 3
DAGS = 3
HOURS = 3
TASKS = ["start", "slow-a", "flaky-b", "c", "slow-d"]
CLEARING_SECONDS = 20


def _workload(now: datetime) -> list[Any]:
    start = (now - timedelta(hours=HOURS)).replace(minute=0, second=0, microsecond=0)
    tasks: list[dict[str, Any]] = [
        {"name": "start"},
        {"name": "slow-a", "dependsOn": ["start"]},
        {"name": "flaky-b", "dependsOn": ["start"], "retries": 1, "retryDelay": "0s"},
        {"name": "c", "dependsOn": ["slow-a", "flaky-b"]},
        {"name": "slow-d", "dependsOn": ["c"]},
    ]
    return [
        manifest(
            f"clr-{d}",
            tasks,
            schedule="@hourly",
            startDate=start.isoformat(),
            catchup=True,
            maxActiveRuns=2,
        )
        for d in range(DAGS)
    ]


def _clear_or_mark(sessions: sessionmaker[Session], rng: random.Random) -> list[str]:
    """One random clear (or, one time in four, a mark success) of one run; the states of
    what it changed."""
    with sessions() as session:
        runs = session.execute(select(DagRun.id)).scalars().all()
        if not runs:
            return []
        run = session.get_one(DagRun, rng.choice(runs))
        task = rng.choice(TASKS)
        now = datetime.now(UTC)
        if rng.random() < 0.25:
            outcome = clearing.mark(
                session, SpecCache(), run, [task], TaskState.SUCCESS, reason="race", now=now
            )
        else:
            outcome = clearing.clear(
                session, SpecCache(), run, [task], downstream=True, reason="race", now=now
            )
        session.commit()
    return [c.was for c in outcome.cleared + outcome.marked]


@pytest.mark.timeout(300)
def test_clears_and_marks_race_three_replicas_without_breaking_invariants(
    db_url: str, sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    for m in _workload(now):
        register(sessions, m, now)
    log_path, stop_file = tmp_path / "tries.jsonl", tmp_path / "stop"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.db.race_worker", db_url, str(log_path), str(stop_file)],
            stderr=(tmp_path / f"worker-{i}.log").open("w"),
        )
        for i in range(REPLICAS)
    ]
    rng = random.Random(20261206)
    changed: list[str] = []
    try:
        until = time.monotonic() + CLEARING_SECONDS
        while time.monotonic() < until:
            changed.extend(_clear_or_mark(sessions, rng))
            assert all(w.poll() is None for w in workers), "a scheduler replica crashed"
            time.sleep(rng.uniform(0.05, 0.3))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with sessions() as session:
                states = session.execute(select(DagRun.state)).scalars().all()
            if len(states) >= DAGS * HOURS and all(
                s in (RunState.SUCCESS, RunState.FAILED) for s in states
            ):
                break
            assert all(w.poll() is None for w in workers), "a scheduler replica crashed"
            time.sleep(0.1)
    finally:
        stop_file.touch()
        for worker in workers:
            worker.wait(timeout=30)

    errors = [
        line
        for i in range(REPLICAS)
        for line in (tmp_path / f"worker-{i}.log").read_text().splitlines()
        if "phase failed" in line
    ]
    assert not errors, errors[:5]
    # The clears met tasks in every state that matters, running ones among them.
    assert {"running", "success", "none"} <= set(changed), sorted(set(changed))

    with sessions() as session:
        run_states = session.execute(select(DagRun.state)).scalars().all()
        assert len(run_states) == DAGS * HOURS
        assert set(run_states) == {RunState.SUCCESS}
        assert reconcile_counters(session) == 0
        assert read_metric(session, COUNTER_FIXES) == 0

    starts: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    ends: dict[tuple[int, int], dict[str, Any]] = {}
    for line in log_path.read_text().splitlines():
        record = json.loads(line)
        key = (record["ti"], record["try"])
        if record["event"] == "start":
            starts[key].append(record)
        else:
            ends[key] = record
    twice = {key: [s["pid"] for s in v] for key, v in starts.items() if len(v) > 1}
    assert not twice, f"tries started more than once: {twice}"
    assert set(starts) == set(ends)
    by_ti: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for (ti, try_number), (start,) in starts.items():
        by_ti[ti].append((try_number, start["t"], ends[(ti, try_number)]["t"]))
    for ti, tries in by_ti.items():
        tries.sort()
        for (_, _, prev_end), (number, next_start, _) in itertools.pairwise(tries):
            assert next_start >= prev_end, f"try {number} of task instance {ti} overlapped"
