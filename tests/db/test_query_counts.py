"""The loop's hot paths issue a fixed number of statements, whatever the batch size (no N+1)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.executors.base import TaskEvent
from sluice.scheduler.dispatch import claim_task_starts
from sluice.scheduler.examine import examine_running_runs
from sluice.scheduler.results import apply_task_events
from sluice.spec.states import TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    count_queries,
    make_loop,
    manifest,
    register,
    trigger,
)


def _runs_of_wide_dag(sessions: sessionmaker[Session], name: str, runs: int, width: int) -> None:
    tasks = [{"name": "root"}] + [{"name": f"t{i}", "dependsOn": ["root"]} for i in range(width)]
    register(sessions, manifest(name, tasks, maxActiveRuns=100, maxActiveTasks=10_000))
    for i in range(runs):
        trigger(sessions, name, T0 + timedelta(minutes=i))
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running', start_date = :t"), {"t": T0})
        session.commit()


def _examine(sessions: sessionmaker[Session], specs: SpecCache, limit: int = 100) -> None:
    with sessions() as session:
        examine_running_runs(session, specs, T0, limit)
        session.commit()


def test_examine_costs_the_same_for_one_run_or_many(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    specs = SpecCache()
    counts = []
    for name, runs in (("one", 1), ("many", 30)):
        _runs_of_wide_dag(sessions, name, runs, width=3)
        _examine(sessions, specs)  # warm the spec cache and settle earlier runs
        with sessions() as session:
            session.execute(text("UPDATE dag_run SET last_scheduling_decision = NULL"))
            session.execute(text("UPDATE task_instance SET needs_eval = true, state = 'none'"))
            session.commit()
        with count_queries(engine) as statements:
            _examine(sessions, specs)
        counts.append(len(statements))
    assert counts[0] == counts[1]


def test_blocked_tasks_are_not_read_at_all(sessions: sessionmaker[Session], engine: Engine) -> None:
    _runs_of_wide_dag(sessions, "blocked", runs=1, width=500)
    specs = SpecCache()
    _examine(sessions, specs)  # schedules `root`; the 500 others wait for it
    with count_queries(engine) as statements:
        _examine(sessions, specs)
    evaluations = [
        s for s in statements if s.lstrip().startswith("SELECT") and "n_upstream_failed" in s
    ]
    assert len(evaluations) == 1  # one lookup for changed rows, which finds none
    with sessions() as session:
        waiting = session.execute(
            text("SELECT count(*) FROM task_instance WHERE needs_eval")
        ).scalar_one()
    assert waiting == 0


def test_reports_and_dispatch_cost_the_same_for_one_or_fifty(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    clock = FakeClock()
    specs = SpecCache()
    apply_counts, dispatch_counts = [], []
    for name, width in (("r1", 1), ("r50", 50)):
        tasks = [{"name": f"t{i}"} for i in range(width)]
        register(sessions, manifest(name, tasks, maxActiveTasks=100), clock.now)
        trigger(sessions, name, clock.now)
        executor = ScriptedExecutor()
        loop = make_loop(sessions, executor, clock)
        loop.tick()
        # The tick ran every try; put them back in `queued` with their outbox rows.
        with sessions() as session:
            session.execute(
                text(
                    "UPDATE task_instance SET state = 'queued' WHERE dag_id = :d;"
                    "INSERT INTO outbox (kind, payload, created_at, not_before, attempts) "
                    "SELECT 'start_task', jsonb_build_object('ti_id', id, 'try_number', "
                    "try_number), :t, :t, 0 FROM task_instance WHERE dag_id = :d"
                ),
                {"d": name, "t": clock.now},
            )
            session.commit()
        with count_queries(engine) as statements, sessions() as session:
            launches = claim_task_starts(
                session, specs, clock.now, job_id=None, executor_name="x", limit=512
            )
            session.commit()
        dispatch_counts.append(len(statements))
        assert len(launches) == width
        events = [TaskEvent(t.ti_id, t.try_number, TaskState.SUCCESS, 0) for t in launches]
        with count_queries(engine) as statements, sessions() as session:
            applied = apply_task_events(session, events, specs, clock.now)
            session.commit()
        apply_counts.append(len(statements))
        assert len(applied) == width
    assert dispatch_counts[0] == dispatch_counts[1]
    assert apply_counts[0] == apply_counts[1]


def test_a_tick_without_bad_rows_sets_no_savepoints(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    clock = FakeClock()
    register(sessions, manifest("sp", [{"name": "a"}, {"name": "b", "dependsOn": ["a"]}]))
    trigger(sessions, "sp", clock.now)
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    with count_queries(engine) as statements:
        for _ in range(3):  # examine, queue, dispatch and reports all have work
            assert loop.tick().busy
    assert not [s for s in statements if s.lstrip().upper().startswith("SAVEPOINT")]


def test_alerts_are_looked_for_after_a_failure_and_otherwise_once_per_interval(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    clock = FakeClock()
    register(sessions, manifest("al", [{"name": "a"}]))
    trigger(sessions, "al", clock.now)
    loop = make_loop(sessions, ScriptedExecutor({"a": [TaskState.FAILED]}), clock)
    loop.tick()  # the first look; then `a` runs and fails, which writes its alert
    with count_queries(engine) as statements:
        loop.tick()  # this replica failed a try: it looks again at once, and takes the alert
    assert sum("RETURNING id, payload" in s for s in statements) == 1
    with sessions() as session:
        assert session.execute(text("SELECT count(*) FROM outbox")).scalar_one() == 0
    with count_queries(engine) as statements:
        loop.tick()
        loop.tick()
    assert sum("RETURNING id, payload" in s for s in statements) == 0  # nothing new, same second
    clock.advance(seconds=1)
    with count_queries(engine) as statements:
        loop.tick()
    assert sum("RETURNING id, payload" in s for s in statements) == 1  # once per tick interval


def test_depends_on_past_costs_the_same_for_one_task_or_many(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """A run whose dependsOnPast (and waitForDownstream) tasks all become ready: their
    previous instances are checked in one statement, however many there are."""
    specs = SpecCache()
    counts = []
    for name, width in (("p1", 1), ("p20", 20)):
        tasks: list[dict[str, object]] = []
        for i in range(width):
            tasks += [
                {"name": f"t{i}", "dependsOnPast": True},
                {"name": f"w{i}", "waitForDownstream": True},
                {"name": f"c{i}", "dependsOn": [f"w{i}"]},
            ]
        register(sessions, manifest(name, tasks, maxActiveRuns=2, maxActiveTasks=10_000))
        for hour in range(2):
            trigger(sessions, name, T0 + timedelta(hours=hour))
        with sessions() as session:
            # The first run is done; the second has just started, all its roots to decide.
            session.execute(
                text(
                    "UPDATE dag_run SET state = 'running', start_date = :t WHERE dag_id = :d;"
                    "UPDATE task_instance SET state = 'success', needs_eval = false"
                    " WHERE dag_id = :d AND logical_date = :t"
                ),
                {"d": name, "t": T0},
            )
            session.commit()
        with count_queries(engine) as statements:
            _examine(sessions, specs)
        counts.append(len(statements))
        with sessions() as session:
            scheduled = session.execute(
                text(
                    "SELECT count(*) FROM task_instance WHERE dag_id = :d AND state = 'scheduled'"
                ),
                {"d": name},
            ).scalar_one()
        assert scheduled == 2 * width  # every t and w of the second run: their past allows
    assert counts[0] == counts[1]


def test_starting_runs_costs_two_statements_for_one_dag_or_ten(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Phase 1's start: one statement locks the DAGs that can start a run, one starts them."""
    from sluice.scheduler.runs import start_queued_runs

    counts = []
    for names in (["s0"], [f"s{i}" for i in range(1, 11)]):
        for name in names:
            register(sessions, manifest(name, [{"name": "a"}]))
            trigger(sessions, name, T0)
        with count_queries(engine) as statements, sessions() as session:
            assert start_queued_runs(session, T0, 10) == len(names)
            session.commit()
        counts.append(len(statements))
    assert counts == [2, 2]
