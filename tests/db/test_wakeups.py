"""Waking idle schedulers: NOTIFY from the migration's triggers, heard by `Waker`.

No timing is asserted: `wait` says whether a notification woke it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import set_paused
from sluice.db.engine import make_engine
from sluice.db.wakeups import Waker
from sluice.scheduler.loop import SchedulerLoop
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    count_queries,
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


def _drain(waker: Waker) -> None:
    """Take every notification sent so far (delivery is asynchronous: a poll can miss one)."""
    while waker.wait(0.2):
        pass


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
    _drain(waker)
    trigger(sessions, "m", FakeClock().now)
    assert waker.wait(WOKEN) is True


def test_the_schedulers_own_bookkeeping_does_not_wake_anyone(
    sessions: sessionmaker[Session], waker: Waker
) -> None:
    register(sessions, manifest("b", chain("a"), schedule=None))
    trigger(sessions, "b", FakeClock().now)
    _drain(waker)
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
    _drain(waker)
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

        self.heard = False  # what pending() answers

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return False

    def pending(self) -> bool:
        return self.heard

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


def test_a_run_that_ends_wakes_the_scheduler_and_progress_does_not(
    sessions: sessionmaker[Session], waker: Waker
) -> None:
    register(sessions, manifest("e", chain("a"), schedule=None))
    trigger(sessions, "e", FakeClock().now)
    _drain(waker)
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running', tasks_done = 1"))
        session.commit()
    assert waker.wait(0.2) is False
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'success'"))
        session.commit()
    assert waker.wait(WOKEN) is True


def test_pending_says_whether_something_came_without_waiting(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    waker = Waker(engine)
    try:
        assert waker.pending() is True  # listening only from now: cannot tell
        assert waker.pending() is False
        register(sessions, manifest("p", chain("a"), schedule=None))
        deadline = 200
        while not waker.pending():  # delivery is asynchronous; a broken NOTIFY fails here
            deadline -= 1
            assert deadline, "no notification arrived"
            time.sleep(0.05)
        assert waker.pending() is False
    finally:
        waker.close()


def _busy_loop(
    sessions: sessionmaker[Session], clock: FakeClock
) -> tuple[SchedulerLoop, RecordingWaker]:
    loop = make_loop(sessions, ScriptedExecutor(), clock, tick_interval=1.0)
    loop.waker = waker = RecordingWaker()
    loop.tick()  # phase 1 always runs on the first tick
    return loop, waker


def test_a_busy_loop_looks_at_runs_when_told_or_once_per_tick_interval(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("g", chain("a"), schedule=None))
    loop, waker = _busy_loop(sessions, clock)
    trigger(sessions, "g", clock.now)
    assert loop.tick().runs_started == 0  # nothing heard, looked at runs this interval
    clock.advance(seconds=0.5)
    assert loop.tick().runs_started == 0
    clock.advance(seconds=0.5)
    assert loop.tick().runs_started == 1  # a tick interval since the last look

    trigger(sessions, "g", clock.now, logical_date=T0 + timedelta(hours=1))
    waker.heard = True  # the run's NOTIFY
    assert loop.tick().runs_started == 1


def test_a_run_this_replica_ends_lets_the_next_one_start_at_once(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("m1", chain("a"), schedule=None, maxActiveRuns=1))
    trigger(sessions, "m1", clock.now)
    trigger(sessions, "m1", clock.now, logical_date=T0 + timedelta(hours=1))
    loop, _ = _busy_loop(sessions, clock)  # starts "first"; "second" waits for its place
    for _ in range(5):
        report = loop.tick()
        if report.runs_finished:
            break
    assert report.runs_finished == 1
    assert loop.tick().runs_started == 1  # no notification needed, no interval waited


def test_a_full_phase_one_is_followed_by_another_at_once(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    for n in range(5):
        register(sessions, manifest(f"f{n}", chain("a"), schedule=None))
    loop = make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_tick=2)
    loop.waker = RecordingWaker()
    loop.tick()
    for n in range(5):  # phase 1 starts the queued runs of at most 2 DAGs per tick
        trigger(sessions, f"f{n}", clock.now)
    assert loop.tick().runs_started == 0  # nothing heard, this interval looked at already
    clock.advance(seconds=1)
    assert [loop.tick().runs_started for _ in range(4)] == [2, 2, 1, 0]


def _waiting_for_a_slot(
    sessions: sessionmaker[Session], clock: FakeClock, **config: Any
) -> tuple[SchedulerLoop, RecordingWaker, ScriptedExecutor]:
    """A loop with a waker, one try running in a pool of one slot and one task waiting for
    it, after the ticks that got it there (the clock stands still)."""
    register(sessions, manifest("slot", [{"name": "a"}, {"name": "b"}], schedule=None))
    with sessions() as session:
        session.execute(text("UPDATE slot_pool SET slots = 1 WHERE name = 'default'"))
        session.commit()
    trigger(sessions, "slot", clock.now)
    executor = ScriptedExecutor()
    executor.hold.update({"a", "b"})
    loop = make_loop(sessions, executor, clock, tick_interval=1.0, **config)
    loop.waker = waker = RecordingWaker()
    for _ in range(3):
        loop.tick()
    assert len(executor.running) == 1
    return loop, waker, executor


def test_a_tick_with_nothing_new_sends_no_statement_and_takes_no_connection(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    clock = FakeClock()
    loop, _, _ = _waiting_for_a_slot(sessions, clock)
    checkouts: list[object] = []
    listener = lambda *args: checkouts.append(args[0])  # noqa: E731
    event.listen(engine, "checkout", listener)
    try:
        with count_queries(engine) as statements:
            assert not loop.tick().busy
    finally:
        event.remove(engine, "checkout", listener)
    # Without a report, a notification or a tick interval, no phase can find anything:
    # not the examine, critical-section or claim statements a busy tick's follower sent,
    # and the tick takes no connection from the pool (nor pings it).
    assert statements == []
    assert checkouts == []


# The statements that say a step looked: each phase's first, and the one look for five
# of them once per tick interval (`probe.py`).
LOOKS = {
    "runs": "WITH waiting AS",
    "examine": "last_scheduling_decision = :now",
    "critical section": "NOWAIT",
    "claims": "WITH taken AS",
    "probe": "AS alerts",
}


def _looked(loop: SchedulerLoop, engine: Engine) -> set[str]:
    with count_queries(engine) as statements:
        loop.tick()
    return {what for what, sql in LOOKS.items() if any(sql in s for s in statements)}


def test_once_per_tick_interval_one_statement_looks_for_every_phase(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Once per tick interval the replica looks for what other replicas, the clock or a
    lost notification brought: one statement for phases 1, 3, 4 and phase 2's runs with
    work, then only the phases it found work for (here none: the pool is full). Phase
    2's round of quiet runs comes once per quiet round interval (ADR 0024). A
    notification makes every phase look at once."""
    clock = FakeClock()
    loop, waker, _ = _waiting_for_a_slot(sessions, clock)  # the quiet round ran at start
    clock.advance(seconds=1)
    assert _looked(loop, engine) == {"probe"}
    assert _looked(loop, engine) == set()
    clock.advance(seconds=28)
    assert _looked(loop, engine) == {"probe"}
    clock.advance(seconds=1)  # 30 s: the quiet round too
    assert _looked(loop, engine) == {"probe", "examine"}
    waker.heard = True  # a notification: an unpause, a run inserted or ended elsewhere
    assert _looked(loop, engine) == {"runs", "examine", "critical section", "claims"}


