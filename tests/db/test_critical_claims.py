"""The critical section claims what it queues (ADR 0047): the tries this replica queued go to
its executor after the section's commit, without a `start_task` outbox row and without a
second transaction; the outbox stays for everything else (tries queued beyond
`dispatch_batch`, tries queued again for a replica that died before starting them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import Engine, event, select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import Outbox, TaskInstance, TaskTry
from sluice.executors.base import Inspection
from sluice.scheduler.critical import queue_schedulable_task_instances
from sluice.scheduler.dispatch import launches_of
from sluice.scheduler.examine import examine_running_runs
from sluice.spec.states import TaskState
from tests.db.test_executor_seam import FAST, _Died
from tests.db.test_unstarted_tries import JobLike
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    count_queries,
    make_loop,
    manifest,
    register,
    silence_replica,
    ti_row,
    trigger,
)


@contextmanager
def count_commits(engine: Engine) -> Iterator[list[int]]:
    """The transactions the engine commits while the block runs (one entry each)."""
    commits: list[int] = []

    def record(conn: object) -> None:
        commits.append(1)

    event.listen(engine, "commit", record)
    try:
        yield commits
    finally:
        event.remove(engine, "commit", record)


# The dispatcher's claim of `start_task` rows (`dispatch._CLAIM`), as it reads them.
_STARTS_CLAIM = "payload->>'ti_id'"


def _start_task_rows_written(sessions: sessionmaker[Session]) -> None:
    """Record every `start_task` row ever inserted into the outbox (even if deleted since)."""
    with sessions() as session:
        session.execute(
            text(
                "CREATE TABLE starts_written (ti_id bigint, try_number int);"
                "CREATE FUNCTION record_start() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " INSERT INTO starts_written SELECT CAST(payload->>'ti_id' AS bigint),"
                " CAST(payload->>'try_number' AS int) FROM fresh WHERE kind = 'start_task';"
                " RETURN NULL; END $$;"
                "CREATE TRIGGER record_start AFTER INSERT ON outbox REFERENCING NEW TABLE AS fresh"
                " FOR EACH STATEMENT EXECUTE FUNCTION record_start()"
            )
        )
        session.commit()


def _starts_written(sessions: sessionmaker[Session]) -> list[tuple[int, int]]:
    with sessions() as session:
        rows = session.execute(text("SELECT ti_id, try_number FROM starts_written")).all()
    return sorted((int(a), int(b)) for a, b in rows)


def test_a_tick_starts_what_it_queues_without_an_outbox_row_or_a_claim(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    clock = FakeClock()
    _start_task_rows_written(sessions)
    register(sessions, manifest("direct", [{"name": f"t{i}"} for i in range(5)]), clock.now)
    executor = ScriptedExecutor()
    executor.hold = {f"t{i}" for i in range(5)}
    loop = make_loop(sessions, executor, clock)
    loop.tick()  # a new loop's first look at everything, the outbox too
    trigger(sessions, "direct", clock.now)
    with count_queries(engine) as statements:
        report = loop.tick()  # phase 1 starts the run and schedules its tasks; 3 queues
    assert (report.tasks_queued, report.tasks_started) == (5, 5)
    assert len({launch.key for launch in executor.started}) == 5
    assert _starts_written(sessions) == []  # no outbox row was ever written for them
    assert not [s for s in statements if _STARTS_CLAIM in s]  # nor claimed from it
    with sessions() as session:
        rows = session.execute(
            select(TaskInstance.state, TaskInstance.running_by_job_id, TaskInstance.start_date)
        ).all()
        tries = session.execute(select(TaskTry.state, TaskTry.external_id)).all()
    assert {(state, owner) for state, owner, _ in rows} == {(TaskState.RUNNING, loop.job_id)}
    assert all(start is not None for _, _, start in rows)
    assert set(tries) == {(TaskState.RUNNING, "scripted")}


def test_a_busy_tick_takes_one_transaction_less(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Queue and start in one transaction: a tick that queues one task and applies the
    report of another has no dispatch transaction."""
    clock = FakeClock()
    register(sessions, manifest("chain", [{"name": "a"}, {"name": "b", "dependsOn": ["a"]}]))
    trigger(sessions, "chain", clock.now)
    executor = ScriptedExecutor()
    loop = make_loop(sessions, executor, clock)
    loop.tick()  # a is queued, started, and its success applied (b scheduled)
    with count_commits(engine) as commits, count_queries(engine) as statements:
        report = loop.tick()  # b: queued and started; its report applied
    assert (report.tasks_queued, report.tasks_started, report.events_applied) == (1, 1, 1)
    assert not [s for s in statements if _STARTS_CLAIM in s]
    # Without a waker phase 2 looks every tick (phase 1 not within a burst: ADR 0049);
    # then the critical section, which starts b, and the report application: no
    # dispatch transaction between them (there were five: issue 36's "5 transactions a
    # tick", with phase 1's).
    assert len(commits) == 3


