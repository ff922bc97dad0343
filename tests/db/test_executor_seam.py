"""The loop's seam with its executor: errors survived, ids known at claim, pod heartbeats.

- Any executor call that raises is logged, counted in the tick's report and
  survived; a batch the executor could not start fails with the reason and
  retries as its task allows (issue 11, defect 1).
- An executor that knows a try's external id before starting it (a Job name)
  has it recorded by the claim itself, so a replica that dies right after
  claiming leaves a try another replica can find (defect 5).
- With tries that heartbeat themselves (task pods), the scheduler never
  refreshes their heartbeat; a stale heartbeat is a zombie only when the
  executor sees the process gone (both signals, recorded), never while it
  cannot look, and a running process past the longer threshold is killed
  as a zombie (invariant 7).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Outbox, TaskInstance, TaskTry
from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.spec.states import TaskState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    make_loop,
    manifest,
    register,
    ti_row,
    trigger,
)

FAST = {"zombie_threshold": 10, "zombie_check_interval": 1, "heartbeat_kill_threshold": 60}


class PodLike(ScriptedExecutor):
    """Tries that heartbeat themselves, with names known in advance; `seen` is what inspect says."""

    name = "podlike"
    pods_heartbeat = True

    def __init__(self) -> None:
        super().__init__()
        self.seen = Inspection(state="alive", running=True)
        self.hold = {"t"}

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        return f"job-{launch.ti_id}-{launch.try_number}"

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {key: f"job-{key[0]}-{key[1]}" for key in self.running}

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return self.seen


class Exploding(ScriptedExecutor):
    name = "exploding"

    def __init__(self, *, start: bool = False, poll: bool = False) -> None:
        super().__init__()
        self.fail_start, self.fail_poll = start, poll

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        if self.fail_start:
            self.fail_start = False  # once: the retry starts
            raise OSError(24, "Too many open files")
        super().start(launches)

    def poll(self) -> list[TaskEvent]:
        if self.fail_poll:
            raise RuntimeError("watch thread blew up")
        return super().poll()


def _one_task(sessions: sessionmaker[Session], clock: FakeClock, **task: Any) -> None:
    register(sessions, manifest("seam", [{"name": "t", **task}]), clock.now)
    trigger(sessions, "seam", clock.now)


def test_a_start_that_raises_fails_the_batch_with_the_reason_and_the_loop_goes_on(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    _one_task(sessions, clock, retries=1, retryDelay="0s")
    executor = Exploding(start=True)
    loop = make_loop(sessions, executor, clock)
    errors: list[str] = []
    for _ in range(4):
        errors += loop.tick().errors
        clock.advance(seconds=1)
    assert any(e.startswith("executor.start: ") and "Too many open files" in e for e in errors)
    with sessions() as session:
        first = session.execute(select(TaskTry).where(TaskTry.try_number == 1)).scalar_one()
        assert first.state == TaskState.FAILED
        assert "could not start the try" in (first.reason or "")
        assert ti_row(session, "seam", "t").try_number == 2  # retried, as the task allows
    executor.fail_start = False
    for _ in range(4):
        loop.tick()
        clock.advance(seconds=1)
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.SUCCESS


def test_a_poll_that_raises_is_counted_and_survived(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    _one_task(sessions, clock)
    executor = Exploding(poll=True)
    loop = make_loop(sessions, executor, clock)
    errors: list[str] = []
    for _ in range(3):
        errors += loop.tick().errors
    assert any(e.startswith("executor.poll: ") for e in errors)
    executor.fail_poll = False
    for _ in range(3):
        loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.SUCCESS


def test_the_claim_records_an_external_id_known_in_advance(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    _one_task(sessions, clock)
    executor = PodLike()
    loop = make_loop(sessions, executor, clock, **FAST)
    seen_at_start: list[str | None] = []
    real_start = executor.start

    def start(launches: Sequence[TaskLaunch]) -> None:
        with sessions() as session:  # committed before the executor is called
            seen_at_start.extend(
                session.get(TaskInstance, launch.ti_id).external_id  # type: ignore[union-attr]
                for launch in launches
            )
        real_start(launches)

    executor.start = start  # type: ignore[method-assign]
    for _ in range(3):
        loop.tick()
    with sessions() as session:
        ti = ti_row(session, "seam", "t")
    assert seen_at_start == [f"job-{ti.id}-1"]


def _running_try(sessions: sessionmaker[Session]) -> tuple[FakeClock, PodLike, Any, TaskInstance]:
    clock = FakeClock()
    _one_task(sessions, clock, retries=1, retryDelay="0s")
    executor = PodLike()
    loop = make_loop(sessions, executor, clock, **FAST)
    for _ in range(3):
        assert not loop.tick().errors
    with sessions() as session:
        ti = ti_row(session, "seam", "t")
    assert ti.state == TaskState.RUNNING
    return clock, executor, loop, ti


def test_the_scheduler_never_refreshes_a_pod_heartbeat(sessions: sessionmaker[Session]) -> None:
    clock, _, loop, ti = _running_try(sessions)
    first = ti.last_heartbeat_at
    for _ in range(5):
        clock.advance(seconds=6)  # past the heartbeat interval each time
        loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").last_heartbeat_at == first


def test_a_stale_try_whose_pod_is_gone_is_a_zombie_with_both_signals(
    sessions: sessionmaker[Session],
) -> None:
    clock, executor, loop, ti = _running_try(sessions)
    executor.seen = Inspection(
        state="gone", evidence={"job": "job-x", "pod": "gone", "job_conditions": ["Failed=True"]}
    )
    executor.running.clear()
    clock.advance(seconds=20)
    loop.tick()
    with sessions() as session:
        zombie = session.execute(
            select(TaskTry).where(TaskTry.task_instance_id == ti.id, TaskTry.try_number == 1)
        ).scalar_one()
        row = ti_row(session, "seam", "t")
    assert zombie.state == TaskState.FAILED
    assert (zombie.reason or "").startswith("zombie: no heartbeat since")
    assert row.state == TaskState.UP_FOR_RETRY
    evidence = row.evidence or {}
    assert evidence["executor_says"] == "gone"
    assert evidence["seen"]["pod"] == "gone"
    assert evidence["last_heartbeat"] == ti.last_heartbeat_at.isoformat()  # type: ignore[union-attr]


def test_no_zombie_while_the_executor_cannot_look(sessions: sessionmaker[Session]) -> None:
    clock, executor, loop, _ = _running_try(sessions)
    executor.seen = Inspection(state="unreachable")
    for _ in range(10):
        clock.advance(seconds=30)  # far past both thresholds
        loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.RUNNING


def test_a_running_pod_that_stopped_heartbeating_is_killed_past_the_longer_threshold(
    sessions: sessionmaker[Session],
) -> None:
    clock, executor, loop, ti = _running_try(sessions)
    executor.seen = Inspection(state="alive", running=True, evidence={"pod_phase": "Running"})
    clock.advance(seconds=30)  # stale, but under the kill threshold: the pod runs
    loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.RUNNING
    assert executor.killed == []
    clock.advance(seconds=40)  # 70 s without a heartbeat, past 60
    loop.tick()
    with sessions() as session:
        row = ti_row(session, "seam", "t")
    assert (ti.id, 1) in executor.killed
    assert row.state == TaskState.UP_FOR_RETRY
    assert (row.evidence or {})["kill_after_seconds"] == 60
    assert "sent no heartbeat" in (row.evidence or {})["verdict"]


def test_a_zombie_the_executor_no_longer_tracks_is_killed_by_its_external_id(
    sessions: sessionmaker[Session],
) -> None:
    """The executor dropped the try (a hand-over it took for real, a restart): the kill
    still names the try's Job, from the database's external id, so it is stopped."""
    clock, executor, loop, ti = _running_try(sessions)
    executor.running.clear()  # no longer tracked here
    executor.seen = Inspection(state="alive", running=True)
    clock.advance(seconds=70)  # past the kill threshold (60 s)
    loop.tick()
    assert executor.killed_ids == {(ti.id, 1): f"job-{ti.id}-1"}


def test_a_pod_that_started_late_is_silent_only_from_its_start(
    sessions: sessionmaker[Session],
) -> None:
    """The kill threshold counts from the later of the last heartbeat and the main
    container's start: a pod that took long to start on a busy node is not silent."""
    clock, executor, loop, ti = _running_try(sessions)
    clock.advance(seconds=50)  # the pod started 50 s after the try
    started = clock()
    executor.seen = Inspection(state="alive", running=True, running_since=started)
    clock.advance(seconds=30)  # 80 s since the last heartbeat, 30 s since its start
    loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.RUNNING
    assert executor.killed == []
    clock.advance(seconds=31)  # 61 s silent since it started, past 60
    loop.tick()
    with sessions() as session:
        row = ti_row(session, "seam", "t")
    assert (ti.id, 1) in executor.killed
    assert row.state == TaskState.UP_FOR_RETRY
    assert "sent no heartbeat for 61s since it started" in (row.evidence or {})["verdict"]