def test_the_look_finds_work_no_one_told_this_replica_of(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """A slot made elsewhere (another replica's try ended, the pool resized) is found by
    the next look: the critical section queues the waiting task and starts it in that
    tick, with no claim from the outbox (ADR 0047)."""
    clock = FakeClock()
    loop, _, executor = _waiting_for_a_slot(sessions, clock)
    with sessions() as session:
        session.execute(text("UPDATE slot_pool SET slots = 2 WHERE name = 'default'"))
        session.commit()
    assert _looked(loop, engine) == set()  # no tick interval yet, no one told it
    clock.advance(seconds=1)
    assert _looked(loop, engine) == {"probe", "critical section"}
    assert len(executor.started) == 2


def _two_other_replicas(sessions: sessionmaker[Session], clock: FakeClock) -> None:
    """Two more live replicas (pid 1), heartbeating now."""
    with sessions() as session:
        for _ in range(2):
            session.execute(
                text(
                    "INSERT INTO scheduler_job (hostname, pid, state, started_at,"
                    " latest_heartbeat) VALUES ('other', 1, 'running', :now, :now)"
                ),
                {"now": clock.now},
            )
        session.commit()


def test_live_replicas_share_the_looks_once_per_tick_interval(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """With three live replicas each looks once per three tick intervals (together about
    once per interval, an idle fleet costing what one idle replica does); a notification
    still makes it look at once, and once the others are dead it looks every interval."""
    clock = FakeClock()
    # Phase 2's quiet round is shared the same way, once per 30 s: out of the picture here.
    loop, waker, _ = _waiting_for_a_slot(sessions, clock, quiet_round_interval=math.inf)
    _two_other_replicas(sessions, clock)
    looks = {"probe"}

    def looked() -> set[str]:
        return _looked(loop, engine)

    clock.advance(seconds=5)  # the replica's heartbeat counts the live ones: three
    assert looked() == looks
    clock.advance(seconds=1)
    assert looked() == set()  # one interval: another replica's turn
    clock.advance(seconds=2)
    assert looked() == looks  # three intervals: its own
    clock.advance(seconds=1)
    assert looked() == set()
    waker.heard = True  # a notification: every phase at once, whoever's turn it is
    assert looked() == {"runs", "examine", "critical section", "claims"}
    waker.heard = False

    clock.advance(seconds=31)  # the others stopped heartbeating: it is alone again
    assert looked() == looks
    clock.advance(seconds=1)
    assert looked() == looks


def test_a_slot_this_replica_frees_is_taken_at_the_next_tick(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    loop, _, executor = _waiting_for_a_slot(sessions, clock)
    executor.hold.clear()
    assert loop.tick().events_applied == 1  # the running try ends: its slot is free
    report = loop.tick()  # the same second: no tick interval has passed
    assert (report.tasks_queued, report.tasks_started) == (1, 1)
    assert len(executor.started) == 2


def test_the_loop_wakes_the_status_publisher_after_a_change_or_a_notification(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    loop, waker, executor = _waiting_for_a_slot(sessions, clock)
    woken: list[str] = []
    loop.on_change = lambda: woken.append("woken")
    loop.tick()
    assert woken == []  # nothing changed: nothing to publish
    executor.hold.clear()
    assert loop.tick().events_applied == 1
    assert woken == ["woken"]  # a try ended: its run's status changed
    woken.clear()
    while loop.tick().busy:
        pass
    woken.clear()
    loop.tick()
    assert woken == []
    waker.heard = True  # another process inserted or ended a run, or (un)paused a DAG
    loop.tick()
    assert woken == ["woken"]


def test_live_replicas_share_the_sweeps_and_the_counter_reconciliation(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """The sweeps for stale tries and the counter reconciliation look at the whole
    fleet's work: with three live replicas each sweeps once per three
    `zombie_check_interval`s (with or without a waker), and alone again once per
    interval. The loop tells the status publisher how many replicas share."""
    clock = FakeClock()
    loop = make_loop(
        sessions,
        ScriptedExecutor(),
        clock,
        zombie_check_interval=10,
        reconcile_interval=60,
        heartbeat_interval=5,
        scheduler_dead_after=30,
    )
    told: list[int] = []
    loop.on_replicas = told.append
    _two_other_replicas(sessions, clock)
    sweep = "UPDATE scheduler_job SET state=%(state)s, ended_at=%(ended_at)s"
    reconcile = "SELECT dag_run.id, dag_run.tasks_total"

    def tick_for(seconds: int, others_beat: bool) -> tuple[int, int]:
        """(ticks that swept, ticks that reconciled) over `seconds` ticks a second apart."""
        swept = reconciled = 0
        for _ in range(seconds):
            clock.advance(seconds=1)
            if others_beat:
                with sessions() as session:
                    session.execute(
                        text("UPDATE scheduler_job SET latest_heartbeat = :now WHERE pid = 1"),
                        {"now": clock.now},
                    )
                    session.commit()
            with count_queries(engine) as statements:
                loop.tick()
            swept += any(sweep in s for s in statements)
            reconciled += any(reconcile in s for s in statements)
        return swept, reconciled

    swept, reconciled = tick_for(180, others_beat=True)
    assert told == [3]
    assert 5 <= swept <= 7  # once per 30 s (the phase taken once may add one)
    assert 1 <= reconciled <= 2  # once per 180 s
    tick_for(40, others_beat=False)  # the others die (30 s) and are counted out
    assert told == [3, 1]
    swept, reconciled = tick_for(60, others_beat=False)
    assert swept == 6  # alone: every 10 s
    assert reconciled == 1
