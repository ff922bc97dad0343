"""Phase 3: pools, slots, maxActiveTasks, priorities, the NOWAIT lock, and query counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import Outbox, SlotPool, TaskInstance
from sluice.scheduler import critical
from sluice.scheduler.critical import queue_schedulable_task_instances
from sluice.scheduler.housekeeping import fail_stuck_tasks
from sluice.spec.states import TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    count_queries,
    make_loop,
    manifest,
    register,
    ti_row,
    trigger,
)


def _add_pool(sessions: sessionmaker[Session], name: str, slots: int) -> None:
    with sessions() as session:
        session.execute(insert(SlotPool).values(name=name, slots=slots, description=""))
        session.commit()


def _schedule_all(sessions: sessionmaker[Session]) -> None:
    """Put every task instance straight into `scheduled` (isolates phase 3)."""
    with sessions() as session:
        session.execute(
            text(
                "UPDATE dag_run SET state = 'running'; "
                "UPDATE task_instance SET state = 'scheduled' WHERE state = 'none'"
            )
        )
        session.commit()


def _queue(sessions: sessionmaker[Session], max_tis: int = 512) -> list[tuple[int, int]]:
    with sessions() as session:
        result = queue_schedulable_task_instances(session, T0, job_id=None, max_tis=max_tis)
        session.commit()
        assert result.entered
        return result.queued


def _queued_tasks(sessions: sessionmaker[Session]) -> list[str]:
    with sessions() as session:
        return list(
            session.execute(
                select(TaskInstance.task_id)
                .where(TaskInstance.state == TaskState.QUEUED)
                .order_by(TaskInstance.task_id)
            ).scalars()
        )


def _wide(name: str, count: int, **task: object) -> list[dict[str, object]]:
    return [{"name": f"t{i:02d}", **task} for i in range(count)]


def test_pool_slots_cap_what_is_queued(sessions: sessionmaker[Session]) -> None:
    _add_pool(sessions, "small", 3)
    register(sessions, manifest("p", _wide("p", 10, pool="small")))
    trigger(sessions, "p", T0)
    _schedule_all(sessions)
    assert len(_queue(sessions)) == 3
    assert _queue(sessions) == []  # full until something ends


def test_pool_slots_per_task_count(sessions: sessionmaker[Session]) -> None:
    _add_pool(sessions, "gpu", 5)
    register(sessions, manifest("big", _wide("big", 4, pool="gpu", poolSlots=2)))
    trigger(sessions, "big", T0)
    _schedule_all(sessions)
    assert len(_queue(sessions)) == 2  # 2 x 2 slots; a third would need 6


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The candidate limit of each read the critical section makes from now on."""
    limits: list[int] = []
    read = critical._READ

    def recorded(session: Session, params: dict[str, Any]) -> Any:
        limits.append(params["limit"])
        return read(session, params)

    monkeypatch.setattr(critical, "_READ", recorded)
    return limits


