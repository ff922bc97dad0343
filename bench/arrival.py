"""Steady state (issue 14): runs arriving every minute, Sluice against Airflow 2.10.5 and 3.3.2.

`python -m bench.arrival [--arms ...] [--dags SIDE=N,...] [--rates K|SIDE=K,...] ...`

Every DAG (`--shape`, `--tasks` 10) is on `* * * * *` with catchup, so `--dags` N
DAGs make N runs due at every minute boundary: an arrival rate of N runs (N x
tasks) a minute. Both sides are installed, configured and measured as in the
like-for-like table (`bench.run`: the same knobs, `common.for_variant`, the same
no-op executors, each Airflow's DAGs serialized into a template before t0, the
same Postgres server with a fresh database per trial). A trial:

1. clone the arm's template (DAGs registered paused), start its schedulers,
   wait until they have registered, let them settle (`--settle`);
2. start sampling CPU; then, in one statement, give every DAG its first run due
   `--lead` seconds from now (the run's data interval ends then; the timetables
   take the following runs to the minute boundaries) and unpause it (t0);
3. warm-up: the runs due before the first minute boundary at least `--warmup`
   seconds after that first due time are not measured;
4. the window: `--window` seconds from that boundary; pg_stat_statements is
   reset at its start and read at its end; the harness sends nothing to the
   database inside the window;
5. drain: up to `--drain` seconds more, until every run due before the window's
   end has finished (so their lags are measured, not bounded);
6. stop the schedulers and read every run and task row (`arrival_figures`).

A trial keeps up when its backlog's slope over the window is not significantly
above `--slope-tolerance` of a minute's runs a minute (`arrival_figures`); a rate
is kept up with when a majority of its `ok` trials kept up.

The sweep: each arm starts at its `--dags` and doubles (`--factor`) while it keeps
up, halves while it falls behind, and stops once it has a rate it kept up with
and one it did not, or after `--rates` rates (per side with `SIDE=K`: an arm at
one rate beside another's search). `--capacity` measures each arm's
capacity instead: the same bracketing, then bisection between the highest rate
kept up with and the lowest fallen behind at until they are within
`--resolution`, `--trials` 3 at each rate, a `--window` of 300 s, and every
Airflow at both runs-examined settings, each also with runs created per loop
tuned (`+tuned`: `max_dagruns_to_create_per_loop` = the DAG count). The arms take
turns, trial by trial, at every step; an arm's trials at a rate stop once the
trials left cannot change its verdict (`arrival_report.decided`: of 3, two that
agree decide it), so `--trials` is the most a rate gets. Results go to
bench/results/arrival-<time>.json (rewritten after every trial) and, with
`--publish NAME`, bench/published/NAME.json; `--render FILE.json ... [--markdown]`
prints the tables again, several files merged (per-arm runs of one capacity
measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from sqlalchemy import Engine, create_engine, text

from bench import arrival_report
from bench.arrival_figures import (
    ERROR,
    SLOPE_TOLERANCE,
    ArrivalTrial,
    RunRow,
    Schedule,
    TaskRow,
    summarize,
)
from bench.common import (
    AIRFLOW_RUNS_CREATED,
    HARNESS_MARK,
    RESULTS,
    CpuSampler,
    Knobs,
    Postgres,
    for_variant,
    stop_processes,
)
from bench.metrics import AIRFLOW_SIDES, DEFAULTS, LIKE_FOR_LIKE, SIDES, side_label
from bench.shapes import SHAPES, Workload

if TYPE_CHECKING:
    from bench.airflow_side import Peer

PUBLISHED = Path(__file__).parent / "published"
CRON = "* * * * *"
PERIOD_S = 60.0
ARMS = f"sluice:{LIKE_FOR_LIKE},airflow:{LIKE_FOR_LIKE},airflow3:{LIKE_FOR_LIKE}"
# `+tuned`: runs created per loop (Airflow's `max_dagruns_to_create_per_loop`, "Max
# number of DAGs to create DagRuns for per scheduler loop") = the DAG count, so one
# loop can create a whole minute's burst (every DAG falls due at the same boundary):
# what a user whose runs start late because they are created 10 a loop would set.
TUNED = "+tuned"
# `--capacity`'s arms: Sluice like for like; each Airflow at both runs-examined
# settings (every run in flight, and its default 20), each also tuned.
CAPACITY_ARMS = ",".join(
    [
        f"sluice:{LIKE_FOR_LIKE}",
        *(
            f"{side}:{variant}{tuned}"
            for side in AIRFLOW_SIDES
            for tuned in ("", TUNED)
            for variant in (LIKE_FOR_LIKE, DEFAULTS)
        ),
    ]
)
MAX_ACTIVE_RUNS = 16  # per DAG, both sides' default


@dataclass(frozen=True)
class Timing:
    """A trial's phases, in seconds (`window_at_first_due`: the smoke's window starts at
    the first due time and ends at the latest at the next minute boundary: no warm-up,
    no wait for a boundary, and only the first runs measured)."""

    settle_s: float = 3.0
    lead_s: float = 2.0
    warmup_s: float = 30.0
    window_s: float = 120.0
    drain_s: float = 30.0
    window_at_first_due: bool = False
    slope_tolerance: float = SLOPE_TOLERANCE  # of a minute's runs a minute (keeps up)

    def schedule(self, dags: int, now: datetime) -> Schedule:
        first_due = now + timedelta(seconds=self.lead_s)
        end: datetime | None = None
        if self.window_at_first_due:
            # The first runs only: the window ends before the next minute's are due.
            start = first_due
            end = _next_boundary(first_due + timedelta(microseconds=1))
        else:
            start = _next_boundary(first_due + timedelta(seconds=self.warmup_s))
        window_end = start + timedelta(seconds=self.window_s)
        return Schedule(
            dags=dags,
            first_due=first_due,
            period_s=PERIOD_S,
            window_start=start,
            window_end=window_end if end is None else min(window_end, end),
        )


def _next_boundary(at: datetime) -> datetime:
    """The first minute boundary at or after `at`."""
    floor = at.replace(second=0, microsecond=0)
    return floor if floor == at else floor + timedelta(minutes=1)


@dataclass(frozen=True)
class SideSql:
    """What differs between the sides' schemas for the same questions."""

    # :start and :due are the first run's data interval; every DAG is unpaused with it.
    first_due: str
    # Runs due before :end, and their tasks not ended.
    progress: str
    runs: str  # run key, dag id, data-interval end
    tasks: str  # run key, task id, queued, end, state


