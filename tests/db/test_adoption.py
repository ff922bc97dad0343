"""A dead replica's tries are adopted, reported or declared zombies: never reset while alive.

Two replicas share one machine and one log directory, as local-executor
replicas do. Replica A starts a try and then "dies" (its job stops
heartbeating and its executor forgets the process, which keeps running, as a
pod would). Replica B must adopt the live try and report how it ends, report a
try that ended while nobody watched, and declare a zombie only when the process
is gone without a result.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import TaskTry
from sluice.executors.local import LocalExecutor
from sluice.executors.taskrun import VIEW
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.states import RunState, TaskState
from tests.support import (
    FakeClock,
    make_loop,
    manifest,
    register,
    runs,
    silence_replica,
    ti_row,
    trigger,
)

FAST = {"zombie_threshold": 10, "zombie_check_interval": 1, "scheduler_dead_after": 10}


def _replica_a_starts(
    sessions: sessionmaker[Session], tmp_path: Path, script: str
) -> tuple[FakeClock, SchedulerLoop, int]:
    clock = FakeClock()
    register(
        sessions,
        manifest(
            "adopt",
            [
                {
                    "name": "t",
                    "command": ["sh", "-c"],
                    "args": [script],
                    "retries": 1,
                    "retryDelay": "0s",
                }
            ],
        ),
        clock.now,
    )
    trigger(sessions, "adopt", clock.now)
    a = make_loop(sessions, LocalExecutor(tmp_path), clock, **FAST)
    for _ in range(3):
        a.tick()
    (pid,) = [entry.pid for entry in a.executor._running.values()]  # type: ignore[attr-defined]
    # A dies: its executor forgets the try (the process lives on) and it stops heartbeating.
    a.executor._running.clear()  # type: ignore[attr-defined]
    with sessions() as session:
        silence_replica(session, a.job_id, clock.now)
        session.commit()
    return clock, a, pid


def _tick_until(
    loop: SchedulerLoop,
    clock: FakeClock,
    sessions: sessionmaker[Session],
    state: TaskState,
    seconds: float = 15,
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        clock.advance(seconds=2)
        report = loop.tick()
        assert not report.errors, report.errors
        with sessions() as session:
            if ti_row(session, "adopt", "t").state == state:
                return
        time.sleep(0.05)
    raise AssertionError(f"task never reached {state}")


def test_a_live_try_of_a_dead_replica_is_adopted_and_reported(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    clock, _, _ = _replica_a_starts(sessions, tmp_path, "sleep 1.5; exit 0")
    clock.advance(seconds=30)
    b = make_loop(sessions, LocalExecutor(tmp_path), clock, **FAST)
    clock.advance(seconds=2)
    b.tick()
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.state == TaskState.RUNNING, ti.evidence
        assert ti.running_by_job_id == b.job_id  # adopted, not reset
        assert ti.try_number == 1
    _tick_until(b, clock, sessions, TaskState.SUCCESS)
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.try_number == 1  # the same try finished: no retry was needed
        assert runs(session, "adopt")[0].state in (RunState.RUNNING, RunState.SUCCESS)


def test_a_try_that_ended_unwatched_is_reported_from_its_result(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    clock, _, pid = _replica_a_starts(sessions, tmp_path, "sleep 1; exit 0")
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # reap: the dead replica would never do it
        except ChildProcessError:
            break
        time.sleep(0.02)
    clock.advance(seconds=30)
    b = make_loop(sessions, LocalExecutor(tmp_path), clock, **FAST)
    _tick_until(b, clock, sessions, TaskState.SUCCESS)
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.try_number == 1
        assert ti.evidence is None  # not a zombie
        assert ti.reason is not None
        assert "ended while its scheduler" in ti.reason


def test_a_try_killed_while_unwatched_is_a_zombie_with_evidence(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    clock, a, pid = _replica_a_starts(sessions, tmp_path, "sleep 30")
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    clock.advance(seconds=30)
    b = make_loop(sessions, LocalExecutor(tmp_path), clock, **FAST)
    _tick_until(b, clock, sessions, TaskState.UP_FOR_RETRY)
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.evidence is not None
        assert ti.evidence["executor_says"] == "gone"
        assert ti.evidence["owner_job"] == a.job_id
        assert ti.evidence["verdict"] == "the process is gone and left no result"
    b.executor.shutdown()


def _replica_a_claims(
    sessions: sessionmaker[Session], tmp_path: Path, script: str, *, start: bool
) -> tuple[FakeClock, SchedulerLoop]:
    """Replica A claims the try (and starts it if `start`), then dies before any
    heartbeat of the try: before the fix, its external id was still NULL then."""
    clock = FakeClock()
    register(
        sessions,
        manifest(
            "adopt",
            [
                {
                    "name": "t",
                    "command": ["sh", "-c"],
                    "args": [script],
                    "retries": 1,
                    "retryDelay": "0s",
                }
            ],
        ),
        clock.now,
    )
    trigger(sessions, "adopt", clock.now)
    executor = LocalExecutor(tmp_path)
    a = make_loop(sessions, executor, clock, **FAST)
    a.handover._sync_executor = lambda report: 0  # type: ignore[method-assign]  # dies first
    a.housekeeping._housekeeping = lambda now, report: None  # type: ignore[method-assign]
    if not start:
        executor.start = lambda launches: None  # type: ignore[method-assign]
    for _ in range(3):
        a.tick()
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.state == TaskState.RUNNING
        assert ti.external_id == f"local:{VIEW}:try:{ti.id}:1"  # recorded by the claim
    executor._running.clear()  # A is gone; the process (if any) lives on
    with sessions() as session:
        silence_replica(session, a.job_id, clock.now)
        session.commit()
    return clock, a


def test_a_try_of_a_replica_killed_between_claim_and_heartbeat_is_adopted(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    """Issue 11, defect 5: the claim records an id that finds the try through its pid
    file, so the live process is adopted, not declared a zombie and run again."""
    clock, _ = _replica_a_claims(sessions, tmp_path, "sleep 1.5; exit 0", start=True)
    clock.advance(seconds=30)
    b = make_loop(sessions, LocalExecutor(tmp_path), clock, **FAST)
    clock.advance(seconds=2)
    b.tick()
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert (ti.state, ti.try_number) == (TaskState.RUNNING, 1)
        assert ti.running_by_job_id == b.job_id  # adopted
        assert ti.evidence is None
    _tick_until(b, clock, sessions, TaskState.SUCCESS)
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.try_number == 1  # the same try ended: nothing ran twice
        assert ti.reason is None  # reported by its adopter, not from a result file


def test_a_try_claimed_by_a_replica_that_died_before_starting_it_is_a_zombie(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    clock, _ = _replica_a_claims(sessions, tmp_path, "exit 0", start=False)
    clock.advance(seconds=30)
    b = make_loop(sessions, LocalExecutor(tmp_path), clock, **FAST)
    _tick_until(b, clock, sessions, TaskState.UP_FOR_RETRY)
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.evidence is not None
        assert ti.evidence["executor_says"] == "gone"
        assert ti.evidence["seen"]["started"] is False
        assert ti.evidence["verdict"] == (
            "the try was claimed but its process never started (its replica died first)"
        )
    _tick_until(b, clock, sessions, TaskState.SUCCESS)
    with sessions() as session:
        ti = ti_row(session, "adopt", "t")
        assert ti.try_number == 2
        assert ti.evidence is None  # the instance describes its current try
        first = session.get(TaskTry, (ti.id, 1))
        assert first is not None
        # The retried zombie's verdict is kept with its try (migration 0007).
        assert first.state == TaskState.FAILED
        assert first.reason is not None
        assert first.reason.startswith("zombie: ")
        assert first.evidence is not None
        assert first.evidence["executor_says"] == "gone"
        assert first.evidence["threshold_seconds"] == FAST["zombie_threshold"]
        assert first.evidence["last_heartbeat"]
