"""Room on each page for a row's next version (migration 0020, ADR 0053).

A burst of tries is inserted densely by the critical section and each try's row is
updated once when it ends. Only its primary key indexes `task_try`, so with room on
the page that update is heap-only (HOT); on full pages every one went elsewhere.
"""

from __future__ import annotations

import time

from sqlalchemy import Engine, text

from sluice.db.engine import make_engine, session_factory
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)

TASKS = 400


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


def test_a_burst_of_tries_ends_in_heap_only_updates(db_url: str, engine: Engine) -> None:
    # The scheduler on an engine of its own: closing it ends its backends, which hand
    # their table counts to the statistics as they exit.
    scheduler = make_engine(db_url)
    sessions = session_factory(scheduler)
    with sessions() as session:
        session.execute(text("UPDATE slot_pool SET slots = :n"), {"n": TASKS})
        session.commit()
    clock = FakeClock()
    tasks = [{"name": f"t{i}"} for i in range(TASKS)]
    register(sessions, manifest("burst", tasks, maxActiveTasks=TASKS), clock.now)
    trigger(sessions, "burst", clock.now)
    before = _updates(engine, "task_try")
    run_until_idle(make_loop(sessions, ScriptedExecutor(), clock))
    scheduler.dispose()

    deadline = time.monotonic() + 10
    while (after := _updates(engine, "task_try"))[0] - before[0] < TASKS:
        assert time.monotonic() < deadline, f"the tries' updates were not counted: {after}"
        time.sleep(0.1)
    updates, hot, newpage = (a - b for a, b in zip(after, before, strict=True))
    assert updates == TASKS  # each try's end
    # Most are HOT (some pages' last rows find no room: the try's row grows when it ends).
    assert hot >= 0.8 * TASKS, (updates, hot, newpage)
