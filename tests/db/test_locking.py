"""Lock order and lock errors: replicas never deadlock on each other, and stuck work moves on."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import Engine, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.db import locks
from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, TaskInstance
from sluice.executors.base import TaskEvent
from sluice.scheduler.housekeeping import fail_stuck_tasks, requeue_stuck_tasks
from sluice.scheduler.results import apply_task_events
from sluice.spec.states import TaskState
from tests.support import T0, chain, manifest, register, runs, ti_row, trigger


def _two_running_runs(sessions: sessionmaker[Session]) -> list[int]:
    register(sessions, manifest("lk", chain("a", "b")))
    trigger(sessions, "lk", T0)
    trigger(sessions, "lk", T0 + timedelta(minutes=1))
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running'"))
        session.execute(
            text("UPDATE task_instance SET state = 'running', try_number = 1 WHERE task_id = 'a'")
        )
        session.commit()
        return [r.id for r in runs(session, "lk")]


def _in_threads(*work: object) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(fn: object) -> None:
        try:
            fn()  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def test_locking_runs_in_opposite_orders_deadlocks(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """The control: this is the hazard the one lock order exists to prevent."""
    run_ids = _two_running_runs(sessions)
    barrier = threading.Barrier(2, timeout=10)

    def lock(order: list[int]) -> None:
        with sessions() as session:
            for i, run_id in enumerate(order):
                session.execute(select(DagRun.id).where(DagRun.id == run_id).with_for_update())
                if i == 0:
                    barrier.wait()
            session.commit()

    errors = _in_threads(lambda: lock(run_ids), lambda: lock(run_ids[::-1]))
    assert len(errors) == 1
    assert isinstance(errors[0], OperationalError)
    assert locks.is_retryable_conflict(errors[0])


def test_reports_for_the_same_runs_in_any_order_never_deadlock(
    sessions: sessionmaker[Session],
) -> None:
    run_ids = _two_running_runs(sessions)
    with sessions() as session:
        a_tis = list(
            session.execute(
                select(TaskInstance.id)
                .where(TaskInstance.task_id == "a")
                .order_by(TaskInstance.dag_run_id)
            ).scalars()
        )
    assert len(run_ids) == len(a_tis) == 2
    barrier = threading.Barrier(2, timeout=10)

    def report(order: list[int]) -> None:
        for _ in range(20):
            barrier.wait()
            with sessions() as session:
                events = [TaskEvent(ti, 1, TaskState.SUCCESS, 0) for ti in order]
                apply_task_events(session, events, SpecCache(), T0)
                session.rollback()  # repeat the same contention

    errors = _in_threads(lambda: report(a_tis), lambda: report(a_tis[::-1]))
    assert errors == []


def test_stuck_queued_is_requeued_then_failed_with_a_reason(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, manifest("stuck", chain("a")))
    trigger(sessions, "stuck", T0)
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running'"))
        session.execute(
            update(TaskInstance).values(state=TaskState.QUEUED, try_number=1, queued_at=T0)
        )
        session.commit()
    later = T0 + timedelta(minutes=11)
    for _ in range(2):
        with sessions() as session:
            assert (
                fail_stuck_tasks(session, SpecCache(), later, queued_timeout=600, max_requeues=2)
                == []
            )
            assert requeue_stuck_tasks(session, later, queued_timeout=600, max_requeues=2) == 1
            # the critical section queues it again
            session.execute(
                update(TaskInstance)
                .where(TaskInstance.state == TaskState.SCHEDULED)
                .values(
                    state=TaskState.QUEUED, try_number=TaskInstance.try_number + 1, queued_at=T0
                )
            )
            session.commit()
    with sessions() as session:
        assert requeue_stuck_tasks(session, later, queued_timeout=600, max_requeues=2) == 0
        failed = fail_stuck_tasks(session, SpecCache(), later, queued_timeout=600, max_requeues=2)
        session.commit()
        ti = ti_row(session, "stuck", "a")
    assert len(failed) == 1
    assert ti.state == TaskState.FAILED
    assert ti.requeue_count == 2
    assert ti.reason is not None
    assert ti.reason.startswith("stuck in queued")


def test_recently_queued_is_left_alone(sessions: sessionmaker[Session]) -> None:
    register(sessions, manifest("fresh", chain("a")))
    trigger(sessions, "fresh", T0)
    with sessions() as session:
        session.execute(update(TaskInstance).values(state=TaskState.QUEUED, queued_at=T0))
        session.commit()
        now = T0 + timedelta(minutes=5)
        assert requeue_stuck_tasks(session, now, queued_timeout=600, max_requeues=2) == 0


def test_a_run_whose_spec_cannot_be_loaded_fails_and_the_others_go_on(
    sessions: sessionmaker[Session],
) -> None:
    """Every run ends: a run whose DAG version no longer parses cannot decide anything,
    so it fails at once, its tasks skipped with the reason (it used to stay `running`
    for ever); the other DAG's run is not held back."""
    from tests.support import (
        FakeClock,
        ScriptedExecutor,
        corrupt_runs_version,
        make_loop,
        task_states,
    )

    clock = FakeClock()
    register(sessions, manifest("good", chain("a", "b")), clock.now)
    register(sessions, manifest("bad", chain("a")), clock.now)
    trigger(sessions, "good", clock.now)
    trigger(sessions, "bad", clock.now)
    corrupt_runs_version(sessions, "bad")
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    for _ in range(6):
        report = loop.tick()
        assert not report.errors  # isolated inside the phase, not a failed phase
    with sessions() as session:
        assert [r.state for r in runs(session, "good")] == ["success"]
        assert [r.state for r in runs(session, "bad")] == ["failed"]
        assert task_states(session, "bad") == {"a": "skipped"}
        reason = ti_row(session, "bad", "a").reason
        version = session.execute(
            text("SELECT id FROM dag_version WHERE spec_hash = 'corrupt'")
        ).scalar_one()
    assert reason == (
        f"DAG 'bad' version 99 (dag_version.id {version}) cannot be loaded: spec.tasks: must be"
        " a list (e.g. [a, b]), got 'not a list'; apply the DAG's manifest again to store a"
        " valid version; this run cannot go on: trigger a new run once it is"
    )


