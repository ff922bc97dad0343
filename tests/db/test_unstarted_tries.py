"""A replica that dies between claiming a try and starting it loses nothing (invariant 5).

The claim commits `queued -> running` before the executor is called, so a
replica killed in between leaves a running try that never started. When the
executor proves that no attempt exists (a Job executor: no Job under the try's
deterministic name, and one started within `ttlSecondsAfterFinished` would
still be there) and the try never heartbeated, another replica queues it
again under the same try number and it runs once; any other silent try is
still a zombie. The chart's pod-kill test met this: a scheduler pod killed
mid-dispatch failed a task (retries 0) that had never run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Outbox, TaskInstance, TaskTry
from sluice.executors.base import Inspection, TaskLaunch
from sluice.scheduler import housekeeping
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.states import TaskState
from tests.db.test_executor_seam import FAST, PodLike, _Died
from tests.support import FakeClock, make_loop, manifest, register, silence_replica, ti_row, trigger

NO_TRACE = Inspection(
    state="gone",
    evidence={"job": "gone", "pod": "gone", "started": False},
    restartable_within=3600.0,
)


class JobLike(PodLike):
    """Tries named in advance that heartbeat themselves; a try it does not run shows as
    `seen` (by default: no trace of it, as a Job executor sees a Job never created)."""

    name = "joblike"

    def __init__(self, *, dies: bool = False) -> None:
        super().__init__()
        self.dies = dies
        self.hold = set()
        self.seen = NO_TRACE

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        if self.dies:
            raise _Died
        super().start(launches)

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        if key in self.running:
            return Inspection(state="alive", running=True)
        return self.seen


def _claimed_by_a_replica_that_died(
    sessions: sessionmaker[Session],
) -> tuple[FakeClock, SchedulerLoop, TaskInstance]:
    """Replica A claims the one try and dies in `executor.start`; it is seen dead."""
    clock = FakeClock()
    register(sessions, manifest("unstarted", [{"name": "t"}]), clock.now)
    trigger(sessions, "unstarted", clock.now)
    a = make_loop(sessions, JobLike(dies=True), clock, **FAST)
    for _ in range(3):
        try:
            a.tick()
        except _Died:
            break
    else:
        raise AssertionError("replica A never started the try")
    with sessions() as session:
        ti = ti_row(session, "unstarted", "t")
        assert (ti.state, ti.try_number, ti.running_by_job_id) == (
            TaskState.RUNNING,
            1,
            a.job_id,
        )
        assert ti.external_id == f"job-{ti.id}-1"  # recorded by the claim
        silence_replica(session, a.job_id, clock.now)
        session.commit()
    return clock, a, ti


def _tick(loop: SchedulerLoop, clock: FakeClock, n: int) -> None:
    for _ in range(n):
        assert not loop.tick().errors
        clock.advance(seconds=1)


def test_a_try_that_never_started_is_queued_again_and_runs_once_under_its_try_number(
    sessions: sessionmaker[Session],
) -> None:
    clock, _a, ti = _claimed_by_a_replica_that_died(sessions)
    executor = JobLike()
    b = make_loop(sessions, executor, clock, **FAST)
    _tick(b, clock, 6)
    with sessions() as session:
        row = ti_row(session, "unstarted", "t")
        first = session.get(TaskTry, (ti.id, 1))
        assert (row.state, row.try_number) == (TaskState.SUCCESS, 1)
        assert row.evidence is None  # no zombie verdict
        assert first is not None
        assert first.state == TaskState.SUCCESS
        assert first.scheduler_job_id == b.job_id
    assert [launch.key for launch in executor.started] == [(ti.id, 1)]  # started once


def test_a_try_that_heartbeated_is_a_zombie_not_queued_again(
    sessions: sessionmaker[Session],
) -> None:
    clock, _, ti = _claimed_by_a_replica_that_died(sessions)
    with sessions() as session:  # its pod heartbeated once: it did start
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id == ti.id)
            .values(last_heartbeat_at=TaskInstance.start_date + timedelta(seconds=2))
        )
        session.commit()
    executor = JobLike()
    b = make_loop(sessions, executor, clock, **FAST)
    _tick(b, clock, 3)
    with sessions() as session:  # it heartbeated lately: gone, but not silent yet
        row = ti_row(session, "unstarted", "t")
        assert (row.state, row.try_number) == (TaskState.RUNNING, 1)
    clock.advance(seconds=FAST["zombie_threshold"])  # silent past the threshold
    _tick(b, clock, 2)
    with sessions() as session:
        row = ti_row(session, "unstarted", "t")
        assert (row.state, row.try_number) == (TaskState.FAILED, 1)
        assert (row.reason or "").startswith("zombie: ")
    assert executor.started == []


def test_a_try_claimed_longer_ago_than_the_proof_reaches_is_a_zombie(
    sessions: sessionmaker[Session],
) -> None:
    """Past `restartable_within` a finished Job may have been cleaned up: no proof."""
    clock, _, _ = _claimed_by_a_replica_that_died(sessions)
    executor = JobLike()
    executor.seen = Inspection(
        state="gone", evidence=dict(NO_TRACE.evidence), restartable_within=20.0
    )
    clock.advance(seconds=30)
    b = make_loop(sessions, executor, clock, **FAST)
    _tick(b, clock, 3)
    with sessions() as session:
        row = ti_row(session, "unstarted", "t")
        assert row.state == TaskState.FAILED
        assert row.evidence is not None
        assert row.evidence["verdict"].startswith("the try was claimed but its process never")
    assert executor.started == []


@pytest.mark.parametrize("executor_says", ["unknown", "gone without proof"])
def test_without_the_executors_proof_the_try_is_a_zombie_as_before(
    sessions: sessionmaker[Session], executor_says: str
) -> None:
    clock, _, _ = _claimed_by_a_replica_that_died(sessions)
    executor = JobLike()
    executor.seen = (
        Inspection(state="unknown")
        if executor_says == "unknown"
        else Inspection(state="gone", evidence=dict(NO_TRACE.evidence))
    )
    b = make_loop(sessions, executor, clock, **FAST)
    _tick(b, clock, 15)
    with sessions() as session:
        assert ti_row(session, "unstarted", "t").state == TaskState.FAILED
    assert executor.started == []


def test_replicas_sweeping_at_once_queue_the_try_once(sessions: sessionmaker[Session]) -> None:
    clock, a, ti = _claimed_by_a_replica_that_died(sessions)
    restart = housekeeping.Restart((ti.id, 1), a.job_id, f"job-{ti.id}-1")
    with sessions() as session:
        starts_before = session.execute(select(func.count()).select_from(Outbox)).scalar_one()
    for _ in range(2):  # two replicas that both planned it
        with sessions() as session:
            taken = housekeeping.restart_tries(
                session, [restart], job_id=a.job_id + 1, now=clock.now
            )
            session.commit()
        assert taken == ([restart] if _ == 0 else [])
    with sessions() as session:
        row = ti_row(session, "unstarted", "t")
        assert (row.state, row.try_number, row.running_by_job_id) == (TaskState.QUEUED, 1, None)
        assert row.external_id is None
        assert row.start_date is None
        first = session.get(TaskTry, (ti.id, 1))
        assert first is not None
        assert first.state == TaskState.QUEUED
        assert "died after claiming this try and before starting it" in (first.reason or "")
        starts = session.execute(select(func.count()).select_from(Outbox)).scalar_one()
        assert starts == starts_before + 1


def test_the_replica_taken_for_dead_releases_the_queued_again_try_and_does_not_kill_it(
    sessions: sessionmaker[Session],
) -> None:
    """Not dead after all (its database link was down): its pending start may have made the
    Job that the new owner now watches, so it lets go instead of deleting it."""
    clock, a, ti = _claimed_by_a_replica_that_died(sessions)
    restart = housekeeping.Restart((ti.id, 1), a.job_id, f"job-{ti.id}-1")
    with sessions() as session:
        housekeeping.restart_tries(session, [restart], job_id=a.job_id + 1, now=clock.now)
        session.commit()
    with sessions() as session:
        fence = housekeeping.heartbeat_tries(
            session, {(ti.id, 1): f"job-{ti.id}-1"}, a.job_id, clock.now, refresh=False
        )
    assert fence == housekeeping.Fence(kill=[], release=[(ti.id, 1)])


@pytest.mark.parametrize(
    ("owner", "fenced"),
    [
        # Adopted by replica B and ended under it: B reported it and keeps its Job.
        ("other", "release"),
        # Ended while A still owned it (a zombie verdict, a run's timeout): A stops it.
        ("same", "kill"),
    ],
)
def test_a_try_that_ended_is_killed_by_the_replica_taken_for_dead_only_if_it_was_its_own(
    sessions: sessionmaker[Session], owner: str, fenced: str
) -> None:
    """Replica A, taken for dead, comes back after its try succeeded: if another replica
    had adopted it, A lets go (killing it deleted that replica's finished Job: the
    chart's pod-kill test found tries with no Job); if the try was still A's, A kills it."""
    clock, a, ti = _claimed_by_a_replica_that_died(sessions)
    new_owner = a.job_id + 1 if owner == "other" else a.job_id
    with sessions() as session:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id == ti.id)
            .values(state=TaskState.SUCCESS, running_by_job_id=new_owner)
        )
        session.commit()
    with sessions() as session:
        fence = housekeeping.heartbeat_tries(
            session, {(ti.id, 1): f"job-{ti.id}-1"}, a.job_id, clock.now, refresh=False
        )
    expected = {"release": housekeeping.Fence(kill=[], release=[(ti.id, 1)])}
    expected["kill"] = housekeeping.Fence(kill=[(ti.id, 1)], release=[])
    assert fence == expected[fenced]
