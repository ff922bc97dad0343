"""The local executor with real short subprocesses and a fake monotonic clock.

Outcomes come from exit codes, the run context reaches the task's environment,
output lands in the try's log file, and every way a try is stopped (execution
timeout, kill, shutdown) takes its whole process group with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice.executors.base import TaskEvent, TaskLaunch
from sluice.executors.local import KILL_GRACE_SECONDS, LocalExecutor
from sluice.spec.states import TaskState

BOUND = 5.0  # seconds any wait in this file may take before it counts as a failure
T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def launch(
    script: str | None = None,
    *,
    ti_id: int = 1,
    try_number: int = 1,
    command: list[str] | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    conf: dict[str, Any] | None = None,
    execution_timeout: timedelta | None = None,
    skip_on_exit_code: frozenset[int] = frozenset({99}),
    task_id: str = "work",
) -> TaskLaunch:
    if script is not None:
        command, args = ["sh", "-c"], [script]
    return TaskLaunch(
        ti_id=ti_id,
        try_number=try_number,
        dag_id="demo",
        task_id=task_id,
        run_id="manual__2026-12-01T00:00:00+00:00",
        logical_date=T0,
        data_interval_start=T0 - timedelta(hours=1),
        data_interval_end=T0,
        conf=conf or {},
        image="busybox:1.36",
        command=command if command is not None else [],
        args=args if args is not None else [],
        env=env or {},
        execution_timeout=execution_timeout,
        skip_on_exit_code=skip_on_exit_code,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def executor(tmp_path: Path, clock: FakeClock) -> Iterator[LocalExecutor]:
    ex = LocalExecutor(tmp_path / "logs", clock=clock)
    yield ex
    ex.stop_all("test over")


def wait_for_events(ex: LocalExecutor, count: int = 1) -> list[TaskEvent]:
    events: list[TaskEvent] = []
    deadline = time.monotonic() + BOUND
    while len(events) < count:
        events.extend(ex.poll())
        if len(events) >= count:
            break
        assert time.monotonic() < deadline, f"only {events} after {BOUND}s"
        time.sleep(0.02)
    return events


def run_one(ex: LocalExecutor, try_: TaskLaunch) -> TaskEvent:
    ex.start([try_])
    (event,) = wait_for_events(ex)
    return event


def read_pid(path: Path) -> int:
    deadline = time.monotonic() + BOUND
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError):
            text = path.read_text()
            if text.endswith("\n"):
                return int(text)
        assert time.monotonic() < deadline, f"{path} was not written within {BOUND}s"
        time.sleep(0.02)


def is_gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its (re)parent to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(*pids: int) -> bool:
    deadline = time.monotonic() + BOUND
    while not all(is_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def reaper() -> Iterator[list[int]]:
    """Pids to SIGKILL after the test, so a failing test does not leave sleeps behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# --- outcomes from exit codes -------------------------------------------------------------


def test_exit_zero_is_success(executor: LocalExecutor) -> None:
    event = run_one(executor, launch("exit 0", ti_id=7, try_number=2))
    assert event == TaskEvent(7, 2, TaskState.SUCCESS, 0)
    assert executor.alive() == []


def test_exit_code_in_skip_on_exit_code_is_skipped(executor: LocalExecutor) -> None:
    event = run_one(executor, launch("exit 99", skip_on_exit_code=frozenset({99})))
    assert event.state == TaskState.SKIPPED
    assert event.exit_code == 99


def test_skip_code_not_listed_is_a_failure(executor: LocalExecutor) -> None:
    event = run_one(executor, launch("exit 99", skip_on_exit_code=frozenset()))
    assert event.state == TaskState.FAILED
    assert event.reason == "exit code 99"


def test_nonzero_exit_is_failed_with_the_code(executor: LocalExecutor) -> None:
    event = run_one(executor, launch("exit 3"))
    assert event.state == TaskState.FAILED
    assert event.exit_code == 3
    assert event.reason == "exit code 3"


# --- environment and log ------------------------------------------------------------------