SLUICE_SQL = SideSql(
    first_due=f"UPDATE {HARNESS_MARK} dag SET next_logical_date = :start,"
    " next_data_interval_start = :start, next_data_interval_end = :due,"
    " next_run_after = :due, is_paused = false",
    progress=f"SELECT {HARNESS_MARK} (SELECT count(*) FROM dag_run WHERE data_interval_end < :end),"
    " (SELECT count(*) FROM task_instance ti JOIN dag_run r ON r.id = ti.dag_run_id"
    " WHERE r.data_interval_end < :end AND ti.end_date IS NULL)",
    runs="SELECT id::text, dag_id, data_interval_end FROM dag_run",
    tasks="SELECT dag_run_id::text, task_id, queued_at, end_date, state FROM task_instance",
)
AIRFLOW_SQL = SideSql(
    first_due=f"UPDATE {HARNESS_MARK} dag SET next_dagrun = :start,"
    " next_dagrun_data_interval_start = :start, next_dagrun_data_interval_end = :due,"
    " next_dagrun_create_after = :due, is_paused = false",
    progress=f"SELECT {HARNESS_MARK} (SELECT count(*) FROM dag_run WHERE data_interval_end < :end),"
    " (SELECT count(*) FROM task_instance ti JOIN dag_run r"
    " ON r.dag_id = ti.dag_id AND r.run_id = ti.run_id"
    " WHERE r.data_interval_end < :end AND ti.end_date IS NULL)",
    runs="SELECT id::text, dag_id, data_interval_end FROM dag_run",
    tasks="SELECT r.id::text, ti.task_id, ti.queued_dttm, ti.end_date, ti.state"
    " FROM task_instance ti JOIN dag_run r ON r.dag_id = ti.dag_id AND r.run_id = ti.run_id",
)


@dataclass(frozen=True)
class Observed:
    schedule: Schedule
    t0: datetime
    observed_until: datetime
    samples: list[Any]
    statements: Any
    top: list[dict[str, Any]]
    slope_tolerance: float