def test_tries_beyond_the_dispatch_batch_wait_on_the_outbox(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, manifest("over", [{"name": f"t{i}"} for i in range(3)]))
    trigger(sessions, "over", T0)
    with sessions() as session:
        session.execute(
            text(
                "UPDATE dag_run SET state = 'running';UPDATE task_instance SET state = 'scheduled'"
            )
        )
        session.commit()
    with sessions() as session:
        result = queue_schedulable_task_instances(
            session, T0, job_id=7, max_tis=16, claim=2, executor_name="x"
        )
        session.commit()
    assert len(result.queued) == 3
    claimed = {(row.id, row.try_number) for row in result.claimed}
    assert len(claimed) == 2
    with sessions() as session:
        instances = {
            (ti.id, ti.try_number): ti for ti in session.execute(select(TaskInstance)).scalars()
        }
        payloads = session.execute(select(Outbox.payload)).scalars().all()
        tries = {
            (t.task_instance_id, t.try_number): t
            for t in session.execute(select(TaskTry)).scalars()
        }
    (left,) = set(result.queued) - claimed
    assert [(p["ti_id"], p["try_number"]) for p in payloads] == [left]
    assert instances[left].state == TaskState.QUEUED
    assert instances[left].running_by_job_id is None
    assert (tries[left].state, tries[left].start_date, tries[left].external_id) == (
        TaskState.QUEUED,
        None,
        None,
    )
    for key in claimed:
        ti = instances[key]
        assert (ti.state, ti.running_by_job_id, ti.queued_by_job_id) == (TaskState.RUNNING, 7, 7)
        assert ti.start_date == ti.queued_at == ti.last_heartbeat_at == T0
        assert (tries[key].state, tries[key].start_date, tries[key].external_id) == (
            TaskState.RUNNING,
            T0,
            "x",
        )


