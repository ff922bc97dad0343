"""The Sluice side: a migrated template, DAGs registered paused, replicas as processes.

One run per DAG comes from `schedule: "@once"` with a start date in the past,
as Airflow's performance DAGs do: at t0 the DAGs are unpaused and the
scheduler itself creates the runs (at most `runs_created` per tick, when set).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from bench.common import (
    RESULTS,
    Knobs,
    Postgres,
    measured_trial,
    stop_processes,
    wait_for,
)
from bench.fake_cluster import FakeCluster, write_kubeconfig
from bench.metrics import Trial
from bench.replica import STATUS_NAMESPACE
from bench.shapes import Workload
from sluice.db.dags import sync_dag
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.spec.models import DagManifest
from sluice.spec.validation import parse_dag_manifest

TEMPLATE = "sluice_bench_template"
START = "2024-01-01T00:00:00Z"
REPO = Path(__file__).resolve().parent.parent


def prepare_template(pg: Postgres, knobs: Knobs) -> None:
    url = pg.create(TEMPLATE)
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE slot_pool SET slots = :n WHERE name = 'default'"), {"n": knobs.pool_slots}
        )
        if os.environ.get("SLUICE_BENCH_STATUS_CAPTURE") == "1":
            # What a cluster install pays: the triggers write a status_outbox row per run
            # per state-changing statement (nothing drains them here; ADR 0017).
            conn.execute(text("INSERT INTO status_sink (id) VALUES (1)"))
    engine.dispose()
    pg.set_template(TEMPLATE)


def manifest(
    workload: Workload,
    dag_id: str,
    knobs: Knobs,
    *,
    schedule: str = "@once",
    catchup: bool = False,
) -> DagManifest:
    return parse_dag_manifest(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": dag_id},
            "spec": {
                "schedule": schedule,
                "startDate": START,
                "catchup": catchup,
                "paused": True,
                "maxActiveTasks": knobs.max_active_tasks,
                "defaults": {"image": "busybox:1.36"},
                "tasks": workload.task_specs(),
            },
        }
    )


def register(
    session: Session,
    workload: Workload,
    knobs: Knobs,
    *,
    schedule: str = "@once",
    catchup: bool = False,
) -> None:
    now = datetime.now(UTC)
    for i, dag_id in enumerate(workload.dag_ids(), start=1):
        m = manifest(workload, dag_id, knobs, schedule=schedule, catchup=catchup)
        sync_dag(session, m, now)
        if i % 200 == 0:
            # Every flush walks the session's objects: thousands in one session is
            # quadratic (minutes for 3,000 DAGs).
            session.commit()
            session.expunge_all()
    session.commit()


def start_replicas(
    url: str, knobs: Knobs, count: int, log_dir: Path, *, status_kubeconfig: Path | None = None
) -> list[subprocess.Popen[bytes]]:
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    env = dict(os.environ)
    if knobs.code:
        # An A/B arm's code tree: its `sluice`, this checkout's harness and replica script.
        env["PYTHONPATH"] = os.pathsep.join([str(Path(knobs.code) / "operator"), str(REPO)])
    for i in range(count):
        log = (log_dir / f"sluice-replica-{i}.log").open("wb")
        stats_path(log_dir, i).unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "bench.replica",
            url,
            f"--max-tis-per-query={knobs.max_tis_per_query}",
            f"--runs-examined={knobs.runs_examined}",
            *([] if knobs.runs_created is None else [f"--runs-created={knobs.runs_created}"]),
            f"--idle-sleep={knobs.idle_sleep}",
            f"--critical-batches={knobs.critical_batches}",
            *([] if knobs.wake else ["--no-wake"]),
            *([] if status_kubeconfig is None else [f"--status-kubeconfig={status_kubeconfig}"]),
            f"--stats={stats_path(log_dir, i)}",
            # More Sluice-only settings for A/B runs, e.g. "--no-prepared-statements".
            *os.environ.get("SLUICE_BENCH_REPLICA_ARGS", "").split(),
        ]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def stats_path(log_dir: Path, replica: int) -> Path:
    """Where replica `replica` writes its `LoopStats` as it stops (`bench.replica --stats`)."""
    return log_dir / f"sluice-replica-{replica}.stats.json"


def replica_stats(log_dir: Path, count: int) -> list[dict[str, Any]]:
    """The stopped replicas' own counts, those that wrote them."""
    found = []
    for i in range(count):
        path = stats_path(log_dir, i)
        if path.exists():
            found.append(json.loads(path.read_text()))
    return found


def wait_for_replicas(engine: Engine, procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every replica has registered its scheduler job (an error if one exits)."""

    def ready() -> bool:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"replica exited with {proc.returncode}; see bench/results/logs")
        with engine.connect() as conn:
            n = conn.execute(
                text("SELECT count(*) FROM scheduler_job WHERE state = 'running'")
            ).scalar_one()
        return bool(n >= len(procs))

    wait_for(ready, 60, "replicas to register")


def _published(cluster: FakeCluster, runs: int) -> bool:
    """Whether every run's DagRun object shows it ended (all succeed in the benchmark)."""
    final = [o for o in cluster.kube.dagruns() if (o.get("status") or {}).get("state") == "success"]
    return len(final) >= runs


def run_trial(
    pg: Postgres,
    workload: Workload,
    knobs: Knobs,
    replicas: int,
    trial: int,
    *,
    timeout: float = 600.0,
) -> Trial:
    name = f"sluice_bench_{workload.shape}_{workload.dags}x{workload.tasks}_{replicas}_{trial}"
    url = pg.create(name, TEMPLATE)
    engine = make_engine(url, application_name="sluice-bench-harness")
    sessions = session_factory(engine)
    procs: list[subprocess.Popen[bytes]] = []
    # The production variant: every replica publishes its runs' status to a stand-in API
    # server in this process (its CPU is the API server's, not counted).
    cluster = FakeCluster(STATUS_NAMESPACE) if knobs.publish_status else None
    kubeconfig = RESULTS / "logs" / f"{name}.kubeconfig"
    try:
        with sessions() as session:
            register(session, workload, knobs)
        if cluster is not None:
            kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            write_kubeconfig(kubeconfig, cluster.start())
        procs = start_replicas(
            url,
            knobs,
            replicas,
            RESULTS / "logs",
            status_kubeconfig=kubeconfig if cluster is not None else None,
        )
        wait_for_replicas(engine, procs)
        result = measured_trial(
            "sluice",
            pg,
            engine,
            name,
            procs,
            workload=workload,
            knobs=knobs,
            replicas=replicas,
            trial=trial,
            timeout=timeout,
            task_times=(
                "SELECT ti.dag_id, ti.task_id, ti.queued_at, ti.start_date, ti.end_date,"
                " r.start_date AS run_start, ti.queued_by_job_id AS job"
                " FROM task_instance ti JOIN dag_run r ON r.id = ti.dag_run_id"
            ),
            # The tick's clock when it created the run (`runs.insert_runs`).
            first_run="SELECT min(created_at) FROM dag_run",
            published=None if cluster is None else lambda: _published(cluster, workload.dags),
        )
        stop_processes(procs)  # each writes its stats as it stops
        return replace(result, replica_stats=replica_stats(RESULTS / "logs", replicas))
    finally:
        stop_processes(procs)
        if cluster is not None:
            cluster.stop()
            kubeconfig.unlink(missing_ok=True)
        engine.dispose()
        pg.drop(name)
