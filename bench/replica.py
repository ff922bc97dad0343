"""One Sluice scheduler replica for the benchmark: `python -m bench.replica URL [knobs]`.

A real clock, the no-op executor, logging at warning (as on the Airflow side),
and a clean stop on SIGTERM. The harness measures this process's CPU in /proc.
The switches below turn off one design choice each, for A/B runs through
`SLUICE_BENCH_REPLICA_ARGS` (bench/README.md). With `--stats FILE` the replica
writes, as it stops, what only it sees (`LoopStats`): its ticks, the transactions
and statements of the ticks that changed something, and how long each critical
section that queued tasks held the pool lock. It reads them from the engine's and
sessions' events and the loop's tick reports, so it measures any `sluice` it is
started with (an A/B arm's code tree, `sluice_side.start_replicas`).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from sluice.cli.scheduler import STATUS_IDLE_INTERVAL, freeze_startup_heap
from sluice.db.engine import make_engine, session_factory
from sluice.db.prepared import sql_of as _sql_of
from sluice.db.wakeups import Waker
from sluice.executors.kubernetes.executor import client_factory
from sluice.executors.noop import NoopExecutor
from sluice.logs import configure_logging
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop, TickReport, utcnow
from sluice.status.publisher import StatusPublisher, loop_hooks

STATUS_NAMESPACE = "bench"

# The critical section's lock statement, and its write (`critical._LOCK_POOLS`, `_QUEUE`):
# the same texts in every tree since 2026-12-03.
LOCK_POOLS = "FOR UPDATE OF p NOWAIT"
QUEUE_WRITE = "INSERT INTO task_try"


# Each statement text sent, with the SQL behind it: memoised, so that counting costs the
# replica a dict lookup a statement whatever the tree's `sql_of` costs (before 2026-12-06 it
# compiled the statement's text on every EXECUTE, 9% of a busy tick).
sql_of = functools.lru_cache(maxsize=4096)(_sql_of)


@dataclass
class LoopStats:
    """Counted in the replica's loop thread (not the status publisher's), over the
    replica's whole life; the ticks that changed something are the trial's."""

    ticks: int = 0
    busy_ticks: int = 0
    busy_transactions: int = 0  # commits in ticks that changed something
    busy_statements: int = 0  # statements sent in those ticks (BEGIN and COMMIT excluded)
    # The collector's full (generation 2) passes in those ticks, and all its passes' time
    # there, in ms (ADR 0048).
    busy_full_collections: int = 0
    busy_collection_ms: float = 0.0
    # Each critical section that queued tasks: from its lock statement being sent to the
    # end of its commit, in ms.
    lock_holds_ms: list[float] = field(default_factory=list)
    _commits: int = 0
    _statements: int = 0
    _lock_at: float | None = None
    _queued: bool = False
    _thread: int = field(default_factory=threading.get_ident)
    _full_collections: int = 0
    _collection_ms: float = 0.0
    _collecting_since: float = 0.0

    def watch(self, engine: Engine, sessions: sessionmaker[Session]) -> None:
        def executed(conn: object, cursor: object, statement: str, *args: object) -> None:
            sql = sql_of(statement)
            if sql is None or threading.get_ident() != self._thread:
                return  # preparing a statement (once per connection), or another thread
            self._statements += 1
            if LOCK_POOLS in sql:
                self._lock_at, self._queued = time.perf_counter(), False
            elif self._lock_at is not None and QUEUE_WRITE in sql:
                self._queued = True

        def committed(conn: object) -> None:
            if threading.get_ident() == self._thread:
                self._commits += 1

        def ended(session: Session) -> None:
            if threading.get_ident() != self._thread:
                return
            if self._lock_at is not None and self._queued:
                self.lock_holds_ms.append((time.perf_counter() - self._lock_at) * 1000)
            self._lock_at = None

        def collected(stage: str, info: dict[str, int]) -> None:
            if threading.get_ident() != self._thread:
                return
            if stage == "start":
                self._collecting_since = time.perf_counter()
                return
            self._collection_ms += (time.perf_counter() - self._collecting_since) * 1000
            self._full_collections += info["generation"] == 2

        gc.callbacks.append(collected)
        event.listen(engine, "before_cursor_execute", executed)
        event.listen(engine, "commit", committed)
        event.listen(sessions, "after_commit", ended)
        event.listen(sessions, "after_rollback", ended)

    def counting(self, tick: Callable[[], TickReport]) -> Callable[[], TickReport]:
        def counted() -> TickReport:
            commits, statements = self._commits, self._statements
            full, collecting = self._full_collections, self._collection_ms
            report = tick()
            self.ticks += 1
            if report.busy:
                self.busy_ticks += 1
                self.busy_transactions += self._commits - commits
                self.busy_statements += self._statements - statements
                self.busy_full_collections += self._full_collections - full
                self.busy_collection_ms += self._collection_ms - collecting
            return report

        return counted

    def as_dict(self) -> dict[str, Any]:
        holds = self.lock_holds_ms
        return {
            "ticks": self.ticks,
            "busy_ticks": self.busy_ticks,
            "busy_transactions": self.busy_transactions,
            "busy_statements": self.busy_statements,
            "busy_full_collections": self.busy_full_collections,
            "busy_collection_ms": round(self.busy_collection_ms, 3),
            "critical_sections_queued": len(holds),
            "lock_hold_ms_p50": round(statistics.median(holds), 3) if holds else None,
            "lock_hold_ms_mean": round(statistics.fmean(holds), 3) if holds else None,
            "lock_hold_ms_max": round(max(holds), 3) if holds else None,
        }


def scheduler_loop(
    sessions: sessionmaker[Session],
    config: SchedulerConfig,
    waker: Waker | None,
    publisher: StatusPublisher | None,
) -> SchedulerLoop:
    """The replica's loop, with the no-op executor, wired to the status publisher (the
    production arm) as `sluice scheduler` wires it (`loop_hooks`)."""
    return SchedulerLoop(
        sessions,
        NoopExecutor(),
        config,
        waker=waker,
        **loop_hooks(publisher),
    )


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
    parser.add_argument(
        "--switch-interval",
        type=float,
        metavar="SECONDS",
        help="sys.setswitchinterval (Python's default 0.005): how long a thread (the status"
        " publisher's) may hold the interpreter while the loop waits for it, for A/B runs",
    )
    parser.add_argument(
        "--freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gc.freeze() once the loop and the publisher are set up, as `sluice scheduler`"
        " does (ADR 0052): the startup heap (the Kubernetes client's classes among it) is left"
        " out of every collection; --no-freeze for A/B runs",
    )
    parser.add_argument("--stats", type=Path, help="write the replica's LoopStats here at exit")
    args = parser.parse_args(argv)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
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
    stats = LoopStats()
    if args.stats is not None:
        stats.watch(engine, sessions)
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
    loop = scheduler_loop(sessions, config, waker, publisher)
    if args.stats is not None:
        loop.tick = stats.counting(loop.tick)  # type: ignore[method-assign]
    if args.freeze:
        freeze_startup_heap()
    print(f"ready job={loop.job_id}", flush=True)
    try:
        loop.run(lambda: stopping)
    finally:
        if publisher is not None:
            publisher.stop()
        loop.close()
        engine.dispose()
        if args.stats is not None:
            args.stats.write_text(json.dumps(stats.as_dict()))


if __name__ == "__main__":
    main()