def _clock(engine: Engine) -> datetime:
    with engine.connect() as conn:
        now: datetime = conn.execute(text(f"SELECT {HARNESS_MARK} clock_timestamp()")).scalar_one()
    return now


def _sleep_until(when: datetime) -> None:
    left = (when - datetime.now(UTC)).total_seconds()
    if left > 0:
        time.sleep(left)


def observe(
    pg: Postgres,
    engine: Engine,
    database: str,
    pids: list[int],
    sql: SideSql,
    dags: int,
    timing: Timing,
) -> Observed:
    """Steps 2-5 of a trial (module docstring), the same on every side."""
    time.sleep(timing.settle_s)
    sampler = CpuSampler(pids, pg.pid)
    sampler.start()
    try:
        schedule = timing.schedule(dags, _clock(engine))
        start = schedule.first_due - timedelta(seconds=PERIOD_S)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(sql.first_due), {"start": start, "due": schedule.first_due})
            t0: datetime = conn.execute(
                text(f"SELECT {HARNESS_MARK} clock_timestamp()")
            ).scalar_one()
        _sleep_until(schedule.window_start)
        pg.reset_statements()
        _sleep_until(schedule.window_end)
        statements = pg.statement_totals(database)
        top = top_statements(pg, database)
        expected = dags * len(schedule.due_times(schedule.window_end))
        deadline = schedule.window_end + timedelta(seconds=timing.drain_s)
        while True:
            with engine.connect() as conn:
                created, unfinished = conn.execute(
                    text(sql.progress), {"end": schedule.window_end}
                ).one()
                now: datetime = conn.execute(
                    text(f"SELECT {HARNESS_MARK} clock_timestamp()")
                ).scalar_one()
            if (created >= expected and unfinished == 0) or now >= deadline:
                break
            time.sleep(0.5)
    finally:
        samples = sampler.stop()
    return Observed(schedule, t0, now, samples, statements, top, timing.slope_tolerance)


def top_statements(pg: Postgres, database: str, limit: int = 8) -> list[dict[str, Any]]:
    """The window's statements that took the most time (execution plus planning), less
    the harness's: what a side's Postgres time is made of. Empty without
    pg_stat_statements."""
    if pg.statements_unavailable:
        return []
    with pg.admin.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 160), s.calls, s.rows,"
                " s.total_exec_time + s.total_plan_time"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = :db AND s.query NOT LIKE :mark"
                " ORDER BY 4 DESC LIMIT :limit"
            ),
            {"db": database, "mark": f"%{HARNESS_MARK}%", "limit": limit},
        ).all()
    return [
        {"query": q, "calls": int(c), "rows": int(r), "ms": round(float(ms), 1)}
        for q, c, r, ms in rows
    ]


def _read(engine: Engine, sql: SideSql) -> tuple[list[RunRow], list[TaskRow]]:
    with engine.connect() as conn:
        runs = [RunRow(*row) for row in conn.execute(text(sql.runs))]
        tasks = [TaskRow(*row) for row in conn.execute(text(sql.tasks))]
    return runs, tasks


def _trial(side: str, variant: str, workload: Workload, replicas: int, n: int) -> ArrivalTrial:
    return ArrivalTrial(
        side=side,
        variant=variant,
        shape=workload.shape,
        dags=workload.dags,
        tasks=workload.tasks,
        replicas=replicas,
        trial=n,
        period_s=PERIOD_S,
    )


def _figures(
    trial: ArrivalTrial,
    workload: Workload,
    observed: Observed,
    engine: Engine,
    sql: SideSql,
    pg: Postgres,
    knobs: Knobs,
) -> ArrivalTrial:
    runs, tasks = _read(engine, sql)
    trial.knobs = asdict(knobs)
    trial.top_statements = observed.top
    return summarize(
        slope_tolerance=observed.slope_tolerance,
        trial=trial,
        graph=workload.graph(),
        schedule=observed.schedule,
        runs=runs,
        tasks=tasks,
        observed_until=observed.observed_until,
        samples=observed.samples,
        statements=observed.statements,
        statements_unavailable=pg.statements_unavailable,
    )


# --- Sluice ---


