"""Phase 2 in the loop: trigger rules, retries and backoff, dependsOnPast, run timeouts."""

from __future__ import annotations

import itertools
from datetime import timedelta

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import TaskInstance, TaskTry
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.states import Reprocess, RunState, TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    run_until_runs_end,
    runs,
    task_states,
    ti_row,
    trigger,
)

F, S, K = TaskState.FAILED, TaskState.SUCCESS, TaskState.SKIPPED


def _run_once(
    sessions: sessionmaker[Session],
    name: str,
    tasks: list[dict[str, object]],
    outcomes: dict[str, list[TaskState]],
    **spec: object,
) -> tuple[RunState, dict[str, str], ScriptedExecutor]:
    clock = FakeClock()
    register(sessions, manifest(name, tasks, **spec), clock.now)
    trigger(sessions, name, clock.now)
    executor = ScriptedExecutor(outcomes)  # type: ignore[arg-type]
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions() as session:
        (run,) = runs(session, name)
        return RunState(run.state), task_states(session, name), executor


def test_cleanup_with_all_done_runs_after_a_failure_and_the_run_fails(
    sessions: sessionmaker[Session],
) -> None:
    tasks = [
        *chain("extract", "load"),
        {"name": "cleanup", "dependsOn": ["load"], "triggerRule": "all_done"},
    ]
    state, states, _ = _run_once(sessions, "cl", tasks, {"extract": [F]})
    assert states == {"extract": "failed", "load": "upstream_failed", "cleanup": "success"}
    # cleanup (the only leaf) succeeded, but Airflow fails a run when... a leaf failed;
    # here load is not a leaf, so the run's fate is its leaf's: success.
    assert state == RunState.SUCCESS


def test_skip_propagates_and_a_none_failed_min_one_success_join_runs(
    sessions: sessionmaker[Session],
) -> None:
    tasks = [
        {"name": "branch-a"},
        {"name": "branch-b"},
        {"name": "after-a", "dependsOn": ["branch-a"]},
        {"name": "after-b", "dependsOn": ["branch-b"]},
        {
            "name": "join",
            "dependsOn": ["after-a", "after-b"],
            "triggerRule": "none_failed_min_one_success",
        },
    ]
    state, states, _ = _run_once(sessions, "br", tasks, {"branch-b": [K]})
    assert states == {
        "branch-a": "success",
        "branch-b": "skipped",
        "after-a": "success",
        "after-b": "skipped",
        "join": "success",
    }
    assert state == RunState.SUCCESS


def test_one_failed_handler_runs_and_one_success_handler_is_skipped(
    sessions: sessionmaker[Session],
) -> None:
    tasks = [
        {"name": "a"},
        {"name": "b"},
        {"name": "on-failure", "dependsOn": ["a", "b"], "triggerRule": "one_failed"},
        {"name": "on-all-failed", "dependsOn": ["a", "b"], "triggerRule": "all_failed"},
    ]
    _, states, _ = _run_once(sessions, "of", tasks, {"a": [F]})
    assert states["on-failure"] == "success"
    assert states["on-all-failed"] == "skipped"


