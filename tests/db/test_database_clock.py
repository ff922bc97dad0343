"""The scheduler's clock is the database's, whatever the replica's wall clock says (issue 11).

A replica whose wall clock was 30 s off wrote heartbeats that every other replica
judged by its own clock: 30 s behind, it was declared dead while it worked and
its tries were taken or failed as zombies; 30 s ahead, it found every other
replica dead. The chaos harness skews one replica's clock; these tests pin the
clock the replicas use instead.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, create_engine, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.clock import DatabaseClock
from sluice.db.models import SchedulerJob
from sluice.scheduler import housekeeping
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop
from tests.support import ScriptedExecutor


def _database_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        found: datetime = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        return found


def _skewed(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_the_clock_follows_the_database_not_the_wall_clock(engine: Engine) -> None:
    for skew in (30.0, -30.0):
        clock = DatabaseClock(engine, fallback=lambda skew=skew: _skewed(skew))
        before = _database_now(engine)
        now = clock()
        after = _database_now(engine)
        assert before - timedelta(seconds=0.5) <= now <= after + timedelta(seconds=0.5)
        offset = clock.offset()
        assert offset is not None
        assert abs(offset + skew) < 1.0  # the wall clock is `skew` off the database's


def test_between_reads_it_moves_with_the_monotonic_clock(engine: Engine) -> None:
    ticks = {"now": 100.0}
    clock = DatabaseClock(engine, resync=60.0, monotonic=lambda: ticks["now"])
    first = clock()
    ticks["now"] += 12.5
    assert (clock() - first).total_seconds() == 12.5  # no second read within `resync`


def test_without_the_database_it_falls_back_to_the_wall_clock_then_syncs(db_url: str) -> None:
    broken = create_engine(db_url.replace("/sluice_test_", "/no_such_database_"))
    clock = DatabaseClock(broken, fallback=lambda: _skewed(-30))
    assert not clock.synced
    assert abs((clock() - _skewed(-30)).total_seconds()) < 1.0
    broken.dispose()


def test_a_replica_with_a_slow_wall_clock_is_not_declared_dead(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """Two replicas, one 30 s behind: with the database's clock neither finds the other dead."""
    behind = DatabaseClock(engine, fallback=lambda: _skewed(-30))
    ahead = DatabaseClock(engine, fallback=lambda: _skewed(30))
    config = SchedulerConfig(scheduler_dead_after=5)
    slow = SchedulerLoop(sessions, ScriptedExecutor(), config, clock=behind)
    fast = SchedulerLoop(sessions, ScriptedExecutor(), config, clock=ahead)
    slow.tick()
    fast.tick()
    with sessions() as session:
        assert housekeeping.mark_dead_schedulers(session, ahead(), 5) == []
        assert housekeeping.mark_dead_schedulers(session, behind(), 5) == []
        session.execute(update(SchedulerJob).values(state="running"))
        session.commit()