def sluice_template(pg: Postgres, workload: Workload, knobs: Knobs) -> str:
    """The migrated template with the workload's DAGs registered, paused (once per run)."""
    from bench.sluice_side import TEMPLATE, register
    from sluice.db.engine import make_engine, session_factory

    name = f"sluice_arr_tpl_{workload.shape}_{workload.dags}x{workload.tasks}"
    if pg.exists(name):
        return name
    url = pg.create(name, TEMPLATE)
    engine = make_engine(url)
    first = Workload(workload.shape, 1, workload.tasks)
    try:
        with session_factory(engine)() as session:
            register(session, first, knobs, schedule=CRON, catchup=True)
            copy_dag(session, first.dag_ids()[0], workload.dag_ids()[1:])
            session.commit()
    finally:
        engine.dispose()
    pg.set_template(name)
    return name


def copy_dag(session: Any, source: str, dag_ids: list[str]) -> None:
    """Register `dag_ids` as copies of `source`, registered by `sync_dag`: the same two
    rows (its `dag` row and its current `dag_version`, the same spec and hash) under
    each new id, in one statement. `sync_dag` takes about 10-60 ms a DAG (nine
    statements), which is minutes for the thousands of DAGs of a high rate."""
    from sluice.db.models import Dag, DagVersion

    version_cols = [c.name for c in DagVersion.__table__.columns if c.name not in ("id", "dag_id")]
    dag_cols = [
        c.name for c in Dag.__table__.columns if c.name not in ("dag_id", "current_version_id")
    ]
    session.execute(
        text(
            f"""
            WITH ids AS (SELECT unnest(CAST(:ids AS text[])) AS dag_id),
            d AS (
                INSERT INTO dag (dag_id, {", ".join(dag_cols)})
                SELECT ids.dag_id, {", ".join(f"s.{c}" for c in dag_cols)}
                FROM ids, dag s WHERE s.dag_id = :source
            ),
            v AS (
                INSERT INTO dag_version (dag_id, {", ".join(version_cols)})
                SELECT ids.dag_id, {", ".join(f"s.{c}" for c in version_cols)}
                FROM ids, dag src JOIN dag_version s ON s.id = src.current_version_id
                WHERE src.dag_id = :source
                RETURNING id, dag_id
            )
            SELECT count(*) FROM v
            """
        ),
        {"ids": dag_ids, "source": source},
    )
    session.execute(
        text(
            "UPDATE dag SET current_version_id = v.id FROM dag_version v"
            " WHERE v.dag_id = dag.dag_id AND dag.current_version_id IS NULL"
        )
    )
    copied = session.execute(
        text("SELECT count(*) FROM dag WHERE current_version_id IS NOT NULL")
    ).scalar_one()
    if copied != len(dag_ids) + 1:
        raise RuntimeError(f"copied {copied - 1} DAGs of {len(dag_ids)}")


def sluice_trial(
    pg: Postgres, workload: Workload, knobs: Knobs, replicas: int, n: int, timing: Timing
) -> ArrivalTrial:
    from bench import sluice_side
    from sluice.db.engine import make_engine

    template = sluice_template(pg, workload, knobs)
    name = f"sluice_arr_{workload.shape}_{workload.dags}x{workload.tasks}_{replicas}_{n}"
    url = pg.create(name, template)
    engine = make_engine(url, application_name="sluice-bench-harness")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs = sluice_side.start_replicas(url, knobs, replicas, RESULTS / "logs")
        sluice_side.wait_for_replicas(engine, procs)
        observed = observe(
            pg, engine, name, [p.pid for p in procs], SLUICE_SQL, workload.dags, timing
        )
        stop_processes(procs)
        trial = _trial("sluice", knobs.variant, workload, replicas, n)
        return _figures(trial, workload, observed, engine, SLUICE_SQL, pg, knobs)
    finally:
        stop_processes(procs)
        engine.dispose()
        pg.drop(name)


# --- Airflow ---