def test_retries_wait_for_the_backoff_delay(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    register(
        sessions,
        manifest(
            "rt",
            [
                {
                    "name": "flaky",
                    "retries": 3,
                    "retryDelay": "10s",
                    "retryExponentialBackoff": True,
                    "maxRetryDelay": "15s",
                }
            ],
        ),
        clock.now,
    )
    trigger(sessions, "rt", clock.now)
    executor = ScriptedExecutor({"flaky": [F, F, F, S]})
    loop = make_loop(sessions, executor, clock, tick_interval=1.0)
    run_until_runs_end(loop, sessions)
    with sessions() as session:
        ti = ti_row(session, "rt", "flaky")
        assert ti.state == TaskState.SUCCESS
        assert ti.try_number == 4
        tries = (
            session.execute(
                select(TaskTry)
                .where(TaskTry.task_instance_id == ti.id)
                .order_by(TaskTry.try_number)
            )
            .scalars()
            .all()
        )
    assert [t.state for t in tries] == ["failed", "failed", "failed", "success"]
    gaps = [
        (later.queued_at - earlier.end_date).total_seconds()  # type: ignore[operator]
        for earlier, later in itertools.pairwise(tries)
    ]
    # 10s, then 20s capped at 15s, then 15s; each gap is at least the delay, at most a tick more.
    for gap, delay in zip(gaps, (10, 15, 15), strict=True):
        assert delay <= gap <= delay + 2


def test_retries_exhausted_fail_the_task(sessions: sessionmaker[Session]) -> None:
    state, states, executor = _run_once(
        sessions, "ex", [{"name": "t", "retries": 1, "retryDelay": "0s"}], {"t": [F, F]}
    )
    assert states == {"t": "failed"}
    assert state == RunState.FAILED
    assert [launch.try_number for launch in executor.started] == [1, 2]


def _two_hourly_intervals_ago(
    sessions: sessionmaker[Session], name: str, tasks: list[dict[str, object]], **spec: object
) -> FakeClock:
    """An hourly DAG with catchup from T0, registered two hours later: two runs are due."""
    clock = FakeClock(T0 + timedelta(hours=2))
    register(
        sessions,
        manifest(name, tasks, schedule="@hourly", startDate=T0.isoformat(), catchup=True, **spec),
        clock.now,
    )
    return clock


def _two_runs_of_a_task_on_its_past(
    sessions: sessionmaker[Session], name: str
) -> tuple[ScriptedExecutor, SchedulerLoop]:
    """Two hourly runs of one `dependsOnPast` task, both allowed to run; tries are held."""
    clock = _two_hourly_intervals_ago(
        sessions, name, [{"name": "t", "dependsOnPast": True}], maxActiveRuns=2
    )
    executor = ScriptedExecutor()
    executor.hold.add("t")
    return executor, make_loop(sessions, executor, clock)


def test_depends_on_past_waits_for_the_previous_run(sessions: sessionmaker[Session]) -> None:
    executor, loop = _two_runs_of_a_task_on_its_past(sessions, "dp")
    for _ in range(5):
        loop.tick()
    # Both runs are running, but only the first run's task may start.
    assert [launch.run_id[-25:-15] for launch in executor.started] == ["2026-12-01"]
    assert len(executor.started) == 1
    executor.hold.clear()
    run_until_idle(loop)
    with sessions() as session:
        assert [r.state for r in runs(session, "dp")] == [RunState.SUCCESS] * 2
    assert len(executor.started) == 2


def test_depends_on_past_blocks_after_a_failure(sessions: sessionmaker[Session]) -> None:
    clock = _two_hourly_intervals_ago(sessions, "dpf", [{"name": "t", "dependsOnPast": True}])
    executor = ScriptedExecutor({"t": [F]})
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions() as session:
        first, second = runs(session, "dpf")
        assert first.state == RunState.FAILED
        assert second.state == RunState.RUNNING  # its task waits for a past that failed
    assert len(executor.started) == 1


def test_wait_for_downstream_waits_for_the_previous_runs_children(
    sessions: sessionmaker[Session],
) -> None:
    tasks = [{"name": "a", "waitForDownstream": True}, {"name": "b", "dependsOn": ["a"]}]
    clock = _two_hourly_intervals_ago(sessions, "wfd", tasks, maxActiveRuns=2)
    executor = ScriptedExecutor()
    executor.hold.add("b")
    loop = make_loop(sessions, executor, clock)
    for _ in range(6):
        loop.tick()
    started = [(launch.task_id, launch.run_id[-14:-9]) for launch in executor.started]
    assert started == [("a", "00:00"), ("b", "00:00")]  # run 2's `a` waits for run 1's `b`
    executor.hold.clear()
    run_until_idle(loop)
    assert len(executor.started) == 4


def test_dagrun_timeout_fails_the_run_and_skips_unfinished_tasks(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("to", chain("a", "b"), dagrunTimeout="10m"), clock.now)
    trigger(sessions, "to", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    loop.tick()
    loop.tick()
    clock.advance(minutes=11)
    loop.tick()
    loop.tick()
    with sessions() as session:
        (run,) = runs(session, "to")
        assert run.state == RunState.FAILED
        assert task_states(session, "to") == {"a": "skipped", "b": "skipped"}
    # The try that was still running is fenced off and killed.
    assert executor.killed == [executor.started[0].key]


def test_manual_run_carries_its_conf_to_the_task(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    register(sessions, manifest("conf", chain("a")), clock.now)
    trigger(sessions, "conf", clock.now, conf={"table": "users"})
    executor = ScriptedExecutor()
    run_until_idle(make_loop(sessions, executor, clock))
    (launch,) = executor.started
    assert launch.conf == {"table": "users"}
    assert launch.context_env()["SLUICE_CONF"] == '{"table": "users"}'
    assert launch.context_env()["SLUICE_RUN_ID"].startswith("manual__")


def test_a_launch_carries_its_dags_namespace(sessions: sessionmaker[Session]) -> None:
    """The Job executor runs a try in its DAG's namespace: the claim reads it with the run
    (None for a DAG registered without one, from the CLI)."""
    clock = FakeClock()
    register(sessions, manifest("tenant", chain("a")), clock.now)
    register(sessions, manifest("cli", chain("a")), clock.now)
    with sessions() as session:
        session.execute(text("UPDATE dag SET namespace = 'team-a' WHERE dag_id = 'tenant'"))
        session.commit()
    trigger(sessions, "tenant", clock.now)
    trigger(sessions, "cli", clock.now)
    executor = ScriptedExecutor()
    run_until_idle(make_loop(sessions, executor, clock))
    assert {launch.dag_id: launch.namespace for launch in executor.started} == {
        "tenant": "team-a",
        "cli": None,
    }


def test_running_tries_are_heartbeated_once_per_interval_and_new_ones_at_once(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("hb", [{"name": "a"}, {"name": "b"}, {"name": "c"}]), clock.now)
    trigger(sessions, "hb", clock.now)
    executor = ScriptedExecutor()
    executor.hold.update({"a", "b", "c"})
    loop = make_loop(sessions, executor, clock, heartbeat_interval=5.0)
    loop.tick()

    def beats() -> dict[str, tuple[object, str | None]]:
        with sessions() as session:
            return {
                t: (
                    ti_row(session, "hb", t).last_heartbeat_at,
                    ti_row(session, "hb", t).external_id,
                )
                for t in ("a", "b", "c")
            }

    started = beats()
    assert all(ext is not None for _, ext in started.values())  # recorded with the first tick
    clock.advance(seconds=2)
    loop.tick()
    assert beats() == started  # within the interval: no write per tick
    clock.advance(seconds=3)
    loop.tick()
    assert {t: beat for t, (beat, _) in beats().items()} == dict.fromkeys(started, clock.now)


def test_a_task_held_back_by_its_past_leaves_its_run_quiet_until_the_past_settles(
    sessions: sessionmaker[Session],
) -> None:
    from sluice.scheduler.reconcile import reconcile_counters

    executor, loop = _two_runs_of_a_task_on_its_past(sessions, "dq")
    for _ in range(4):
        loop.tick()
    with sessions() as session:
        first, second = _instances(session, "dq")
    assert first.state == TaskState.RUNNING
    # Held back, but not looked at again on every tick: its run has no work.
    assert (second.state, second.needs_eval) == (TaskState.NONE, False)
    assert loop.tick().runs_examined == 0
    # The reconciliation looks at it again once in a while, whatever happened.
    with sessions() as session:
        reconcile_counters(session)
        session.commit()
        assert _instances(session, "dq")[1].needs_eval
    loop.tick()  # looked at, still held back
    executor.hold.clear()
    run_until_idle(loop)  # the first try's success wakes the second run's task
    assert len(executor.started) == 2


def _instances(session: Session, dag_id: str) -> list[TaskInstance]:
    return list(
        session.execute(
            select(TaskInstance)
            .where(TaskInstance.dag_id == dag_id)
            .order_by(TaskInstance.logical_date)
        ).scalars()
    )


def test_one_statement_decides_every_kind_of_past(sessions: sessionmaker[Session]) -> None:
    """`past.allowed_by_past` over instances with different pasts at once: no previous
    instance, a previous success, a previous failure, and waitForDownstream with the
    previous instance's child done or not."""
    from sluice.scheduler.past import allowed_by_past

    tasks = [
        {"name": "ok", "dependsOnPast": True},
        {"name": "bad", "dependsOnPast": True},
        {"name": "new", "dependsOnPast": True},
        {"name": "w-done", "waitForDownstream": True},
        {"name": "w-done-child", "dependsOn": ["w-done"]},
        {"name": "w-open", "waitForDownstream": True},
        {"name": "w-open-child", "dependsOn": ["w-open"]},
    ]
    register(sessions, manifest("past", tasks))
    trigger(sessions, "past", T0)
    trigger(sessions, "past", T0 + timedelta(hours=1))
    with sessions() as session:
        session.execute(
            text(
                "UPDATE task_instance SET state = CASE task_id WHEN 'bad' THEN 'failed'"
                " WHEN 'w-open-child' THEN 'running' ELSE 'success' END"
                " WHERE logical_date = :t;"
                # `new` was added to the DAG after the first run: it has no past.
                "DELETE FROM task_instance WHERE task_id = 'new' AND logical_date = :t"
            ),
            {"t": T0},
        )
        second = dict(
            session.execute(
                text("SELECT task_id, id FROM task_instance WHERE logical_date > :t"), {"t": T0}
            ).all()
        )
        waiting_on_past = ["ok", "bad", "new", "w-done", "w-open"]
        allowed = allowed_by_past(session, [second[name] for name in waiting_on_past])
    assert {name for name in waiting_on_past if second[name] in allowed} == {"ok", "new", "w-done"}


def test_a_run_timeout_ends_the_open_tries_too(sessions: sessionmaker[Session]) -> None:
    """The running and the queued try of a timed-out run end in task_try as their
    instances do: skipped, at the timeout, with the reason."""
    from sluice.db.dags import SpecCache
    from sluice.scheduler.critical import queue_schedulable_task_instances
    from sluice.scheduler.dispatch import claim_task_starts
    from sluice.scheduler.examine import examine_running_runs

    register(sessions, manifest("tt", [{"name": "a"}, {"name": "b"}], dagrunTimeout="10m"))
    trigger(sessions, "tt", T0)
    specs = SpecCache()
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running', start_date = :t"), {"t": T0})
        examine_running_runs(session, specs, T0, 10)
        assert len(queue_schedulable_task_instances(session, T0, job_id=None, max_tis=10).queued)
        session.commit()
    with sessions() as session:
        (launch,) = claim_task_starts(
            session, specs, T0, job_id=None, executor_name="x", limit=1
        )  # one try running, the other still queued
        session.commit()
    later = T0 + timedelta(minutes=11)
    with sessions() as session:
        stats = examine_running_runs(session, specs, later, 10)
        session.commit()
        assert stats.finished_runs == {runs(session, "tt")[0].id: RunState.FAILED}
        tries = {
            row.task_id: (row.state, row.end_date, row.reason)
            for row in session.execute(
                select(TaskInstance.task_id, TaskTry.state, TaskTry.end_date, TaskTry.reason).join(
                    TaskTry, TaskTry.task_instance_id == TaskInstance.id
                )
            )
        }
    assert launch.task_id in tries
    assert tries == dict.fromkeys(("a", "b"), (TaskState.SKIPPED, later, "dagrun timeout"))


def test_a_task_held_back_by_a_failed_past_runs_once_the_past_is_rerun(
    sessions: sessionmaker[Session],
) -> None:
    """As in Airflow, a failed past holds the next run's task until that past succeeds:
    here a backfill with rerun-failed re-runs it, and the waiting task is woken."""
    from sluice.db.dags import SpecCache
    from sluice.scheduler.backfill import create_backfill

    clock = _two_hourly_intervals_ago(sessions, "dpr", [{"name": "t", "dependsOnPast": True}])
    executor = ScriptedExecutor({"t": [F]})
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    with sessions() as session:
        assert [r.state for r in runs(session, "dpr")] == [RunState.FAILED, RunState.RUNNING]
        create_backfill(session, SpecCache(), "dpr", T0, T0, clock.now, reprocess=Reprocess.FAILED)
        session.commit()
    executor.outcomes.clear()
    run_until_idle(loop)
    with sessions() as session:
        assert [r.state for r in runs(session, "dpr")] == [RunState.SUCCESS] * 2