def test_a_starting_pod_is_not_a_zombie_however_long_it_starts(
    sessions: sessionmaker[Session],
) -> None:
    clock, executor, loop, _ = _running_try(sessions)
    executor.seen = Inspection(state="alive", running=False)  # pulling its image
    clock.advance(seconds=120)
    loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.RUNNING
    assert executor.killed == []


def test_a_heartbeat_from_the_pod_keeps_it_out_of_the_sweep(
    sessions: sessionmaker[Session],
) -> None:
    clock, executor, loop, ti = _running_try(sessions)
    executor.seen = Inspection(state="gone")
    for _ in range(5):
        clock.advance(seconds=5)
        with sessions() as session:  # what the task API writes for the pod's sidecar
            session.execute(
                update(TaskInstance)
                .where(TaskInstance.id == ti.id)
                .values(last_heartbeat_at=clock.now)
            )
            session.commit()
        loop.tick()
    with sessions() as session:
        assert ti_row(session, "seam", "t").state == TaskState.RUNNING
    assert timedelta(seconds=25) > timedelta(seconds=FAST["zombie_threshold"])


class _Died(BaseException):
    """The replica's process ends here (a SIGKILL): nothing after it in the tick runs."""


class DiesAtStart(ScriptedExecutor):
    name = "dies"

    def __init__(self) -> None:
        super().__init__()
        self.dies = False

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        if self.dies:
            raise _Died
        super().start(launches)