# One file per chunk of DAGs: `airflow dags reserialize` parses files, not DAGs, and
# one file per DAG would make preparing thousands of DAGs take minutes.
DAG_FILE = """\
# Generated by bench/arrival.py for the steady-state benchmark (Airflow {major}).
import datetime

{imports}
UPSTREAM: dict[str, list[str]] = {upstream!r}
DAG_IDS: list[str] = {dag_ids!r}

for dag_id in DAG_IDS:
    with DAG(
        dag_id,
        schedule={cron!r},
        start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
        catchup=True,
        is_paused_upon_creation=True,
        max_active_runs={max_active_runs},
        max_active_tasks={max_active_tasks},
        default_args={{"retries": 0}},
    ) as dag:
        tasks = {{name: BashOperator(task_id=name, bash_command="true") for name in UPSTREAM}}
        for name, ups in UPSTREAM.items():
            for up in ups:
                tasks[up] >> tasks[name]
    globals()[dag_id.replace("-", "_")] = dag
"""
DAGS_PER_FILE = 250


def airflow_env(peer: Peer, url: str, knobs: Knobs, folder: Path) -> dict[str, str]:
    from bench import airflow_side

    env = airflow_side.airflow_env(peer, url, knobs, folder)
    env.update(
        {
            # A cron string is a CronDataIntervalTimetable on both Airflows (2.10's
            # default; 3.x defaults to CronTriggerTimetable): a run's logical date is
            # its interval's start and it is due at the interval's end, as in Sluice.
            "AIRFLOW__SCHEDULER__CREATE_CRON_DATA_INTERVALS": "True",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
        }
    )
    return env


def write_dag_files(peer: Peer, workload: Workload, knobs: Knobs) -> Path:
    from bench.airflow_side import DAG_IMPORTS, dags_folder

    folder = dags_folder(peer, "arrival", workload)
    ids = workload.dag_ids()
    for i in range(0, len(ids), DAGS_PER_FILE):
        source = DAG_FILE.format(
            major=peer.major,
            imports=DAG_IMPORTS[min(peer.major, 3)],
            upstream=workload.graph(),
            dag_ids=ids[i : i + DAGS_PER_FILE],
            cron=CRON,
            max_active_runs=MAX_ACTIVE_RUNS,
            max_active_tasks=knobs.max_active_tasks,
        )
        (folder / f"arrival_{i // DAGS_PER_FILE:04d}.py").write_text(source)
    return folder


def airflow_template(
    peer: Peer, pg: Postgres, workload: Workload, knobs: Knobs
) -> tuple[str, Path]:
    """This version's template with the workload's DAGs parsed and serialized, paused."""
    from bench.airflow_side import serialized_template

    name = f"airflow_arr_tpl_{peer.tag}_{workload.shape}_{workload.dags}x{workload.tasks}"
    folder = write_dag_files(peer, workload, knobs)
    serialized_template(
        peer, pg, name, workload.dags, lambda url: airflow_env(peer, url, knobs, folder)
    )
    return name, folder


def airflow_trial(
    side: str,
    pg: Postgres,
    workload: Workload,
    knobs: Knobs,
    replicas: int,
    n: int,
    timing: Timing,
) -> ArrivalTrial:
    from bench.airflow_side import PEERS, start_schedulers

    peer = PEERS[side]
    template, folder = airflow_template(peer, pg, workload, knobs)
    name = f"airflow_arr_{peer.tag}_{workload.shape}_{workload.dags}x{workload.tasks}_{n}"
    url = pg.create(name, template)
    env = airflow_env(peer, url, knobs, folder)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE dag SET last_parsed_time = now()"))
        start_schedulers(peer, env, engine, replicas, procs)
        observed = observe(
            pg, engine, name, [p.pid for p in procs], AIRFLOW_SQL, workload.dags, timing
        )
        stop_processes(procs, timeout=30)
        trial = _trial(side, knobs.variant, workload, replicas, n)
        return _figures(trial, workload, observed, engine, AIRFLOW_SQL, pg, knobs)
    finally:
        stop_processes(procs, timeout=30)
        engine.dispose()
        pg.drop(name)


# --- the CLI ---

Runner = Callable[[Postgres, Workload, Knobs, int, int, Timing], ArrivalTrial]


def runner_for(side: str) -> Runner:
    if side == "sluice":
        return sluice_trial

    def run(
        pg: Postgres, workload: Workload, knobs: Knobs, replicas: int, n: int, timing: Timing
    ) -> ArrivalTrial:
        return airflow_trial(side, pg, workload, knobs, replicas, n, timing)

    return run


