"""`sluice scheduler`: one replica of the active-active scheduler."""

from __future__ import annotations

import gc
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import structlog
import typer
from kubernetes import client
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.api.server import TaskApi
from sluice.archive.store import StoreError, open_store
from sluice.cli import kubernetes as k8s
from sluice.cli.common import DatabaseUrl, LogJson, LogLevel, LogStoreUrl, load_manifests
from sluice.cli.errors import fail
from sluice.config import ConfigError, require_database_url
from sluice.db.clock import DatabaseClock
from sluice.db.dags import DagNameTaken, sync_dag
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.db.wakeups import Waker
from sluice.executors.base import Executor
from sluice.executors.kubernetes import KubernetesExecutor, KubernetesSettings
from sluice.executors.kubernetes.executor import api_client_factory
from sluice.executors.local import LocalExecutor, log_file
from sluice.executors.logsources import FileLogs, LogSource, PodLogs
from sluice.executors.noop import NoopExecutor
from sluice.logs import configure_logging, first_line
from sluice.metrics.health import DEFAULT_STALE_AFTER, LIVENESS_FACTOR, LoopHealth
from sluice.metrics.sampler import Sampler
from sluice.metrics.server import MetricsServer
from sluice.scheduler.archiver import DEFAULT_MAX_BYTES, LogArchiver
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.contact import HeartbeatRecording
from sluice.scheduler.loop import SchedulerLoop, utcnow
from sluice.scheduler.retention import LogRetention
from sluice.status.publisher import DEFAULT_HISTORY_LIMIT, StatusPublisher, loop_hooks

_defaults = SchedulerConfig()
log = structlog.get_logger("sluice.scheduler")

# The status publisher runs when the loop wakes it (a change, a notification); rows no one
# woke it for (a dead publisher's lease ending, a DAG version from the operator) wait at
# most this long (seconds).
STATUS_IDLE_INTERVAL = 5.0


