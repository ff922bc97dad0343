"""A run's deadline (ADR 0024): phase 1 writes it as it starts the run, and a run past
it, or of a deleted DAG, is phase 2's work, found without the quiet round.

The loops here run phase 2's quiet round once, at their start (before any run
exists), and never again (`quiet_round_interval` infinite): whatever ends a run
below was found as work. The last test is the net the quiet round still is, for a
run started without a deadline (before migration 0012)."""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun
from sluice.handlers.store import deactivate_dag
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.states import RunState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    chain,
    corrupt_runs_version,
    make_loop,
    manifest,
    register,
    runs,
    task_states,
    trigger,
)

NO_QUIET_ROUND = math.inf


def _ticks(loop: SchedulerLoop, clock: FakeClock, n: int, seconds: float = 1.0) -> None:
    for _ in range(n):
        report = loop.tick()
        assert not report.errors, report.errors
        clock.advance(seconds=seconds)


def _deadlines(session: Session, dag_id: str) -> list[object]:
    return list(
        session.execute(
            select(DagRun.deadline).where(DagRun.dag_id == dag_id).order_by(DagRun.id)
        ).scalars()
    )


def test_a_run_gets_its_start_plus_its_timeout_and_one_without_a_timeout_none(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("timed", chain("a"), dagrunTimeout="10m"), clock.now)
    register(sessions, manifest("untimed", chain("a")), clock.now)
    trigger(sessions, "timed", clock.now)
    trigger(sessions, "untimed", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock, quiet_round_interval=NO_QUIET_ROUND)
    started = clock.now
    _ticks(loop, clock, 1)
    with sessions() as session:
        (run,) = runs(session, "timed")
        assert run.start_date == started
        assert _deadlines(session, "timed") == [started + timedelta(minutes=10)]
        assert _deadlines(session, "untimed") == [None]


def test_a_run_past_its_timeout_ends_without_the_quiet_round(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("to", chain("a", "b"), dagrunTimeout="10m"), clock.now)
    register(sessions, manifest("other", chain("x")), clock.now)
    trigger(sessions, "to", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock, quiet_round_interval=NO_QUIET_ROUND)
    _ticks(loop, clock, 3)
    clock.advance(minutes=9)
    _ticks(loop, clock, 3)
    with sessions() as session:
        assert [r.state for r in runs(session, "to")] == [RunState.RUNNING]
    clock.advance(minutes=1)
    _ticks(loop, clock, 2)
    with sessions() as session:
        (run,) = runs(session, "to")
        assert run.state == RunState.FAILED
        assert task_states(session, "to") == {"a": "skipped", "b": "skipped"}
    assert executor.killed == [executor.started[0].key]


def test_a_running_run_of_a_deleted_dag_ends_without_the_quiet_round(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("going", chain("a", "b")), clock.now)
    trigger(sessions, "going", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock, quiet_round_interval=NO_QUIET_ROUND)
    _ticks(loop, clock, 3)
    with sessions() as session:
        assert deactivate_dag(session, "going", None)
        session.commit()
    _ticks(loop, clock, 2)
    with sessions() as session:
        assert [r.state for r in runs(session, "going")] == [RunState.FAILED]


def test_a_run_whose_version_cannot_be_loaded_is_due_at_its_start_and_ends(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("bad", chain("a")), clock.now)
    trigger(sessions, "bad", clock.now)
    corrupt_runs_version(sessions, "bad")
    loop = make_loop(sessions, ScriptedExecutor(), clock, quiet_round_interval=NO_QUIET_ROUND)
    started = clock.now
    _ticks(loop, clock, 3)
    with sessions() as session:
        assert [r.state for r in runs(session, "bad")] == [RunState.FAILED]
        assert _deadlines(session, "bad") == [started]
        assert task_states(session, "bad") == {"a": "skipped"}


def test_a_run_without_a_deadline_still_times_out_in_the_quiet_round(
    sessions: sessionmaker[Session],
) -> None:
    """A run started before migration 0012 has no deadline: the quiet round, once per
    `quiet_round_interval`, still finds it past its timeout."""
    clock = FakeClock()
    register(sessions, manifest("old", chain("a"), dagrunTimeout="10m"), clock.now)
    trigger(sessions, "old", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock, quiet_round_interval=30.0)
    _ticks(loop, clock, 2)
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET deadline = NULL"))
        session.commit()
    clock.advance(minutes=9, seconds=48)
    _ticks(loop, clock, 1)  # t = 9m50s: a quiet round, before the timeout
    clock.advance(seconds=14)
    _ticks(loop, clock, 2)  # t = 10m05s: past the timeout, the next round not yet due
    with sessions() as session:
        assert [r.state for r in runs(session, "old")] == [RunState.RUNNING]
    _ticks(loop, clock, 20)
    with sessions() as session:
        assert [r.state for r in runs(session, "old")] == [RunState.FAILED]