def parse_arms(value: str) -> list[tuple[str, str]]:
    """`SIDE:VARIANT[+tuned],...` (`bench.run.parse_arms`, and the `+tuned` suffix)."""
    from bench.run import parse_arms as parse_plain

    arms = []
    for item in value.split(","):
        tuned = item.endswith(TUNED)
        side, variant = parse_plain(item.removesuffix(TUNED))[0]
        arms.append((side, variant + (TUNED if tuned else "")))
    return arms


def arm_knobs(base: Knobs, variant: str, dags: int) -> Knobs:
    """An arm's knobs at `dags` DAGs: `common.for_variant`'s, and with `+tuned` runs
    created per loop = the DAG count (at least Airflow's default 10)."""
    plain = variant.removesuffix(TUNED)
    knobs = for_variant(base, plain, dags)
    if variant.endswith(TUNED):
        knobs = replace(knobs, runs_created=max(AIRFLOW_RUNS_CREATED, dags), variant=variant)
    return knobs


def per_side(value: str, sides: list[str], flag: str = "--dags") -> dict[str, int]:
    """`100` (every side) or `sluice=2000,airflow=200,...` (a side left out: the first
    number given): `--dags`, and `--rates`."""
    found: dict[str, int] = {}
    plain: int | None = None
    for item in value.split(","):
        side, eq, number = item.partition("=")
        if eq and side not in SIDES:
            raise SystemExit(f"{flag} {item!r}: the side is one of {', '.join(SIDES)}")
        try:
            n = int(number if eq else side)
        except ValueError:
            raise SystemExit(f"{flag} {value!r}: a number, or SIDE=N,...") from None
        if eq:
            found[side] = n
        else:
            plain = n
    # Every item set one or the other (or raised): `found` is not empty when `plain` is None.
    default = plain if plain is not None else next(iter(found.values()))
    return {side: found.get(side, default) for side in sides}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.arrival", description=__doc__)
    parser.add_argument(
        "--arms",
        default=None,
        help=f"SIDE:VARIANT[+tuned],... (default {ARMS}; with --capacity {CAPACITY_ARMS})",
    )
    parser.add_argument("--dags", default="100", help="starting DAGs per arm: N or SIDE=N,...")
    parser.add_argument(
        "--rates",
        default=None,
        help="at most this many rates per arm: N or SIDE=N,... (3; capacity 8). With"
        " --dags, SIDE=1 tries one side at one rate beside another's search",
    )
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument(
        "--capacity",
        action="store_true",
        help="measure each arm's capacity: bracket, then bisect to --resolution, with"
        " --trials 3 and --window 300 unless given (bench/README.md, 'Steady state')",
    )
    parser.add_argument(
        "--resolution",
        type=float,
        default=arrival_report.RESOLUTION,
        help="with --capacity: bisect until the lowest rate fallen behind at is within"
        " 1 + this of the highest kept up with",
    )
    parser.add_argument(
        "--slope-tolerance",
        type=float,
        default=SLOPE_TOLERANCE,
        help="a trial keeps up unless its backlog grows by more than this fraction of a"
        " minute's runs a minute, at 95%% confidence",
    )
    parser.add_argument("--shape", default="linear", choices=sorted(SHAPES))
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--tis", type=int, default=512, help="tasks per critical-section query")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="at most this many trials of each arm at each rate, fewer once the rest cannot"
        " change its verdict (1; capacity 3)",
    )
    parser.add_argument("--settle", type=float, default=Timing.settle_s)
    parser.add_argument("--lead", type=float, default=Timing.lead_s)
    parser.add_argument("--warmup", type=float, default=Timing.warmup_s)
    parser.add_argument(
        "--window", type=float, default=None, help="seconds, whole minutes (120; capacity 300)"
    )
    parser.add_argument("--drain", type=float, default=Timing.drain_s)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="Sluice only, 3 DAGs x 4 tasks, one rate, a window of seconds from the first"
        " runs' due time (no warm-up): the harness end to end, nothing timed is judged",
    )
    parser.add_argument("--publish", metavar="NAME", help="also write bench/published/NAME.json")
    parser.add_argument("--render", nargs="+", metavar="FILE.json", help="print saved results")
    parser.add_argument("--markdown", action="store_true", help="with --render: the README's")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    console = Console(width=int(os.environ.get("COLUMNS", "200")))
    if args.render:
        return _render(args.render, markdown=args.markdown, console=console)

    from bench.run import REPO, provenance, scheduler_code

    if args.publish and scheduler_code() != REPO / "operator" / "sluice":
        # The JSON names this checkout's commit: the code measured must be that commit's.
        raise SystemExit(
            f"--publish: the scheduler code imported is {scheduler_code()}, not this "
            f"checkout's {REPO / 'operator' / 'sluice'}; run with PYTHONPATH=operator:."
        )
    capacity = args.capacity and not args.smoke
    window = args.window if args.window is not None else 300.0 if capacity else Timing.window_s
    timing = Timing(
        args.settle, args.lead, args.warmup, window, args.drain,
        slope_tolerance=args.slope_tolerance,
    )  # fmt: skip
    arms = parse_arms(args.arms or (CAPACITY_ARMS if capacity else ARMS))
    rates = args.rates if args.rates is not None else "8" if capacity else "3"
    trials_per_rate = args.trials if args.trials is not None else 3 if capacity else 1
    resolution = args.resolution if capacity else None
    tasks, shape = args.tasks, args.shape
    if args.smoke:
        arms = [("sluice", LIKE_FOR_LIKE)]
        args.dags, rates, tasks, args.tis, trials_per_rate = "3", "1", 4, 16, 1
        timing = Timing(0.5, 1.0, 0.0, 6.0, 60.0, window_at_first_due=True)
    if not args.smoke and timing.window_s % PERIOD_S:
        # Tasks/s over part of a minute would count one minute's runs over less than one.
        raise SystemExit(f"--window {timing.window_s:g}: a whole number of minutes (60, 120, ...)")
    start = per_side(args.dags, [side for side, _ in arms])
    most = per_side(rates, [side for side, _ in arms], "--rates")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    saved = RESULTS / f"arrival-{stamp}.json"
    command = "python -m bench.arrival " + " ".join(sys.argv[1:] if argv is None else argv)
    base = replace(Knobs(), max_tis_per_query=args.tis, settle_s=timing.settle_s)
    about: dict[str, Any] = {}
    trials: list[ArrivalTrial] = []
    search = {
        "capacity": capacity,
        "start": start,
        "factor": args.factor,
        "resolution": resolution,
        "rates": most,
        "trials": trials_per_rate,
        "rule": "a rate is kept up with when a strict majority of its ok trials kept up",
        # An arm's trials at a rate stop once the trials left cannot change its verdict
        # (`arrival_report.decided`), so a rate has at most `trials`; every trial that
        # ran is in the payload's `trials`. Absent in JSON saved before: all ran.
        "stop_once_decided": True,
        "slope_tolerance": timing.slope_tolerance,
    }

    def save(*, complete: bool) -> None:
        payload = {
            "mode": "arrival",
            "command": command,
            "when": stamp,
            "complete": complete,
            "cores": os.cpu_count(),
            "loadavg_at_end": os.getloadavg(),
            **about,
            "knobs": asdict(base),
            "timing": asdict(timing),
            "search": search,
            "schedule": CRON,
            "arms": [f"{side}:{variant}" for side, variant in arms],
            "trials": [t.as_dict() for t in trials],
        }
        saved.write_text(json.dumps(payload, indent=1, default=str))

    pg = Postgres(statements=True)
    try:
        installs: dict[str, dict[str, Any]] = {}
        sides = {side for side, _ in arms}
        if "sluice" in sides:
            from bench import sluice_side

            sluice_side.prepare_template(pg, base)
        for side in AIRFLOW_SIDES:
            if side in sides:
                from bench import airflow_side

                console.print(f"{side_label(side)}: checking the venv")
                installs[side] = airflow_side.prepare(side, pg, base)
        about.update(provenance(pg, installs))
        history: dict[tuple[str, str], list[tuple[int, bool]]] = {arm: [] for arm in arms}

        def run(arm: tuple[str, str], dags: int, n: int) -> ArrivalTrial:
            trial = _one(*arm, Workload(shape, dags, tasks), base, args.replicas, n, timing, pg)
            trials.append(trial)
            save(complete=False)
            console.print(arrival_report.progress_line(trial), highlight=False)
            return trial

        steps = dict.fromkeys(arms, 0)
        while todo := search_step(history, steps, start, most, args.factor, resolution):
            for arm in todo:
                steps[arm] += 1
            done = rate_round(todo, trials_per_rate, run)
            for arm, group in done.items():
                if any(t.ok for t in group):  # a rate with no ok trial decides nothing
                    history[arm].append((todo[arm], arrival_report.group_keeps_up(group)))
    finally:
        pg.stop()
    save(complete=True)
    shutil.copyfile(saved, RESULTS / "arrival-latest.json")
    if args.publish:
        PUBLISHED.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(saved, PUBLISHED / f"{args.publish}.json")
        console.print(f"published: {PUBLISHED / args.publish}.json")
    arrival_report.print_report(trials, console)
    console.print(f"results: {saved}")
    return 0 if all(t.ok for t in trials) else 1


