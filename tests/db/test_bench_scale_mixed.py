"""The scale benchmark's mixed level on real Postgres: a pool that binds, priorities,
retries and failures, with the checks the benchmark reports."""

from __future__ import annotations

from datetime import UTC, datetime

from bench import scale_mixed
from bench.sluice_side import START
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import sync_dag
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop


def test_runs_sharing_a_bound_pool_keep_its_slots_and_priorities_and_end_as_they_should(
    sessions: sessionmaker[Session],
) -> None:
    runs = 20  # 200 tasks for 32 slots: the pool binds
    with sessions() as session:
        scale_mixed.create_pool(session)
        for m in scale_mixed.manifests(runs, START):
            sync_dag(session, m, datetime.now(UTC))
        session.commit()
    loop = SchedulerLoop(sessions, scale_mixed.FlakyExecutor(), SchedulerConfig())
    try:
        found = scale_mixed.probe(loop, sessions, scale_mixed.dag_ids(runs))
    finally:
        loop.close()
    assert found["pool_most_occupied"] == scale_mixed.SLOTS  # full, never over
    assert found["ticks_pool_bound"] > 0  # ticks that took some and held higher ones back
    assert found["priority_inversions"] == 0
    assert found["run_states"] == found["run_states_expected"] == {"success": 18, "failed": 2}
    assert found["tries"] == found["tries_expected"] == 200 + 20 + 2
