"""Phase 1 under a burst: many DAGs due together (a minute's runs on a one-minute cron).

Under the defaults the burst's runs are created, and their first tasks queued, in
one tick; a phase-1 tick that spends its time budget stops between batches and
the next tick goes on, with nothing lost or made twice; `runs_created_per_tick`
still caps a tick (Airflow's 10 means 10). Time is the loop's injected clock,
never a sleep, and nothing here is timed (speed is the benchmarks').
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from bench.arrival import copy_dag
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, TaskInstance
from sluice.scheduler.runs import create_and_start_runs
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    count_queries,
    make_loop,
    manifest,
    register,
)

HOURLY = {"schedule": "@hourly", "startDate": "2026-12-01T00:00:00Z", "catchup": True}
# The first interval, 00:00-01:00, has ended: one run due per DAG.
DUE = T0 + timedelta(hours=1, minutes=30)


def _dags(sessions: sessionmaker[Session], count: int, **spec: object) -> list[str]:
    """`count` DAGs of a three-task chain, each with one run due at DUE (copies of the
    first, as the benchmark registers its thousands)."""
    names = [f"burst-{i:04d}" for i in range(count)]
    register(sessions, manifest(names[0], chain("a", "b", "c"), **{**HOURLY, **spec}))
    with sessions() as session:
        copy_dag(session, names[0], names[1:])
        # Slots for every first task (the default pool has 128).
        session.execute(text("UPDATE slot_pool SET slots = 10000 WHERE name = 'default'"))
        session.commit()
    return names


def _runs_per_dag(sessions: sessionmaker[Session]) -> Counter[str]:
    with sessions() as session:
        return Counter(session.execute(select(DagRun.dag_id)).scalars())


def _first_tasks_queued(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(
            session.execute(
                select(func.count())
                .select_from(TaskInstance)
                .where(TaskInstance.task_id == "a", TaskInstance.try_number >= 1)
            ).scalar_one()
        )


def test_a_burst_is_created_and_its_first_tasks_queued_in_one_tick(
    sessions: sessionmaker[Session],
) -> None:
    names = _dags(sessions, 400)
    clock = FakeClock(DUE)
    loop = make_loop(sessions, ScriptedExecutor(), clock)  # Sluice's defaults
    report = loop.tick()
    assert not report.errors, report.errors
    assert (report.runs_created, report.runs_started) == (400, 400)
    assert report.tasks_queued == 400  # every run's first task, in the same tick
    assert _runs_per_dag(sessions) == Counter(dict.fromkeys(names, 1))
    assert _first_tasks_queued(sessions) == 400


def test_a_started_run_s_first_tasks_wait_for_the_critical_section_not_for_phase_2(
    sessions: sessionmaker[Session],
) -> None:
    """Phase 2 examines 20 runs a tick; the first tasks of all 100 runs are queued in
    the tick that started them."""
    _dags(sessions, 100)
    loop = make_loop(sessions, ScriptedExecutor(), FakeClock(DUE), runs_examined_per_tick=20)
    report = loop.tick()
    assert (report.runs_started, report.tasks_queued) == (100, 100)


class SteppingClock(FakeClock):
    """A clock that moves `step` on every reading: each phase-1 batch takes time."""

    def __init__(self, start: datetime, step: timedelta) -> None:
        super().__init__(start)
        self.step = step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


def test_the_time_budget_ends_a_phase_1_tick_and_the_next_tick_goes_on(
    sessions: sessionmaker[Session],
) -> None:
    names = _dags(sessions, 230)
    clock = SteppingClock(DUE, timedelta(seconds=1))  # past the 0.5 s budget after a batch
    loop = make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_batch=50)
    created = []
    for _ in range(6):
        report = loop.tick()
        assert not report.errors, report.errors
        created.append(report.runs_created)
    assert created == [50, 50, 50, 50, 30, 0]
    assert _runs_per_dag(sessions) == Counter(dict.fromkeys(names, 1))  # none lost, none twice
    assert _first_tasks_queued(sessions) == 230


def test_batches_follow_one_another_within_the_budget(sessions: sessionmaker[Session]) -> None:
    _dags(sessions, 230)
    clock = FakeClock(DUE)  # no time passes: the budget is never spent
    loop = make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_batch=50)
    assert loop.tick().runs_created == 230


def test_ten_runs_created_per_tick_still_means_ten(sessions: sessionmaker[Session]) -> None:
    """Airflow's `max_dagruns_to_create_per_loop` default, as the like-for-like benchmark
    sets it: ten runs a tick, and the queued runs of ten DAGs started."""
    _dags(sessions, 35)
    loop = make_loop(sessions, ScriptedExecutor(), FakeClock(DUE), runs_created_per_tick=10)
    reports = [loop.tick() for _ in range(5)]
    assert [r.runs_created for r in reports] == [10, 10, 10, 5, 0]
    assert all(r.runs_started <= 10 for r in reports)
    assert sum(r.runs_started for r in reports) == 35


def test_max_active_runs_holds_across_a_burst_of_catchup_runs(
    sessions: sessionmaker[Session],
) -> None:
    """Ten intervals due per DAG, maxActiveRuns 3: three runs each, then one per tick as
    runs end (the ScriptedExecutor ends every try at once)."""
    names = _dags(sessions, 40, maxActiveRuns=3)
    clock = FakeClock(T0 + timedelta(hours=10, minutes=30))
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    loop.tick()
    with sessions() as session:
        per_dag = Counter(
            session.execute(
                select(DagRun.dag_id).where(DagRun.state.in_(["queued", "running"]))
            ).scalars()
        )
    assert per_dag == Counter(dict.fromkeys(names, 3))
    for _ in range(60):
        loop.tick()
    with sessions() as session:
        rows = session.execute(select(DagRun.dag_id, DagRun.logical_date, DagRun.state)).all()
    assert Counter(r.dag_id for r in rows) == Counter(dict.fromkeys(names, 10))
    assert {r.state for r in rows} == {"success"}


def test_a_pass_costs_the_same_statements_for_ten_dags_or_two_hundred(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Set-based: the due DAGs, the runs, their task instances, the DAGs' next runs, the
    start (two) and one round of first-task decisions, whatever the batch's size."""
    counts = []
    for count in (10, 200):
        with sessions() as session:
            session.execute(text("TRUNCATE dag, dag_version, dag_run, task_instance CASCADE"))
            session.commit()
        _dags(sessions, count)
        specs = SpecCache()
        with sessions() as session:  # warm: versions cached, statements prepared
            create_and_start_runs(session, specs, DUE, 1)
            session.rollback()
        with count_queries(engine) as statements, sessions() as session:
            batch = create_and_start_runs(session, specs, DUE, 500)
            session.commit()
        assert (batch.created, batch.started, batch.first_tasks.scheduled) == (count,) * 3
        counts.append(len(statements))
    assert counts[0] == counts[1]