def search_step(
    history: dict[tuple[str, str], list[tuple[int, bool]]],
    steps: dict[tuple[str, str], int],
    start: dict[str, int],
    most: dict[str, int],
    factor: float,
    resolution: float | None,
) -> dict[tuple[str, str], int]:
    """The search's next step: each arm's next rate (`arrival_report.next_dags`), for
    the arms whose search goes on and that have taken fewer than their side's `most`
    `steps` (a step whose trials all failed is one, though it decides nothing and is
    not in `history`). Empty: the search is done."""
    todo = {}
    for arm, tried in history.items():
        if steps[arm] >= most[arm[0]]:
            continue
        nxt = arrival_report.next_dags(tried, start[arm[0]], factor, resolution)
        if nxt is not None:
            todo[arm] = nxt
    return todo


def rate_round(
    todo: dict[tuple[str, str], int],
    planned: int,
    run: Callable[[tuple[str, str], int, int], ArrivalTrial],
) -> dict[tuple[str, str], list[ArrivalTrial]]:
    """One step of the search: each arm's trials at its rate (`todo`), up to `planned`,
    the arms taking turns trial by trial (`run(arm, dags, n)` runs trial `n`). An arm
    stops once the trials it has left cannot change its verdict
    (`arrival_report.decided`); the others go on taking turns."""
    done: dict[tuple[str, str], list[ArrivalTrial]] = {arm: [] for arm in todo}
    for n in range(planned):
        for arm, dags in todo.items():
            if arrival_report.decided(done[arm], planned) is None:
                done[arm].append(run(arm, dags, n))
    return done


