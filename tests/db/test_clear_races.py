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

import random
import time
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
from tests.db.race_fleet import RaceFleet, replay
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
            # Exactly HOURS runs, even when the test crosses an hour boundary.
            endDate=(start + timedelta(hours=HOURS - 1)).isoformat(),
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
    fleet = RaceFleet(db_url, tmp_path, REPLICAS)
    fleet.start()
    rng = random.Random(20261206)
    changed: list[str] = []
    try:
        until = time.monotonic() + CLEARING_SECONDS
        while time.monotonic() < until:
            changed.extend(_clear_or_mark(sessions, rng))
            fleet.assert_alive()
            time.sleep(rng.uniform(0.05, 0.3))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with sessions() as session:
                states = session.execute(select(DagRun.state)).scalars().all()
            if len(states) >= DAGS * HOURS and all(
                s in (RunState.SUCCESS, RunState.FAILED) for s in states
            ):
                break
            fleet.assert_alive()
            time.sleep(0.1)
    finally:
        fleet.stop()

    errors = fleet.phase_errors()
    assert not errors, errors[:5]
    # The clears met tasks in every state that matters, running ones among them.
    assert {"running", "success", "none"} <= set(changed), sorted(set(changed))

    with sessions() as session:
        run_states = session.execute(select(DagRun.state)).scalars().all()
        assert len(run_states) == DAGS * HOURS
        assert set(run_states) == {RunState.SUCCESS}
        assert reconcile_counters(session) == 0
        assert read_metric(session, COUNTER_FIXES) == 0

    # Every try started once and ended; a cleared running try was stopped before the next.
    replay(fleet.log_path)
