"""The scheduler alone at scale: how a tick's time grows with DAGs and task instances.

One in-process `SchedulerLoop` (no-op executor, tis/query 512) on a fresh
database. A probe workload (10 DAGs x 100 independent tasks, manual runs) is
scheduled to the end at each background level, cumulatively:

1. nothing else;
2. + 10,000 registered DAGs (idle: manual-only schedules);
3. + 100,000 blocked task instances (100 running runs of a 1,000-task chain
   whose first task is held `running` by a live fake scheduler);
4. + 100,000 task instances in flight (100 running runs of 1,000 independent
   tasks, every one `running` under that fake scheduler);
5. + a pool that binds, priorities, retries and failures: its own probe
   (`scale_mixed`: 100 runs of 10 tasks sharing a 32-slot pool), with the pool's
   occupancy, priority inversions, the runs' states and the tries checked.

Per level: tick time (median, p95, max) while the probe runs, an idle tick's time,
ticks to finish the probe, the median time of each phase, and the counter
reconciliation timed by itself: one step (what a tick pays while a pass is under
way) and a whole pass. The JSON carries the commit, dirty state, versions and
machine as every results JSON does (`bench.run.provenance`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.orm import Session

from bench import scale_mixed
from bench.common import RESULTS, Knobs, Postgres
from bench.metrics import percentile
from bench.shapes import Workload
from bench.sluice_side import START, TEMPLATE, manifest, prepare_template
from sluice.db.dags import SpecCache, sync_dag
from sluice.db.engine import make_engine, session_factory
from sluice.executors.noop import NoopExecutor
from sluice.logs import configure_logging
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop
from sluice.scheduler.reconcile import reconcile_counters, reconcile_runs
from sluice.scheduler.triggers import trigger_run

T = TypeVar("T")
FAR = datetime(2100, 1, 1, tzinfo=UTC)


class TimedLoop(SchedulerLoop):
    """The real loop, with the wall time of each phase's transaction recorded."""

    phase_times: dict[str, list[float]]

    def _transaction(
        self, phase: str, work: Callable[[Session], T], default: T, report: Any = None
    ) -> T:
        if not hasattr(self, "phase_times"):
            self.phase_times = defaultdict(list)
        started = time.perf_counter()
        try:
            return super()._transaction(phase, work, default, report)
        finally:
            self.phase_times[phase].append(time.perf_counter() - started)


def _manual_manifest(workload: Workload, dag_id: str, knobs: Knobs, max_runs: int = 16) -> Any:
    m = manifest(workload, dag_id, knobs)
    spec = m.spec.model_copy(
        update={"schedule": None, "paused": False, "max_active_runs": max_runs}
    )
    return m.model_copy(update={"spec": spec})


def _register(sessions: Any, manifests: list[Any], batch: int = 500) -> None:
    now = datetime.now(UTC)
    for i in range(0, len(manifests), batch):
        with sessions() as session:
            for m in manifests[i : i + batch]:
                sync_dag(session, m, now)
            session.commit()