def test_a_replica_that_dies_at_a_start_loses_no_alert(
    sessions: sessionmaker[Session],
) -> None:
    """A replica that dies in `executor.start()` loses no alert (invariant 8: the chaos
    harness's kill between claim and start once lost them). Since the critical section
    starts what it queues (ADR 0047), a start comes before the tick's alert claim: the
    alert is still on the outbox when the replica dies, and another replica delivers it,
    once."""
    import structlog.testing

    clock = FakeClock()
    register(
        sessions,
        manifest(
            "seam",
            [{"name": "a"}, {"name": "b", "dependsOn": ["a"], "triggerRule": "all_done"}],
        ),
        clock.now,
    )
    trigger(sessions, "seam", clock.now)
    executor = DiesAtStart()
    executor.outcomes = {"a": [TaskState.FAILED]}
    loop = make_loop(sessions, executor, clock)
    with structlog.testing.capture_logs() as logs:
        loop.tick()  # a starts and fails: its alert is in the outbox, b is scheduled
    with sessions() as session:
        assert ti_row(session, "seam", "a").state == TaskState.FAILED
        failed = ti_row(session, "seam", "a").id
    assert not any(e["event"] == "alert: task try failed" for e in logs)  # not delivered yet
    executor.dies = True
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            try:
                loop.tick()
            except _Died:
                break
        else:
            raise AssertionError("b was never started")
    delivered = [e["ti_id"] for e in logs if e["event"] == "alert: task try failed"]
    with sessions() as session:
        waiting = session.execute(select(Outbox).where(Outbox.kind == "alert")).scalars().all()
    assert len(delivered) + len(waiting) == 1  # delivered before the death, or still waiting
    other = make_loop(sessions, ScriptedExecutor(), clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            other.tick()
            clock.advance(seconds=1)
    delivered += [e["ti_id"] for e in logs if e["event"] == "alert: task try failed"]
    assert delivered == [failed]


class StartsOneThenRaises(ScriptedExecutor):
    """Starts the first try of a batch, then fails (a spawn that hit EMFILE on the second)."""

    name = "partial"

    def __init__(self) -> None:
        super().__init__()
        self.hold = {"a", "b"}
        self.raised = False

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        if self.raised or len(launches) < 2:
            super().start(launches)
            return
        self.raised = True
        super().start(launches[:1])
        raise OSError(24, "Too many open files")


def test_a_start_that_raises_midway_fails_only_the_tries_it_did_not_start(
    sessions: sessionmaker[Session],
) -> None:
    """The try it started runs on as one of this replica's: failing it too (issue 11's
    chaos run) recorded it ended, its pool slot free, while it ran until fencing killed it."""
    clock = FakeClock()
    register(sessions, manifest("seam", [{"name": "a"}, {"name": "b"}]), clock.now)
    trigger(sessions, "seam", clock.now)
    executor = StartsOneThenRaises()
    loop = make_loop(sessions, executor, clock)
    for _ in range(3):
        loop.tick()
        if executor.raised:
            break
    assert executor.raised
    loop.tick()  # the failure is applied; the started try is heartbeated, not fenced
    (started,) = executor.running
    assert executor.killed == []
    with sessions() as session:
        states = {
            ti.task_id: (ti.id, ti.state, ti.reason)
            for ti in (ti_row(session, "seam", "a"), ti_row(session, "seam", "b"))
        }
    by_id = {ti_id: (state, reason) for ti_id, state, reason in states.values()}
    assert by_id[started[0]] == (TaskState.RUNNING, None)
    ((other_state, other_reason),) = [v for k, v in by_id.items() if k != started[0]]
    assert other_state == TaskState.FAILED
    assert other_reason == "the executor could not start the try: [Errno 24] Too many open files"
