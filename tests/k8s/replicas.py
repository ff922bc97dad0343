"""Scheduler replicas run on the host against the test cluster (the Job executor's tests).

Each `Replica` is `sluice scheduler --executor kubernetes` in a subprocess, in
the cluster's network namespace (inherited from the test session), on the
test's own Postgres database (a Unix socket, reachable from any namespace).
Every replica serves the task API on the same address with SO_REUSEPORT, as
replicas behind one Service would: a task pod's sidecar reaches whichever
replica is alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import SchedulerJob

T = TypeVar("T")

# Short enough for tests to see zombies, timeouts and adoption within a minute.
FAST = [
    "--tick-interval", "0.5",
    "--heartbeat-interval", "2",
    "--zombie-threshold", "8",
    "--zombie-check-interval", "2",
    "--heartbeat-kill-threshold", "20",
    "--scheduler-dead-after", "6",
    "--pod-start-timeout", "45",
    "--task-image-pull-policy", "IfNotPresent",
]  # fmt: skip


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 120, every: float = 0.5
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


class Replica:
    def __init__(
        self,
        *,
        name: str,
        db_url: str,
        namespace: str,
        kubeconfig: Path,
        image: str,
        task_api: tuple[str, int],
        keys_file: Path,
        dags: Path | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.name = name
        self.log = Path(tempfile.mkstemp(prefix=f"sluice-{name}-", suffix=".log")[1])
        host, port = task_api
        sluice = Path(sys.executable).with_name("sluice")
        args = [
            str(sluice), "scheduler",
            "--executor", "kubernetes",
            "--namespace", namespace,
            "--kubeconfig", str(kubeconfig),
            "--sluice-image", image,
            "--task-api-listen", f"{host}:{port}",
            "--task-api-url", f"http://{host}:{port}",
            "--task-api-keys-file", str(keys_file),
            *FAST,
            *(["--dags", str(dags)] if dags else []),
            *(extra or []),
        ]  # fmt: skip
        env = dict(os.environ, SLUICE_DATABASE_URL=db_url)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.job_id: int | None = None

    def output(self, tail: int = 12000) -> str:
        return self.log.read_text(errors="replace")[-tail:]

    def registered(self, sessions: sessionmaker[Session]) -> int:
        """This replica's scheduler job id, once it has registered."""

        def probe() -> int | None:
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.output()}"
            with sessions() as session:
                return session.execute(
                    select(SchedulerJob.id).where(SchedulerJob.pid == self.proc.pid)
                ).scalar()

        self.job_id = wait_for(f"{self.name} to register", probe, timeout=60)
        return self.job_id

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def __repr__(self) -> str:
        return f"Replica({self.name}, pid={self.proc.pid})"


def env_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def sidecar_pids(ti_id: int, try_number: int) -> list[int]:
    """Host pids of the heartbeat sidecar of one try (pods are processes on this node)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if b"heartbeat" not in cmdline or not any(b"sluice" in part for part in cmdline):
                continue
            env = env_of(int(entry.name))
        except OSError:
            continue
        if env.get("SLUICE_TI_ID") == str(ti_id) and env.get("SLUICE_TRY_NUMBER") == str(
            try_number
        ):
            found.append(int(entry.name))
    return found


def describe(values: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in values.items())