def test_a_try_whose_spec_cannot_be_loaded_fails_and_the_batch_starts(
    sessions: sessionmaker[Session],
) -> None:
    from sluice.scheduler.critical import queue_schedulable_task_instances
    from sluice.scheduler.dispatch import claim_task_starts
    from sluice.scheduler.examine import examine_running_runs

    register(sessions, manifest("fine", chain("a")))
    register(sessions, manifest("broken", chain("a", "b", retries=3)))
    trigger(sessions, "fine", T0)
    trigger(sessions, "broken", T0)
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running', start_date = :t"), {"t": T0})
        examine_running_runs(session, SpecCache(), T0, 10)
        result = queue_schedulable_task_instances(session, T0, job_id=None, max_tis=10)
        assert len(result.queued) == 2
        # The stored spec of one run's version stops parsing while its try waits in the outbox.
        session.execute(
            text(
                'UPDATE dag_version SET spec = \'{"tasks": "not a list"}\''
                " WHERE dag_id = 'broken'"
            )
        )
        session.commit()
    with sessions() as session:
        launches = claim_task_starts(
            session, SpecCache(), T0, job_id=None, executor_name="x", limit=10
        )
        session.commit()
    assert [launch.dag_id for launch in launches] == ["fine"]
    with sessions() as session:
        a = ti_row(session, "broken", "a")
        assert a.state == TaskState.FAILED  # retries left, but a retry would fail the same way
        assert a.reason is not None
        assert a.reason.startswith("the task's spec could not be loaded")
        assert ti_row(session, "broken", "b").n_failed == 1  # settled like any failure
        assert (
            session.execute(
                text("SELECT count(*) FROM outbox WHERE kind = 'start_task'")
            ).scalar_one()
            == 0
        )
        assert (
            session.execute(text("SELECT count(*) FROM outbox WHERE kind = 'alert'")).scalar_one()
            == 1
        )


def test_an_error_without_a_message_is_recorded_by_its_type() -> None:
    from sluice.scheduler.loop import SchedulerLoop, TickReport

    report = TickReport()
    SchedulerLoop._report_error("examine", RuntimeError(), report)
    assert report.errors == ["examine: RuntimeError"]


class _PgError(Exception):
    def __init__(self, pgcode: str) -> None:
        super().__init__(f"pgcode {pgcode}")
        self.pgcode = pgcode


def test_the_loop_retries_a_deadlock_and_skips_a_busy_lock(
    sessions: sessionmaker[Session],
) -> None:
    from sqlalchemy.exc import DBAPIError

    from tests.support import FakeClock, ScriptedExecutor, make_loop

    loop = make_loop(sessions, ScriptedExecutor(), FakeClock())
    attempts: list[int] = []

    def deadlocks_once(session: Session) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise DBAPIError("UPDATE ...", {}, _PgError(locks.DEADLOCK_DETECTED))
        return "done"

    assert loop._transaction("test", deadlocks_once, "default") == "done"
    assert len(attempts) == 2

    def busy(session: Session) -> str:
        raise DBAPIError("SELECT ... NOWAIT", {}, _PgError(locks.LOCK_NOT_AVAILABLE))

    assert loop._transaction("test", busy, "skipped") == "skipped"

    def broken(session: Session) -> str:
        raise ValueError("a bug")

    from sluice.scheduler.loop import TickReport

    report = TickReport()
    assert loop._transaction("test", broken, "default", report) == "default"
    assert report.errors == ["test: a bug"]


def test_a_requeued_try_ends_in_task_try(sessions: sessionmaker[Session]) -> None:
    """A try requeued after the queued timeout is over: its task_try row ends (state
    `scheduled`, as its instance, with the reason); the next queueing is a new try."""
    from sluice.db.models import TaskTry
    from sluice.scheduler.critical import queue_schedulable_task_instances

    register(sessions, manifest("rq", chain("a")))
    trigger(sessions, "rq", T0)
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running'"))
        session.execute(update(TaskInstance).values(state=TaskState.SCHEDULED))
        queue_schedulable_task_instances(session, T0, job_id=None, max_tis=10)
        session.commit()
    later = T0 + timedelta(minutes=11)
    with sessions() as session:
        assert requeue_stuck_tasks(session, later, queued_timeout=600, max_requeues=2) == 1
        queue_schedulable_task_instances(session, later, job_id=None, max_tis=10)
        session.commit()
        tries = session.execute(
            select(TaskTry.try_number, TaskTry.state, TaskTry.end_date, TaskTry.reason).order_by(
                TaskTry.try_number
            )
        ).all()
    assert [tuple(t[:3]) for t in tries] == [(1, "scheduled", later), (2, "queued", None)]
    assert tries[0].reason == (
        "requeued: queued for over 600s (requeue 1 of at most 2); "
        "check that scheduler replicas are running"
    )
