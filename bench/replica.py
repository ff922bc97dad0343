"""One Sluice scheduler replica for the benchmark: `python -m bench.replica URL [knobs]`.

A real clock, the no-op executor, logging at warning (as on the Airflow side),
and a clean stop on SIGTERM. The harness measures this process's CPU in /proc.
The switches below turn off one design choice each, for A/B runs through
`SLUICE_BENCH_REPLICA_ARGS` (bench/README.md).
"""

from __future__ import annotations

import argparse
import signal
from types import FrameType

from sluice.cli.scheduler import STATUS_IDLE_INTERVAL
from sluice.db.engine import make_engine, session_factory
from sluice.db.wakeups import Waker
from sluice.executors.kubernetes.executor import client_factory
from sluice.executors.noop import NoopExecutor
from sluice.logs import configure_logging
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop, utcnow
from sluice.status.publisher import StatusPublisher

STATUS_NAMESPACE = "bench"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replica")
    parser.add_argument("url")
    parser.add_argument("--max-tis-per-query", type=int, default=16)
    parser.add_argument("--runs-examined", type=int, default=20)
    parser.add_argument(
        "--runs-created",
        type=int,
        default=SchedulerConfig.runs_created_per_tick,
        help="runs created per tick, at most (10: Airflow's max_dagruns_to_create_per_loop)",
    )
    parser.add_argument(
        "--runs-phase-budget",
        type=float,
        default=SchedulerConfig.runs_phase_budget,
        help="seconds of a tick phase 1 may take in batches",
    )
    parser.add_argument("--idle-sleep", type=float, default=1.0)
    parser.add_argument(
        "--critical-batches",
        type=int,
        default=SchedulerConfig.critical_batches_per_tick,
        help="critical-section batches per tick (1: one query per tick, as Airflow)",
    )
    parser.add_argument(
        "--no-wake",
        action="store_true",
        help="idle sleep without LISTEN/NOTIFY, nor an end at the next due run (Airflow's)",
    )
    parser.add_argument(
        "--no-prepared-statements", action="store_true", help="hot statements as plain text"
    )
    parser.add_argument(
        "--status-kubeconfig",
        metavar="PATH",
        help="run the status publisher against this cluster, as a chart install does"
        " (the production arm: status capture and publishing on)",
    )
    args = parser.parse_args(argv)
    configure_logging("warning")

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    engine = make_engine(
        args.url,
        application_name="sluice-bench",
        prepare_statements=not args.no_prepared_statements,
    )
    config = SchedulerConfig(
        tick_interval=args.idle_sleep,
        max_tis_per_query=args.max_tis_per_query,
        runs_examined_per_tick=args.runs_examined,
        runs_created_per_tick=args.runs_created,
        runs_phase_budget=args.runs_phase_budget,
        critical_batches_per_tick=args.critical_batches,
        wake_at_next_due=not args.no_wake,
    )
    waker = None if args.no_wake else Waker(engine)
    sessions = session_factory(engine)
    publisher = None
    if args.status_kubeconfig:
        # What `sluice scheduler` starts beside its loop (cli/scheduler.py), with its settings.
        publisher = StatusPublisher(
            sessions,
            client_factory(args.status_kubeconfig),
            clock=utcnow,
            default_namespace=STATUS_NAMESPACE,
            idle_interval=STATUS_IDLE_INTERVAL,
        )
        publisher.start()
    loop = SchedulerLoop(sessions, NoopExecutor(), config, waker=waker)
    print(f"ready job={loop.job_id}", flush=True)
    try:
        loop.run(lambda: stopping)
    finally:
        if publisher is not None:
            publisher.stop()
        loop.close()
        engine.dispose()


if __name__ == "__main__":
    main()