def scheduler(
    database_url: DatabaseUrl = None,
    executor: Annotated[str, typer.Option(help="local, kubernetes or noop")] = "local",
    dags: Annotated[
        Path | None, typer.Option(help="sync the DAG manifests in this directory at start")
    ] = None,
    log_dir: Annotated[
        Path,
        typer.Option(
            help="task logs, and each try's pid, result and lease files (local executor;"
            " the replicas of one machine share it, to adopt each other's tries)"
        ),
    ] = Path("sluice-logs"),
    migrate: Annotated[bool, typer.Option(help="run `db upgrade` first")] = True,
    tick_interval: Annotated[
        float,
        typer.Option(help="seconds an idle replica waits between ticks (Airflow's idle sleep)"),
    ] = _defaults.tick_interval,
    runs_created_per_tick: Annotated[
        int,
        typer.Option(
            help="phase 1 creates at most this many scheduled runs per tick (and starts the"
            " queued runs of at most as many DAGs; Airflow's max_dagruns_to_create_per_loop)"
        ),
    ] = _defaults.runs_created_per_tick,
    runs_created_per_batch: Annotated[
        int,
        typer.Option(
            help="phase 1 creates and starts runs in batches of this many, each its own"
            " transaction (ADR 0023)"
        ),
    ] = _defaults.runs_created_per_batch,
    runs_phase_budget: Annotated[
        float,
        typer.Option(
            help="phase 1 starts another batch while it has taken less than this many"
            " seconds of the tick; the next tick goes on"
        ),
    ] = _defaults.runs_phase_budget,
    wake_at_next_due: Annotated[
        bool,
        typer.Option(
            help="end an idle wait when the next scheduled run falls due (off: the wait"
            " lasts --tick-interval, as Airflow's idle sleep does)"
        ),
    ] = _defaults.wake_at_next_due,
    runs_examined_per_tick: Annotated[
        int,
        typer.Option(
            help="phase 2 examines at most this many running runs per tick (Airflow's"
            " max_dagruns_per_loop_to_schedule)"
        ),
    ] = _defaults.runs_examined_per_tick,
    quiet_round_interval: Annotated[
        float,
        typer.Option(
            help="phase 2 also examines runs without work, round-robin, once per this many"
            " seconds (shared by the live replicas): the net for runs without a deadline"
            " (ADR 0024)"
        ),
    ] = _defaults.quiet_round_interval,
    max_tis_per_query: Annotated[
        int,
        typer.Option(
            help="phase 3 reads at most this many scheduled task instances per critical"
            " section, and dispatches as many per batch (Airflow's max_tis_per_query)"
        ),
    ] = _defaults.max_tis_per_query,
    critical_batches_per_tick: Annotated[
        int, typer.Option(help="critical-section batches per tick while batches come back full")
    ] = _defaults.critical_batches_per_tick,
    zombie_threshold: Annotated[
        float,
        typer.Option(
            help="seconds without a heartbeat after which a running try whose worker is gone"
            " fails as a zombie"
        ),
    ] = _defaults.zombie_threshold,
    heartbeat_kill_threshold: Annotated[
        float,
        typer.Option(
            help="tries that heartbeat themselves (task pods): one still running without a "
            "heartbeat for this long is killed as a zombie"
        ),
    ] = _defaults.heartbeat_kill_threshold,
    heartbeat_interval: Annotated[
        float,
        typer.Option(
            help="seconds between the replica's heartbeats (of itself and of the tries its"
            " executor runs)"
        ),
    ] = _defaults.heartbeat_interval,
    scheduler_dead_after: Annotated[
        float,
        typer.Option(
            help="seconds without a heartbeat after which a replica is taken for dead and"
            " live replicas adopt its tries"
        ),
    ] = _defaults.scheduler_dead_after,
    zombie_check_interval: Annotated[
        float, typer.Option(help="how often a replica looks for stale tries (seconds)")
    ] = _defaults.zombie_check_interval,
    prepared_statements: Annotated[
        bool,
        typer.Option(
            help="prepare the loop's hot statements once per connection; turn off behind a"
            " pooler in transaction mode (PgBouncer), where each transaction may get another"
            " server connection"
        ),
    ] = True,
    namespace: k8s.Namespace = None,
    job_namespace: k8s.JobNamespace = None,
    kubeconfig: k8s.Kubeconfig = None,
    sluice_image: k8s.SluiceImage = "localhost/sluice:dev",
    task_api_url: k8s.TaskApiUrl = None,
    task_api_listen: k8s.TaskApiListen = "0.0.0.0:8793",
    task_api_keys_file: k8s.TaskApiKeysFile = None,
    pod_start_timeout: k8s.PodStartTimeout = 300.0,
    job_ttl: k8s.JobTtl = 3600,
    log_store: LogStoreUrl = None,
    log_max_bytes: Annotated[
        int,
        typer.Option(
            help="with --log-store: the most of a try's output archived; the rest is cut, and"
            " the archived log says so"
        ),
    ] = DEFAULT_MAX_BYTES,
    log_retention_days: Annotated[
        int,
        typer.Option(
            help="with --log-store: delete a try's archived log this many days after the try"
            " ended (`sluice logs` then says when, and why); 0 keeps every log"
        ),
    ] = 0,
    task_service_account: k8s.TaskServiceAccount = None,
    task_image_pull_policy: k8s.TaskImagePullPolicy = None,
    publish_status: Annotated[
        bool,
        typer.Option(
            help="kubernetes executor: publish every run to a DagRun object (status, Events;"
            " runs of DAGs without a namespace go to --namespace)"
        ),
    ] = True,
    dagrun_history_limit: Annotated[
        int,
        typer.Option(
            help="keep the DagRun objects of each DAG's newest this many ended runs, by end"
            " time, and delete the older ones' (0: keep every object); the database keeps"
            " every run (sluice dags runs)",
            min=0,
        ),
    ] = DEFAULT_HISTORY_LIMIT,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="serve /metrics (Prometheus), /readyz and /healthz on this port (default: off)",
            min=0,
            max=65535,
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="the address --metrics-port listens on")
    ] = "0.0.0.0",
    health_stale_after: Annotated[
        float,
        typer.Option(
            help="/readyz answers 503 once the loop's last tick that reached the database"
            f" ended longer ago than this (seconds); /healthz only after {LIVENESS_FACTOR}"
            " times as long without any tick (a stuck loop: a restart does not cure a"
            " database outage)"
        ),
    ] = DEFAULT_STALE_AFTER,
    log_level: LogLevel = "info",
    log_json: LogJson = False,
) -> None:
    """Run the four-phase loop until SIGTERM or SIGINT."""
    configure_logging(log_level, json=log_json)
    try:
        url = require_database_url(database_url)
    except ConfigError as exc:
        fail(str(exc))
    for name, value in (
        ("--runs-created-per-tick", runs_created_per_tick),
        ("--runs-created-per-batch", runs_created_per_batch),
        ("--runs-examined-per-tick", runs_examined_per_tick),
        ("--max-tis-per-query", max_tis_per_query),
        ("--critical-batches-per-tick", critical_batches_per_tick),
    ):
        if value < 1:
            fail(f"{name} must be at least 1 (got {value})")
    for name, seconds in (
        ("--tick-interval", tick_interval),
        ("--heartbeat-interval", heartbeat_interval),
        ("--zombie-check-interval", zombie_check_interval),
        ("--runs-phase-budget", runs_phase_budget),
        ("--quiet-round-interval", quiet_round_interval),
    ):
        if seconds <= 0:
            fail(f"{name} must be more than 0 seconds (got {seconds})")
    for name, seconds, looks_like in (
        ("--zombie-threshold", zombie_threshold, "every running try looks like a zombie"),
        (
            "--heartbeat-kill-threshold",
            heartbeat_kill_threshold,
            "every running task pod is killed as a zombie",
        ),
        ("--scheduler-dead-after", scheduler_dead_after, "live replicas look dead"),
    ):
        if seconds <= heartbeat_interval:
            fail(
                f"{name} ({seconds}s) must be longer than --heartbeat-interval"
                f" ({heartbeat_interval}s), or {looks_like}"
            )
    if health_stale_after <= tick_interval:
        fail(
            f"--health-stale-after ({health_stale_after}s) must be longer than --tick-interval"
            f" ({tick_interval}s), or an idle replica looks stalled"
        )
    chosen: Executor
    signer = None
    store = None
    if log_retention_days < 0:
        fail(f"--log-retention-days must be 0 (keep every log) or more (got {log_retention_days})")
    if log_retention_days and not log_store:
        fail(
            "--log-retention-days deletes archived logs: it needs --log-store (or SLUICE_LOG_STORE)"
        )
    if log_store is not None:
        if log_max_bytes < 1024:
            fail(f"--log-max-bytes must be at least 1024 (got {log_max_bytes})")
        try:
            store = open_store(log_store)
        except (ValueError, StoreError) as exc:
            fail(f"--log-store: {exc}")
    settings: KubernetesSettings | None = None
    if executor == "local":
        # A local try stops itself once no replica has recorded its heartbeat for this
        # long: longer than a live replica of its machine takes to adopt it (ADR 0015).
        lease = 2 * max(zombie_threshold, scheduler_dead_after) + zombie_check_interval
        chosen = LocalExecutor(log_dir, lease=lease)
    elif executor == "noop":
        chosen = NoopExecutor()
    elif executor == "kubernetes":
        settings = k8s.kubernetes_settings(
            namespace=namespace,
            kubeconfig=kubeconfig,
            sluice_image=sluice_image,
            task_api_url=task_api_url,
            pod_start_timeout=pod_start_timeout,
            heartbeat_interval=heartbeat_interval,
            service_account=task_service_account,
            image_pull_policy=task_image_pull_policy,
            job_namespace=job_namespace,
            job_ttl=job_ttl,
            adoption_seconds=scheduler_dead_after + zombie_check_interval,
        )
        listen = k8s.listen_address(task_api_listen)
        signer = k8s.task_signer(task_api_keys_file) if task_api_url else None
        chosen = k8s.make_executor(settings, signer)
    else:
        fail(f"--executor {executor!r} is not known; use local, kubernetes or noop")
    config = SchedulerConfig(
        tick_interval=tick_interval,
        runs_created_per_tick=runs_created_per_tick,
        runs_created_per_batch=runs_created_per_batch,
        runs_phase_budget=runs_phase_budget,
        wake_at_next_due=wake_at_next_due,
        runs_examined_per_tick=runs_examined_per_tick,
        quiet_round_interval=quiet_round_interval,
        max_tis_per_query=max_tis_per_query,
        critical_batches_per_tick=critical_batches_per_tick,
        dispatch_batch=max_tis_per_query,
        heartbeat_interval=heartbeat_interval,
        scheduler_dead_after=scheduler_dead_after,
        zombie_threshold=zombie_threshold,
        heartbeat_kill_threshold=heartbeat_kill_threshold,
        zombie_check_interval=zombie_check_interval,
    )
    stopping = {"now": False}

    def request_stop(signum: int, frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    def stopped() -> bool:
        return stopping["now"]

    # The probes answer from the start: live, and not ready while the replica waits for
    # the database below.
    health = LoopHealth()
    server = None
    if metrics_port is not None:
        server = MetricsServer(
            health, host=metrics_host, port=metrics_port, stale_after=health_stale_after
        )
        try:
            server.start()
        except OSError as exc:
            fail(f"--metrics-port {metrics_port} on {metrics_host}: {exc}")
    engine: Engine | None = None
    task_api: TaskApi | None = None
    publisher: StatusPublisher | None = None
    archiver: LogArchiver | None = None
    sampler: Sampler | None = None
    loop: SchedulerLoop | None = None
    try:
        # A Postgres restart or outage while the replica starts is waited out, as the loop
        # waits it out later: it is no reason to exit (invariant 6).
        if migrate and not until_reachable("db upgrade", lambda: upgrade(url), stopped):
            return
        engine = make_engine(url, prepare_statements=prepared_statements)
        sessions = session_factory(engine)
        # Every timestamp the replicas compare comes from the database's clock, never from
        # this machine's wall clock (which may be off, or jump).
        clock = DatabaseClock(engine, fallback=utcnow)
        # What the task API could not write, the loop does not count as a try's silence.
        recording = HeartbeatRecording(
            clock(), longest=max(config.zombie_threshold, config.heartbeat_kill_threshold)
        )
        task_api = (
            None
            if signer is None
            else k8s.start_task_api(engine, signer, listen, clock, on_write=recording.report)
        )
        if settings is not None and publish_status:
            publisher = StatusPublisher(
                sessions,
                api_client_factory(settings),
                clock=clock,
                default_namespace=settings.namespace,
                idle_interval=STATUS_IDLE_INTERVAL,
                history_limit=dagrun_history_limit,
            )
        if server is not None:
            sampler = Sampler(sessions)  # the numbers that need a query, every few seconds
            sampler.start()
        if publisher is not None and not until_reachable(
            "starting the status publisher", publisher.start, stopped
        ):
            return
        if store is not None:
            retention = (
                LogRetention(engine, store, log_retention_days, clock=clock)
                if log_retention_days
                else None
            )
            archiver = LogArchiver(
                engine,
                store,
                _log_source(chosen, settings, log_dir),
                max_bytes=log_max_bytes,
                retention=retention,
            )
            if not until_reachable("starting the log archiver", archiver.start, stopped):
                return
        if dags is not None and not until_reachable(
            "syncing --dags", lambda: _sync_manifests(sessions, dags, clock()), stopped
        ):
            return
        waker = Waker(engine)

        def register() -> None:
            nonlocal loop
            loop = SchedulerLoop(
                sessions,
                chosen,
                config,
                clock=clock,
                waker=waker,
                health=health,
                **loop_hooks(publisher),
                recording=None if task_api is None else recording,
            )

        if not until_reachable("registering the replica", register, stopped):
            return
        assert loop is not None
        freeze_startup_heap()
        loop.run(stopped)
    finally:
        if loop is not None:
            loop.close()
        if isinstance(chosen, KubernetesExecutor):
            # What this replica cost the API server (the benchmark reads it: bench/k8s.py).
            log.info(
                "kubernetes executor stopped",
                api_requests=chosen.request_counts(),
                **chosen.watches.stats(),
            )
        if task_api is not None:
            task_api.stop()
        if archiver is not None:
            archiver.stop()
        if publisher is not None:
            publisher.stop()
            log.info("status publisher stopped", **vars(publisher.counts))
        if sampler is not None:
            sampler.stop()
        if engine is not None:
            engine.dispose()
        if server is not None:
            server.stop()


def _log_source(chosen: object, settings: KubernetesSettings | None, log_dir: Path) -> LogSource:
    """Where the archiver reads ended tries' output: their pods, or the local log files."""
    if settings is not None:
        return PodLogs(client.CoreV1Api(api_client_factory(settings)()))
    return FileLogs(lambda r: log_file(log_dir, r.dag_id, r.run_id, r.task_id, r.try_number))


def freeze_startup_heap() -> None:
    """Leave what is set up by now (the Kubernetes client's models and classes among it,
    all of it living as long as the replica) out of every collection, so that a full
    collection no longer walks it, in the critical section or anywhere else (ADR 0052).
    The setup's garbage is collected first: frozen, a cycle would never be freed."""
    gc.collect()
    gc.freeze()


def until_reachable(
    what: str,
    work: Callable[[], object],
    stopped: Callable[[], bool],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Run `work`, again after a growing pause (0.5 s to 5 s) while the database cannot be
    reached; False if asked to stop first. Any other error is raised."""
    pause = 0.5
    while not stopped():
        try:
            work()
            return True
        except OperationalError as exc:
            log.warning(
                "database unreachable while starting; trying again",
                step=what,
                error=first_line(exc),
                retry_in=pause,
            )
        for _ in range(round(pause / 0.1)):
            if stopped():
                break
            sleep(0.1)
        pause = min(pause * 2, 5.0)
    return False


def _sync_manifests(sessions: sessionmaker[Session], dags: Path, now: datetime) -> None:
    """Every manifest in `dags`, in one transaction: all of them, or none if one may not be
    written (a namespace's DAG of the same name is never taken over or reset)."""
    manifests = load_manifests([dags])
    taken: list[str] = []
    with sessions() as session:
        for manifest in manifests:
            try:
                sync_dag(session, manifest, now)
            except DagNameTaken as exc:
                taken.append(f"{exc}, or leave it out of --dags {dags}")
        if taken:
            session.rollback()
            fail("; ".join(taken) + " (nothing was synced)")
        session.commit()
