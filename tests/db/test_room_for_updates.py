"""Updates that write no index entry (heap-only, HOT): migrations 0020 and 0021, ADR 0053.

A burst of tries is inserted densely by the critical section and each try's row is
updated once when it ends. Only its primary key indexes `task_try`, so with room on
the page that update is HOT; on full pages every one went elsewhere. A running try's
heartbeat moves `last_heartbeat_at` only, which no index holds since 0021, so it is
HOT too where its page has room.
"""

from __future__ import annotations

from datetime import timedelta

from bench.common import alone, read_writes
from sqlalchemy import Engine, text

from sluice.api.heartbeats import ACCEPTED, record_heartbeats
from sluice.db.engine import make_engine, session_factory
from sluice.db.models import TaskInstance
from sluice.spec.states import TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)

TASKS = 400


def _burst(db_url: str, executor: ScriptedExecutor) -> Engine:
    """TASKS tasks of one run, all claimed in one tick; the scheduler's engine (its own,
    so that closing it ends its backends, which hand their counts over)."""
    scheduler = make_engine(db_url)
    sessions = session_factory(scheduler)
    with sessions() as session:
        session.execute(text("UPDATE slot_pool SET slots = :n"), {"n": TASKS})
        session.commit()
    clock = FakeClock()
    tasks = [{"name": f"t{i}"} for i in range(TASKS)]
    register(sessions, manifest("burst", tasks, maxActiveTasks=TASKS), clock.now)
    trigger(sessions, "burst", clock.now)
    run_until_idle(make_loop(sessions, executor, clock))
    return scheduler


def test_a_burst_of_tries_ends_in_heap_only_updates(db_url: str, engine: Engine) -> None:
    before = read_writes(engine)
    _burst(db_url, ScriptedExecutor()).dispose()
    # Read once the scheduler's backends have exited, handing their counts over.
    assert alone(engine), "the scheduler's backends did not exit"
    updates, hot, newpage = read_writes(engine).since(before).updates["task_try"]
    assert updates == TASKS  # each try's end
    # Most are HOT (some pages' last rows find no room: the try's row grows when it ends).
    assert hot >= 0.8 * TASKS, (updates, hot, newpage)


def test_running_tries_heartbeats_are_heap_only(db_url: str, engine: Engine) -> None:
    executor = ScriptedExecutor()
    executor.hold.update(f"t{i}" for i in range(TASKS))  # every try stays running
    _burst(db_url, executor).dispose()
    keys = [launch.key for launch in executor.started]
    assert len(keys) == TASKS
    assert alone(engine), "the scheduler's backends did not exit"  # counts handed over
    before = read_writes(engine)
    beating = make_engine(db_url)
    with session_factory(beating)() as session:
        for beat in range(1, 4):  # three rounds, as pods heartbeat every few seconds
            verdicts = record_heartbeats(session, keys, T0 + timedelta(seconds=10 * beat))
            session.commit()
            assert set(verdicts.values()) == {ACCEPTED}
        running = session.query(TaskInstance).filter_by(state=TaskState.RUNNING).count()
    assert running == TASKS
    beating.dispose()
    assert alone(engine), "the heartbeating backends did not exit"
    updates, hot, newpage = read_writes(engine).since(before).updates["task_instance"]
    assert updates == 3 * TASKS
    # The first round finds room left by the fillfactor, the next ones the room that
    # pruning the earlier versions frees (an index on the heartbeat made every one non-HOT).
    assert hot >= 0.6 * updates, (updates, hot, newpage)
