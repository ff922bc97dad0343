"""What both sides share: knobs, the Postgres server and its databases, process CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import Engine, create_engine, text

from sluice.db.embedded import EmbeddedPostgres, start_embedded_postgres
from sluice.db.engine import normalize_url

RESULTS = Path(__file__).parent / "results"
CACHE = Path(os.environ.get("SLUICE_CACHE_DIR", Path.home() / ".cache" / "sluice"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Knobs:
    """The same settings on both sides (Airflow's names in the comments)."""

    max_tis_per_query: int = 16  # [scheduler] max_tis_per_query
    runs_examined: int = 20  # [scheduler] max_dagruns_per_loop_to_schedule
    runs_created: int = 10  # [scheduler] max_dagruns_to_create_per_loop
    idle_sleep: float = 1.0  # [scheduler] scheduler_idle_sleep_time
    pool_slots: int = 1_000_000  # default pool, "unlimited"
    max_active_tasks: int = 100_000  # per DAG, so only pools and the scheduler limit


class Postgres:
    """One embedded server for a whole benchmark session; databases cloned from templates."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self._tmp: Path | None = None
        if data_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-pg-"))
            data_dir = self._tmp / "data"
        self.server: EmbeddedPostgres = start_embedded_postgres(data_dir, keep_data=False)
        self.admin: Engine = create_engine(
            normalize_url(self.server.url), isolation_level="AUTOCOMMIT"
        )

    def url(self, database: str) -> str:
        """A plain `postgresql://` URL (Sluice and Airflow both accept it)."""
        return self.server.database_url(database).replace("postgresql+psycopg2://", "postgresql://")

    def create(self, name: str, template: str | None = None) -> str:
        self.drop(name)
        with self.admin.connect() as conn:
            suffix = f" TEMPLATE {template}" if template else ""
            conn.execute(text(f"CREATE DATABASE {name}{suffix}"))
        return self.url(name)

    def drop(self, name: str) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))

    def exists(self, name: str) -> bool:
        with self.admin.connect() as conn:
            found = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            ).first()
        return found is not None

    def set_template(self, name: str) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {name} WITH IS_TEMPLATE true"))

    @property
    def pid(self) -> int:
        """The postmaster's pid: its CPU (with its reaped backends') is Postgres's CPU."""
        return int((self.server.data_dir / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        self.admin.dispose()
        self.server.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    try:
        for task in task_dir.iterdir():
            content = (task / "children").read_text().split()
            kids.extend(int(k) for k in content)
    except OSError:
        pass
    return kids


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its live descendants (plus reaped children's)."""
    total = 0.0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # fields[11..14] are utime, stime, cutime, cstime (proc(5) fields 14-17).
        total += sum(int(x) for x in fields[11:15]) / CLK_TCK
        stack.extend(_children(current))
    return total


def stop_processes(procs: list[subprocess.Popen[bytes]], timeout: float = 20.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat; diff two readings for utilisation."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return float(total - idle), float(total)


class Meter:
    """CPU of the scheduler processes, of Postgres, and of the whole machine, from t0."""

    def __init__(self, pids: list[int], postgres_pid: int) -> None:
        self.pids = pids
        self.postgres_pid = postgres_pid
        self.start = [cpu_seconds(p) for p in pids]
        self.pg_start = cpu_seconds(postgres_pid)
        self.busy_start = machine_busy()

    def read(self) -> tuple[float, float, float]:
        """(scheduler CPU s, Postgres CPU s, machine busy fraction) since construction."""
        sched = sum(cpu_seconds(p) - c for p, c in zip(self.pids, self.start, strict=True))
        pg = cpu_seconds(self.postgres_pid) - self.pg_start
        busy, total = machine_busy()
        fraction = (busy - self.busy_start[0]) / max(1.0, total - self.busy_start[1])
        return sched, pg, fraction


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def unpause_all(engine: Engine) -> datetime:
    """t0: unpause every DAG (both sides' `dag` tables have `is_paused`); Postgres' clock."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE dag SET is_paused = false"))
        t0: datetime = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
    return t0


def wait_for_runs(engine: Engine, expected: int, timeout: float) -> str | None:
    """Wait until `expected` runs exist and none is queued or running; an error if not."""

    def finished() -> bool:
        with engine.connect() as conn:
            total, active = conn.execute(
                text(
                    "SELECT count(*), count(*) FILTER (WHERE state IN ('queued', 'running'))"
                    " FROM dag_run"
                )
            ).one()
        return bool(total >= expected and active == 0)

    try:
        wait_for(finished, timeout, "every run to end", interval=0.2)
    except TimeoutError as exc:
        return str(exc)
    return None
