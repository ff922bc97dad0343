"""Status publishing under load: how many patches the API server sees (issue 12).

100 DAGs x 100 tasks (no edges: every task of a run can run at once), one run
each, on a fresh embedded Postgres; one scheduling loop with the noop executor
(every try succeeds at the next poll) and, beside it, the status publishers
(`--publishers`, threads of this process, as in replicas) against the
in-memory API server of the tests (`tests/fake_kube.py`: resourceVersion
preconditions, no network). It prints what the API server would have seen:
creates, patches, conflicts and Events, patches per second, the most patches
any one run got in any one second, and the status outbox's largest backlog.

    python -m bench.status [--dags 100] [--tasks 100] [--publishers 2]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy import func, select, text

from sluice.db.dags import SpecCache, sync_dag
from sluice.db.embedded import start_embedded_postgres
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.db.models import DagRun, StatusOutbox
from sluice.executors.noop import NoopExecutor
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop
from sluice.scheduler.triggers import trigger_run
from sluice.spec.validation import parse_dag_manifest
from sluice.status import store
from sluice.status.publisher import StatusPublisher
from tests.fake_kube import FakeKube


class CountingKube(FakeKube):
    """Records when each patch landed, and on which object."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.patched: list[tuple[float, str]] = []

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Any:
        response = super().patch_namespaced_custom_object_status(*args, **kwargs)
        self.patched.append((time.monotonic(), args[4]))
        return response


def utcnow() -> datetime:
    return datetime.now(UTC)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.status", description=__doc__)
    parser.add_argument("--dags", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--publishers", type=int, default=2)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-status-"))
    pg = start_embedded_postgres(workdir / "pg", keep_data=False)
    try:
        return _run(pg.url, args)
    finally:
        pg.stop()


def _run(url: str, args: argparse.Namespace) -> int:
    upgrade(url)
    engine = make_engine(url, pool_size=args.publishers + 4)
    sessions = session_factory(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE slot_pool SET slots = 1000000 WHERE name = 'default'"))
    with sessions() as session:
        for d in range(args.dags):
            manifest = parse_dag_manifest(
                {
                    "apiVersion": "sluice.io/v1alpha1",
                    "kind": "DAG",
                    "metadata": {"name": f"status-{d:03d}"},
                    "spec": {
                        "schedule": None,
                        "startDate": "2026-01-01T00:00:00Z",
                        "maxActiveTasks": args.tasks,
                        "defaults": {"image": "busybox"},
                        "tasks": [{"name": f"t{i:03d}"} for i in range(args.tasks)],
                    },
                }
            )
            sync_dag(session, manifest, utcnow())
        session.commit()
    kube = CountingKube()
    publishers = [
        StatusPublisher(sessions, client.ApiClient, clock=utcnow, default_namespace="bench")
        for _ in range(args.publishers)
    ]
    for publisher in publishers:
        publisher.custom = kube  # type: ignore[assignment]
        publisher.core = kube  # type: ignore[assignment]
    with sessions.begin() as session:
        store.enable(session)
    backlog = {"max": 0}
    stop = threading.Event()

    def watch_backlog() -> None:
        while not stop.wait(0.2):
            with sessions() as session:
                rows = session.execute(select(func.count()).select_from(StatusOutbox)).scalar_one()
            backlog["max"] = max(backlog["max"], int(rows))

    watcher = threading.Thread(target=watch_backlog, daemon=True)
    watcher.start()
    for publisher in publishers:
        publisher.start()
    loop = SchedulerLoop(sessions, NoopExecutor(), SchedulerConfig(), clock=utcnow)
    t0 = time.monotonic()
    with sessions() as session:
        for d in range(args.dags):
            trigger_run(session, SpecCache(), f"status-{d:03d}", utcnow())
        session.commit()
    while True:
        loop.tick()
        with sessions() as session:
            active = session.execute(
                select(func.count()).where(DagRun.state.in_(("queued", "running")))
            ).scalar_one()
        if not active:
            break
    scheduled = time.monotonic() - t0
    while True:  # until every object shows its run's final state
        done = sum(1 for o in kube.dagruns() if (o.get("status") or {}).get("state") == "success")
        if done == args.dags:
            break
        time.sleep(0.1)
    published = time.monotonic() - t0
    stop.set()
    for publisher in publishers:
        publisher.stop()
    loop.close()
    engine.dispose()

    per_run_second: Counter[tuple[str, int]] = Counter(
        (name, int(at - t0)) for at, name in kube.patched
    )
    per_run: dict[str, list[float]] = defaultdict(list)
    for at, name in kube.patched:
        per_run[name].append(at)
    gaps = [b - a for times in per_run.values() for a, b in pairwise(times)]
    counts = Counter(verb for verb, _ in kube.calls)
    conflicts = sum(p.counts.conflicts for p in publishers)
    print(f"{args.dags} runs x {args.tasks} tasks, {args.publishers} publisher(s), noop executor")
    print(f"scheduled in {scheduled:.1f}s; every object final after {published:.1f}s")
    print(
        f"API calls: {counts['create']} creates, {counts['patch']} patches"
        f" ({conflicts} refused with 409), {counts['get']} gets, {counts['event']} Events"
    )
    print(f"patches per second over {published:.1f}s: {counts['patch'] / published:.1f}")
    sizes = [len(times) for times in per_run.values()]
    print(
        f"patches per run: max {max(sizes)}, mean {sum(sizes) / len(sizes):.1f}; most to one"
        f" run within one clock second: {max(per_run_second.values())}; shortest gap between"
        f" two patches of one run: {min(gaps, default=float('nan')):.2f}s"
    )
    print(f"largest status outbox backlog: {backlog['max']} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
