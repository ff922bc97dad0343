"""Deleting a Pool or a DAG stops the work that needs it, and every run still ends.

A task whose pool does not exist waits up to `queued_timeout` (the pool may be on
its way: a DAG and its Pool applied together), then fails with the reason. A
deleted DAG's queued runs never start and its running runs stop: they fail,
their unfinished tasks skipped with the reason, as a timed-out run's are.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun, SlotPool, TaskInstance, TaskTry
from sluice.handlers.objects import DagRunObject, PoolSpec
from sluice.handlers.ownership import Owned, RunRecord
from sluice.handlers.store import (
    MarkRefused,
    cancel_run,
    deactivate_dag,
    delete_pool,
    mark_run_as,
    object_verdict,
    upsert_pool,
)
from sluice.spec.states import RunState, TaskState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    runs,
    task_states,
    ti_row,
    trigger,
)

QUEUED_TIMEOUT = 60.0


def _object_run(sessions: sessionmaker[Session], run_id: int, name: str) -> DagRunObject:
    """Make `run_id` the run a user's DagRun object `ns/name` triggered; the object, as its
    handlers see it."""
    uid = f"uid-of-{name}"
    with sessions.begin() as session:
        session.execute(
            update(DagRun)
            .where(DagRun.id == run_id)
            .values(object_name=name, object_namespace="ns", object_uid=uid)
        )
        dag_id = session.execute(select(DagRun.dag_id).where(DagRun.id == run_id)).scalar_one()
    return DagRunObject(namespace="ns", name=name, uid=uid, dag_name=dag_id)


def _run_of(session: Session, obj: DagRunObject) -> RunRecord:
    verdict = object_verdict(session, obj)
    assert isinstance(verdict, Owned), verdict
    return verdict.run


def _pool(sessions: sessionmaker[Session], name: str, slots: int) -> None:
    with sessions() as session:
        session.execute(insert(SlotPool).values(name=name, slots=slots, description=""))
        session.commit()


def _tick_for(loop: object, clock: FakeClock, seconds: float) -> None:
    """Tick once a second for `seconds` of fake time."""
    for _ in range(int(seconds)):
        clock.advance(seconds=1)
        report = loop.tick()  # type: ignore[attr-defined]
        assert not report.errors, report.errors


def test_tasks_of_a_deleted_pool_fail_with_the_reason_and_the_run_ends(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    _pool(sessions, "gpu", 1)
    tasks = [
        {"name": "first", "pool": "gpu", "priorityWeight": 2},
        {"name": "second", "pool": "gpu"},
    ]
    register(sessions, manifest("gp", tasks), clock.now)
    trigger(sessions, "gp", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("first")
    loop = make_loop(sessions, executor, clock, queued_timeout=QUEUED_TIMEOUT)
    _tick_for(loop, clock, 2)  # `first` holds the pool's one slot; `second` waits for it
    with sessions() as session:
        assert delete_pool(session, "gpu")
        session.commit()
    _tick_for(loop, clock, QUEUED_TIMEOUT / 2)
    with sessions() as session:
        assert task_states(session, "gp") == {"first": "running", "second": "scheduled"}
    _tick_for(loop, clock, QUEUED_TIMEOUT)
    executor.hold.clear()  # the try that was running before the delete ends as it would
    _tick_for(loop, clock, 2)
    with sessions() as session:
        assert task_states(session, "gp") == {"first": "success", "second": "failed"}
        (run,) = runs(session, "gp")
        assert run.state == RunState.FAILED
        second = ti_row(session, "gp", "second")
        reason = (
            "pool 'gpu' does not exist (named by the task's `pool` field): create a Pool"
            " named 'gpu' or set the task's `pool` to an existing one, then run the task again"
        )
        assert second.reason == reason
        try_row = session.execute(
            select(TaskTry).where(TaskTry.task_instance_id == second.id)
        ).scalar_one()
        assert (try_row.try_number, try_row.state, try_row.reason) == (1, "failed", reason)
    assert [launch.task_id for launch in executor.started] == ["first"]


def test_a_pool_created_within_the_wait_lets_its_tasks_run(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("late", [{"name": "a", "pool": "later"}]), clock.now)
    trigger(sessions, "late", clock.now)
    loop = make_loop(sessions, ScriptedExecutor(), clock, queued_timeout=QUEUED_TIMEOUT)
    _tick_for(loop, clock, QUEUED_TIMEOUT - 5)
    with sessions() as session:
        assert task_states(session, "late") == {"a": "scheduled"}
        upsert_pool(session, PoolSpec(name="later", slots=1, description=""))
        session.commit()
    _tick_for(loop, clock, 3)
    with sessions() as session:
        assert task_states(session, "late") == {"a": "success"}


def _reason(dag_id: str) -> str:
    return (
        f"DAG {dag_id!r} was deleted (dag.is_active is false), so its runs end:"
        " apply the DAG again and trigger a new run"
    )


def test_a_deleted_dag_starts_nothing_and_its_runs_end_with_the_reason(
    sessions: sessionmaker[Session],
) -> None:
    """`gone` has a running run and two queued ones (phase 1 ends them all); `going`
    has a running run only (examine ends it)."""
    clock = FakeClock()
    register(sessions, manifest("gone", chain("a", "b"), maxActiveRuns=1), clock.now)
    register(sessions, manifest("going", chain("a", "b")), clock.now)
    for minutes in range(3):
        trigger(sessions, "gone", clock.now + timedelta(minutes=minutes))
    trigger(sessions, "going", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    _tick_for(loop, clock, 2)  # the first runs run `a`; `gone`'s others wait their turn
    with sessions() as session:
        for dag_id in ("gone", "going"):  # what deleting the DAG object does
            assert deactivate_dag(session, dag_id, None)
        session.commit()
    _tick_for(loop, clock, 6)  # runs end at once; the running tries are fenced at a heartbeat
    with sessions() as session:
        for dag_id, count in (("gone", 3), ("going", 1)):
            assert [r.state for r in runs(session, dag_id)] == [RunState.FAILED] * count
            instances = session.execute(
                select(TaskInstance.state, TaskInstance.reason).where(TaskInstance.dag_id == dag_id)
            ).all()
            assert set(instances) == {(TaskState.SKIPPED, _reason(dag_id))}
            (running_try,) = session.execute(
                select(TaskTry)
                .join(TaskInstance, TaskInstance.id == TaskTry.task_instance_id)
                .where(TaskInstance.dag_id == dag_id)
            ).scalars()
            assert (running_try.state, running_try.reason) == (TaskState.SKIPPED, _reason(dag_id))
    # Only the first runs' `a` ever started, and both are killed.
    assert sorted(executor.killed) == sorted(launch.key for launch in executor.started)
    assert [launch.task_id for launch in executor.started] == ["a", "a"]


def test_deleting_a_running_dagrun_object_cancels_its_run_and_stops_its_tries(
    sessions: sessionmaker[Session],
) -> None:
    """Its unfinished tasks are skipped with the reason, the run fails, and the replica
    that runs a try of it stops the try at its next heartbeat (the fence)."""
    clock = FakeClock()
    register(sessions, manifest("cancel", chain("a", "b")), clock.now)
    run_id = trigger(sessions, "cancel", clock.now, run_id="manual__mine__1234")
    executor = ScriptedExecutor()
    executor.hold = {"a"}
    loop = make_loop(sessions, executor, clock)
    for _ in range(5):
        loop.tick()
    assert list(executor.running), "a should be running"
    obj = _object_run(sessions, run_id, "cancel-mine")
    reason = "cancelled: its DagRun object ns/cancel-mine was deleted"
    with sessions.begin() as session:
        assert cancel_run(session, _run_of(session, obj), reason, clock.now) == "manual__mine__1234"
    with sessions() as session:
        assert [r.state for r in runs(session, "cancel")] == [RunState.FAILED]
        assert task_states(session, "cancel") == {"a": "skipped", "b": "skipped"}
        assert ti_row(session, "cancel", "a").reason == reason
    clock.advance(seconds=10)
    loop.tick()
    assert executor.killed, "the running try was not stopped"
    with sessions.begin() as session:  # an ended run: deleting its object changes nothing
        assert cancel_run(session, _run_of(session, obj), reason, clock.now) is None


def test_marking_a_run_failed_or_success_ends_it_as_airflows_mark_run_as(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("marked", chain("a", "b")), clock.now)
    failing = trigger(sessions, "marked", clock.now, run_id="manual__fail__1")
    executor = ScriptedExecutor()
    executor.hold = {"a"}
    loop = make_loop(sessions, executor, clock)
    for _ in range(5):
        loop.tick()
    ref = _object_run(sessions, failing, "x")
    with sessions.begin() as session:
        message = mark_run_as(session, _run_of(session, ref), "failed", clock.now)
    assert message.startswith("run manual__fail__1 marked failed")
    with sessions() as session:
        assert task_states(session, "marked") == {"a": "failed", "b": "skipped"}
        (run,) = runs(session, "marked")
        assert (run.id, run.state, run.tasks_done) == (failing, "failed", 2)
        tries = session.execute(select(TaskTry.state)).scalars().all()
        assert tries == ["failed"]
    clock.advance(seconds=10)
    loop.tick()
    assert executor.killed, "the running try was not stopped"
    # An ended run is not marked again.
    with sessions.begin() as session, pytest.raises(MarkRefused, match="already ended as failed"):
        mark_run_as(session, _run_of(session, ref), "success", clock.now)

    ok = _object_run(sessions, trigger(sessions, "marked", clock.now, run_id="manual__ok__2"), "y")
    with sessions.begin() as session:
        mark_run_as(session, _run_of(session, ok), "success", clock.now)
    with sessions() as session:
        (done,) = [r for r in runs(session, "marked") if r.run_id == "manual__ok__2"]
        assert done.state == "success"
        states = session.execute(
            select(TaskInstance.state).where(TaskInstance.dag_run_id == done.id)
        ).scalars()
        assert set(states) == {"success"}
