"""The loop end to end on real Postgres with a scripted executor."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler import phase_critical
from sluice.spec.states import RunState, TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    runs,
    task_states,
    trigger,
)


def test_scheduled_run_goes_through_a_chain(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock(T0 + timedelta(minutes=30))
    register(
        sessions,
        manifest(
            "etl",
            chain("extract", "transform", "load"),
            schedule="@hourly",
            startDate="2026-11-30T23:00:00Z",
        ),
        clock.now,
    )
    executor = ScriptedExecutor()
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    with sessions() as session:
        (run,) = runs(session, "etl")
        assert run.state == RunState.SUCCESS
        assert run.logical_date == T0 - timedelta(hours=1)
        assert run.tasks_done == 3
        assert task_states(session, "etl") == {
            "extract": "success",
            "transform": "success",
            "load": "success",
        }
    assert [launch.task_id for launch in executor.started] == ["extract", "transform", "load"]


def test_failure_propagates_upstream_failed(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    register(sessions, manifest("f", chain("a", "b", "c"), schedule=None), clock.now)
    from tests.support import trigger

    trigger(sessions, "f", clock.now)
    executor = ScriptedExecutor({"a": [TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    with sessions() as session:
        (run,) = runs(session, "f")
        assert run.state == RunState.FAILED
        assert task_states(session, "f") == {
            "a": "failed",
            "b": "upstream_failed",
            "c": "upstream_failed",
        }


def test_parallel_branches_report_in_one_batch(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    tasks = [
        {"name": "start"},
        {"name": "left", "dependsOn": ["start"]},
        {"name": "right", "dependsOn": ["start"]},
        {"name": "join", "dependsOn": ["left", "right"]},
    ]
    register(sessions, manifest("diamond", tasks), clock.now)
    from tests.support import trigger

    trigger(sessions, "diamond", clock.now)
    executor = ScriptedExecutor()
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions() as session:
        (run,) = runs(session, "diamond")
        assert run.state == RunState.SUCCESS
    started = [launch.task_id for launch in executor.started]
    assert started[0] == "start"
    assert started[-1] == "join"
    assert sorted(started[1:3]) == ["left", "right"]


def test_a_tick_takes_one_connection_and_a_failed_phase_gives_it_back(
    sessions: sessionmaker[Session], engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    register(sessions, manifest("one", chain("a", "b")), clock.now)
    trigger(sessions, "one", clock.now)
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    checkouts: list[object] = []
    listener = lambda *args: checkouts.append(args[0])  # noqa: E731
    event.listen(engine, "checkout", listener)
    try:
        report = loop.tick()  # every phase has work: the run starts, `a` runs and ends
        assert report.tasks_started == 1
        assert len(checkouts) == 1

        checkouts.clear()

        def broken(*args: object, **kwargs: object) -> object:
            raise RuntimeError("pool table unreadable")

        # A tick interval on, phase 4 looks at the outbox too (once per interval).
        clock.advance(seconds=1)
        with monkeypatch.context() as patch:
            patch.setattr(phase_critical, "queue_schedulable_task_instances", broken)
            report = loop.tick()  # phase 3 fails; the phases after it take a fresh connection
        assert report.errors == ["critical_section: pool table unreadable"]
        assert len(checkouts) >= 2  # the tick's, then fresh ones for the phases after it
        run_until_idle(loop)
    finally:
        event.remove(engine, "checkout", listener)
    with sessions() as session:
        assert [r.state for r in runs(session, "one")] == [RunState.SUCCESS]
