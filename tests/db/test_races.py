"""Several scheduler processes on one database: nothing runs twice, limits hold, runs end.

Three replicas (separate processes, the real loop, small batches to force many
interleavings) schedule the same DAGs: catchup runs, a tight pool, tasks that
take two pool slots, flaky tasks that retry, and an all_done join. While they
run, a sampler reads pool occupancy from the database; afterwards the workers'
start/end logs are replayed to check every try started once, tries of one task
never overlapped, and no pool was ever over its size.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun, SlotPool, TaskInstance
from sluice.scheduler.reconcile import COUNTER_FIXES, read_metric, reconcile_counters
from sluice.spec.states import RunState
from tests.db.race_fleet import RaceFleet, replay
from tests.support import manifest, register

REPLICAS = 3
DAGS = 5
HOURS = 4
TIGHT_SLOTS = 3


def _workload(now: datetime) -> list[Any]:
    start = (now - timedelta(hours=HOURS)).replace(minute=0, second=0, microsecond=0)
    manifests = []
    for d in range(DAGS):
        tasks: list[dict[str, Any]] = [{"name": "start"}]
        for i in range(6):
            task: dict[str, Any] = {"name": f"work-{i}", "dependsOn": ["start"], "pool": "tight"}
            if i % 3 == 0:
                task["poolSlots"] = 2
            tasks.append(task)
        tasks.append({"name": "flaky-a", "dependsOn": ["start"], "retries": 2, "retryDelay": "0s"})
        tasks.append(
            {
                "name": "join",
                "dependsOn": [f"work-{i}" for i in range(6)] + ["flaky-a"],
                "triggerRule": "all_done",
            }
        )
        manifests.append(
            manifest(
                f"race-{d}",
                tasks,
                schedule="@hourly",
                startDate=start.isoformat(),
                # Exactly HOURS runs, even when the test crosses an hour boundary.
                endDate=(start + timedelta(hours=HOURS - 1)).isoformat(),
                catchup=True,
                maxActiveRuns=3,
                maxActiveTasks=8,
            )
        )
    return manifests


def _pool_samples(sessions: sessionmaker[Session]) -> dict[str, int]:
    with sessions() as session:
        rows = session.execute(
            select(TaskInstance.pool, func.sum(TaskInstance.pool_slots))
            .where(TaskInstance.state.in_(["queued", "running"]))
            .group_by(TaskInstance.pool)
        ).all()
    return {pool: int(used) for pool, used in rows}


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "dispatch_batch",
    [
        pytest.param(4, id="claimed-in-the-section"),
        # Each batch of 4 claims 1 for its replica; 3 go through the outbox, which every
        # replica's dispatcher drains: both paths race at once (ADR 0047).
        pytest.param(1, id="mostly-through-the-outbox"),
    ],
)
def test_three_replicas_race_without_breaking_invariants(
    db_url: str, sessions: sessionmaker[Session], tmp_path: Path, dispatch_batch: int
) -> None:
    now = datetime.now(UTC)
    with sessions() as session:
        session.execute(insert(SlotPool).values(name="tight", slots=TIGHT_SLOTS, description=""))
        session.commit()
    for m in _workload(now):
        register(sessions, m, now)

    fleet = RaceFleet(db_url, tmp_path, REPLICAS, dispatch_batch)
    fleet.start()
    expected_runs = DAGS * HOURS
    max_seen: dict[str, int] = defaultdict(int)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            for pool, used in _pool_samples(sessions).items():
                max_seen[pool] = max(max_seen[pool], used)
            with sessions() as session:
                states = session.execute(select(DagRun.state)).scalars().all()
            if len(states) >= expected_runs and all(
                s in (RunState.SUCCESS, RunState.FAILED) for s in states
            ):
                break
            fleet.assert_alive()
            time.sleep(0.05)
    finally:
        fleet.stop()

    errors = fleet.phase_errors()
    assert not errors, errors[:5]

    with sessions() as session:
        run_states = session.execute(select(DagRun.dag_id, DagRun.state)).all()
        assert len(run_states) == expected_runs, "catchup must create exactly one run per hour"
        assert {state for _, state in run_states} == {RunState.SUCCESS}
        assert reconcile_counters(session) == 0
        assert read_metric(session, COUNTER_FIXES) == 0

    # Every try started once and ended; tries of one task instance never overlapped.
    tries = replay(fleet.log_path)
    starts, ends = tries.starts, tries.ends

    # Replay the logs: the tight pool never held more than its slots.
    slots_of = {f"work-{i}": (2 if i % 3 == 0 else 1) for i in range(6)}
    timeline = []
    for key, (start,) in starts.items():
        if start["task"] in slots_of:
            timeline.append((start["t"], slots_of[start["task"]]))
            timeline.append((ends[key]["t"], -slots_of[start["task"]]))
    used = peak = 0
    for _, delta in sorted(timeline, key=lambda e: (e[0], e[1])):
        used += delta
        peak = max(peak, used)
    assert peak <= TIGHT_SLOTS
    assert max_seen["tight"] <= TIGHT_SLOTS
    # Every replica took part (SKIP LOCKED shares the work rather than serialising it).
    assert len({s["pid"] for v in starts.values() for s in v}) == REPLICAS