def test_broken_dags_leave_a_burst_without_holding_it_back(
    sessions: sessionmaker[Session],
) -> None:
    names = _dags(sessions, 120)
    broken = names[:30]
    with sessions() as session:
        session.execute(
            text("UPDATE dag_version SET spec = '{\"tasks\": 5}'::jsonb WHERE dag_id = ANY(:ids)"),
            {"ids": broken},
        )
        session.commit()
    loop = make_loop(sessions, ScriptedExecutor(), FakeClock(DUE), runs_created_per_batch=50)
    report = loop.tick()
    assert report.runs_created == 90
    with sessions() as session:
        marked = set(
            session.execute(text("SELECT dag_id FROM dag WHERE broken_reason IS NOT NULL"))
            .scalars()
            .all()
        )
    assert marked == set(broken)
    assert _runs_per_dag(sessions) == Counter(dict.fromkeys(names[30:], 1))


def test_an_idle_loop_wakes_when_the_next_run_falls_due(
    sessions: sessionmaker[Session],
) -> None:
    """A schedule falling due notifies no one: the idle wait ends at the next due run
    (not up to a tick interval later), and phase 1 looks then, though it looked less
    than a tick interval before."""
    from tests.db.test_wakeups import RecordingWaker

    _dags(sessions, 3)
    first_due = T0 + timedelta(hours=1)
    clock = FakeClock(first_due - timedelta(seconds=0.25))
    loop = make_loop(sessions, ScriptedExecutor(), clock, tick_interval=1.0)
    loop.waker = waker = RecordingWaker()
    assert loop.tick().runs_created == 0
    loop.idle()
    assert waker.waits == [0.25]  # not the tick interval
    clock.advance(seconds=0.25)  # what the wait took
    assert loop.tick().runs_created == 3
    # Nothing due now: the next run is an hour away, so the wait is the tick interval.
    for _ in range(10):
        if not loop.tick().busy:
            break
    loop.idle()
    assert waker.waits[-1] == 1.0


def test_replicas_creating_a_burst_together_make_each_run_once(
    sessions: sessionmaker[Session],
) -> None:
    """Three loops on threads of their own (their sessions and connections), small
    batches so they interleave: DAG rows are taken SKIP LOCKED, so the runs they
    create add up to the schedule's, none lost and none twice. (tests/db/test_races.py
    races whole processes over every phase.)"""
    import threading

    names = _dags(sessions, 300)
    clock = FakeClock(T0 + timedelta(hours=3, minutes=30))  # three intervals due per DAG
    loops = [make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_batch=25)]
    loops += [make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_batch=25)]
    loops += [make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_batch=25)]
    created = [0] * len(loops)
    errors: list[str] = []
    start = threading.Barrier(len(loops))

    def replica(i: int) -> None:
        start.wait()
        for _ in range(40):
            report = loops[i].tick()
            errors.extend(report.errors)
            created[i] += report.runs_created

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(len(loops))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sum(created) == 900
    assert _runs_per_dag(sessions) == Counter(dict.fromkeys(names, 3))


def test_without_the_wake_at_the_next_due_run_the_idle_wait_is_the_tick_interval(
    sessions: sessionmaker[Session],
) -> None:
    """The like-for-like benchmark's setting: an idle sleep as Airflow's."""
    from tests.db.test_wakeups import RecordingWaker

    _dags(sessions, 1)
    clock = FakeClock(T0 + timedelta(hours=1) - timedelta(seconds=0.25))
    loop = make_loop(sessions, ScriptedExecutor(), clock, wake_at_next_due=False)
    loop.waker = waker = RecordingWaker()
    assert loop.tick().runs_created == 0
    loop.idle()
    assert waker.waits == [1.0]
