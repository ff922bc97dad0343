"""Where a busy tick's time goes: one workload through one loop, in this process.

    python -m bench.tick_anatomy --shape grid --size 100x10 --tis 16 [--explain FILE]

The scheduler loop of a like-for-like replica (`common.for_variant`: one
critical-section query a tick, no waker, Airflow's 10 runs a loop, every run
examined) with the no-op executor, driven tick by tick from the unpause until
every task succeeded, on an embedded Postgres. It prints, for the ticks of the
burst: each phase's wall time, the part of it spent inside the driver's
`execute` (Postgres's work plus the round trip), and its statements (each one
round trip; `BEGIN` and `COMMIT` are not statements here); the commits; the
collector's passes; the statements that took longest in `execute`; and the
prepared statements Postgres planned anew on most calls (`pg_prepared_statements`'
custom plans: a plan made on every call, where a generic one is made once). With
`--explain FILE`, `auto_explain` writes each statement's plan, with Postgres's
own time for it, to FILE (with its overhead: the other figures of that run are
not comparable).

The collector's passes are counted as `bench.replica --stats` counts them
(ADR 0048); `--freeze` freezes the heap before the unpause, to compare. The
wall time is this process's and the server's together: on 2 cores they mostly
take turns. Tasks/s here are not the
benchmark's (no separate replica process, no harness sampling): use
`bench.run` for those, and this to see where a tick's time goes.

`--capture` turns on status capture (ADR 0017: the triggers that enqueue a run's
changes for the status publisher, on in every cluster install) without a
publisher, to see what the triggers add to each phase; with `--explain` the
triggers' own statements are explained too.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy.engine import default as sa_default

from bench import sluice_side
from bench.common import Knobs, Postgres, for_variant
from bench.metrics import LIKE_FOR_LIKE
from bench.shapes import SHAPES, Workload
from sluice.db.engine import make_engine, session_factory
from sluice.db.prepared import sql_of
from sluice.executors.noop import NoopExecutor
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop

PHASES = ("runs", "examine", "critical", "handover", "housekeeping")
# What the tick sends outside its phases (the look once per tick interval, the notifications).
OUTSIDE = "outside the phases"
_EXPLAIN_SETTINGS = (
    "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
    " SET auto_explain.log_analyze = on; SET auto_explain.log_level = notice;"
    " SET auto_explain.log_buffers = on"
)


@dataclass
class Phase:
    wall_ms: float = 0.0
    execute_ms: float = 0.0
    statements: int = 0


@dataclass
class Anatomy:
    workload: str
    tis: int
    ticks: int = 0
    wall_s: float = 0.0
    tasks_per_s: float = 0.0
    commits: int = 0
    commit_ms: float = 0.0
    gc_passes: int = 0
    gc_full_passes: int = 0
    gc_ms: float = 0.0
    phases: dict[str, Phase] = field(
        default_factory=lambda: {p: Phase() for p in (*PHASES, OUTSIDE)}
    )
    # Time in `execute` and count, per statement (its SQL's first 100 characters).
    statements: dict[str, tuple[float, int]] = field(default_factory=dict)
    # Each prepared statement's plans on the loop's connection after the burst
    # (`pg_prepared_statements`): generic (planned once, kept) and custom (planned anew
    # on that call), by its SQL's first 100 characters.
    plans: dict[str, tuple[int, int]] = field(default_factory=dict)


class _Recorder:
    """Times statements, commits and collections, and which phase sent them."""

    def __init__(self, anatomy: Anatomy) -> None:
        self.a = anatomy
        self.phase: str | None = None
        self.on = False
        self._sent = 0.0
        self._gc_at = 0.0
        self._by_sql: dict[str, tuple[float, int]] = {}  # ms in execute, count

    def watch(self, engine: Engine) -> Callable[[], None]:
        def before(conn: object, cursor: object, statement: str, *args: object) -> None:
            self._sent = time.perf_counter()

        def after(conn: object, cursor: object, statement: str, *args: object) -> None:
            if not self.on:
                return
            spent = (time.perf_counter() - self._sent) * 1000
            sql = " ".join((sql_of(statement) or "(prepare)").split())[:100]
            ms, count = self._by_sql.get(sql, (0.0, 0))
            self._by_sql[sql] = (ms + spent, count + 1)
            phase = self.a.phases[self.phase or OUTSIDE]
            phase.execute_ms += spent
            phase.statements += 1

        commit = sa_default.DefaultDialect.do_commit

        def timed_commit(dialect: Any, dbapi_connection: Any) -> None:
            began = time.perf_counter()
            commit(dialect, dbapi_connection)  # type: ignore[no-untyped-call]
            if self.on:
                self.a.commits += 1
                self.a.commit_ms += (time.perf_counter() - began) * 1000

        def collected(stage: str, info: dict[str, int]) -> None:
            if stage == "start":
                self._gc_at = time.perf_counter()
            elif self.on:
                self.a.gc_passes += 1
                self.a.gc_full_passes += info["generation"] == 2
                self.a.gc_ms += (time.perf_counter() - self._gc_at) * 1000

        event.listen(engine, "before_cursor_execute", before)
        event.listen(engine, "after_cursor_execute", after)
        sa_default.DefaultDialect.do_commit = timed_commit  # type: ignore[method-assign]
        gc.callbacks.append(collected)

        def stop() -> None:
            sa_default.DefaultDialect.do_commit = commit  # type: ignore[method-assign]
            gc.callbacks.remove(collected)

        return stop

    @contextmanager
    def in_phase(self, name: str) -> Iterator[None]:
        self.phase = name
        began = time.perf_counter()
        try:
            yield
        finally:
            if self.on:
                self.a.phases[name].wall_ms += (time.perf_counter() - began) * 1000
            self.phase = None

    def wrap(self, loop: SchedulerLoop) -> None:
        for name in PHASES:
            part = getattr(loop, name)
            tick = part.tick

            def timed(*args: Any, _tick: Any = tick, _name: str = name) -> Any:
                with self.in_phase(_name):
                    return _tick(*args)

            part.tick = timed

    def finish(self) -> None:
        slowest = sorted(self._by_sql.items(), key=lambda kv: -kv[1][0])
        self.a.statements = {sql: (round(ms, 1), count) for sql, (ms, count) in slowest}


def measure(
    pg: Postgres,
    workload: Workload,
    tis: int,
    *,
    explain: Path | None = None,
    freeze: bool = False,
    capture: bool = False,
) -> Anatomy:
    knobs = for_variant(Knobs(max_tis_per_query=tis), LIKE_FOR_LIKE, workload.dags)
    sluice_side.prepare_template(pg, knobs)
    url = pg.create("tick_anatomy", sluice_side.TEMPLATE)
    engine = make_engine(url, application_name="sluice-bench")
    checks = make_engine(url, application_name="sluice-bench-harness")  # not recorded
    anatomy = Anatomy(workload.label, tis)
    recorder = _Recorder(anatomy)
    out = explain.open("w") if explain is not None else None
    unexplain = _explain_into(engine, out, nested=capture) if out is not None else None
    sessions = session_factory(engine)
    with sessions() as session:
        sluice_side.register(session, workload, knobs)
    config = SchedulerConfig(
        tick_interval=knobs.idle_sleep,
        max_tis_per_query=knobs.max_tis_per_query,
        runs_examined_per_tick=knobs.runs_examined,
        runs_created_per_tick=knobs.runs_created or SchedulerConfig.runs_created_per_tick,
        critical_batches_per_tick=knobs.critical_batches,
        wake_at_next_due=knobs.wake,
    )
    loop = SchedulerLoop(sessions, NoopExecutor(), config, waker=None)
    recorder.wrap(loop)
    stop = recorder.watch(engine)
    try:
        loop.tick()  # registered, nothing due: what an idle replica has done before the unpause
        with checks.begin() as conn:
            if capture:  # what a status publisher does as it starts (ADR 0017)
                conn.execute(text("INSERT INTO status_sink (id) VALUES (1)"))
            conn.execute(text("UPDATE dag SET is_paused = false"))
        if freeze:
            gc.freeze()
        recorder.on = True
        began = time.perf_counter()
        while not _finished(checks, workload):
            loop.tick()
            anatomy.ticks += 1
        anatomy.wall_s = round(time.perf_counter() - began, 3)
        recorder.on = False
        anatomy.plans = _plans(sessions)
    finally:
        stop()
        if freeze:
            gc.unfreeze()
        loop.close()
        engine.dispose()
        checks.dispose()
        if unexplain is not None:
            unexplain()
        if out is not None:
            out.close()
        pg.drop("tick_anatomy")
    anatomy.tasks_per_s = round(workload.total_tasks / anatomy.wall_s, 1)
    recorder.finish()
    return anatomy


def _plans(sessions: Any) -> dict[str, tuple[int, int]]:
    """The plans of the statements prepared on the loop's connection (the pool's one)."""
    with sessions() as session:
        rows = session.execute(
            text(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
                " ORDER BY custom_plans DESC, name"
            )
        ).all()
    found = {}
    for row in rows:
        sql = sql_of(f"EXECUTE {row.name}") if row.name.startswith("sluice_") else row.name
        found[" ".join((sql or row.name).split())[:100]] = (row.generic_plans, row.custom_plans)
    return found


def _finished(checks: Engine, workload: Workload) -> bool:
    with checks.connect() as conn:
        done = conn.execute(
            text("SELECT count(*) FROM task_instance WHERE state = 'success'")
        ).scalar_one()
    return bool(done >= workload.total_tasks)


def _explain_into(engine: Engine, out: Any, *, nested: bool = False) -> Callable[[], None]:
    """Plans into `out` (`nested`: the statements of triggers and functions too);
    returns what puts the notices' logger back as it was."""

    @event.listens_for(engine, "connect")
    def explained(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(_EXPLAIN_SETTINGS)
        if nested:
            cursor.execute("SET auto_explain.log_nested_statements = on")
        cursor.close()
        dbapi_connection.commit()

    class Plans(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            out.write(record.getMessage() + "\n")

    # psycopg2's dialect logs the server's notices at INFO.
    notices = logging.getLogger("sqlalchemy.dialects.postgresql")
    level, propagate, handler = notices.level, notices.propagate, Plans()
    notices.setLevel(logging.INFO)
    notices.addHandler(handler)
    notices.propagate = False

    def undo() -> None:
        notices.removeHandler(handler)
        notices.setLevel(level)
        notices.propagate = propagate

    return undo


def render(a: Anatomy, top: int = 12) -> str:
    ticks = max(a.ticks, 1)
    lines = [
        f"{a.workload} at {a.tis} tasks per query: {a.ticks} ticks in {a.wall_s:.3f} s"
        f" ({a.tasks_per_s:,.0f} tasks/s in this process), {a.wall_s * 1000 / ticks:.2f} ms a tick",
        f"commits: {a.commits} ({a.commits / ticks:.2f} a tick), {a.commit_ms:.0f} ms;"
        f" collector: {a.gc_passes} passes ({a.gc_full_passes} full), {a.gc_ms:.1f} ms",
        "",
        "| phase | ms a tick | in execute | statements a tick |",
        "|---|---|---|---|",
    ]
    for name, p in a.phases.items():
        wall = "" if name == OUTSIDE else f"{p.wall_ms / ticks:.2f}"
        lines.append(
            f"| {name} | {wall} | {p.execute_ms / ticks:.2f} | {p.statements / ticks:.2f} |"
        )
    lines += ["", "| ms in execute | count | statement |", "|---|---|---|"]
    for sql, (ms, count) in list(a.statements.items())[:top]:
        lines.append(f"| {ms:.1f} | {count} | `{sql}` |")
    planned = [(sql, g, c) for sql, (g, c) in a.plans.items() if c > 5]
    if planned:
        lines += [
            "",
            "Planned anew on most calls (custom plans after the first five):",
            "",
            "| generic plans | custom plans | statement |",
            "|---|---|---|",
        ]
        lines += [f"| {g} | {c} | `{sql}` |" for sql, g, c in planned]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="grid", choices=SHAPES)
    parser.add_argument("--size", default="100x10", help="DAGSxTASKS, e.g. 100x10")
    parser.add_argument("--tis", type=int, default=16, help="tasks per critical-section query")
    parser.add_argument("--explain", type=Path, help="write auto_explain's plans here")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--capture",
        action="store_true",
        help="status capture on (ADR 0017's triggers), as in a cluster install",
    )
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="freeze the heap before the unpause (gc.freeze), to compare (ADR 0048)",
    )
    args = parser.parse_args(argv)
    dags, _, tasks = args.size.partition("x")
    workload = Workload(args.shape, int(dags), int(tasks))
    pg = Postgres()
    try:
        anatomy = measure(
            pg, workload, args.tis, explain=args.explain, freeze=args.freeze, capture=args.capture
        )
    finally:
        pg.stop()
    print(render(anatomy))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(anatomy), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
