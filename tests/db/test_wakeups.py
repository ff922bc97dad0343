"""Waking idle schedulers: NOTIFY from the migration's triggers, heard by `Waker`.

No timing is asserted: `wait` says whether a notification woke it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import set_paused
from sluice.db.engine import make_engine
from sluice.db.wakeups import Waker
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    trigger,
)

# Long enough never to expire in a passing test; a broken wake-up fails, slowly.
WOKEN = 30.0


@pytest.fixture
def waker(engine: Engine) -> Iterator[Waker]:
    waker = Waker(engine)
    assert waker.wait(0) is False  # listening from here on
    yield waker
    waker.close()


def test_registering_and_unpausing_a_dag_wake_the_scheduler(
    sessions: sessionmaker[Session], waker: Waker
) -> None:
    register(sessions, manifest("w", chain("a"), schedule=None, paused=True))
    assert waker.wait(WOKEN) is True
    assert waker.wait(0) is False  # drained: one change, one wake-up
    with sessions() as session:
        assert set_paused(session, "w", False)
        session.commit()
    assert waker.wait(WOKEN) is True


def test_a_manual_run_wakes_the_scheduler(sessions: sessionmaker[Session], waker: Waker) -> None:
    register(sessions, manifest("m", chain("a"), schedule=None))
    waker.wait(0)
    trigger(sessions, "m", FakeClock().now)
    assert waker.wait(WOKEN) is True


def test_the_schedulers_own_bookkeeping_does_not_wake_anyone(
    sessions: sessionmaker[Session], waker: Waker
) -> None:
    register(sessions, manifest("b", chain("a"), schedule=None))
    trigger(sessions, "b", FakeClock().now)
    waker.wait(0)
    with sessions() as session:
        session.execute(text("UPDATE dag SET next_run_after = now()"))
        session.execute(text("UPDATE dag_run SET state = 'running'"))
        session.execute(text("UPDATE task_instance SET state = 'scheduled'"))
        session.commit()
    assert waker.wait(0.2) is False


def test_a_lost_listener_falls_back_to_sleeping_and_reconnects(
    sessions: sessionmaker[Session], engine: Engine, waker: Waker
) -> None:
    register(sessions, manifest("r", chain("a"), schedule=None, paused=True))
    waker.wait(0)
    with engine.begin() as conn:
        killed = conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query = 'LISTEN sluice_wake'"
            )
        ).scalars()
        assert list(killed) == [True]
    assert waker.wait(0.2) is False  # the broken connection is noticed, not raised
    waker.wait(0)  # listening again
    with sessions() as session:
        set_paused(session, "r", False)
        session.commit()
    assert waker.wait(WOKEN) is True


def test_a_waker_without_a_database_sleeps_instead_of_raising() -> None:
    # Postgres down (restarting, unreachable): the idle wait must not kill the replica.
    engine = make_engine("postgresql://nobody@127.0.0.1:1/none")
    waker = Waker(engine)
    try:
        assert waker.wait(0.05) is False
        assert waker.wait(0.05) is False  # and it tries again each time
    finally:
        waker.close()
        engine.dispose()


class RecordingWaker(Waker):
    def __init__(self) -> None:
        self.waits: list[float] = []
        self.closed = False

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return False

    def close(self) -> None:
        self.closed = True


def test_an_idle_loop_waits_on_its_waker_instead_of_sleeping(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    loop = make_loop(sessions, ScriptedExecutor(), clock, tick_interval=2.5)
    loop.waker = waker = RecordingWaker()
    ticks = iter(range(3))
    loop.run(lambda: next(ticks, None) is None)
    assert waker.waits == [2.5, 2.5, 2.5]
    assert clock() == T0  # the clock's sleep was never called
    loop.close()
    assert waker.closed