def test_a_replica_that_dies_between_the_sections_commit_and_the_start_loses_nothing(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Replica A queues and claims the try in its critical section, commits and dies in
    `executor.start`, before its phase 4 ever runs. The try is running under A with its
    planned external id and no heartbeat after the claim; once A is seen dead, B's sweep
    queues it again (the outbox path) and B starts it once."""
    clock = FakeClock()
    _start_task_rows_written(sessions)
    register(sessions, manifest("dies", [{"name": "t"}]), clock.now)
    trigger(sessions, "dies", clock.now)
    a = make_loop(sessions, JobLike(dies=True), clock, **FAST)
    with count_queries(engine) as statements:
        died = False
        try:
            a.tick()
        except _Died:
            died = True
    assert died, "A started the try in a later tick than the one that queued it"
    assert not [s for s in statements if _STARTS_CLAIM in s]  # died in phase 3
    with sessions() as session:
        ti = ti_row(session, "dies", "t")
        assert (ti.state, ti.try_number, ti.running_by_job_id) == (TaskState.RUNNING, 1, a.job_id)
        assert ti.external_id == f"job-{ti.id}-1"  # recorded in the section's transaction
        assert session.execute(select(Outbox)).first() is None
        silence_replica(session, a.job_id, clock.now)
        session.commit()
    assert _starts_written(sessions) == []

    executor = JobLike(dies=False)
    b = make_loop(sessions, executor, clock, **FAST)
    for _ in range(6):
        assert not b.tick().errors
        clock.advance(seconds=1)
    with sessions() as session:
        row = ti_row(session, "dies", "t")
        first = session.get(TaskTry, (ti.id, 1))
    assert (row.state, row.try_number, row.evidence) == (TaskState.SUCCESS, 1, None)
    assert first is not None
    assert first.scheduler_job_id == b.job_id
    assert [launch.key for launch in executor.started] == [(ti.id, 1)]  # started once
    assert _starts_written(sessions) == [(ti.id, 1)]  # through the outbox, by the sweep


def test_without_proof_the_dead_replicas_claimed_try_is_a_zombie(
    sessions: sessionmaker[Session],
) -> None:
    """The same death, with an executor that cannot prove no attempt exists: the sweep
    settles the silent try as a zombie (a retry follows as the task allows)."""
    clock = FakeClock()
    register(sessions, manifest("zombie", [{"name": "t"}]), clock.now)
    trigger(sessions, "zombie", clock.now)
    a = make_loop(sessions, JobLike(dies=True), clock, **FAST)
    with suppress(_Died):
        a.tick()
    with sessions() as session:
        silence_replica(session, a.job_id, clock.now)
        session.commit()
    executor = JobLike(dies=False)
    executor.seen = Inspection(state="gone", evidence={"pod": "gone"})
    b = make_loop(sessions, executor, clock, **FAST)
    for _ in range(30):
        assert not b.tick().errors
        clock.advance(seconds=1)
    with sessions() as session:
        row = ti_row(session, "zombie", "t")
    assert row.state == TaskState.FAILED
    assert row.evidence is not None
    assert executor.started == []


def test_an_unloadable_spec_fails_its_try_and_the_batch_starts(
    sessions: sessionmaker[Session],
) -> None:
    """The section's claim builds launches as the dispatcher's does (`launches_of`): a try
    whose stored spec no longer parses fails in the same transaction, the rest start."""
    register(sessions, manifest("fine", [{"name": "a"}]))
    register(sessions, manifest("broken", [{"name": "a"}, {"name": "b", "dependsOn": ["a"]}]))
    trigger(sessions, "fine", T0)
    trigger(sessions, "broken", T0)
    with sessions() as session:
        session.execute(text("UPDATE dag_run SET state = 'running', start_date = :t"), {"t": T0})
        examine_running_runs(session, SpecCache(), T0, 10)
        session.execute(
            text(
                'UPDATE dag_version SET spec = \'{"tasks": "not a list"}\''
                " WHERE dag_id = 'broken'"
            )
        )
        session.commit()
    with sessions() as session:
        result = queue_schedulable_task_instances(
            session, T0, job_id=None, max_tis=10, claim=10, executor_name="x"
        )
        launches = launches_of(session, SpecCache(), T0, result.claimed)
        session.commit()
    assert len(result.claimed) == 2
    assert [launch.dag_id for launch in launches] == ["fine"]
    with sessions() as session:
        a = ti_row(session, "broken", "a")
        assert a.state == TaskState.FAILED
        assert a.reason is not None
        assert a.reason.startswith("the task's spec could not be loaded")
        assert ti_row(session, "broken", "b").n_failed == 1  # settled like any failure
        assert ti_row(session, "fine", "a").state == TaskState.RUNNING
        kinds = session.execute(select(Outbox.kind)).scalars().all()
    assert kinds == ["alert"]
