"""Updates that write no index entry (heap-only, HOT): migrations 0020 and 0021, ADR 0053.

A burst of tries is inserted densely by the critical section and each try's row is
updated once when it ends. Only its primary key indexes `task_try`, so with room on
the page that update is HOT; on full pages every one went elsewhere. A running try's
heartbeat moves `last_heartbeat_at` only, which no index holds since 0021, so it is
HOT too where its page has room.
"""

from __future__ import annotations

import time
from datetime import timedelta

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
SCHEDULER = "sluice-test-burst"


def _updates(engine: Engine, table: str) -> tuple[int, int, int]:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT n_tup_upd, n_tup_hot_upd, n_tup_newpage_upd FROM pg_stat_user_tables"
                " WHERE relname = :t"
            ),
            {"t": table},
        ).one()
    return (row[0], row[1], row[2])


def _closed(engine: Engine, scheduler: Engine) -> None:
    """Close `scheduler`'s connections and wait until their backends are gone: a backend
    hands its counts to the statistics as it exits."""
    scheduler.dispose()
    deadline = time.monotonic() + 10
    left = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")
    while True:
        with engine.connect() as conn:
            if conn.execute(left, {"name": SCHEDULER}).scalar_one() == 0:
                return
        assert time.monotonic() < deadline, "the scheduler's backends did not exit"
        time.sleep(0.05)


def _counted(
    engine: Engine, table: str, before: tuple[int, int, int], updates: int
) -> tuple[int, ...]:
    """The table's counts since `before`, once `updates` of them have reached the
    statistics (a backend hands its counts over at its exit)."""
    deadline = time.monotonic() + 10
    while (after := _updates(engine, table))[0] - before[0] < updates:
        assert time.monotonic() < deadline, f"{table}'s updates were not counted: {after}"
        time.sleep(0.1)
    return tuple(a - b for a, b in zip(after, before, strict=True))


def _burst(db_url: str, executor: ScriptedExecutor) -> Engine:
    """TASKS tasks of one run, all claimed in one tick; the scheduler's engine (its own,
    so that closing it ends its backends, which hand their counts over)."""
    scheduler = make_engine(db_url, application_name=SCHEDULER)
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
    before = _updates(engine, "task_try")
    _closed(engine, _burst(db_url, ScriptedExecutor()))
    updates, hot, newpage = _counted(engine, "task_try", before, TASKS)
    assert updates == TASKS  # each try's end
    # Most are HOT (some pages' last rows find no room: the try's row grows when it ends).
    assert hot >= 0.8 * TASKS, (updates, hot, newpage)


def test_running_tries_heartbeats_are_heap_only(db_url: str, engine: Engine) -> None:
    executor = ScriptedExecutor()
    executor.hold.update(f"t{i}" for i in range(TASKS))  # every try stays running
    _closed(engine, _burst(db_url, executor))
    keys = [launch.key for launch in executor.started]
    assert len(keys) == TASKS
    before = _updates(engine, "task_instance")
    beating = make_engine(db_url, application_name=SCHEDULER)
    with session_factory(beating)() as session:
        for beat in range(1, 4):  # three rounds, as pods heartbeat every few seconds
            verdicts = record_heartbeats(session, keys, T0 + timedelta(seconds=10 * beat))
            session.commit()
            assert set(verdicts.values()) == {ACCEPTED}
        running = session.query(TaskInstance).filter_by(state=TaskState.RUNNING).count()
    assert running == TASKS
    _closed(engine, beating)
    updates, hot, newpage = _counted(engine, "task_instance", before, 3 * TASKS)
    assert updates == 3 * TASKS
    # The first round finds room left by the fillfactor, the next ones the room that
    # pruning the earlier versions frees (an index on the heartbeat made every one non-HOT).
    assert hot >= 0.6 * updates, (updates, hot, newpage)
