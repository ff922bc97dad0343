"""Clearing and marking tasks (Airflow's semantics) on real Postgres, through the real loop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, TaskInstance, TaskTry
from sluice.scheduler import clearing, endings
from sluice.scheduler.clearing import ActionError
from sluice.scheduler.reconcile import reconcile_counters
from sluice.scheduler.transitions import lock_runs
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
    trigger,
)

ONCE = {"schedule": None}


def _instances(sessions: sessionmaker[Session], run_id: int) -> dict[str, tuple[str, int, int]]:
    """Each task's (state, try number, max tries) in the run."""
    with sessions() as session:
        return {
            ti.task_id: (ti.state, ti.try_number, ti.max_tries)
            for ti in session.execute(
                select(TaskInstance).where(TaskInstance.dag_run_id == run_id)
            ).scalars()
        }


def _tries(sessions: sessionmaker[Session], run_id: int, task_id: str) -> list[tuple[int, str]]:
    with sessions() as session:
        return [
            (row.try_number, row.state)
            for row in session.execute(
                select(TaskTry)
                .join(TaskInstance, TaskInstance.id == TaskTry.task_instance_id)
                .where(TaskInstance.dag_run_id == run_id, TaskInstance.task_id == task_id)
                .order_by(TaskTry.try_number)
            ).scalars()
        ]


def _run(sessions: sessionmaker[Session], run_id: int) -> DagRun:
    with sessions() as session:
        return session.get_one(DagRun, run_id)


def _clear(sessions: sessionmaker[Session], run_id: int, clock: FakeClock, **kw: Any) -> Any:
    with sessions() as session:
        run = session.get_one(DagRun, run_id)
        outcome = clearing.clear(session, SpecCache(), run, reason="test", now=clock.now, **kw)
        session.commit()
        return outcome


def _mark(
    sessions: sessionmaker[Session], run_id: int, tasks: list[str], target: TaskState, **kw: Any
) -> Any:
    with sessions() as session:
        run = session.get_one(DagRun, run_id)
        outcome = clearing.mark(
            session, SpecCache(), run, tasks, target, reason="marked", now=T0, **kw
        )
        session.commit()
        return outcome


def _consistent(sessions: sessionmaker[Session]) -> None:
    """Every counter a clear or mark moved is what a recount gives (nothing fixed)."""
    with sessions() as session:
        assert reconcile_counters(session) == 0


