"""The loop end to end on real Postgres with a scripted executor."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

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