def test_context_and_task_env_reach_the_task(executor: LocalExecutor) -> None:
    try_ = launch(
        "env",
        ti_id=3,
        try_number=2,
        env={"GREETING": "hello there", "EMPTY": ""},
        conf={"b": [1, 2], "a": "x"},
        task_id="extract",
    )
    assert run_one(executor, try_).state == TaskState.SUCCESS
    lines = executor.log_path(try_).read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert env["SLUICE_DAG"] == "demo"
    assert env["SLUICE_TASK"] == "extract"
    assert env["SLUICE_RUN_ID"] == "manual__2026-12-01T00:00:00+00:00"
    assert env["SLUICE_LOGICAL_DATE"] == "2026-12-01T00:00:00+00:00"
    assert env["SLUICE_DATA_INTERVAL_START"] == "2026-11-30T23:00:00+00:00"
    assert env["SLUICE_DATA_INTERVAL_END"] == "2026-12-01T00:00:00+00:00"
    assert env["SLUICE_TRY_NUMBER"] == "2"
    assert json.loads(env["SLUICE_CONF"]) == {"a": "x", "b": [1, 2]}
    assert env["GREETING"] == "hello there"
    assert env["EMPTY"] == ""


def test_empty_conf_is_an_empty_json_object(executor: LocalExecutor) -> None:
    try_ = launch('printf "%s\\n" "$SLUICE_CONF"')
    assert run_one(executor, try_).state == TaskState.SUCCESS
    assert json.loads(executor.log_path(try_).read_text()) == {}


def test_stdout_and_stderr_land_in_the_log(executor: LocalExecutor) -> None:
    try_ = launch("echo to-stdout; echo to-stderr >&2; exit 3")
    assert run_one(executor, try_).state == TaskState.FAILED
    log = executor.log_path(try_).read_text()
    assert "to-stdout" in log
    assert "to-stderr" in log


def test_each_try_has_its_own_log(executor: LocalExecutor, tmp_path: Path) -> None:
    first, second = launch("echo first", try_number=1), launch("echo second", try_number=2)
    run_one(executor, first)
    run_one(executor, second)
    assert executor.log_path(first) != executor.log_path(second)
    assert executor.log_path(first).read_text() == "first\n"
    assert executor.log_path(second).read_text() == "second\n"
    assert executor.log_path(first).is_relative_to(tmp_path / "logs")
    # ':' and '+' of the run id do not reach the file system
    assert ":" not in str(executor.log_path(first).relative_to(tmp_path))
    assert "+" not in str(executor.log_path(first).relative_to(tmp_path))


# --- starting -----------------------------------------------------------------------------


def test_missing_program_fails_with_could_not_start(executor: LocalExecutor) -> None:
    event = run_one(executor, launch(command=["/nonexistent/sluice-no-such-program"]))
    assert event.state == TaskState.FAILED
    assert event.reason is not None
    assert "could not start" in event.reason
    assert "/nonexistent/sluice-no-such-program" in event.reason
    assert executor.alive() == []


def test_empty_command_and_args_fail_naming_command(executor: LocalExecutor) -> None:
    event = run_one(executor, launch(command=[], args=[], ti_id=4, try_number=1))
    assert (event.ti_id, event.try_number, event.state) == (4, 1, TaskState.FAILED)
    assert event.reason is not None
    assert "command" in event.reason
    assert executor.alive() == []


def test_args_alone_are_the_argv(executor: LocalExecutor) -> None:
    try_ = launch(command=[], args=["sh", "-c", "echo from-args"])
    assert run_one(executor, try_).state == TaskState.SUCCESS
    assert executor.log_path(try_).read_text() == "from-args\n"