def _one(
    side: str,
    variant: str,
    workload: Workload,
    base: Knobs,
    replicas: int,
    n: int,
    timing: Timing,
    pg: Postgres,
) -> ArrivalTrial:
    knobs = arm_knobs(base, variant, workload.dags)
    started = time.monotonic()
    try:
        trial = runner_for(side)(pg, workload, knobs, replicas, n, timing)
    except Exception as exc:  # kept as an `error` trial: every trial counts
        trial = _trial(side, variant, workload, replicas, n)
        trial.status = ERROR
        trial.errors = [f"{type(exc).__name__}: {str(exc)[:500]}"]
        trial.knobs = asdict(knobs)
    trial.trial_s = round(time.monotonic() - started, 1)
    return trial


def _render(files: list[str], *, markdown: bool, console: Console) -> int:
    """One file's report; with several, each file's (a sitting, ADR 0050), then each Sluice
    arm's ratio across them. A `--capacity` file's target is judged against every Airflow
    arm of `CAPACITY_ARMS`."""
    from bench.run import measured_on

    expected = tuple(arm for arm in parse_arms(CAPACITY_ARMS) if arm[0] != "sluice")
    sittings = []
    for path in files:
        saved = json.loads(Path(path).read_text())
        trials = [ArrivalTrial.from_dict(t) for t in saved["trials"]]
        wanted = expected if saved.get("search", {}).get("capacity") else ()
        print(f"`{saved['command']}` ({measured_on(saved)})")
        if markdown:
            print()
            print(arrival_report.markdown(trials, wanted))
            print()
        else:
            arrival_report.print_report(trials, console, wanted)
        sittings.append((arrival_report.Sitting(Path(path).stem, trials), bool(wanted)))
    if len(sittings) > 1:
        capacity = all(wanted for _, wanted in sittings)
        lines = arrival_report.paired_lines([s for s, _ in sittings], expected if capacity else ())
        print("Across the files (each a sitting, ADR 0050):")
        for line in lines:
            print(f"- {line}" if markdown else line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
