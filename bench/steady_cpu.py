"""A replica's CPU while it mostly waits: runs in flight, tries running for tens of seconds.

    python -m bench.steady_cpu [--replicas 1] [--window 60] [--task-seconds 40] ...

What `make bench-k8s` showed (bench/README.md): on a real node, throughput is
about one task a second, and each replica's fixed costs per second (its loop's
ticks, the status publisher's polling, its two watches) dominate its CPU per
task. This puts replicas in that state without the cluster, on Postgres only:

- an embedded Postgres; `--runs` runs already triggered (half of DAGs whose
  `--tasks` tasks are a chain, half with no edges), the default pool at
  `--slots` slots, so tasks wait for a slot as they did on the node;
- `--replicas` real `sluice scheduler --executor kubernetes` processes (through
  `bench/steady_replica.py`, which counts statements and reads thread CPU), with
  the task API and the status publisher on, as a chart install runs them;
- against `bench/fake_cluster.py`: an API server, kubelet and sidecars in this
  process, where each try's pod takes `--task-seconds` (spread +-50%), sends the
  watch events a real pod does, and heartbeats to the task API every 10 s.

After `--warmup` seconds it reads each replica's CPU per thread (ms of CPU per
wall second, from `pthread_getcpuclockid`), its statements per thread and per
tick, its ticks, and Postgres's CPU over `--window` seconds, and the tasks that
ended meanwhile. It prints its figures and asserts nothing timed; each trial
goes to bench/results/steady-<time>.json. `--profile` also writes cProfile
stats (CPU time) of replica 0's loop thread over the window, and of its status
publisher and task API threads over their lives, to the trial's work directory
(profiling inflates CPU: keep profiled trials out of the figures).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from bench.common import RESULTS, Postgres, cpu_seconds
from bench.fake_cluster import FakeCluster, write_kubeconfig
from sluice.db.dags import SpecCache, sync_dag
from sluice.db.engine import make_engine, normalize_url, session_factory
from sluice.db.migrate import upgrade
from sluice.scheduler.triggers import trigger_run
from sluice.spec.validation import parse_dag_manifest
from tests.hosting import free_port

NAMESPACE = "bench"
REPO = Path(__file__).resolve().parent.parent


def _manifest(name: str, tasks: int, chain: bool) -> Any:
    return parse_dag_manifest(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": name},
            "spec": {
                "schedule": None,
                "startDate": "2026-01-01T00:00:00Z",
                "defaults": {"image": "localhost/sluice:dev", "command": ["true"]},
                "tasks": [
                    {
                        "name": f"t{i:02d}",
                        **({"dependsOn": [f"t{i - 1:02d}"]} if chain and i else {}),
                    }
                    for i in range(tasks)
                ],
            },
        }
    )


def _prepare(url: str, args: argparse.Namespace) -> None:
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    now = datetime.now(UTC)
    with sessions() as session:
        session.execute(
            text("UPDATE slot_pool SET slots = :n WHERE name = 'default'"), {"n": args.slots}
        )
        for r in range(args.runs):
            name = f"steady-{'chain' if r % 2 else 'flat'}-{r:03d}"
            sync_dag(session, _manifest(name, args.tasks, chain=bool(r % 2)), now)
        session.commit()
        specs = SpecCache()
        for r in range(args.runs):
            name = f"steady-{'chain' if r % 2 else 'flat'}-{r:03d}"
            trigger_run(session, specs, name, now)
        session.commit()
    engine.dispose()


def _pythonpath() -> str:
    """This checkout first, then the caller's PYTHONPATH: a checkout of another commit
    measures its own code with `PYTHONPATH=$WT/operator:$WT` (bench/README.md)."""
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)


def _start_replicas(
    args: argparse.Namespace, url: str, work: Path, kubeconfig: Path, keys: Path
) -> list[tuple[subprocess.Popen[bytes], Path, Path]]:
    port = free_port()
    replicas = []
    for i in range(args.replicas):
        snap = work / f"replica-{i}.json"
        log = work / f"replica-{i}.log"
        profile = ["--profile", str(work)] if args.profile and i == args.profile_replica else []
        cmd = [
            sys.executable, "-m", "bench.steady_replica", str(snap), *profile, "--",
            "scheduler",
            "--executor", "kubernetes",
            "--namespace", NAMESPACE,
            "--kubeconfig", str(kubeconfig),
            "--task-api-listen", f"127.0.0.1:{port}",
            "--task-api-url", f"http://127.0.0.1:{port}",
            "--task-api-keys-file", str(keys),
            "--tick-interval", str(args.tick_interval),
            "--no-migrate",
            "--log-level", "warning",
            *([] if args.publish_status else ["--no-publish-status"]),
            *os.environ.get("SLUICE_BENCH_REPLICA_ARGS", "").split(),
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=dict(os.environ, SLUICE_DATABASE_URL=url, PYTHONPATH=_pythonpath()),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        replicas.append((proc, snap, log))
    return replicas


def _probe(replicas: list[tuple[subprocess.Popen[bytes], Path, Path]]) -> list[dict[str, Any]]:
    """Ask every replica for a snapshot; wait for each to be written."""
    before = {snap: snap.stat().st_mtime_ns if snap.exists() else 0 for _, snap, _ in replicas}
    for proc, _, _ in replicas:
        proc.send_signal(signal.SIGUSR1)
    out = []
    for proc, snap, log in replicas:
        deadline = time.monotonic() + 30
        while not snap.exists() or snap.stat().st_mtime_ns == before[snap]:
            if proc.poll() is not None:
                raise RuntimeError(f"replica exited ({proc.returncode}); see {log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no snapshot from {snap}")
            time.sleep(0.05)
        out.append(json.loads(snap.read_text()))
    return out


def _db_now(engine: Any) -> datetime:
    with engine.connect() as conn:
        now: datetime = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
    return now


def _diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in sorted(set(a) | set(b))}


def _group(name: str) -> str:
    """Thread names as one group per role (the task API's helpers under it)."""
    if name in ("MainThread", "status-publisher", "sluice-watch-pods", "sluice-watch-jobs"):
        return name
    if name == "task-api" or name.startswith(("ThreadPoolExecutor", "asyncio")):
        return "task-api"
    return "other"


def _trial(args: argparse.Namespace, pg: Postgres, trial: int) -> dict[str, Any]:
    database = f"steady_{os.getpid()}_{trial}"
    url = pg.create(database)
    _prepare(url, args)
    work = Path(tempfile.mkdtemp(prefix="sluice-steady-"))
    keys = work / "keys"
    keys.write_text(base64.b64encode(secrets.token_bytes(48)).decode() + "\n")
    cluster = FakeCluster(NAMESPACE, task_seconds=args.task_seconds, seed=trial)
    kubeconfig = work / "kubeconfig"
    write_kubeconfig(kubeconfig, cluster.start())
    engine = create_engine(normalize_url(url))
    replicas = _start_replicas(args, url, work, kubeconfig, keys)
    try:
        time.sleep(args.warmup)
        in_flight = cluster.running_pods()
        pg_before = cpu_seconds(pg.pid)
        events_before = dict(cluster.store.events)
        calls_before = len(cluster.kube.calls)
        beats_before = dict(cluster.heartbeats)
        db_start = _db_now(engine)
        start = _probe(replicas)
        time.sleep(args.window)
        end = _probe(replicas)
        db_end = _db_now(engine)
        pg_cpu = cpu_seconds(pg.pid) - pg_before
        in_flight_end = cluster.running_pods()
        calls = Counter(verb for verb, _ in cluster.kube.calls[calls_before:])
        jobs_created = cluster.jobs_created
        with engine.connect() as conn:
            ended = conn.execute(
                text(
                    "SELECT count(*) FROM task_instance"
                    " WHERE end_date > :a AND end_date <= :b AND state = 'success'"
                ),
                {"a": db_start, "b": db_end},
            ).scalar_one()
            failed = conn.execute(
                text("SELECT count(*) FROM task_instance WHERE state IN ('failed', 'up_for_retry')")
            ).scalar_one()
            running_runs = conn.execute(
                text("SELECT count(*) FROM dag_run WHERE state = 'running'")
            ).scalar_one()
    finally:
        for proc, _, _ in replicas:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _, _ in replicas:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        cluster.stop()
        engine.dispose()
        pg.drop(database)
    figures: dict[str, Any] = {
        "trial": trial,
        "window_s": None,
        "tasks_ended": int(ended),
        "tasks_failed_total": int(failed),
        "running_runs_at_end": int(running_runs),
        "pods_in_flight": [in_flight, in_flight_end],
        "postgres_cpu_s": pg_cpu,
        "watch_events": _diff(
            {k: float(v) for k, v in events_before.items()},
            {k: float(v) for k, v in cluster.store.events.items()},
        ),
        "heartbeats": {k: cluster.heartbeats[k] - beats_before[k] for k in beats_before},
        "status_api_calls": dict(calls),
        "jobs_created_total": jobs_created,
        "replicas": [],
        "work": str(work),
    }
    windows = []
    for a, b in zip(start, end, strict=True):
        wall = b["monotonic"] - a["monotonic"]
        windows.append(wall)
        threads = _diff(a["threads"], b["threads"])
        grouped: defaultdict[str, float] = defaultdict(float)
        for name, seconds in threads.items():
            grouped[_group(name)] += seconds
        statements = _diff(
            {k: float(v) for k, v in a["statements"].items()},
            {k: float(v) for k, v in b["statements"].items()},
        )
        loop_statements = _diff(
            {k: float(v) for k, v in a["loop_statements"].items()},
            {k: float(v) for k, v in b["loop_statements"].items()},
        )
        publisher_statements = _diff(
            {k: float(v) for k, v in a.get("publisher_statements", {}).items()},
            {k: float(v) for k, v in b.get("publisher_statements", {}).items()},
        )
        ticks = b["ticks"].get("tick_count", 0) - a["ticks"].get("tick_count", 0)
        figures["replicas"].append(
            {
                "wall_s": wall,
                "process_cpu_s": b["process_cpu"] - a["process_cpu"],
                "threads_cpu_s": dict(grouped),
                "threads_cpu_s_by_name": threads,
                "ticks": ticks,
                "statements": {_group(k): v for k, v in statements.items() if _group(k) != "other"}
                | {"other": sum(v for k, v in statements.items() if _group(k) == "other")},
                "loop_statements": {k: v for k, v in loop_statements.items() if v},
                "publisher_statements": {k: v for k, v in publisher_statements.items() if v},
                "phases": _diff(a["phases"], b["phases"]),
                "phase_cpu_s": _diff(a.get("phase_cpu", {}), b.get("phase_cpu", {})),
            }
        )
    figures["window_s"] = sum(windows) / len(windows)
    return figures


def _print(result: dict[str, Any]) -> None:
    window = result["window_s"]
    tasks = result["tasks_ended"]
    print(
        f"trial {result['trial']}: window {window:.1f}s, {tasks} tasks ended"
        f" ({tasks / window:.2f}/s), pods in flight {result['pods_in_flight']},"
        f" watch events {result['watch_events']}, heartbeats {result['heartbeats']},"
        f" status API calls {result['status_api_calls']},"
        f" Postgres {1000 * result['postgres_cpu_s'] / window:.1f} ms/s"
    )
    total = 0.0
    for i, r in enumerate(result["replicas"]):
        wall = r["wall_s"]
        cpu = r["threads_cpu_s"]
        total += r["process_cpu_s"]
        per = ", ".join(
            f"{name} {1000 * seconds / wall:.2f}" for name, seconds in sorted(cpu.items())
        )
        ticks = r["ticks"]
        loop_statements = r["statements"].get("MainThread", 0)
        print(
            f"  replica {i}: {1000 * r['process_cpu_s'] / wall:.2f} ms CPU/s ({per});"
            f" {ticks / wall:.2f} ticks/s, {loop_statements / max(ticks, 1):.1f} loop statements"
            f"/tick; statements/s "
            + ", ".join(f"{k} {v / wall:.2f}" for k, v in sorted(r["statements"].items()) if v)
        )
        phases = r["phase_cpu_s"]
        outside = cpu.get("MainThread", 0) - sum(phases.values())
        print(
            "    loop CPU by phase, ms/s: "
            + ", ".join(f"{k} {1000 * v / wall:.2f}" for k, v in sorted(phases.items()))
            + f"; outside phases {1000 * outside / wall:.2f}"
        )
    per_task = 1000 * total / tasks if tasks else float("nan")
    print(f"  all replicas: {1000 * total / window:.2f} ms CPU/s, {per_task:.1f} ms CPU per task")
    if result.get("work"):
        print(f"  logs (and profiles): {result['work']}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steady_cpu", description=__doc__)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tasks", type=int, default=20, help="tasks per run")
    parser.add_argument("--slots", type=int, default=40, help="the default pool's slots")
    parser.add_argument("--task-seconds", type=float, default=40.0)
    parser.add_argument("--tick-interval", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument(
        "--no-publish-status", dest="publish_status", action="store_false", default=True
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one replica's loop")
    parser.add_argument(
        "--profile-replica", type=int, default=0, help="which replica --profile profiles"
    )
    args = parser.parse_args()
    # A SIGTERM (or a SIGINT where a background shell ignores it) stops the replicas, the
    # stand-in cluster and Postgres on the way out, like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    pg = Postgres()
    results = []
    try:
        for trial in range(args.trials):
            result = _trial(args, pg, trial)
            _print(result)
            results.append(result)
    finally:
        pg.stop()
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"steady-{stamp}.json"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    out.write_text(
        json.dumps(
            {"args": vars(args), "commit": commit + ("-dirty" if dirty else ""), "trials": results},
            indent=1,
            default=str,
        )
    )
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