def _background(sessions: Any, dag_id: str, workload: Workload, runs: int, held: str) -> None:
    """`runs` running runs of `dag_id`; tasks matching `held` are running under a fake job."""
    knobs = Knobs()
    _register(sessions, [_manual_manifest(workload, dag_id, knobs, max_runs=runs + 1)])
    specs = SpecCache()
    base = datetime(2025, 1, 1, tzinfo=UTC)
    with sessions() as session:
        for i in range(runs):
            trigger_run(
                session,
                specs,
                dag_id,
                base,
                logical_date=base.replace(hour=i % 24, day=1 + i // 24),
            )
        job = session.execute(
            text(
                "INSERT INTO scheduler_job (hostname, pid, state, started_at, latest_heartbeat)"
                " VALUES ('bench-fake', 0, 'running', now(), :far) RETURNING id"
            ),
            {"far": FAR},
        ).scalar_one()
        session.execute(
            text("UPDATE dag_run SET state = 'running', start_date = now() WHERE dag_id = :d"),
            {"d": dag_id},
        )
        session.execute(
            text(
                "UPDATE task_instance SET state = 'running', try_number = 1, needs_eval = false,"
                " queued_at = now(), start_date = now(), last_heartbeat_at = :far,"
                " running_by_job_id = :job, queued_by_job_id = :job"
                f" WHERE dag_id = :d AND {held}"
            ),
            {"d": dag_id, "far": FAR, "job": job},
        )
        session.execute(
            text(
                "UPDATE task_instance SET needs_eval = false WHERE dag_id = :d AND state = 'none'"
            ),
            {"d": dag_id},
        )
        session.commit()
    with sessions() as session:
        session.execute(text("ANALYZE"))
        session.commit()


def _probe(loop: TimedLoop, sessions: Any, dag_ids: list[str]) -> dict[str, Any]:
    loop.phase_times = defaultdict(list)
    scale_mixed.trigger_one_run_each(sessions, dag_ids)
    ticks: list[float] = []
    while True:
        started = time.perf_counter()
        loop.tick()
        ticks.append(time.perf_counter() - started)
        with sessions() as session:
            active = scale_mixed.active_runs(session, dag_ids)
        if not active or len(ticks) > 2000:
            break
    busy_phases = {k: statistics.median(v) * 1000 for k, v in loop.phase_times.items()}
    idle: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        loop.tick()
        idle.append(time.perf_counter() - started)
    # The counter reconciliation, timed by itself: one step of a pass (what a tick
    # pays while a pass is under way) and a whole pass in one transaction.
    with sessions() as session:
        started = time.perf_counter()
        reconcile_runs(session, 0, loop.config.reconcile_tasks_per_tick)
        session.commit()
        step = time.perf_counter() - started
        started = time.perf_counter()
        reconcile_counters(session)
        session.commit()
        whole = time.perf_counter() - started
    return {
        "reconcile_step_ms": round(step * 1000, 1),
        "reconcile_pass_s": round(whole, 2),
        "ticks": len(ticks),
        "tick_median_ms": round(statistics.median(ticks) * 1000, 1),
        "tick_p95_ms": round(percentile(ticks, 95) * 1000, 1),
        "tick_max_ms": round(max(ticks) * 1000, 1),
        "idle_tick_ms": round(statistics.median(idle) * 1000, 1),
        "probe_s": round(sum(ticks), 2),
        "phases_ms": {k: round(v, 2) for k, v in sorted(busy_phases.items())},
    }


def _mixed_level(sessions: Any, runs: int) -> dict[str, Any]:
    """Level 5: on top of everything before, `runs` runs sharing a 32-slot pool, run by
    a loop of its own whose executor holds each try for a tick and fails some."""
    started = time.monotonic()
    with sessions() as session:
        scale_mixed.create_pool(session)
        session.commit()
    ids = scale_mixed.dag_ids(runs)
    _register(sessions, scale_mixed.manifests(runs, START))
    took = time.monotonic() - started
    result: dict[str, Any] = {
        "level": f"+{runs} runs in a {scale_mixed.SLOTS}-slot pool, retries, failures",
        "setup_s": round(took, 1),
    }
    loop = TimedLoop(sessions, scale_mixed.FlakyExecutor(), SchedulerConfig(max_tis_per_query=512))
    try:
        result.update(scale_mixed.probe(loop, sessions, ids))
    finally:
        loop.close()
    with sessions() as session:
        counts = session.execute(
            text("SELECT (SELECT count(*) FROM dag), (SELECT count(*) FROM task_instance)")
        ).one()
    result["dags"], result["task_instances"] = (int(c) for c in counts)
    return result


def _mixed_table(r: dict[str, Any]) -> Table:
    table = Table(title=r["level"])
    for name in (
        "ticks",
        "tick med/p95/max ms",
        "probe s",
        "pool: most slots used / slots",
        "priority inversions",
        "runs: states / expected",
        "tries / expected",
    ):
        table.add_column(name)
    table.add_row(
        str(r["ticks"]),
        f"{r['tick_median_ms']}/{r['tick_p95_ms']}/{r['tick_max_ms']}",
        str(r["probe_s"]),
        f"{r['pool_most_occupied']} / {r['pool_slots']}",
        str(r["priority_inversions"]),
        f"{r['run_states']} / {r['run_states_expected']}",
        f"{r['tries']} / {r['tries_expected']}",
    )
    return table


def run_scale(console: Console, *, dags: int = 10_000, runs: int = 100, tasks: int = 1000) -> int:
    from bench.run import provenance

    configure_logging("warning")
    knobs = Knobs()
    pg = Postgres()
    results: list[dict[str, Any]] = []
    about: dict[str, Any] = {}
    try:
        about = provenance(pg, {})
        prepare_template(pg, knobs)
        url = pg.create("sluice_bench_scale", TEMPLATE)
        engine = make_engine(url)
        sessions = session_factory(engine)
        probe_workload = Workload("no_structure", 10, 100)
        probe_ids = [f"probe-{i}" for i in range(probe_workload.dags)]
        _register(sessions, [_manual_manifest(probe_workload, d, knobs) for d in probe_ids])
        loop = TimedLoop(sessions, NoopExecutor(), SchedulerConfig(max_tis_per_query=512))

        def measure(level: str, setup: Callable[[], None]) -> None:
            started = time.monotonic()
            setup()
            took = time.monotonic() - started
            result = {
                "level": level,
                "setup_s": round(took, 1),
                **_probe(loop, sessions, probe_ids),
            }
            with sessions() as session:
                counts = session.execute(
                    text(
                        "SELECT (SELECT count(*) FROM dag), (SELECT count(*) FROM task_instance),"
                        " (SELECT count(*) FROM task_instance WHERE state = 'running')"
                    )
                ).one()
            result["dags"], result["task_instances"], result["running"] = (int(c) for c in counts)
            results.append(result)
            console.print(f"{level}: {json.dumps(result)}", highlight=False, soft_wrap=True)

        idle_workload = Workload("linear", dags, 3)
        measure("probe only", lambda: None)
        measure(
            f"+{dags:,} DAGs",
            lambda: _register(
                sessions,
                [_manual_manifest(idle_workload, f"idle-{i:05d}", knobs) for i in range(dags)],
            ),
        )
        measure(
            f"+{runs * tasks:,} blocked TIs",
            lambda: _background(
                sessions, "bg-blocked", Workload("linear", 1, tasks), runs, "task_id = 't0'"
            ),
        )
        measure(
            f"+{runs * tasks:,} running TIs",
            lambda: _background(
                sessions, "bg-running", Workload("no_structure", 1, tasks), runs, "true"
            ),
        )
        loop.close()
        mixed = _mixed_level(sessions, runs)
        results.append(mixed)
        console.print(f"{mixed['level']}: {json.dumps(mixed)}", highlight=False, soft_wrap=True)
        engine.dispose()
    finally:
        pg.stop()
    table = Table(title="Scheduler alone at scale (probe: 10x100 no_structure, tis/query 512)")
    for name in (
        "level",
        "DAGs",
        "TIs",
        "running",
        "ticks",
        "tick med/p95/max ms",
        "idle tick ms",
        "probe s",
        "reconcile step ms / pass s",
        "slowest phases (median ms)",
    ):
        table.add_column(name)
    for r in results:
        if "phases_ms" not in r:
            continue  # the mixed level: its own table below
        slow = sorted(r["phases_ms"].items(), key=lambda kv: -kv[1])[:3]
        table.add_row(
            r["level"],
            f"{r['dags']:,}",
            f"{r['task_instances']:,}",
            f"{r['running']:,}",
            str(r["ticks"]),
            f"{r['tick_median_ms']}/{r['tick_p95_ms']}/{r['tick_max_ms']}",
            str(r["idle_tick_ms"]),
            str(r["probe_s"]),
            f"{r['reconcile_step_ms']} / {r['reconcile_pass_s']}",
            ", ".join(f"{k} {v}" for k, v in slow),
        )
    console.print(table)
    console.print(_mixed_table(results[-1]))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    saved = json.dumps(
        scale_payload(stamp, about, results, dags=dags, runs=runs, tasks=tasks),
        indent=1,
        default=str,
    )
    for path in (RESULTS / f"scale-{stamp}.json", RESULTS / "scale-latest.json"):
        path.write_text(saved)
    return 0


def scale_payload(
    stamp: str,
    about: dict[str, Any],
    levels: list[dict[str, Any]],
    *,
    dags: int,
    runs: int,
    tasks: int,
) -> dict[str, Any]:
    """The results JSON: the levels, with the command, commit, dirty state, versions and
    machine (`about`: `bench.run.provenance`) as in every other mode's."""
    return {
        "mode": "scale",
        "command": "python -m bench.run " + " ".join(sys.argv[1:]),
        "when": stamp,
        "complete": True,
        "cores": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        **about,
        "knobs": {"max_tis_per_query": 512, "dags": dags, "runs": runs, "tasks": tasks},
        "levels": levels,
    }
