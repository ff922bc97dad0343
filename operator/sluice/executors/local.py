"""The local executor: each try is a subprocess group on this machine.

Used by `sluice standalone`, `sluice dags test` and the chaos harness. The
task's `command` and `args` run under the `taskrun` wrapper with the run
context in the environment (SLUICE_DAG, SLUICE_RUN_ID, SLUICE_LOGICAL_DATE,
...); the exit code decides the outcome (0 success, one of `skipOnExitCode`
skipped, anything else failed). On `executionTimeout` the whole group gets
SIGTERM, then SIGKILL after a grace period.

Like a pod, a try outlives the replica that started it. Its external id
(`local:HOST:PID:STARTTIME`) and the wrapper's result file let any replica on
the same machine tell whether it is still running, adopt it, and read how it
ended (`inspect`, `adopt`); the start time guards against a reused pid.
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
from typing import IO

from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.spec.states import TaskState

KILL_GRACE_SECONDS = 5.0
HOSTNAME = socket.gethostname()


@dataclass
class _Running:
    key: tuple[int, int]
    pid: int
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

    def __init__(self, log_dir: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.log_dir = log_dir
        self.results_dir = log_dir / ".results"
        self._clock = clock
        self._running: dict[tuple[int, int], _Running] = {}
        self._finished: list[TaskEvent] = []

    def log_path(self, launch: TaskLaunch) -> Path:
        safe_run = launch.run_id.replace(":", "_").replace("+", "_")
        return self.log_dir / launch.dag_id / safe_run / launch.task_id / f"{launch.try_number}.log"

    def result_path(self, key: tuple[int, int]) -> Path:
        return self.results_dir / f"{key[0]}-{key[1]}.json"

    # -- starting -------------------------------------------------------------------

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        return None  # known once the process runs

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
        log = path.open("ab")
        wrapper = [sys.executable, "-m", "sluice.executors.taskrun", "--result", str(result), "--"]
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
        timeout = launch.execution_timeout.total_seconds() if launch.execution_timeout else None
        self._running[launch.key] = _Running(
            key=launch.key,
            pid=process.pid,
            external_id=_external_id(process.pid),
            started=self._clock(),
            timeout=timeout,
            skip_on_exit_code=launch.skip_on_exit_code,
            process=process,
            log=log,
        )

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
        elif _alive(entry.pid, entry.external_id):
            return None
        recorded = self._recorded_exit(entry.key)
        if recorded is not None:
            return recorded
        if entry.process is not None:
            return entry.process.returncode
        return -signal.SIGKILL  # an adopted try that vanished without a result was killed

    def _recorded_exit(self, key: tuple[int, int]) -> int | None:
        try:
            return int(json.loads(self.result_path(key).read_text())["exit_code"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

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
        reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return TaskEvent(ti_id, try_number, TaskState.FAILED, code, reason)

    def alive(self) -> list[tuple[int, int]]:
        return list(self._running)

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {key: entry.external_id for key, entry in self._running.items()}

    # -- other replicas' tries ------------------------------------------------------

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        """Is a try (possibly started by another replica) still running here?"""
        if external_id is None or not external_id.startswith(f"local:{HOSTNAME}:"):
            return Inspection(state="unknown")
        pid = int(external_id.split(":")[2])
        if _alive(pid, external_id):
            return Inspection(state="alive")
        code = self._recorded_exit(key)
        return Inspection(state="gone", exit_code=code)

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
        pid = int(external_id.split(":")[2])
        self._running[key] = _Running(
            key=key,
            pid=pid,
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

    def kill(self, key: tuple[int, int], reason: str) -> None:
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


def _proc_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after it are fixed.
    return raw[raw.rindex(")") + 2 :].split()


def _external_id(pid: int) -> str:
    fields = _proc_stat(pid)
    start = fields[19] if fields else "0"
    return f"local:{HOSTNAME}:{pid}:{start}"


def _alive(pid: int, external_id: str) -> bool:
    """The process exists, is not a zombie, and is the one we started (not a reused pid)."""
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return external_id.endswith(f":{fields[19]}")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
