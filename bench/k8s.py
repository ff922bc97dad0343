"""The Job executor on the local cluster (issue 10): `python -m bench.k8s` (`make bench-k8s`).

Trivial tasks (`true` in the Sluice image) through `sluice scheduler --executor
kubernetes` replicas, on the local cluster that `hack/` runs: 100 DAGs x 10
tasks by default, half `linear` and half `no_structure` (bench/shapes.py), at
1 and 3 replicas. Run it inside the cluster's network namespace
(`hack/in-cluster.sh`, as the Make target does): the replicas it starts serve
the task API on the node address, where the task pods' heartbeat sidecars
reach it, and talk to the API server, which answers only there.

Each trial: a database cloned from a migrated template (its default pool cut
to `--pool-slots`, so the 2-core node is not overcommitted), a namespace of its
own, the DAGs registered paused, the replicas started and idle, a quiet window
(the idle cluster's API requests per second), then at t0 every DAG is
unpaused and the replicas create the runs. When every run has ended, the
figures are read: task times from Postgres; the Jobs and pods (LIST) for their
timestamps; the API server's `apiserver_request_total` (before and after);
CPU seconds of the replicas, Postgres and every cluster process from /proc,
the pods from their cgroup, and the machine's busy time from /proc/stat. The
namespace is then deleted (and waited for) and the database dropped. A trial
that fails or times out is kept and shown as such.

The cluster is shared with whoever else uses it (the k8s tests): a trial waits
for it to be quiet first (no namespace but the system ones, for `--quiet-for`
seconds, at most `--quiet-wait`), and reports the pods other namespaces created
while it ran. Only the local cluster is used: the kubeconfig must point at the
API server recorded in `$SLUICE_CLUSTER_DIR/env`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from rich.console import Console
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from bench import k8s_report
from bench.common import CACHE, CLK_TCK, RESULTS, Postgres, cpu_seconds, machine_busy, unpause_all
from bench.k8s_figures import (
    K8sTrial,
    background,
    diff_counts,
    latency_table,
    parse_request_totals,
    sluice_requests,
    sum_counts,
    task_segments,
    task_times,
    without_watches,
)
from bench.shapes import SHAPES, Workload
from sluice.db.dags import sync_dag
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.spec.validation import parse_dag_manifest

CLUSTER_DIR = Path(os.environ.get("SLUICE_CLUSTER_DIR", CACHE / "cluster"))
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
NS_PREFIX = "sluice-bench-"
BENCH_LABELS = {"app.kubernetes.io/managed-by": "sluice-bench"}
TEMPLATE = "sluice_k8s_bench_template"
START = "2024-01-01T00:00:00Z"
REPO = Path(__file__).resolve().parent.parent
KUBEPODS_CPU = Path("/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage")
PROGRESS_EVERY = 60.0


def cluster_env() -> dict[str, str]:
    env_file = CLUSTER_DIR / "env"
    if not env_file.is_file():
        raise SystemExit(f"no local cluster: {env_file} is missing (make cluster-up)")
    pairs = (line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.startswith("#")}


RETRY_FOR = 300.0  # the API server may be restarted under us (the k8s tests do it)
T = TypeVar("T")


def retrying(call: Callable[[], T], what: str) -> T:
    """`call()`, again every 2 s while the API server is unreachable or answers 5xx/429."""
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            return call()
        except (urllib3.exceptions.HTTPError, OSError, ApiException) as exc:
            status = getattr(exc, "status", None)
            transient = not isinstance(exc, ApiException) or (
                status is not None and (status >= 500 or status == 429)
            )
            if not transient or time.monotonic() > deadline:
                raise
            log_retry(what, exc)
            time.sleep(2)


def log_retry(what: str, exc: Exception) -> None:
    print(f"  {what}: {type(exc).__name__}, retrying (API server restarting?)", flush=True)


class Cluster:
    """The local cluster's API, through the admin kubeconfig (the Python client)."""

    def __init__(self, kubeconfig: Path, expected_server: str) -> None:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
        if configuration.host.rstrip("/") != expected_server.rstrip("/"):
            raise SystemExit(
                f"{kubeconfig} points at {configuration.host}, not the local cluster's "
                f"API server {expected_server}: this benchmark only loads the local cluster"
            )
        self.kubeconfig = kubeconfig
        self.configuration = configuration
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)

    def raw(self, path: str, timeout: float = 30) -> str:
        """GET a path of the API server (/metrics, /readyz) as text."""
        headers = {"Accept": "text/plain"}
        token = self.configuration.api_key.get("authorization")
        if token:
            headers["Authorization"] = token
        call: Any = self.api.call_api
        response: Any = call(
            "GET", self.configuration.host + path, header_params=headers, _request_timeout=timeout
        )
        body = response.read()
        if not 200 <= response.status < 300:
            raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
        return str(body.decode())

    def request_totals(self) -> dict[str, float]:
        return parse_request_totals(retrying(lambda: self.raw("/metrics"), "GET /metrics"))

    def _paged(self, call: Any, *args: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = token
            response: Any = retrying(
                lambda page=page: call(  # type: ignore[misc]
                    *args, limit=500, _continue=page, _preload_content=False, _request_timeout=60
                ),
                "LIST",
            )
            body = json.loads(response.data)
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def jobs(self, namespace: str) -> list[dict[str, Any]]:
        batch = client.BatchV1Api(self.api)
        return self._paged(batch.list_namespaced_job, namespace)

    def all_pods(self) -> list[dict[str, Any]]:
        return self._paged(self.core.list_pod_for_all_namespaces)

    def namespaces(self) -> list[dict[str, Any]]:
        return self._paged(self.core.list_namespace)

    def create_namespace(self, name: str) -> None:
        body: Any = {"metadata": {"name": name, "labels": BENCH_LABELS}}
        retrying(lambda: self.core.create_namespace(body, _request_timeout=30), "create namespace")

    def delete_namespace(self, name: str, timeout: float) -> float:
        """Delete a namespace and wait until it is gone; the seconds it took."""
        started = time.monotonic()
        try:
            retrying(
                lambda: self.core.delete_namespace(name, _request_timeout=30), "delete namespace"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        while time.monotonic() - started < timeout:
            try:
                retrying(
                    lambda: self.core.read_namespace(name, _request_timeout=30), "read namespace"
                )
            except ApiException as exc:
                if exc.status == 404:
                    return round(time.monotonic() - started, 1)
                raise
            time.sleep(1)
        raise TimeoutError(f"namespace {name} still there after {timeout:.0f}s")


def apply_crds(kubeconfig: Path) -> None:
    """Sluice's CRDs, applied (idempotent) and served before a trial: the replicas publish
    every run to a DagRun object, as a release does, and without the CRD each publication
    fails and is retried (a fresh cluster has none until a test or the chart applies them)."""
    kubectl = shutil.which("kubectl") or str(CACHE / "bin" / "kubectl")
    base = [kubectl, "--kubeconfig", str(kubeconfig)]
    subprocess.run([*base, "apply", "-f", str(REPO / "crds")], check=True, capture_output=True)
    subprocess.run(
        [*base, "wait", "--for=condition=Established", "--timeout=60s"]
        + [f"crd/{kind}.sluice.io" for kind in ("dags", "dagruns", "pools", "backfills")],
        check=True,
        capture_output=True,
    )


def foreign_namespaces(cluster: Cluster, mine: str | None = None) -> list[str]:
    return sorted(
        ns["metadata"]["name"]
        for ns in cluster.namespaces()
        if ns["metadata"]["name"] not in SYSTEM_NAMESPACES and ns["metadata"]["name"] != mine
    )


def wait_quiet(cluster: Cluster, quiet_for: float, wait: float, console: Console) -> dict[str, Any]:
    """Wait until no namespace but the system ones has existed for `quiet_for` seconds."""
    started = time.monotonic()
    quiet_since: float | None = None
    said = False
    while True:
        now = time.monotonic()
        others = foreign_namespaces(cluster)
        if others:
            quiet_since = None
            if not said:
                console.print(
                    f"waiting for a quiet cluster (other namespaces: {', '.join(others)})"
                )
                said = True
        elif quiet_since is None:
            quiet_since = now
        if quiet_since is not None and now - quiet_since >= quiet_for:
            return {"waited_s": round(now - started, 1), "quiet_at_start": True}
        if now - started >= wait:
            console.print(f"[yellow]not quiet after {wait:.0f}s; running anyway[/yellow]")
            return {"waited_s": round(now - started, 1), "quiet_at_start": False, "busy": others}
        time.sleep(2)


# -- processes and CPU --------------------------------------------------------------------


def component_pids() -> dict[str, int]:
    pids = {}
    for path in sorted((CLUSTER_DIR / "pids").glob("*.pid")):
        try:
            pids[path.stem] = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _own_cpu(pid: int) -> float:
    """utime + stime of one process: its own CPU, not its children's (a shim's children
    are runc and the containers' processes, counted in the kubepods cgroup)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(x) for x in fields[11:13]) / CLK_TCK


def _shim_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().startswith("containerd-shim"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _kubepods_cpu() -> float:
    try:
        return int(KUBEPODS_CPU.read_text()) / 1e9
    except (OSError, ValueError):
        return 0.0


class ClusterMeter:
    """CPU seconds of each part over a window, from /proc and the kubepods cgroup.

    containerd's shims re-parent to PID 1, so their CPU is reaped by no process
    we measure: a thread samples their own CPU every second (a lower bound: the
    last second of a shim that exits is missed). runc, which the shims run, and
    the kernel's own work are in the machine's busy time only: "other".
    """

    def __init__(self, replica_pids: list[int], postgres_pid: int) -> None:
        self.replica_pids = replica_pids
        self.postgres_pid = postgres_pid
        self.components = component_pids()
        self._start = self._parts()
        self._busy0 = machine_busy()[0]
        self._t0 = time.monotonic()
        self._shims_first: dict[int, float] = {p: _own_cpu(p) for p in _shim_pids()}
        self._shims_last: dict[int, float] = dict(self._shims_first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="shim-sampler", daemon=True)
        self._thread.start()

    def _parts(self) -> dict[str, float]:
        parts = {name: cpu_seconds(pid) for name, pid in self.components.items()}
        parts["scheduler replicas"] = sum(cpu_seconds(p) for p in self.replica_pids)
        parts["postgres"] = cpu_seconds(self.postgres_pid)
        parts["pods (kubepods cgroup)"] = _kubepods_cpu()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        parts["bench harness"] = usage.ru_utime + usage.ru_stime
        return parts

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            for pid in _shim_pids():
                self._shims_last[pid] = _own_cpu(pid)
                self._shims_first.setdefault(pid, 0.0)

    def read(self) -> tuple[dict[str, float], float, float, list[str]]:
        """(CPU s by part, machine busy core-seconds, window s, parts restarted meanwhile)."""
        self._stop.set()
        self._thread.join(timeout=5)
        for pid in _shim_pids():
            self._shims_last[pid] = _own_cpu(pid)
            self._shims_first.setdefault(pid, 0.0)
        end = self._parts()
        window = time.monotonic() - self._t0
        busy = (machine_busy()[0] - self._busy0) / CLK_TCK
        now = component_pids()
        restarted = [name for name, pid in self.components.items() if now.get(name) != pid]
        cpu = {part: round(end[part] - self._start.get(part, 0.0), 3) for part in end}
        cpu["containerd shims (sampled)"] = round(
            sum(self._shims_last[p] - self._shims_first[p] for p in self._shims_last), 3
        )
        for name in restarted:
            cpu.pop(name, None)  # a restarted process's count starts again: not comparable
        return cpu, busy, window, restarted


# -- the workload -------------------------------------------------------------------------


def workloads(shapes: list[str], dags: int, tasks: int) -> list[Workload]:
    """`dags` DAGs split as evenly as possible over `shapes`."""
    out = []
    for i, shape in enumerate(shapes):
        count = dags // len(shapes) + (1 if i < dags % len(shapes) else 0)
        if count:
            out.append(Workload(shape, count, tasks))
    return out


def dag_manifest(dag_id: str, workload: Workload, image: str) -> Any:
    return parse_dag_manifest(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": dag_id},
            "spec": {
                "schedule": "@once",
                "startDate": START,
                "paused": True,
                "defaults": {"image": image, "command": ["true"], "retries": 0},
                "tasks": workload.task_specs(),
            },
        }
    )


def prepare_template(pg: Postgres, pool_slots: int) -> None:
    url = pg.create(TEMPLATE)
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE slot_pool SET slots = :n WHERE name = 'default'"), {"n": pool_slots}
        )
    engine.dispose()
    pg.set_template(TEMPLATE)


def register(session: Session, loads: list[Workload], image: str) -> None:
    now = datetime.now(UTC)
    for workload in loads:
        for dag_id in workload.dag_ids():
            sync_dag(session, dag_manifest(dag_id, workload, image), now)
    session.commit()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_replicas(
    count: int,
    *,
    db_url: str,
    namespace: str,
    kubeconfig: Path,
    image: str,
    node_ip: str,
    keys: Path,
    log_dir: Path,
    sidecar: bool = True,
    log_store: str | None = None,
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    """`sluice scheduler --executor kubernetes` replicas, sharing the task API's address
    (SO_REUSEPORT, as replicas behind one Service). Without `sidecar`, no task API: task
    pods get no heartbeat sidecar, and the replicas heartbeat the tries they watch. With
    `log_store`, each archives the tries' logs there."""
    port = _free_port(node_ip)
    sluice = Path(sys.executable).with_name("sluice")
    procs, logs = [], []
    for i in range(count):
        log_path = log_dir / f"{namespace}-replica-{i}.log"
        cmd = [
            str(sluice), "scheduler",
            "--executor", "kubernetes",
            "--namespace", namespace,
            "--kubeconfig", str(kubeconfig),
            "--sluice-image", image,
            *(
                [
                    "--task-api-listen", f"{node_ip}:{port}",
                    "--task-api-url", f"http://{node_ip}:{port}",
                    "--task-api-keys-file", str(keys),
                ]
                if sidecar
                else []
            ),
            "--task-image-pull-policy", "IfNotPresent",
            *(["--log-store", log_store] if log_store else []),
            "--no-migrate",
            "--log-json",
            *os.environ.get("SLUICE_BENCH_REPLICA_ARGS", "").split(),
        ]  # fmt: skip
        with log_path.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=REPO,
                    env=dict(os.environ, SLUICE_DATABASE_URL=db_url),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        logs.append(log_path)
    return procs, logs


def stop_replicas(procs: list[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_replica_logs(paths: list[Path]) -> tuple[dict[str, int], Counter[str], list[str]]:
    """(the executors' request counts summed, log events by level, the replicas that
    logged no count)."""
    counts: list[dict[str, int]] = []
    events: Counter[str] = Counter()
    missing = []
    for path in paths:
        found = False
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                events["unparsed line"] += 1
                continue
            events[f"{record.get('level', '?')}: {record.get('event', '?')}"] += 1
            if record.get("event") == "kubernetes executor stopped":
                counts.append({k: int(v) for k, v in (record.get("api_requests") or {}).items()})
                found = True
        if not found:
            missing.append(path.name)
    return sum_counts(counts), events, missing


# -- one trial ----------------------------------------------------------------------------


def _registered(engine: Engine) -> int:
    with engine.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM scheduler_job WHERE state = 'running'")
        ).scalar_one()
    return int(n)


def _progress(engine: Engine) -> tuple[int, int, int]:
    """(runs, runs still queued or running, tasks ended)."""
    with engine.connect() as conn:
        runs, active = conn.execute(
            text(
                "SELECT count(*), count(*) FILTER (WHERE state IN ('queued', 'running'))"
                " FROM dag_run"
            )
        ).one()
        ended = conn.execute(
            text("SELECT count(*) FROM task_instance WHERE end_date IS NOT NULL")
        ).scalar_one()
    return int(runs), int(active), int(ended)


def _wait_for_runs(
    engine: Engine,
    procs: list[subprocess.Popen[bytes]],
    expected_runs: int,
    total_tasks: int,
    timeout: float,
    console: Console,
    look_around: Callable[[], None] = lambda: None,
) -> str | None:
    """None once every run has ended; else why not (a timeout, a replica that exited).
    `look_around` is called every ten seconds meanwhile."""
    started = time.monotonic()
    last_said = last_look = started
    while True:
        if time.monotonic() - last_look >= 10:
            last_look = time.monotonic()
            look_around()
        for i, proc in enumerate(procs):
            if proc.poll() is not None:
                return f"replica {i} exited with {proc.returncode}"
        runs, active, ended = _progress(engine)
        if runs >= expected_runs and active == 0:
            return None
        now = time.monotonic()
        if now - started > timeout:
            return f"timed out after {timeout:.0f}s: {ended} of {total_tasks} tasks ended"
        if now - last_said >= PROGRESS_EVERY:
            last_said = now
            console.print(
                f"  {now - started:5.0f}s: {runs} runs ({active} active), "
                f"{ended}/{total_tasks} tasks ended",
                highlight=False,
            )
        time.sleep(0.5)


def _wait_for_archives(
    engine: Engine, procs: list[subprocess.Popen[bytes]], timeout: float, result: K8sTrial
) -> str | None:
    """Wait until the log outbox is empty (every ended try's log archived or lost), then
    count them; None, else why not."""
    started = time.monotonic()
    while True:
        for i, proc in enumerate(procs):
            if proc.poll() is not None:
                return f"replica {i} exited with {proc.returncode}"
        with engine.connect() as conn:
            waiting = conn.execute(text("SELECT count(*) FROM log_outbox")).scalar_one()
        if not waiting:
            break
        if time.monotonic() - started > timeout:
            return f"timed out after {timeout:.0f}s: {waiting} logs not yet archived"
        time.sleep(0.2)
    result.archive_drain_s = round(time.monotonic() - started, 2)
    with engine.connect() as conn:
        states: dict[str, int] = {
            row.state: row.n
            for row in conn.execute(
                text("SELECT state, count(*) AS n FROM task_log GROUP BY state")
            )
        }
    result.archived = int(states.get("archived", 0))
    result.archive_lost = int(states.get("lost", 0))
    return None


def _task_rows(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [
            dict(row._mapping)
            for row in conn.execute(
                text(
                    "SELECT ti.id, ti.dag_id, ti.task_id, ti.state, ti.queued_at, ti.start_date,"
                    " ti.end_date, ti.external_id, ti.queued_by_job_id, ti.reason"
                    " FROM task_instance ti"
                )
            )
        ]


def _first_run_created(engine: Engine) -> datetime | None:
    with engine.connect() as conn:
        value: datetime | None = conn.execute(
            text("SELECT min(created_at) FROM dag_run")
        ).scalar_one()
    return value


def _pod_of_job(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest pod of each Job, by the Job name on its labels."""
    newest: dict[str, dict[str, Any]] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if not job:
            continue
        seen = newest.get(job)
        if (
            seen is None
            or pod["metadata"]["creationTimestamp"] > seen["metadata"]["creationTimestamp"]
        ):
            newest[job] = pod
    return newest


def run_trial(
    pg: Postgres,
    cluster: Cluster,
    opts: argparse.Namespace,
    env: dict[str, str],
    replicas: int,
    trial: int,
    stamp: str,
    console: Console,
) -> K8sTrial:
    loads = workloads(opts.shapes.split(","), opts.dags, opts.tasks)
    namespace = (
        f"{NS_PREFIX}{stamp.lower()}-r{replicas}-{trial}"
        + ("-nosidecar" if opts.no_sidecar else "")
        + ("-archive" if opts.archive else "")
    )
    result = K8sTrial(
        shapes=opts.shapes.split(","),
        dags=opts.dags,
        tasks_per_dag=opts.tasks,
        replicas=replicas,
        trial=trial,
        namespace=namespace,
        pool_slots=opts.pool_slots,
        tasks_total=sum(w.total_tasks for w in loads),
        sidecar=not opts.no_sidecar,
        archive=opts.archive,
    )
    result.foreign = wait_quiet(cluster, opts.quiet_for, opts.quiet_wait, console)
    db_name = (
        f"sluice_k8s_bench_r{replicas}_{trial}"
        + ("_nosidecar" if opts.no_sidecar else "")
        + ("_archive" if opts.archive else "")
    )
    url = pg.create(db_name, TEMPLATE)
    engine = make_engine(url, application_name="sluice-bench-harness")
    log_dir = RESULTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    created_namespace = False
    trial_started = datetime.now(UTC)
    try:
        with session_factory(engine)() as session:
            register(session, loads, opts.image)
        cluster.create_namespace(namespace)
        created_namespace = True
        keys = log_dir / f"{namespace}.keys"
        keys.write_text(secrets.token_hex(32) + "\n")
        procs, logs = start_replicas(
            replicas,
            db_url=url,
            namespace=namespace,
            kubeconfig=cluster.kubeconfig,
            image=opts.image,
            node_ip=env["NODE_IP"],
            keys=keys,
            log_dir=log_dir,
            sidecar=not opts.no_sidecar,
            log_store=(log_dir / f"{namespace}-archive").as_uri() if opts.archive else None,
        )
        deadline = time.monotonic() + 120
        while _registered(engine) < replicas:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a replica exited with {proc.returncode}; see {logs[0]}")
            if time.monotonic() > deadline:
                raise TimeoutError("replicas did not register within 120s")
            time.sleep(0.2)
        time.sleep(1.0)  # every replica in its idle sleep
        # The idle cluster's own requests (leases, node status, ...), replicas included.
        quiet0 = cluster.request_totals()
        busy0, clock0 = machine_busy()[0], time.monotonic()
        idle0 = sum(cpu_seconds(p.pid) for p in procs)
        time.sleep(opts.baseline)
        quiet_s = time.monotonic() - clock0
        # Cores busy with the cluster idle: well above ~0.3 means something else ran.
        result.foreign["busy_cores_before_t0"] = round(
            (machine_busy()[0] - busy0) / CLK_TCK / quiet_s, 2
        )
        result.replicas_idle_ms_per_s = round(
            (sum(cpu_seconds(p.pid) for p in procs) - idle0) * 1000 / quiet_s, 2
        )
        quiet1 = cluster.request_totals()
        quiet, quiet_reset = diff_counts(quiet0, quiet1)
        meter = ClusterMeter([p.pid for p in procs], pg.pid)
        before = cluster.request_totals()
        api_t0 = time.monotonic()
        t0 = unpause_all(engine)
        console.print(f"  t0: {replicas} replica(s), namespace {namespace}", highlight=False)
        seen: set[str] = set()

        def look_around() -> None:
            """Other namespaces while the trial runs: someone else loads the cluster."""
            try:
                seen.update(foreign_namespaces(cluster, namespace))
            except Exception as exc:  # the API server restarting: the trial goes on
                seen.add(f"(not listed: {type(exc).__name__})")

        problem = _wait_for_runs(
            engine,
            procs,
            sum(w.dags for w in loads),
            result.tasks_total,
            opts.timeout,
            console,
            look_around,
        )
        result.foreign["namespaces_during"] = sorted(seen)
        if opts.archive and not problem:
            # The window runs on until every ended try's log is archived: its reads and
            # CPU are the archive's cost.
            problem = _wait_for_archives(engine, procs, opts.timeout, result)
        after = cluster.request_totals()
        result.api_window_s = round(time.monotonic() - api_t0, 2)
        cpu, busy, window, restarted = meter.read()
        result.cpu, result.machine_busy_s, result.cpu_window_s = cpu, round(busy, 2), window
        result.restarted = restarted
        if problem:
            result.status = "timed out" if problem.startswith("timed out") else "failed"
            result.errors.append(problem)
        stop_replicas(procs)
        executor_counts, events, missing = read_replica_logs(logs)
        result.api_sluice_executor = executor_counts
        result.foreign["replica_log_events"] = {
            k: v for k, v in events.most_common() if not k.startswith("info: ")
        }
        if missing:
            result.errors.append(f"no request count in {', '.join(missing)}")
        counts, reset = diff_counts(before, after)
        result.api_valid = not reset and not quiet_reset and "kube-apiserver" not in restarted
        if not result.api_valid:
            result.errors.append("the API server restarted during the trial: no API figures")
        result.api_cluster = without_watches(counts)
        result.api_sluice_server = sluice_requests(counts)
        result.api_background = background(quiet, opts.baseline, result.api_window_s)
        if restarted:
            result.errors.append(f"restarted during the trial: {', '.join(restarted)}")
        _figures(result, engine, cluster, namespace, t0, trial_started)
    except Exception as exc:  # a broken trial is reported, and the next one runs
        result.status = "failed"
        result.errors.append(f"{type(exc).__name__}: {str(exc)[:500]}")
    finally:
        stop_replicas(procs)
        engine.dispose()
        pg.drop(db_name)
        if created_namespace and not opts.keep_namespace:
            try:
                result.namespace_delete_s = cluster.delete_namespace(namespace, opts.timeout)
            except Exception as exc:
                result.errors.append(f"deleting {namespace}: {str(exc)[:300]}")
    return result


def _figures(
    result: K8sTrial,
    engine: Engine,
    cluster: Cluster,
    namespace: str,
    t0: datetime,
    trial_started: datetime,
) -> None:
    rows = _task_rows(engine)
    first_run = _first_run_created(engine)
    jobs = {j["metadata"]["name"]: j for j in cluster.jobs(namespace)}
    pods_everywhere = cluster.all_pods()
    pods = [p for p in pods_everywhere if p["metadata"]["namespace"] == namespace]
    others = [
        p
        for p in pods_everywhere
        if p["metadata"]["namespace"] != namespace
        and p["metadata"]["creationTimestamp"] >= trial_started.strftime("%Y-%m-%dT%H:%M:%SZ")
    ]
    result.foreign["pods_created_elsewhere"] = len(others)
    result.foreign["namespaces_elsewhere"] = sorted({p["metadata"]["namespace"] for p in others})
    pod_of = _pod_of_job(pods)
    succeeded = [r for r in rows if r["state"] == "success"]
    result.tasks_succeeded = len(succeeded)
    not_ok = len(rows) - len(succeeded)
    if not_ok:
        reasons = Counter(
            str(r["reason"] or r["state"])[:120] for r in rows if r["state"] != "success"
        )
        result.errors.append(
            f"{not_ok} tasks did not succeed: "
            + "; ".join(f"{n}x {why}" for why, n in reasons.most_common(3))
        )
        if result.status == "ok":
            result.status = "failed"
    ends = [r["end_date"] for r in succeeded if r["end_date"] is not None]
    if ends and first_run is not None:
        result.makespan_s = round((max(ends) - first_run).total_seconds(), 3)
        result.tasks_per_s = round(len(succeeded) / result.makespan_s, 2)
        result.unpause_to_first_run_s = round((first_run - t0).total_seconds(), 3)
    per_task = []
    for row in succeeded:
        name = row["external_id"]
        pod = pod_of.get(name)
        if pod is None:
            result.tasks_without_pod += 1
        times = task_times(row["queued_at"], row["end_date"], jobs.get(name), pod)
        per_task.append(task_segments(times))
    result.latency = {name: vars(s) for name, s in latency_table(per_task).items()}
    per_replica = Counter(r["queued_by_job_id"] for r in rows if r["queued_by_job_id"])
    result.per_replica = sorted(per_replica.values(), reverse=True)


# -- the CLI ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.k8s", description=__doc__)
    parser.add_argument("--shapes", default="linear,no_structure")
    parser.add_argument("--dags", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=10, help="tasks per DAG")
    parser.add_argument("--replicas", default="1,3")
    parser.add_argument("--trials", type=int, default=1, help="trials per replica count")
    parser.add_argument(
        "--pool-slots", type=int, default=40, help="the default pool: task pods at once"
    )
    parser.add_argument("--image", default=None, help="task image (default: the cluster's)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per trial")
    parser.add_argument(
        "--baseline",
        type=float,
        default=30.0,
        help="quiet window before t0, s (the idle cluster's requests, the replicas' idle CPU)",
    )
    parser.add_argument("--quiet-for", type=float, default=20.0)
    parser.add_argument("--quiet-wait", type=float, default=900.0)
    parser.add_argument(
        "--no-sidecar",
        action="store_true",
        help="A/B: no task API, so task pods run without the heartbeat sidecar",
    )
    parser.add_argument(
        "--archive",
        action="store_true",
        help="the replicas archive every try's log (--log-store, a directory): its cost",
    )
    parser.add_argument("--keep-namespace", action="store_true", help="debugging: keep it")
    parser.add_argument(
        "--render", nargs="+", metavar="FILE.json", help="print saved runs' tables (merged)"
    )
    parser.add_argument("--markdown", action="store_true", help="with --render: as Markdown")
    opts = parser.parse_args(argv)
    console = Console(width=int(os.environ.get("COLUMNS", "200")))
    if opts.render:
        shown = []
        for path in opts.render:
            saved = json.loads(Path(path).read_text())
            trials_of = [K8sTrial(**t) for t in saved["trials"]]
            for one in trials_of:  # judged by today's rule of which requests are Sluice's
                if one.api_cluster:
                    one.api_sluice_server = sluice_requests(one.api_cluster)
            if len(opts.render) > 1:  # several runs: say which code each trial measured
                for one in trials_of:
                    one.commit = one.commit or saved["commit"]
            shown += trials_of
            done = "" if saved.get("complete", True) else ", interrupted"
            print(
                f"`{saved['command']}` at {saved['commit']} "
                f"({saved['when']}, {saved['cores']} cores{done})"
            )
        if opts.markdown:
            print(k8s_report.markdown(shown))
        else:
            k8s_report.print_report(shown, console)
        return 0
    for shape in opts.shapes.split(","):
        if shape not in SHAPES:
            raise SystemExit(f"--shapes: {shape!r} is not one of {', '.join(SHAPES)}")

    env = cluster_env()
    kubeconfig = Path(os.environ.get("KUBECONFIG") or env.get("KUBECONFIG", ""))
    cluster = Cluster(kubeconfig, env["APISERVER_URL"])
    try:
        cluster.raw("/readyz", timeout=10)
    except Exception as exc:
        raise SystemExit(
            f"the local cluster's API server does not answer ({str(exc)[:200]}): run this "
            "inside its network namespace (hack/in-cluster.sh, or make bench-k8s), and check "
            "hack/cluster-status.sh"
        ) from None
    opts.image = opts.image or env.get("SLUICE_IMAGE", "localhost/sluice:dev")
    apply_crds(kubeconfig)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in foreign_namespaces(cluster):
        if name.startswith(NS_PREFIX):
            console.print(f"deleting {name}, left by an interrupted run")
            cluster.delete_namespace(name, opts.timeout)

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    saved_path = RESULTS / f"k8s-{stamp}.json"
    command = "python -m bench.k8s " + " ".join(sys.argv[1:] if argv is None else argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    trials: list[K8sTrial] = []

    def save(*, complete: bool) -> None:
        payload = {
            "mode": "k8s",
            "command": command,
            "commit": commit + ("-dirty" if dirty else ""),
            "when": stamp,
            "complete": complete,
            "cores": os.cpu_count(),
            "node_ip": env.get("NODE_IP"),
            "trials": [t.as_dict() for t in trials],
        }
        saved_path.write_text(json.dumps(payload, indent=1, default=str))

    replica_counts = [int(x) for x in opts.replicas.split(",")]
    plan = [(r, t) for r in replica_counts for t in range(opts.trials)]
    pg = Postgres()
    try:
        prepare_template(pg, opts.pool_slots)
        for i, (replicas, trial) in enumerate(plan, 1):
            console.print(
                f"[{i}/{len(plan)}] {replicas} replica(s), trial {trial}: "
                f"{opts.dags} DAGs x {opts.tasks} tasks ({opts.shapes}), pool {opts.pool_slots}",
                highlight=False,
            )
            started = time.monotonic()
            # Saved first as interrupted: a bench killed meanwhile (hack/cluster-down.sh kills
            # everything in the cluster's network namespace) still shows the trial it lost.
            trials.append(
                K8sTrial(
                    shapes=opts.shapes.split(","),
                    dags=opts.dags,
                    tasks_per_dag=opts.tasks,
                    replicas=replicas,
                    trial=trial,
                    namespace="",
                    pool_slots=opts.pool_slots,
                    sidecar=not opts.no_sidecar,
                    archive=opts.archive,
                    status="interrupted",
                    errors=["the benchmark process ended during this trial"],
                    tasks_total=opts.dags * opts.tasks,
                )
            )
            save(complete=False)
            result = run_trial(pg, cluster, opts, env, replicas, trial, stamp, console)
            trials[-1] = result
            save(complete=False)
            console.print(
                f"[{i}/{len(plan)}] {result.status}: {result.tasks_succeeded}/"
                f"{result.tasks_total} tasks, {result.tasks_per_s} tasks/s, makespan "
                f"{result.makespan_s}s, scheduler CPU {result.scheduler_ms_per_task:.1f} "
                f"ms/task ({time.monotonic() - started:.0f}s)"
                + (f" ERR {'; '.join(result.errors)}" if result.errors else ""),
                highlight=False,
            )
    finally:
        pg.stop()
    save(complete=True)
    shutil.copyfile(saved_path, RESULTS / "k8s-latest.json")
    k8s_report.print_report(trials, console)
    console.print(f"results: {saved_path}")
    return 0 if all(t.status == "ok" for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
