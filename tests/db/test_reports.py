"""Executor reports, zombies and reconciliation: guarded, idempotent, exactly once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import SchedulerJob, TaskInstance
from sluice.executors.base import TaskEvent
from sluice.scheduler import reconcile
from sluice.scheduler.housekeeping import plan_stale_tries
from sluice.scheduler.loop import SchedulerLoop
from sluice.scheduler.reconcile import COUNTER_FIXES, read_metric, reconcile_counters
from sluice.scheduler.results import apply_task_events
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
    ti_row,
    trigger,
)


def _start_first_task(
    sessions: sessionmaker[Session], name: str, **task: object
) -> tuple[FakeClock, ScriptedExecutor, SchedulerLoop]:
    clock = FakeClock()
    register(sessions, manifest(name, chain("a", "b", **task)), clock.now)
    trigger(sessions, name, clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock, zombie_threshold=60, zombie_check_interval=5)
    loop.tick()
    return clock, executor, loop


def test_duplicate_and_late_reports_change_nothing(sessions: sessionmaker[Session]) -> None:
    _, executor, _ = _start_first_task(sessions, "dup")
    (launch,) = executor.started
    success = TaskEvent(launch.ti_id, launch.try_number, TaskState.SUCCESS, 0)
    with sessions() as session:
        first = apply_task_events(session, [success], SpecCache(), T0)
        session.commit()
        again = apply_task_events(session, [success], SpecCache(), T0)
        late_failure = apply_task_events(
            session,
            [TaskEvent(launch.ti_id, launch.try_number, TaskState.FAILED, 1)],
            SpecCache(),
            T0,
        )
        older_try = apply_task_events(
            session,
            [TaskEvent(launch.ti_id, launch.try_number - 1, TaskState.FAILED, 1)],
            SpecCache(),
            T0,
        )
        session.commit()
        b = ti_row(session, "dup", "b")
        (run,) = runs(session, "dup")
    assert len(first) == 1
    assert again == late_failure == older_try == []
    assert (b.n_success, b.n_failed, b.state) == (1, 0, TaskState.SCHEDULED)  # decided at once
    assert run.tasks_done == 1


def test_a_report_decides_the_tasks_it_makes_ready_without_waiting_for_phase_2(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    tasks = [
        {"name": "a"},
        {"name": "b", "dependsOn": ["a"]},
        {"name": "c", "dependsOn": ["a"], "triggerRule": "all_failed"},
    ]
    register(sessions, manifest("ff", tasks), clock.now)
    for hour in range(3):
        trigger(sessions, "ff", clock.now, logical_date=T0 + timedelta(hours=hour))
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock, runs_examined_per_tick=1)  # a run per tick
    for _ in range(3):
        loop.tick()
    assert len(executor.started) == 3
    executor.hold.clear()
    loop.tick()  # phase 2 looks at one run; the three reports decide for all three
    with sessions() as session:
        states = session.execute(
            text("SELECT task_id, state FROM task_instance WHERE task_id <> 'a' ORDER BY id")
        ).all()
    assert sorted(states) == [("b", "scheduled")] * 3 + [("c", "skipped")] * 3


def test_counter_propagation_is_idempotent_per_upstream(sessions: sessionmaker[Session]) -> None:
    from sluice.scheduler.transitions import Settled, propagate

    _start_first_task(sessions, "idem")
    with sessions() as session:
        run_id = runs(session, "idem")[0].id
        for state in (TaskState.SUCCESS, TaskState.SUCCESS, TaskState.FAILED, TaskState.FAILED):
            propagate(session, [Settled(run_id, "a", ["b"], state)])
        session.commit()
        b = ti_row(session, "idem", "b")
    # The last state per upstream counts, once.
    assert (b.n_success, b.n_failed) == (0, 1)
    assert b.upstream_states == {"a": "failed"}


def test_one_propagation_moves_every_edge_of_a_batch(sessions: sessionmaker[Session]) -> None:
    from sluice.scheduler.transitions import Settled, propagate

    tasks = [{"name": n} for n in ("u1", "u2", "u3")] + [
        {"name": "join", "dependsOn": ["u1", "u2", "u3"]},
        {"name": "side", "dependsOn": ["u1"]},
    ]
    register(sessions, manifest("fan", tasks))
    trigger(sessions, "fan", T0)
    with sessions() as session:
        run_id = runs(session, "fan")[0].id
        first = propagate(
            session,
            [
                Settled(run_id, "u1", ["join", "side"], TaskState.SUCCESS),
                Settled(run_id, "u2", ["join"], TaskState.FAILED),
                Settled(run_id, "u3", ["join"], TaskState.SKIPPED),
            ],
        )
        # u2 cleared (as a backfill rerun does) and u3 reported again: one more statement.
        again = propagate(
            session,
            [
                Settled(run_id, "u2", ["join"], None),
                Settled(run_id, "u3", ["join"], TaskState.SKIPPED),
            ],
        )
        session.commit()
        join, side = ti_row(session, "fan", "join"), ti_row(session, "fan", "side")
    assert sorted(row.task_id for row in first.downstream) == ["join", "side"]
    assert [row.task_id for row in again.downstream] == ["join"]  # u3's repeat moved nothing
    assert (join.n_success, join.n_failed, join.n_skipped) == (1, 0, 1)
    assert join.upstream_states == {"u1": "success", "u3": "skipped"}
    assert (side.n_success, side.upstream_states) == (1, {"u1": "success"})


def test_zombie_of_a_dead_scheduler_is_retried_once_with_evidence(
    sessions: sessionmaker[Session],
) -> None:
    clock, executor, loop = _start_first_task(sessions, "zomb", retries=1, retryDelay="0s")
    (launch,) = executor.started
    executor.running.clear()  # the process is gone, as if its replica was killed
    with sessions() as session:
        # Hand the try to another replica that then died.
        session.execute(
            text(
                "INSERT INTO scheduler_job (id, hostname, pid, state, started_at, "
                "latest_heartbeat) VALUES (99, 'gone', 1, 'running', :t, :t)"
            ),
            {"t": clock.now},
        )
        session.execute(
            update(TaskInstance).where(TaskInstance.id == launch.ti_id).values(running_by_job_id=99)
        )
        session.commit()
    clock.advance(seconds=120)
    with sessions() as session:
        plans = [  # three replicas look at once; no executor can vouch for the try
            plan_stale_tries(
                session,
                SpecCache(),
                ScriptedExecutor(),
                clock.now,
                job_id=job,
                threshold=60,
                dead_after=30,
            )
            for job in (1, 2, 3)
        ]
        swept = [
            apply_task_events(session, p.events, SpecCache(), clock.now, evidence=p.evidence)
            for p in plans
        ]
        session.commit()
        ti = ti_row(session, "zomb", "a")
        dead = session.get_one(SchedulerJob, 99)
    assert [len(s) for s in swept] == [1, 0, 0]
    assert ti.state == TaskState.UP_FOR_RETRY
    assert ti.reason is not None
    assert ti.reason.startswith("zombie: no heartbeat since")
    assert ti.evidence is not None
    assert ti.evidence["owner_job"] == 99
    assert ti.evidence["owner_alive"] is False
    assert ti.evidence["executor_says"] == "unknown"
    assert dead.state == "running"  # the sweep judges by heartbeat age, not by this flag
    executor.hold.clear()
    run_until_idle(loop)
    with sessions() as session:
        assert task_states(session, "zomb") == {"a": "success", "b": "success"}
        assert ti_row(session, "zomb", "a").try_number == 2


def test_a_live_try_is_never_a_zombie(sessions: sessionmaker[Session]) -> None:
    clock, executor, loop = _start_first_task(sessions, "alive")
    for _ in range(30):  # 150 s of ticks: the heartbeat keeps it fresh
        clock.advance(seconds=5)
        loop.tick()
    with sessions() as session:
        assert ti_row(session, "alive", "a").state == TaskState.RUNNING
    assert len(executor.started) == 1


def test_loop_fails_its_own_lost_try_as_a_zombie(sessions: sessionmaker[Session]) -> None:
    clock, executor, loop = _start_first_task(sessions, "lost")
    executor.running.clear()  # the executor lost it without a report
    for _ in range(20):
        clock.advance(seconds=5)
        loop.tick()
    with sessions() as session:
        a = ti_row(session, "lost", "a")
        assert a.state == TaskState.FAILED
        assert a.evidence is not None
        assert "has no process" in a.evidence["verdict"]
        assert runs(session, "lost")[0].state == RunState.FAILED


def test_reconciliation_fixes_corrupted_counters_and_counts_them(
    sessions: sessionmaker[Session],
) -> None:
    _clock, executor, loop = _start_first_task(sessions, "rec")
    with sessions() as session:
        assert reconcile_counters(session) == 0
        session.execute(update(TaskInstance).where(TaskInstance.task_id == "b").values(n_success=1))
        session.commit()
        assert reconcile_counters(session) == 1
        session.commit()
        assert read_metric(session, COUNTER_FIXES) == 1
        assert ti_row(session, "rec", "b").n_success == 0
    executor.hold.clear()
    run_until_idle(loop)
    with sessions() as session:
        assert runs(session, "rec")[0].state == RunState.SUCCESS


def test_one_alert_per_failed_try_however_often_it_is_reported(
    sessions: sessionmaker[Session],
) -> None:
    from sluice.scheduler.dispatch import claim_alerts

    _, executor, _ = _start_first_task(sessions, "alert", retries=1, retryDelay="0s")
    (launch,) = executor.started
    failure = TaskEvent(launch.ti_id, launch.try_number, TaskState.FAILED, 3, "exit code 3")
    with sessions() as session:
        for _ in range(3):  # three replicas saw the same failure
            apply_task_events(session, [failure], SpecCache(), T0)
        session.commit()
        alerts = claim_alerts(session, T0, limit=10)
        session.commit()
        assert claim_alerts(session, T0, limit=10) == []
    assert alerts == [
        {"ti_id": launch.ti_id, "try_number": 1, "state": "up_for_retry", "reason": "exit code 3"}
    ]


def _held_runs(
    sessions: sessionmaker[Session], name: str, runs: int, max_active: int
) -> tuple[FakeClock, SchedulerLoop]:
    """`runs` runs of a two-task chain, each held running at its first task, after
    one tick of a loop whose reconciliation steps take one run each."""
    clock = FakeClock()
    register(sessions, manifest(name, chain("a", "b"), maxActiveRuns=max_active), clock.now)
    for minute in range(runs):
        trigger(sessions, name, clock.now, logical_date=T0 + timedelta(minutes=minute))
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(
        sessions,
        executor,
        clock,
        reconcile_tasks_per_tick=2,  # one two-task run per step
        zombie_check_interval=3600,
        zombie_threshold=7200,
        scheduler_dead_after=7200,
    )
    loop.tick()
    return clock, loop


def test_a_reconciliation_pass_reaches_every_running_run_one_step_per_tick(
    sessions: sessionmaker[Session],
) -> None:
    clock, loop = _held_runs(sessions, "many", runs=3, max_active=5)

    def wrong() -> int:
        with sessions() as session:
            return len(
                session.execute(
                    select(TaskInstance.id).where(
                        TaskInstance.task_id == "b", TaskInstance.n_success == 1
                    )
                ).all()
            )

    with sessions() as session:
        session.execute(update(TaskInstance).where(TaskInstance.task_id == "b").values(n_success=1))
        session.commit()
    clock.advance(seconds=61)
    left = []
    for _ in range(4):
        loop.tick()
        left.append(wrong())
    assert left == [2, 1, 0, 0]  # one run a tick, then the pass is over
    with sessions() as session:
        assert read_metric(session, COUNTER_FIXES) == 3


def test_a_reconciliation_pass_ends_while_new_runs_keep_arriving(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass covers the runs there when it began: one created every tick, faster
    than the pass walks (one run a step here), waits for the next pass instead of
    keeping the pass going every tick."""
    clock, loop = _held_runs(sessions, "busy", runs=2, max_active=50)
    steps: list[reconcile.Reconciled] = []
    step = reconcile.reconcile_runs

    def counted(*args: Any) -> reconcile.Reconciled:
        steps.append(step(*args))
        return steps[-1]

    monkeypatch.setattr(reconcile, "reconcile_runs", counted)
    clock.advance(seconds=61)
    created = []
    for minute in range(2, 10):
        created.append(
            trigger(sessions, "busy", clock.now, logical_date=T0 + timedelta(minutes=minute))
        )
        loop.dues.runs.tell()  # as its notification would: phase 1 starts it this tick
        loop.tick()
    with sessions() as session:
        running = [r.id for r in runs(session, "busy") if r.state == RunState.RUNNING]
    assert len(running) == 10
    began = created[0]  # the newest run when the pass began, in the first of these ticks
    assert [s.through for s in steps] == [*(i for i in running if i <= began), None]
