"""The local executor: each try is a subprocess group on this machine.

Used by `sluice standalone`, `sluice dags test` and the chaos harness. The
task's `command` and `args` run under the `taskrun` wrapper with the run
context in the environment (SLUICE_DAG, SLUICE_RUN_ID, SLUICE_LOGICAL_DATE,
...); the exit code decides the outcome (0 success, one of `skipOnExitCode`
skipped, anything else failed). On `executionTimeout` the whole group gets
SIGTERM, then SIGKILL after a grace period.

Like a pod, a try outlives the replica that started it. Its external id names
the try, not a process (`local:VIEW:try:TI:TRY`, where VIEW is the machine and
the PID namespace), so the claim records it before the process exists
(`planned_external_id`): a replica killed between the claim and its first
heartbeat leaves a try that can still be found. The wrapper writes a pid file
keyed by the try before the command starts, and a result file when it ends;
through them any replica with the same view tells whether the try still runs,
adopts it, and reads how it ended (`inspect`, `adopt`); the pid's start time
guards against a reused pid. A replica with another view (another machine or
PID namespace) can read a recorded result, and otherwise says "unknown".

With a lease (`sluice scheduler` always sets one, ADR 0015), a try stops itself
once no replica has recorded its heartbeat for `lease` seconds: the replica
that owns it renews the lease after each heartbeat the database took, an
adopter from the moment it adopts. So a try that nobody can see (its replica
paused or dead, on another machine or PID namespace) is gone once its
heartbeat is older than the lease, and `inspect` says so (`stops_within`): a
zombie verdict waits that long, and a retry never runs beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.executors.taskrun import VIEW, proc_start_time, proc_stat, write_json, write_lease
from sluice.spec.states import TaskState

KILL_GRACE_SECONDS = 5.0
HOSTNAME = socket.gethostname()
# Past its lease, a try's wrapper notices within half a second and kills it at once; a
# replica that cannot see the try waits this much longer than the lease before a verdict.
LEASE_MARGIN_SECONDS = 3.0


@dataclass
class _Running:
    key: tuple[int, int]
    pid: int
    start_time: str | None  # the pid's start time, to tell it from a reused pid
    external_id: str
    started: float
    timeout: float | None
    skip_on_exit_code: frozenset[int]
    process: subprocess.Popen[bytes] | None = None  # None when adopted from another replica
    log: IO[bytes] | None = None
    terminate_sent: float | None = None
    timed_out: bool = False


class LocalExecutor:
    name = "local"
    pods_heartbeat = False  # the scheduler heartbeats the tries it runs

    def __init__(
        self,
        log_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        lease: float | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.results_dir = log_dir / ".results"
        self._clock = clock
        self.lease = lease
        self._running: dict[tuple[int, int], _Running] = {}
        self._finished: list[TaskEvent] = []

    def log_path(self, launch: TaskLaunch) -> Path:
        return log_file(
            self.log_dir, launch.dag_id, launch.run_id, launch.task_id, launch.try_number
        )

    def result_path(self, key: tuple[int, int]) -> Path:
        return self.results_dir / f"{key[0]}-{key[1]}.json"

    def pid_path(self, key: tuple[int, int]) -> Path:
        return self.results_dir / f"{key[0]}-{key[1]}.pid"

    def lease_path(self, key: tuple[int, int]) -> Path:
        return self.results_dir / f"{key[0]}-{key[1]}.lease"

    @property
    def stops_within(self) -> float | None:
        """How long after its last recorded heartbeat a try of ours is sure to be gone."""
        return None if self.lease is None else self.lease + LEASE_MARGIN_SECONDS

    # -- starting -------------------------------------------------------------------

    def planned_external_id(self, launch: TaskLaunch) -> str:
        """Known before the process exists: the claim records it (see `inspect`)."""
        return external_id_for(launch.key)

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        for launch in launches:
            if launch.key in self._running:
                continue
            problem = _cannot_start([*launch.command, *launch.args])
            if problem:
                self._finished.append(
                    TaskEvent(launch.ti_id, launch.try_number, TaskState.FAILED, reason=problem)
                )
                continue
            self._spawn(launch)

    def _spawn(self, launch: TaskLaunch) -> None:
        path = self.log_path(launch)
        path.parent.mkdir(parents=True, exist_ok=True)
        result = self.result_path(launch.key)
        result.unlink(missing_ok=True)
        pid_file = self.pid_path(launch.key)
        pid_file.unlink(missing_ok=True)
        log = path.open("ab")
        wrapper = [
            sys.executable,
            "-m",
            "sluice.executors.taskrun",
            "--result",
            str(result),
            "--pid-file",
            str(pid_file),
        ]
        if self.lease is not None:
            lease = self.lease_path(launch.key)
            # From the claim on: a try started long after it (its replica paused between
            # the two) finds its lease already spent and does not run.
            write_lease(lease, launch.claimed_at or time.monotonic())
            wrapper += ["--lease", str(lease), "--lease-seconds", f"{self.lease:g}"]
        wrapper.append("--")
        process = subprocess.Popen(
            [*wrapper, *launch.command, *launch.args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                **launch.env,
                **launch.context_env(),
                "SLUICE_SCHEDULER_PID": str(os.getpid()),
            },
            start_new_session=True,
        )
        start_time = proc_start_time(process.pid)
        timeout = launch.execution_timeout.total_seconds() if launch.execution_timeout else None
        # Watched from here on, whatever fails next (`alive` lists it: the loop knows it
        # started).
        self._running[launch.key] = _Running(
            key=launch.key,
            pid=process.pid,
            start_time=start_time,
            external_id=external_id_for(launch.key),
            started=self._clock(),
            timeout=timeout,
            skip_on_exit_code=launch.skip_on_exit_code,
            process=process,
            log=log,
        )
        # The wrapper writes the same file before it runs the command (this replica may die
        # first); written here too, it is there as soon as the process is.
        write_json(pid_file, {"pid": process.pid, "start": start_time, "view": VIEW})

    # -- watching -------------------------------------------------------------------

    def poll(self) -> list[TaskEvent]:
        now = self._clock()
        events, self._finished = self._finished, []
        for key, entry in list(self._running.items()):
            code = self._exit_code(entry)
            if code is None:
                self._enforce_timeout(entry, now)
                continue
            del self._running[key]
            # As in a pod, nothing outlives the try's main process (a child that
            # ignored SIGTERM on timeout included); the group id stays reserved while
            # any member lives, so this cannot hit an unrelated process.
            _signal_group(entry.pid, signal.SIGKILL)
            if entry.log is not None:
                entry.log.close()
            events.append(self._outcome(entry, code))
        return events

    def _exit_code(self, entry: _Running) -> int | None:
        """How the try ended, or None while it runs."""
        if entry.process is not None:
            code = entry.process.poll()
            if code is None:
                return None
        elif _alive(entry.pid, entry.start_time):
            return None
        recorded = self._recorded_exit(entry.key)
        if recorded is not None:
            return recorded
        if entry.process is not None:
            return entry.process.returncode
        return -signal.SIGKILL  # an adopted try that vanished without a result was killed

    def _recorded_exit(self, key: tuple[int, int]) -> int | None:
        return self._recorded(key)[0]

    def _recorded(self, key: tuple[int, int]) -> tuple[int | None, str | None]:
        """The exit code the wrapper recorded, and why it stopped the try if it did."""
        try:
            found = json.loads(self.result_path(key).read_text())
            reason = found.get("reason")
            return int(found["exit_code"]), reason if isinstance(reason, str) else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None, None

    def _enforce_timeout(self, entry: _Running, now: float) -> None:
        if entry.timeout is None:
            return
        if entry.terminate_sent is None and now - entry.started > entry.timeout:
            entry.timed_out = True
            entry.terminate_sent = now
            _signal_group(entry.pid, signal.SIGTERM)
        elif entry.terminate_sent is not None and now - entry.terminate_sent > KILL_GRACE_SECONDS:
            _signal_group(entry.pid, signal.SIGKILL)

    def _outcome(self, entry: _Running, code: int) -> TaskEvent:
        ti_id, try_number = entry.key
        if entry.timed_out:
            assert entry.timeout is not None
            return TaskEvent(
                ti_id,
                try_number,
                TaskState.FAILED,
                code,
                f"execution timeout: still running after {entry.timeout:g}s",
            )
        if code == 0:
            return TaskEvent(ti_id, try_number, TaskState.SUCCESS, 0)
        if code in entry.skip_on_exit_code:
            return TaskEvent(ti_id, try_number, TaskState.SKIPPED, code, f"exit code {code}")
        stopped = self._recorded(key=entry.key)[1]
        reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return TaskEvent(ti_id, try_number, TaskState.FAILED, code, stopped or reason)

    def alive(self) -> list[tuple[int, int]]:
        return list(self._running)

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {key: entry.external_id for key, entry in self._running.items()}

    def heartbeats_recorded(self, keys: Sequence[tuple[int, int]], at: float) -> None:
        """Renew the leases of these tries (ours; the database took their heartbeats)."""
        if self.lease is None:
            return
        for key in keys:
            if key in self._running and self.lease_path(key).exists():
                with contextlib.suppress(OSError):
                    write_lease(self.lease_path(key), at)

    # -- other replicas' tries ------------------------------------------------------

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        """Is a try (possibly started by another replica) still running here?

        With this executor's view (machine and PID namespace): "alive" while its
        wrapper runs, else "gone" with the recorded exit code if there is one; a
        try whose wrapper never wrote its pid file was claimed but never started.
        With another view, only a recorded result can be read ("gone"); otherwise
        "unknown": nobody here can vouch for it.
        """
        where = _parse_external_id(external_id)
        if where is None:
            return Inspection(state="unknown", evidence={"external_id": external_id})
        view, pid, start_time = where
        if pid is None and view == VIEW:
            found = self._read_pid_file(key)
            if found is not None:
                pid, start_time = found
        evidence: dict[str, Any] = {"view": view, "our_view": VIEW}
        if view == VIEW and pid is not None:
            evidence["pid"] = pid
            if _alive(pid, start_time):
                return Inspection(state="alive", evidence=evidence)
        code, reason = self._recorded(key)
        if code is not None:
            return Inspection(state="gone", exit_code=code, reason=reason, evidence=evidence)
        if view != VIEW:
            # It may run where we cannot see; with a lease, not for long.
            return Inspection(state="unknown", evidence=evidence, stops_within=self.stops_within)
        if pid is None:
            # No pid file: the wrapper never ran. Its replica may still start it (paused
            # between the claim and the start); the lease, counted from the claim, says
            # until when it could.
            evidence["started"] = False
            evidence["pid_file"] = str(self.pid_path(key))
            return Inspection(state="gone", evidence=evidence, stops_within=self.stops_within)
        return Inspection(state="gone", evidence=evidence)

    def _read_pid_file(self, key: tuple[int, int]) -> tuple[int, str | None] | None:
        try:
            found = json.loads(self.pid_path(key).read_text())
            if found.get("view", VIEW) != VIEW:
                return None
            return int(found["pid"]), found.get("start")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def adopt(
        self,
        key: tuple[int, int],
        external_id: str,
        *,
        elapsed: float,
        timeout: float | None,
        skip_on_exit_code: frozenset[int],
    ) -> None:
        """Watch a live try another replica started (it is not our child)."""
        if key in self._running:
            return
        where = _parse_external_id(external_id)
        if where is None:
            raise ValueError(f"not a local try's external id: {external_id!r}")
        _, pid, start_time = where
        if pid is None:
            found = self._read_pid_file(key)
            if found is None:
                raise ValueError(f"try {key} has no pid file ({self.pid_path(key)})")
            pid, start_time = found
        self._running[key] = _Running(
            key=key,
            pid=pid,
            start_time=start_time,
            external_id=external_id,
            started=self._clock() - elapsed,
            timeout=timeout,
            skip_on_exit_code=skip_on_exit_code,
        )

    def release(self, key: tuple[int, int]) -> None:
        """Stop watching a try another replica has adopted, without stopping it."""
        entry = self._running.pop(key, None)
        if entry is not None and entry.log is not None:
            entry.log.close()

    # -- stopping -------------------------------------------------------------------

    def kill(self, key: tuple[int, int], reason: str, external_id: str | None = None) -> None:
        """Stop a try this executor watches; one it does not stops by its lease (ADR 0015)."""
        entry = self._running.pop(key, None)
        if entry is None:
            return
        _signal_group(entry.pid, signal.SIGKILL)
        if entry.process is not None:
            entry.process.wait()
        if entry.log is not None:
            entry.log.write(f"\n[sluice] try stopped: {reason}\n".encode())
            entry.log.close()

    def shutdown(self) -> None:
        """Hand over: stop watching, leave every try running (another replica adopts it)."""
        for key in list(self._running):
            self.release(key)

    def stop_all(self, reason: str) -> None:
        """Kill every try this executor watches (`sluice standalone` on its way out,
        where no other replica is left to adopt them)."""
        for key in list(self._running):
            self.kill(key, reason)


def _cannot_start(argv: list[str]) -> str | None:
    if not argv:
        return (
            "task has no command or args: the local executor runs `command` + `args` "
            "(set them on the task or in spec.defaults)"
        )
    program = argv[0]
    if os.sep in program:
        found = os.access(program, os.X_OK) and os.path.isfile(program)
    else:
        found = shutil.which(program) is not None
    return None if found else f"could not start {program!r}: not found or not executable"


def log_file(log_dir: Path, dag_id: str, run_id: str, task_id: str, try_number: int) -> Path:
    """Where a local try's stdout and stderr go (`sluice logs` reads them there)."""
    safe_run = run_id.replace(":", "_").replace("+", "_")
    return log_dir / dag_id / safe_run / task_id / f"{try_number}.log"


def external_id_for(key: tuple[int, int]) -> str:
    """A local try's external id: this executor's view and the try (not a pid)."""
    return f"local:{VIEW}:try:{key[0]}:{key[1]}"


def _parse_external_id(external_id: str | None) -> tuple[str, int | None, str | None] | None:
    """(view, pid, pid start time) of a local try's external id; the pid is None when the
    id names the try (`local:VIEW:try:TI:TRY`: the pid file says). Ids written before
    that (`local:HOST:PID:STARTTIME`) name a pid of their host. None: not a local id."""
    if external_id is None or not external_id.startswith("local:"):
        return None
    parts = external_id.split(":")
    try:
        if len(parts) == 5 and parts[2] == "try":
            return parts[1], None, None
        if len(parts) == 4:
            view = VIEW if parts[1] == HOSTNAME else parts[1]
            return view, int(parts[2]), parts[3]
    except ValueError:
        return None
    return None


def _alive(pid: int, start_time: str | None) -> bool:
    """The process exists, is not a zombie, and is the one we started (not a reused pid)."""
    fields = proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_time is None or fields[19] == start_time


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
