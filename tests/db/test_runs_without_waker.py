"""Without a waker, phase 1 looks on the tick after an idle one, when told, when a
schedule falls due and once per tick interval; a burst's other ticks skip its reads
(ADR 0049)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

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
    run_until_idle,
    runs,
    trigger,
)

# Phase 1's read of due DAGs (`runs._DUE_DAGS`): sent once per pass.
_DUE_READ = "FROM dag d CROSS JOIN LATERAL"


def _phase_one_passes(loop: SchedulerLoop, sessions: sessionmaker[Session]) -> int:
    """Tick once; how many of phase 1's passes the tick ran."""
    engine = sessions.kw["bind"]
    with count_queries(engine) as sent:
        loop.tick()
    return sum(1 for sql in sent if _DUE_READ in sql)


def _burst(sessions: sessionmaker[Session], clock: FakeClock) -> SchedulerLoop:
    """A loop in the middle of a burst: a chain of five, its first tick done."""
    register(sessions, manifest("long", chain("a", "b", "c", "d", "e"), schedule=None), clock.now)
    trigger(sessions, "long", clock.now)
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    assert _phase_one_passes(loop, sessions) == 1  # a new loop looks at once
    return loop


def test_a_burst_s_ticks_skip_phase_one(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock(T0)
    loop = _burst(sessions, clock)
    assert [_phase_one_passes(loop, sessions) for _ in range(3)] == [0, 0, 0]


def test_a_manual_run_is_seen_once_per_tick_interval_within_a_burst(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock(T0)
    loop = _burst(sessions, clock)
    register(sessions, manifest("other", chain("x"), schedule=None), clock.now)
    trigger(sessions, "other", clock.now)  # another process, mid-burst
    assert _phase_one_passes(loop, sessions) == 0
    with sessions() as session:
        assert runs(session, "other")[0].state == "queued"
    clock.advance(seconds=loop.config.tick_interval)
    assert _phase_one_passes(loop, sessions) == 1
    with sessions() as session:
        assert runs(session, "other")[0].state == "running"


def test_phase_one_looks_on_the_tick_after_an_idle_one(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock(T0)
    loop = _burst(sessions, clock)
    run_until_idle(loop)  # the burst ends with a tick that changed nothing
    with sessions() as session:
        assert runs(session, "long")[0].state == "success"
    trigger(sessions, "long", clock.now + timedelta(minutes=1))  # no time passes here
    assert _phase_one_passes(loop, sessions) == 1
    with sessions() as session:
        assert [r.state for r in runs(session, "long")] == ["success", "running"]


def test_a_schedule_falling_due_mid_burst_is_seen_when_due(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock(T0 + timedelta(seconds=50))
    register(
        sessions,
        manifest(
            "minutely",
            chain("a", "b", "c", "d", "e"),
            schedule="* * * * *",
            startDate="2026-11-30T00:00:00Z",
            catchup=False,
        ),
        clock.now,
    )
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    run_until_idle(loop)
    with sessions() as session:
        before = len(runs(session, "minutely"))
    clock.advance(seconds=10)  # the next minute's run falls due
    passes = _phase_one_passes(loop, sessions)
    assert passes == 1
    with sessions() as session:
        assert len(runs(session, "minutely")) == before + 1