def test_starting_a_running_try_again_is_a_no_op(executor: LocalExecutor, tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    try_ = launch(f"echo started >> {marker}; sleep 0.3")
    executor.start([try_])
    executor.start([try_])
    assert executor.alive() == [try_.key]
    wait_for_events(executor)
    assert marker.read_text() == "started\n"


# --- execution timeout ----------------------------------------------------------------------


def test_execution_timeout_kills_the_whole_process_group(
    executor: LocalExecutor, clock: FakeClock, tmp_path: Path, reaper: list[int]
) -> None:
    shell_pid, child_pid = tmp_path / "shell.pid", tmp_path / "child.pid"
    try_ = launch(
        f"sleep 60 & echo $! > {child_pid}; echo $$ > {shell_pid}; sleep 60",
        execution_timeout=timedelta(seconds=30),
    )
    executor.start([try_])
    shell, child = read_pid(shell_pid), read_pid(child_pid)
    reaper.extend([shell, child])
    clock.advance(29)
    assert executor.poll() == []  # not yet past the timeout
    assert executor.alive() == [try_.key]
    clock.advance(2)
    (event,) = wait_for_events(executor)
    assert event.state == TaskState.FAILED
    assert event.reason is not None
    assert "execution timeout" in event.reason
    assert wait_gone(shell, child), "the shell or its background child survived the timeout"
    assert executor.alive() == []


def test_execution_timeout_sigkills_a_group_that_ignores_sigterm(
    executor: LocalExecutor, clock: FakeClock, tmp_path: Path, reaper: list[int]
) -> None:
    child_pid = tmp_path / "child.pid"
    try_ = launch(
        f"trap '' TERM; sleep 60 & echo $! > {child_pid}; wait",
        execution_timeout=timedelta(seconds=1),
    )
    executor.start([try_])
    child = read_pid(child_pid)
    reaper.append(child)
    clock.advance(2)
    assert executor.poll() == []  # SIGTERM sent, and ignored
    time.sleep(0.2)
    assert executor.poll() == []
    assert not is_gone(child)
    clock.advance(KILL_GRACE_SECONDS + 1)
    (event,) = wait_for_events(executor)
    assert event.state == TaskState.FAILED
    assert event.reason is not None
    assert "execution timeout" in event.reason
    assert wait_gone(child)


def test_execution_timeout_also_kills_children_that_ignore_sigterm(
    executor: LocalExecutor, clock: FakeClock, tmp_path: Path, reaper: list[int]
) -> None:
    """The shell dies of SIGTERM, its child ignores it: the grace-period SIGKILL must still come.

    Otherwise the timed-out try keeps running beside its retry.
    """
    child_pid, ready = tmp_path / "child.pid", tmp_path / "ready"
    try_ = launch(
        f"(trap '' TERM; echo 1 > {ready}; exec sleep 60) & echo $! > {child_pid}; sleep 60",
        execution_timeout=timedelta(seconds=1),
    )
    executor.start([try_])
    child = read_pid(child_pid)
    reaper.append(child)
    read_pid(ready)  # the child ignores SIGTERM from here on
    clock.advance(2)
    (event,) = wait_for_events(executor)
    assert event.state == TaskState.FAILED
    assert event.reason is not None
    assert "execution timeout" in event.reason
    clock.advance(KILL_GRACE_SECONDS + 1)
    executor.poll()
    executor.stop_all("test over")
    assert wait_gone(child), "a group member that ignored SIGTERM outlived the timed-out try"


def test_no_timeout_means_the_clock_does_not_matter(
    executor: LocalExecutor, clock: FakeClock
) -> None:
    try_ = launch("sleep 0.2")
    executor.start([try_])
    clock.advance(10_000)
    assert executor.poll() == []
    (event,) = wait_for_events(executor)
    assert event.state == TaskState.SUCCESS


# --- kill, shutdown, alive ------------------------------------------------------------------


def test_alive_lists_running_tries(executor: LocalExecutor) -> None:
    fast = launch("exit 0", ti_id=1)
    slow = launch("sleep 60", ti_id=2, try_number=3)
    executor.start([fast, slow])
    assert set(executor.alive()) == {(1, 1), (2, 3)}
    (event,) = wait_for_events(executor)
    assert event.key == (1, 1)
    assert executor.alive() == [(2, 3)]


def test_kill_stops_the_group_and_forgets_the_try(
    executor: LocalExecutor, tmp_path: Path, reaper: list[int]
) -> None:
    shell_pid, child_pid = tmp_path / "shell.pid", tmp_path / "child.pid"
    victim = launch(f"sleep 60 & echo $! > {child_pid}; echo $$ > {shell_pid}; sleep 60", ti_id=1)
    other = launch("sleep 60", ti_id=2)
    executor.start([victim, other])
    shell, child = read_pid(shell_pid), read_pid(child_pid)
    reaper.extend([shell, child])
    executor.kill(victim.key, "fenced: the database has it failed")
    assert executor.alive() == [other.key]
    assert wait_gone(shell, child)
    assert executor.poll() == []  # a killed try is not reported
    assert "fenced: the database has it failed" in executor.log_path(victim).read_text()
    executor.kill(victim.key, "again")  # unknown keys are ignored
    executor.kill((99, 1), "never started")
    assert executor.alive() == [other.key]


def test_stop_all_kills_everything(
    executor: LocalExecutor, tmp_path: Path, reaper: list[int]
) -> None:
    pids: list[Path] = []
    launches = []
    for i in range(3):
        child_pid, shell_pid = tmp_path / f"child{i}.pid", tmp_path / f"shell{i}.pid"
        pids += [child_pid, shell_pid]
        launches.append(
            launch(f"sleep 60 & echo $! > {child_pid}; echo $$ > {shell_pid}; sleep 60", ti_id=i)
        )
    executor.start(launches)
    running = [read_pid(p) for p in pids]
    reaper.extend(running)
    assert len(executor.alive()) == 3
    executor.stop_all("standalone exiting")
    assert executor.alive() == []
    assert wait_gone(*running)
    assert executor.poll() == []


def test_shutdown_hands_tries_over_alive_and_another_executor_adopts_them(
    executor: LocalExecutor, tmp_path: Path, clock: FakeClock, reaper: list[int]
) -> None:
    """A graceful stop (SIGTERM, a rolling restart) must not kill the tries (issue 11, 6)."""
    shell_pid = tmp_path / "shell.pid"
    try_ = launch(f"echo $$ > {shell_pid}; sleep 1; exit 3", ti_id=5)
    executor.start([try_])
    pid = read_pid(shell_pid)
    reaper.append(pid)
    (external_id,) = executor.external_ids().values()
    executor.shutdown()
    assert executor.alive() == []
    assert executor.inspect(try_.key, external_id).state == "alive"  # still running
    other = LocalExecutor(tmp_path / "logs", clock=clock)
    other.adopt(try_.key, external_id, elapsed=0.1, timeout=None, skip_on_exit_code=frozenset())
    (event,) = wait_for_events(other)
    assert (event.key, event.state, event.exit_code) == (try_.key, TaskState.FAILED, 3)


# --- finding a try from its claim (issue 11, defect 5) ------------------------------------


def test_the_external_id_is_known_before_the_start_and_names_the_try(
    executor: LocalExecutor,
) -> None:
    try_ = launch("sleep 0.2", ti_id=8, try_number=3)
    planned = executor.planned_external_id(try_)
    assert planned.startswith("local:")
    assert planned.endswith(":try:8:3")
    executor.start([try_])
    assert executor.external_ids() == {try_.key: planned}
    wait_for_events(executor)


def test_inspect_finds_a_try_through_its_pid_file(
    executor: LocalExecutor, tmp_path: Path, clock: FakeClock, reaper: list[int]
) -> None:
    """Another executor with only the planned id (what the claim recorded) sees the try
    alive, adopts it, and reports its end; once ended, inspect reads the result."""
    shell_pid = tmp_path / "shell.pid"
    try_ = launch(f"echo $$ > {shell_pid}; sleep 1; exit 4", ti_id=9)
    planned = executor.planned_external_id(try_)
    executor.start([try_])
    reaper.append(read_pid(shell_pid))
    pid_file = json.loads(executor.pid_path(try_.key).read_text())
    (wrapper_pid,) = [e.pid for e in executor._running.values()]  # type: ignore[attr-defined]
    assert pid_file["pid"] == wrapper_pid
    executor.shutdown()  # the replica "dies": nobody watches the try any more
    other = LocalExecutor(tmp_path / "logs", clock=clock)
    seen = other.inspect(try_.key, planned)
    assert seen.state == "alive"
    assert seen.evidence["pid"] == wrapper_pid
    other.adopt(try_.key, planned, elapsed=0.1, timeout=None, skip_on_exit_code=frozenset())
    (event,) = wait_for_events(other)
    assert (event.key, event.state, event.exit_code) == (try_.key, TaskState.FAILED, 4)
    after = other.inspect(try_.key, planned)
    assert (after.state, after.exit_code) == ("gone", 4)


def test_a_claimed_try_that_never_started_is_gone_and_says_so(executor: LocalExecutor) -> None:
    try_ = launch("true", ti_id=10)
    seen = executor.inspect(try_.key, executor.planned_external_id(try_))
    assert seen.state == "gone"
    assert seen.exit_code is None
    assert seen.evidence["started"] is False


def test_another_view_cannot_vouch_but_reads_a_recorded_result(
    executor: LocalExecutor,
) -> None:
    """A try of another machine or PID namespace is "unknown", unless it left a result."""
    running = launch("sleep 5", ti_id=11)
    elsewhere = "local:other-host/4026531836:try:11:1"
    assert executor.inspect(running.key, elsewhere).state == "unknown"
    done = launch("exit 0", ti_id=12)
    run_one(executor, done)
    seen = executor.inspect(done.key, "local:other-host/4026531836:try:12:1")
    assert (seen.state, seen.exit_code) == ("gone", 0)


def test_ids_written_before_planned_ids_are_still_understood(
    executor: LocalExecutor, tmp_path: Path, reaper: list[int]
) -> None:
    import socket

    shell_pid = tmp_path / "shell.pid"
    try_ = launch(f"echo $$ > {shell_pid}; sleep 5", ti_id=13)
    executor.start([try_])
    reaper.append(read_pid(shell_pid))
    (entry,) = executor._running.values()  # type: ignore[attr-defined]
    legacy = f"local:{socket.gethostname()}:{entry.pid}:{entry.start_time}"
    assert executor.inspect(try_.key, legacy).state == "alive"
    assert executor.inspect(try_.key, f"local:{socket.gethostname()}:{entry.pid}:1").state == (
        "gone"
    )


# --- leases: a try nobody vouches for stops itself (ADR 0015) ------------------------------


def test_a_try_whose_lease_is_not_renewed_stops_itself_and_says_why(
    tmp_path: Path, clock: FakeClock, reaper: list[int]
) -> None:
    ex = LocalExecutor(tmp_path / "logs", clock=clock, lease=1.0)
    shell_pid = tmp_path / "shell.pid"
    try_ = launch(f"echo $$ > {shell_pid}; sleep 30", ti_id=20)
    ex.start([try_])
    pid = read_pid(shell_pid)
    reaper.append(pid)
    assert wait_gone(pid)  # within the lease and a half-second check
    (event,) = wait_for_events(ex)
    assert event.state == TaskState.FAILED
    assert event.reason == "lease expired: no heartbeat recorded for 1s"
    seen = LocalExecutor(tmp_path / "logs", clock=clock, lease=1.0).inspect(
        try_.key, ex.planned_external_id(try_)
    )
    assert (seen.state, seen.exit_code) == ("gone", -signal.SIGKILL)
    assert seen.reason == "lease expired: no heartbeat recorded for 1s"


def test_recorded_heartbeats_keep_a_leased_try_running(
    tmp_path: Path, clock: FakeClock, reaper: list[int]
) -> None:
    ex = LocalExecutor(tmp_path / "logs", clock=clock, lease=1.0)
    try_ = launch("sleep 2.5; exit 0", ti_id=21)
    ex.start([try_])
    deadline = time.monotonic() + BOUND
    events: list[TaskEvent] = []
    while not events:
        ex.heartbeats_recorded([try_.key], time.monotonic())
        events = ex.poll()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert events[0].state == TaskState.SUCCESS


def test_a_try_started_long_after_its_claim_does_not_run(tmp_path: Path, clock: FakeClock) -> None:
    """Its replica paused between the claim and the start: a retry may run by now."""
    ex = LocalExecutor(tmp_path / "logs", clock=clock, lease=1.0)
    marker = tmp_path / "ran"
    try_ = launch(f"touch {marker}", ti_id=22)
    late = dataclasses.replace(try_, claimed_at=time.monotonic() - 5)
    ex.start([late])
    (event,) = wait_for_events(ex)
    assert event.state == TaskState.FAILED
    assert event.reason == "lease expired before the start: no heartbeat recorded for 1s"
    assert not marker.exists()


def test_a_try_out_of_sight_is_unknown_until_its_lease_must_have_run_out(
    tmp_path: Path, clock: FakeClock
) -> None:
    ex = LocalExecutor(tmp_path / "logs", clock=clock, lease=12.0)
    seen = ex.inspect((30, 1), "local:other-host/4026531836:try:30:1")
    assert seen.state == "unknown"
    assert seen.stops_within == 15.0
    never = ex.inspect((31, 1), ex.planned_external_id(launch("true", ti_id=31)))
    assert never.state == "gone"
    assert never.stops_within == 15.0  # its replica may still start it, until then
