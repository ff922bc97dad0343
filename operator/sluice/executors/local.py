"""The local executor: each try is a subprocess in its own process group.

Used by `sluice standalone` and `sluice dags test`. The task's `command` and
`args` run with the run context in the environment (SLUICE_DAG, SLUICE_RUN_ID,
SLUICE_LOGICAL_DATE, ...); the exit code decides the outcome (0 success, one of
`skipOnExitCode` skipped, anything else failed). On `executionTimeout` the
whole group gets SIGTERM, then SIGKILL after a grace period. Children are
asked to die with the scheduler (PR_SET_PDEATHSIG) so a killed replica does
not leave orphaned tries running beside their retries.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sluice.executors.base import TaskEvent, TaskLaunch
from sluice.spec.states import TaskState

KILL_GRACE_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: the group kill on shutdown still applies
        pass


@dataclass
class _Running:
    launch: TaskLaunch
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float
    terminate_sent: float | None = None
    timed_out: bool = False


class LocalExecutor:
    name = "local"

    def __init__(self, log_dir: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.log_dir = log_dir
        self._clock = clock
        self._running: dict[tuple[int, int], _Running] = {}
        self._finished: list[TaskEvent] = []

    def log_path(self, launch: TaskLaunch) -> Path:
        safe_run = launch.run_id.replace(":", "_").replace("+", "_")
        return self.log_dir / launch.dag_id / safe_run / launch.task_id / f"{launch.try_number}.log"

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        for launch in launches:
            if launch.key in self._running:
                continue
            argv = [*launch.command, *launch.args]
            if not argv:
                self._finished.append(
                    TaskEvent(
                        launch.ti_id,
                        launch.try_number,
                        TaskState.FAILED,
                        reason="task has no command or args: the local executor runs "
                        "`command` + `args` (set them on the task or in spec.defaults)",
                    )
                )
                continue
            path = self.log_path(launch)
            path.parent.mkdir(parents=True, exist_ok=True)
            log = path.open("ab")
            env = {**os.environ, **launch.env, **launch.context_env()}
            try:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                log.close()
                self._finished.append(
                    TaskEvent(
                        launch.ti_id,
                        launch.try_number,
                        TaskState.FAILED,
                        reason=f"could not start {argv[0]!r}: {exc.strerror}",
                    )
                )
                continue
            self._running[launch.key] = _Running(launch, process, log, self._clock())

    def poll(self) -> list[TaskEvent]:
        now = self._clock()
        events, self._finished = self._finished, []
        for key, entry in list(self._running.items()):
            code = entry.process.poll()
            if code is None:
                self._enforce_timeout(entry, now)
                continue
            del self._running[key]
            entry.log.close()
            events.append(self._outcome(entry, code))
        return events

    def _enforce_timeout(self, entry: _Running, now: float) -> None:
        timeout = entry.launch.execution_timeout
        if timeout is None:
            return
        if entry.terminate_sent is None and now - entry.started > timeout.total_seconds():
            entry.timed_out = True
            entry.terminate_sent = now
            _signal_group(entry.process, signal.SIGTERM)
        elif entry.terminate_sent is not None and now - entry.terminate_sent > KILL_GRACE_SECONDS:
            _signal_group(entry.process, signal.SIGKILL)

    def _outcome(self, entry: _Running, code: int) -> TaskEvent:
        launch = entry.launch
        if entry.timed_out:
            assert launch.execution_timeout is not None
            seconds = launch.execution_timeout.total_seconds()
            return TaskEvent(
                launch.ti_id,
                launch.try_number,
                TaskState.FAILED,
                code,
                f"execution timeout: still running after {seconds:g}s",
            )
        if code == 0:
            return TaskEvent(launch.ti_id, launch.try_number, TaskState.SUCCESS, 0)
        if code in launch.skip_on_exit_code:
            return TaskEvent(
                launch.ti_id, launch.try_number, TaskState.SKIPPED, code, f"exit code {code}"
            )
        reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return TaskEvent(launch.ti_id, launch.try_number, TaskState.FAILED, code, reason)

    def alive(self) -> list[tuple[int, int]]:
        return list(self._running)

    def kill(self, key: tuple[int, int], reason: str) -> None:
        entry = self._running.pop(key, None)
        if entry is None:
            return
        _signal_group(entry.process, signal.SIGKILL)
        entry.process.wait()
        entry.log.write(f"\n[sluice] try stopped: {reason}\n".encode())
        entry.log.close()

    def shutdown(self) -> None:
        for key in list(self._running):
            self.kill(key, "scheduler shutting down")


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