def test_a_pass_reads_a_window_the_size_of_its_free_slots(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One free slot and 40 tasks waiting: the pass reads and locks two candidates, not
    `max_tis`; what it queues is what the full read would have queued."""
    _add_pool(sessions, "few", 1)
    register(sessions, manifest("many", _wide("many", 40, pool="few"), maxActiveTasks=50))
    trigger(sessions, "many", T0)
    _schedule_all(sessions)
    limits = _reads(monkeypatch)
    assert len(_queue(sessions)) == 1
    assert limits == [2]
    assert _queued_tasks(sessions) == ["t00"]


def test_a_window_that_cannot_fill_its_slots_reads_on(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two free slots; the four candidates first in order each need three slots (skipped:
    the pool is starved for them), the fifth and sixth one each. The window of four
    queues nothing, so the pass reads on, as the full read always did."""
    _add_pool(sessions, "gpu", 2)
    tasks = [
        *[
            {"name": f"big{i}", "pool": "gpu", "poolSlots": 3, "priorityWeight": 9}
            for i in range(4)
        ],
        *[{"name": f"small{i}", "pool": "gpu"} for i in range(2)],
    ]
    register(sessions, manifest("mixed", tasks, maxActiveTasks=50))
    trigger(sessions, "mixed", T0)
    _schedule_all(sessions)
    limits = _reads(monkeypatch)
    assert len(_queue(sessions)) == 2
    assert limits == [4, 512]
    assert _queued_tasks(sessions) == ["small0", "small1"]


def test_a_full_pool_does_not_starve_other_pools(sessions: sessionmaker[Session]) -> None:
    _add_pool(sessions, "tiny", 1)
    tasks = [
        *[{"name": f"hi{i}", "pool": "tiny", "priorityWeight": 100} for i in range(5)],
        *[{"name": f"lo{i}"} for i in range(2)],
    ]
    register(sessions, manifest("mix", tasks, maxActiveTasks=50))
    trigger(sessions, "mix", T0)
    _schedule_all(sessions)
    # A batch of 3 would be all high-priority `tiny` tasks; the full pool is left out up front.
    assert len(_queue(sessions, max_tis=3)) == 1
    assert sorted(_queued_tasks(sessions))[0].startswith("hi")
    assert len(_queue(sessions, max_tis=3)) == 2
    assert sorted(_queued_tasks(sessions)) == ["hi0", "lo0", "lo1"]


def test_priority_weight_orders_the_queue(sessions: sessionmaker[Session]) -> None:
    _add_pool(sessions, "one", 1)
    tasks = [
        {"name": n, "pool": "one", "priorityWeight": w}
        for n, w in (("low", 1), ("high", 50), ("mid", 10))
    ]
    register(sessions, manifest("prio", tasks))
    trigger(sessions, "prio", T0)
    _schedule_all(sessions)
    order = []
    for _ in range(3):
        _queue(sessions)
        with sessions() as session:
            queued = session.execute(
                update(TaskInstance)
                .where(TaskInstance.state == TaskState.QUEUED)
                .values(state=TaskState.SUCCESS)
                .returning(TaskInstance.task_id)
            ).scalar_one()
            session.commit()
        order.append(queued)
    assert order == ["high", "mid", "low"]


def test_max_active_tasks_counts_across_runs(sessions: sessionmaker[Session]) -> None:
    register(sessions, manifest("mat", _wide("mat", 3), maxActiveTasks=4))
    trigger(sessions, "mat", T0)
    trigger(sessions, "mat", T0 + timedelta(minutes=1))
    _schedule_all(sessions)
    assert len(_queue(sessions)) == 4
    assert _queue(sessions) == []


def test_unknown_pool_blocks_nothing_and_its_task_fails_after_the_wait(
    sessions: sessionmaker[Session],
) -> None:
    """A task whose pool does not exist is never queued and never holds back the others;
    it waits up to the queued timeout for its pool, then fails with the reason (it used
    to wait for ever, and so did its run)."""
    tasks = [{"name": "lost", "pool": "nonexistent", "priorityWeight": 99}, {"name": "ok"}]
    register(sessions, manifest("up", tasks))
    trigger(sessions, "up", T0)
    _schedule_all(sessions)
    assert len(_queue(sessions, max_tis=1)) == 1
    assert _queued_tasks(sessions) == ["ok"]

    def fail_stuck(seconds: float) -> int:
        with sessions() as session:
            failed = fail_stuck_tasks(
                session,
                SpecCache(),
                T0 + timedelta(seconds=seconds),
                queued_timeout=600,
                max_requeues=2,
            )
            session.commit()
        return len(failed)

    assert fail_stuck(599) == 0  # still waiting for its pool
    assert fail_stuck(601) == 1
    with sessions() as session:
        lost = ti_row(session, "up", "lost")
    assert lost.state == TaskState.FAILED
    assert lost.reason == (
        "pool 'nonexistent' does not exist (named by the task's `pool` field): create a"
        " Pool named 'nonexistent' or set the task's `pool` to an existing one, then run"
        " the task again"
    )


def test_queueing_writes_a_try_and_an_outbox_row_per_task(sessions: sessionmaker[Session]) -> None:
    register(sessions, manifest("ob", _wide("ob", 3)))
    trigger(sessions, "ob", T0)
    _schedule_all(sessions)
    queued = _queue(sessions)
    with sessions() as session:
        payloads = session.execute(select(Outbox.payload)).scalars().all()
    assert sorted((p["ti_id"], p["try_number"]) for p in payloads) == sorted(queued)
    assert {try_number for _, try_number in queued} == {1}


def test_busy_pool_lock_skips_the_tick_instead_of_waiting(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    register(sessions, manifest("busy", _wide("busy", 2)))
    trigger(sessions, "busy", T0)
    _schedule_all(sessions)
    with engine.connect() as other:
        other.execute(text("SELECT * FROM slot_pool FOR UPDATE"))
        with sessions() as session:
            result = queue_schedulable_task_instances(session, T0, job_id=None, max_tis=10)
            session.rollback()
        assert not result.entered
        other.rollback()
    assert len(_queue(sessions)) == 2


def test_the_loop_survives_a_busy_lock(sessions: sessionmaker[Session], engine: Engine) -> None:
    clock = FakeClock()
    register(sessions, manifest("busy2", _wide("busy2", 2)), clock.now)
    trigger(sessions, "busy2", clock.now)
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    with engine.connect() as other:
        other.execute(text("SELECT * FROM slot_pool FOR UPDATE"))
        report = loop.tick()
        other.rollback()
    assert report.critical_section_skipped
    assert not report.errors


def test_critical_section_query_count_does_not_grow_with_tasks(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    _add_pool(sessions, "large", 1000)
    counts = []
    for n, name in ((5, "few"), (200, "many")):
        register(sessions, manifest(name, _wide(name, n, pool="large"), maxActiveTasks=1000))
        trigger(sessions, name, T0)
        _schedule_all(sessions)
        with count_queries(engine) as statements:
            queued = _queue(sessions)
        counts.append(len(statements))
        assert len(queued) == n
    assert counts[0] == counts[1] <= 8


def test_full_batches_repeat_within_a_tick_up_to_the_cap(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    tasks = [{"name": f"t{i}", "image": "busybox"} for i in range(10)]
    register(sessions, manifest("wide", tasks, schedule=None), clock())
    trigger(sessions, "wide", clock())
    executor = ScriptedExecutor()
    loop = make_loop(
        sessions, executor, clock, max_tis_per_query=3, critical_batches_per_tick=2,
        dispatch_batch=2,
    )  # fmt: skip
    report = loop.tick()
    assert report.tasks_queued == 6  # two full batches of 3, then the cap
    # Each batch claims 2 of its 3 (`dispatch_batch`) and starts them; the two left on the
    # outbox are one dispatch batch of 2 (full, so the dispatcher looks again: nothing).
    assert report.tasks_started == 6
    report = loop.tick()
    assert report.tasks_queued == 4  # 3, then 1: a batch that is not full ends the phase
    assert report.tasks_started == 4  # 2 + 1 claimed in the section, 1 through the outbox
    assert len(executor.started) == 10
    assert len({launch.key for launch in executor.started}) == 10


def test_with_nothing_scheduled_the_tasks_in_flight_are_not_counted(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    register(sessions, manifest("busy", [{"name": f"t{i}"} for i in range(5)]))
    trigger(sessions, "busy", T0)
    with sessions() as session:
        session.execute(
            text("UPDATE dag_run SET state = 'running'; UPDATE task_instance SET state = 'running'")
        )
        session.commit()
    with count_queries(engine) as statements, sessions() as session:
        result = queue_schedulable_task_instances(session, T0, job_id=None, max_tis=16)
        session.commit()
    assert result.entered
    assert not result.queued
    assert [s.split()[0] for s in statements] == ["SELECT"]  # the lock, which says "no work"


def test_with_every_pool_full_the_waiting_tasks_are_not_read(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    _add_pool(sessions, "small", 2)
    register(sessions, manifest("full", _wide("full", 5, pool="small")))
    trigger(sessions, "full", T0)
    _schedule_all(sessions)
    assert len(_queue(sessions)) == 2  # the pool is full; three tasks wait for a slot
    with count_queries(engine) as statements, sessions() as session:
        result = queue_schedulable_task_instances(session, T0, job_id=None, max_tis=16)
        session.commit()
    assert result.entered
    assert not result.queued
    assert "small" in result.starved_pools
    # The lock says every pool with waiting tasks is full: nothing is read, nothing locked.
    assert [s.split()[0] for s in statements] == ["SELECT"]
    with sessions() as session:  # a slot frees: the next pass reads and queues again
        session.execute(
            text("UPDATE task_instance SET state = 'success' WHERE state = 'queued' AND id = ("
                 "SELECT min(id) FROM task_instance WHERE state = 'queued')")
        )  # fmt: skip
        session.commit()
    assert len(_queue(sessions)) == 1