def test_clearing_a_failed_task_with_downstream_reruns_them_counting_tries_on(
    sessions: sessionmaker[Session],
) -> None:
    """a -> b -> c; b (retries 1) fails both tries, c is upstream_failed, the run fails.
    Clearing b with downstream: b and c back to none, b gets its retry again, the run is
    queued; then b's try 3 succeeds, c runs, the run succeeds; b's history keeps 1-3."""
    clock = FakeClock()
    tasks = chain("a", "b", "c")
    tasks[1]["retries"] = 1
    tasks[1]["retryDelay"] = "0s"
    register(sessions, manifest("cl", tasks, **ONCE), clock.now)
    run_id = trigger(sessions, "cl", clock.now)
    executor = ScriptedExecutor({"b": [TaskState.FAILED, TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    assert _run(sessions, run_id).state == RunState.FAILED
    assert _instances(sessions, run_id) == {
        "a": ("success", 1, 0),
        "b": ("failed", 2, 1),
        "c": ("upstream_failed", 0, 0),
    }

    outcome = _clear(sessions, run_id, clock, task_ids=["b"], downstream=True)
    assert [(c.task_id, c.was) for c in outcome.cleared] == [
        ("b", "failed"),
        ("c", "upstream_failed"),
    ]
    assert (outcome.run_state_before, outcome.run_state) == ("failed", "queued")
    run = _run(sessions, run_id)
    assert (run.state, run.end_date, run.tasks_done) == (RunState.QUEUED, None, 1)
    assert _instances(sessions, run_id) == {
        "a": ("success", 1, 0),
        "b": ("none", 2, 3),
        "c": ("none", 0, 0),
    }
    _consistent(sessions)

    run_until_idle(loop)
    run = _run(sessions, run_id)
    assert (run.state, run.tasks_done) == (RunState.SUCCESS, 3)
    assert _instances(sessions, run_id)["b"][:2] == ("success", 3)
    assert _tries(sessions, run_id, "b") == [(1, "failed"), (2, "failed"), (3, "success")]
    assert [launch.task_id for launch in executor.started].count("a") == 1
    _consistent(sessions)


def test_clearing_one_task_of_a_succeeded_run_reruns_only_it(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("ok", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "ok", clock.now)
    executor = ScriptedExecutor()
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    _clear(sessions, run_id, clock, task_ids=["a"])
    assert _instances(sessions, run_id)["b"][0] == "success"
    run_until_idle(loop)
    assert _run(sessions, run_id).state == RunState.SUCCESS
    assert _instances(sessions, run_id) == {"a": ("success", 2, 1), "b": ("success", 1, 0)}


def test_only_failed_clears_failed_and_upstream_failed_only(
    sessions: sessionmaker[Session],
) -> None:
    """x fails, y (after x) is upstream_failed, z (alone) succeeds: a whole-run clear with
    only_failed takes x and y, leaves z."""
    clock = FakeClock()
    tasks = [{"name": "x"}, {"name": "y", "dependsOn": ["x"]}, {"name": "z"}]
    register(sessions, manifest("of", tasks, **ONCE), clock.now)
    run_id = trigger(sessions, "of", clock.now)
    loop = make_loop(sessions, ScriptedExecutor({"x": [TaskState.FAILED]}), clock)
    run_until_idle(loop)
    outcome = _clear(sessions, run_id, clock, only_failed=True)
    assert sorted(c.task_id for c in outcome.cleared) == ["x", "y"]
    run_until_idle(loop)
    assert _instances(sessions, run_id) == {
        "x": ("success", 2, 1),
        "y": ("success", 1, 0),
        "z": ("success", 1, 0),
    }


def test_upstream_takes_every_ancestor_and_a_dry_run_changes_nothing(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("up", chain("a", "b", "c", "d"), **ONCE), clock.now)
    run_id = trigger(sessions, "up", clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor(), clock))
    before = _instances(sessions, run_id)
    outcome = _clear(sessions, run_id, clock, task_ids=["c"], upstream=True, dry_run=True)
    assert [c.task_id for c in outcome.cleared] == ["a", "b", "c"]
    assert outcome.run_state == RunState.SUCCESS
    assert _instances(sessions, run_id) == before
    assert _run(sessions, run_id).state == RunState.SUCCESS


def test_a_running_try_that_is_cleared_restarts_only_once_it_has_stopped(
    sessions: sessionmaker[Session],
) -> None:
    """Airflow's RESTARTING: the running try keeps its slot until its replica's fence has
    killed it; then the instance is none again and try 2 starts, never beside try 1."""
    clock = FakeClock()
    register(sessions, manifest("rs", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "rs", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    assert _instances(sessions, run_id)["a"][:2] == ("running", 1)

    outcome = _clear(sessions, run_id, clock, task_ids=["a"], downstream=True)
    assert [(c.task_id, c.was) for c in outcome.cleared] == [("a", "running"), ("b", "none")]
    with sessions() as session:
        a = session.execute(
            select(TaskInstance).where(
                TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "a"
            )
        ).scalar_one()
        assert (a.state, a.stopping_since) == ("running", clock.now)

    clock.advance(seconds=loop.config.heartbeat_interval + 1)
    run_until_idle(loop)
    assert executor.killed == [(a.id, 1)]
    assert _tries(sessions, run_id, "a") == [(1, "failed"), (2, "running")]
    executor.hold.clear()
    run_until_idle(loop)
    assert _instances(sessions, run_id) == {"a": ("success", 2, 1), "b": ("success", 1, 0)}
    assert _run(sessions, run_id).state == RunState.SUCCESS
    _consistent(sessions)


def _mark_task(session: Session, run: DagRun, now: Any) -> None:
    clearing.mark(session, SpecCache(), run, ["a"], TaskState.SUCCESS, reason="marked", now=now)


def _mark_run(session: Session, run: DagRun, now: Any) -> None:
    lock_runs(session, [run.id])
    endings.mark_run(session, run.id, "failed", "marked failed", now)


def _end_run(session: Session, run: DagRun, now: Any) -> None:
    lock_runs(session, [run.id])
    endings.end_runs(session, {run.id: "past its dagrunTimeout"}, now)


@pytest.mark.parametrize("end", [_mark_task, _mark_run, _end_run])
def test_a_try_ended_under_its_process_then_cleared_has_no_next_try_until_it_stopped(
    sessions: sessionmaker[Session], end: Any
) -> None:
    """A mark (of the task or of its run) or a run's timeout ends a running try in the
    database at once, as in Airflow, while its process runs on until its replica's fence
    stops it. A clear in between must not start try 2 beside it (invariant 1; the clear
    race test found it: try 2 started 0.3 s before try 1 was killed)."""
    clock = FakeClock()
    register(sessions, manifest("ms", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "ms", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    with sessions() as session:
        end(session, session.get_one(DagRun, run_id), clock.now)
        session.commit()
    _clear(sessions, run_id, clock, task_ids=["a"], downstream=True)
    assert _instances(sessions, run_id)["a"][:2] == ("none", 1)

    run_until_idle(loop)  # before the heartbeat that fences try 1: it still runs
    assert executor.killed == []
    assert [number for number, _ in _tries(sessions, run_id, "a")] == [1]

    clock.advance(seconds=loop.config.heartbeat_interval + 1)
    run_until_idle(loop)
    assert executor.killed == [(executor.killed[0][0], 1)]
    assert _tries(sessions, run_id, "a")[1:] == [(2, "running")]
    executor.hold.clear()
    run_until_idle(loop)
    assert _instances(sessions, run_id)["a"][:2] == ("success", 2)
    assert _run(sessions, run_id).state == RunState.SUCCESS
    _consistent(sessions)


def test_a_marked_try_of_a_dead_replica_is_released_once_its_heartbeat_is_stale(
    sessions: sessionmaker[Session],
) -> None:
    """Nobody reports the stop of a try whose replica died: once its heartbeat is as old
    as a zombie's (its pod refused since the mark, so stopped), another replica lets the
    cleared task run again, and not before."""
    fast = {"zombie_threshold": 10, "heartbeat_kill_threshold": 20, "scheduler_dead_after": 10}
    clock = FakeClock()
    register(sessions, manifest("md", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "md", clock.now)
    first = ScriptedExecutor()
    first.hold.add("a")
    run_until_idle(make_loop(sessions, first, clock, **fast))
    _mark(sessions, run_id, ["a"], TaskState.SUCCESS)
    _clear(sessions, run_id, clock, task_ids=["a"], downstream=True)

    second = ScriptedExecutor()
    other = make_loop(sessions, second, clock, **fast)
    clock.advance(seconds=15)  # the first replica is dead; try 1 silent for 15 s < 20 s
    run_until_idle(other)
    assert [number for number, _ in _tries(sessions, run_id, "a")] == [1]
    clock.advance(seconds=10)
    run_until_idle(other)
    run_until_idle(other)
    assert _instances(sessions, run_id)["a"][:2] == ("success", 2)
    assert _run(sessions, run_id).state == RunState.SUCCESS
    _consistent(sessions)


def test_a_cleared_run_waits_for_room_under_max_active_runs(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("mx", chain("a"), maxActiveRuns=1, **ONCE), clock.now)
    first = trigger(sessions, "mx", clock.now)
    executor = ScriptedExecutor()
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    executor.hold.add("a")
    second = trigger(sessions, "mx", clock.now + timedelta(minutes=1))
    run_until_idle(loop)
    assert _run(sessions, second).state == RunState.RUNNING
    _clear(sessions, first, clock)
    run_until_idle(loop)
    assert _run(sessions, first).state == RunState.QUEUED
    executor.hold.clear()
    run_until_idle(loop)
    assert [_run(sessions, r).state for r in (first, second)] == [RunState.SUCCESS] * 2


def test_clearing_a_failed_past_unblocks_the_next_run(sessions: sessionmaker[Session]) -> None:
    """dependsOnPast: day -2's `a` fails, so day -1's `a` waits. Clearing day -2's `a`
    reruns it; once it succeeds, day -1's runs."""
    clock = FakeClock()
    daily = {"schedule": "@daily", "startDate": (T0 - timedelta(days=2)).isoformat()}
    tasks = [{"name": "a", "dependsOnPast": True}]
    register(sessions, manifest("dp", tasks, catchup=True, **daily), clock.now)
    executor = ScriptedExecutor({"a": [TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    with sessions() as session:
        first, second = (r.id for r in runs(session, "dp"))
    assert _run(sessions, first).state == RunState.FAILED
    assert _instances(sessions, second)["a"][0] == "none"
    executor.outcomes.clear()
    _clear(sessions, first, clock, task_ids=["a"])
    run_until_idle(loop)
    assert [_run(sessions, r).state for r in (first, second)] == [RunState.SUCCESS] * 2


def test_marking_a_failed_task_success_resumes_its_failed_downstream(
    sessions: sessionmaker[Session],
) -> None:
    """a fails, b is upstream_failed, the run fails. Marking a success clears b (Airflow's
    follow-up clear of failed downstream tasks), the run is queued, b runs, it succeeds."""
    clock = FakeClock()
    register(sessions, manifest("mk", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "mk", clock.now)
    loop = make_loop(sessions, ScriptedExecutor({"a": [TaskState.FAILED]}), clock)
    run_until_idle(loop)
    outcome = _mark(sessions, run_id, ["a"], TaskState.SUCCESS)
    assert [(c.task_id, c.was) for c in outcome.marked] == [("a", "failed")]
    assert [(c.task_id, c.was) for c in outcome.cleared] == [("b", "upstream_failed")]
    assert outcome.run_state == RunState.QUEUED
    _consistent(sessions)
    run_until_idle(loop)
    assert _instances(sessions, run_id) == {"a": ("success", 1, 0), "b": ("success", 1, 0)}
    assert _run(sessions, run_id).state == RunState.SUCCESS


def test_marking_a_failed_leaf_success_leaves_the_ended_run_as_it_ended(
    sessions: sessionmaker[Session],
) -> None:
    """As Airflow: nothing downstream to clear, so the failed run is not examined again."""
    clock = FakeClock()
    register(sessions, manifest("lf", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "lf", clock.now)
    loop = make_loop(sessions, ScriptedExecutor({"b": [TaskState.FAILED]}), clock)
    run_until_idle(loop)
    outcome = _mark(sessions, run_id, ["b"], TaskState.SUCCESS)
    assert (outcome.cleared, outcome.run_state) == ([], RunState.FAILED)
    run_until_idle(loop)
    assert _run(sessions, run_id).state == RunState.FAILED
    assert _instances(sessions, run_id)["b"][0] == "success"
    _consistent(sessions)


def test_marking_a_running_task_ends_its_try_and_the_run_decides(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("mr", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "mr", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("b")
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    _mark(sessions, run_id, ["b"], TaskState.SUCCESS)
    assert _tries(sessions, run_id, "b") == [(1, "success")]
    clock.advance(seconds=loop.config.heartbeat_interval + 1)
    run_until_idle(loop)
    assert len(executor.killed) == 1
    run = _run(sessions, run_id)
    assert (run.state, run.tasks_done) == (RunState.SUCCESS, 2)


def test_marking_failed_with_downstream_follows_airflow(sessions: sessionmaker[Session]) -> None:
    """Airflow's set_task_instance_state with downstream: a and b are set failed, then the
    failed tasks downstream of a (b, just marked) are cleared; a running run then fails b
    as upstream_failed when it examines it."""
    clock = FakeClock()
    register(sessions, manifest("mf", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "mf", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    outcome = _mark(sessions, run_id, ["a"], TaskState.FAILED, downstream=True)
    assert [(c.task_id, c.was) for c in outcome.marked] == [("a", "running"), ("b", "none")]
    assert [c.task_id for c in outcome.cleared] == ["b"]
    clock.advance(seconds=loop.config.heartbeat_interval + 1)
    run_until_idle(loop)
    assert _instances(sessions, run_id) == {"a": ("failed", 1, 0), "b": ("upstream_failed", 0, 0)}
    assert _run(sessions, run_id).state == RunState.FAILED
    _consistent(sessions)


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        (["nope"], "--task 'nope': DAG 'er' has no such task \\(its tasks: a, b\\)"),
    ],
)
def test_unknown_tasks_and_runs_are_refused_naming_them(
    sessions: sessionmaker[Session], tasks: list[str], message: str
) -> None:
    clock = FakeClock()
    register(sessions, manifest("er", chain("a", "b"), **ONCE), clock.now)
    run_id = trigger(sessions, "er", clock.now)
    with pytest.raises(ActionError, match=message):
        _clear(sessions, run_id, clock, task_ids=tasks)
    with pytest.raises(ActionError, match=message):
        _mark(sessions, run_id, tasks, TaskState.SUCCESS)
    with sessions() as session, pytest.raises(ActionError, match="has no run 'x'"):
        clearing.find_run(session, "er", "x")
