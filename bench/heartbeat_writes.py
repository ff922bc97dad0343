"""What a running try's heartbeat writes, with and without an index on the heartbeat.

    python -m bench.heartbeat_writes [--instances 100000] [--running 2000] [--rounds 5]

Migration 0021 dropped `ix_ti_running_heartbeat` (ADR 0053). This puts numbers on
it, on Postgres only: a database at head with `--instances` task instances, of which
`--running` are running (owned by a live replica) and the rest succeeded, and then,
in each arm, `--rounds` rounds of every running try heartbeating through the task
API's own statement (`sluice.api.heartbeats.record_heartbeats`, `--batch` tries a
statement, each committed). Arms, interleaved, `--trials` each, a fresh database
per trial:

- `as migrated`: the schema at head;
- `indexed`: the same plus the index as migration 0003 made it.

Per trial: the heartbeats' wall time, their row updates, the HOT ones and those to
a new page (`bench.common.read_writes`: `pg_stat_user_tables`, read once the
heartbeating connection has closed), WAL bytes per heartbeat, and the stale-tries
sweep (`housekeeping.plan_stale_tries`, nothing stale) timed over `--sweeps`
calls, for tries that heartbeat themselves (Kubernetes) and for an in-process
executor's. It prints its figures and asserts nothing timed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from bench.common import Postgres, read_writes, writes_settled
from bench.metrics import update_shares
from sluice.api.heartbeats import record_heartbeats
from sluice.db.dags import SpecCache, sync_dag
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.scheduler.housekeeping import plan_stale_tries
from sluice.scheduler.triggers import trigger_run
from sluice.spec.validation import parse_dag_manifest

TEMPLATE = "sluice_heartbeats_template"
ARMS = ("as migrated", "indexed")
# Migration 0003's index, which 0021 dropped.
INDEX = (
    "CREATE INDEX ix_ti_running_heartbeat ON task_instance (last_heartbeat_at)"
    " WHERE state = 'running'"
)


@dataclass(frozen=True)
class _Beating:
    """An executor whose tries heartbeat themselves (the Kubernetes one's flag)."""

    pods_heartbeat: bool = True

    def alive(self) -> list[tuple[int, int]]:
        return []


def copy_task_instance(
    session: Session, instances: int, running: int, *, owner: int, at: datetime
) -> None:
    """The database's one task instance copied to `instances` rows in one statement
    (task ids `t1`...), the original removed: the first `running` are running at try 1,
    heartbeated at `at` and owned by replica `owner`; the rest succeeded."""
    (original,) = session.execute(text("SELECT id FROM task_instance")).scalars()
    columns = ", ".join(
        session.execute(
            text(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'task_instance' AND column_name NOT IN"
                " ('id', 'task_id', 'state', 'try_number', 'last_heartbeat_at',"
                " 'running_by_job_id')"
            )
        ).scalars()
    )
    session.execute(
        text(
            f"INSERT INTO task_instance ({columns}, task_id, state, try_number,"
            " last_heartbeat_at, running_by_job_id)"
            f" SELECT {columns}, 't' || g,"
            " CASE WHEN g <= :running THEN 'running' ELSE 'success' END, 1,"
            " CASE WHEN g <= :running THEN CAST(:at AS timestamptz) END,"
            " CASE WHEN g <= :running THEN CAST(:owner AS int) END"
            " FROM task_instance, generate_series(1, :n) AS g"
        ),
        {"running": running, "owner": owner, "at": at, "n": instances},
    )
    session.execute(text("DELETE FROM task_instance WHERE id = :id"), {"id": original})


def _template(pg: Postgres, instances: int, running: int) -> tuple[int, list[tuple[int, int]]]:
    """One DAG of one task and one run, its task instance copied to `instances` rows;
    the first `running` are running, owned by a live replica. Returns the replica's
    id and the running tries' keys."""
    url = pg.create(TEMPLATE)
    upgrade(url)
    engine = make_engine(url)
    now = datetime.now(UTC)
    dag = parse_dag_manifest(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": "beats"},
            "spec": {"defaults": {"image": "busybox:1.36"}, "tasks": [{"name": "t"}]},
        }
    )
    with session_factory(engine)() as session:
        sync_dag(session, dag, now)
        trigger_run(session, SpecCache(), "beats", now)
        job = session.execute(
            text(
                "INSERT INTO scheduler_job (hostname, pid, state, started_at, latest_heartbeat)"
                " VALUES ('bench', 1, 'running', now(), now()) RETURNING id"
            )
        ).scalar_one()
        copy_task_instance(session, instances, running, owner=job, at=now)
        keys = [
            (row[0], row[1])
            for row in session.execute(
                text("SELECT id, try_number FROM task_instance WHERE state = 'running'")
            )
        ]
        session.commit()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()
    pg.set_template(TEMPLATE)
    return int(job), keys


def _sweep_ms(engine: Engine, job: int, self_beating: bool, calls: int) -> float:
    sessions = session_factory(engine)
    took = []
    for _ in range(calls):
        with sessions() as session:
            start = time.perf_counter()
            plan = plan_stale_tries(
                session,
                SpecCache(),
                _Beating(self_beating),  # type: ignore[arg-type]
                datetime.now(UTC),
                job_id=job,
                threshold=60.0,
                dead_after=30.0,
            )
            took.append((time.perf_counter() - start) * 1000)
            session.rollback()
        if plan.events or plan.adoptions or plan.restarts or plan.kill:
            raise RuntimeError(f"the sweep found stale tries where none is: {plan}")
    return statistics.median(took)


def _trial(
    pg: Postgres,
    arm: str,
    trial: int,
    job: int,
    keys: list[tuple[int, int]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    name = f"sluice_heartbeats_{arm.replace(' ', '_')}_{trial}"
    url = pg.create(name, TEMPLATE)
    engine = make_engine(url, application_name="sluice-bench-harness")
    beating = make_engine(url)
    try:
        with engine.begin() as conn:
            # The owner stays live whenever the trial runs: its tries are no dead one's.
            conn.execute(text("UPDATE scheduler_job SET latest_heartbeat = now()"))
            if arm == "indexed":
                conn.execute(text(INDEX))
        before = read_writes(engine)
        sessions = session_factory(beating)
        start = time.perf_counter()
        now = datetime.now(UTC)
        with sessions() as session:
            for r in range(args.rounds):
                at = now + timedelta(seconds=r + 1)
                for i in range(0, len(keys), args.batch):
                    record_heartbeats(session, keys[i : i + args.batch], at)
                    session.commit()
        seconds = time.perf_counter() - start
        beating.dispose()
        writes = writes_settled(engine, before)
        updates = writes.updates.get("task_instance", (0, 0, 0))
        beats = args.rounds * len(keys)
        hot, newpage = update_shares({"task_instance": updates})
        return {
            "arm": arm,
            "trial": trial,
            "heartbeats": beats,
            "ms": seconds * 1000,
            "updates": updates[0],
            "hot_pct": hot,
            "newpage_pct": newpage,
            "wal_bytes_per_beat": writes.wal_bytes / beats,
            "sweep_ms_self_beating": _sweep_ms(engine, job, True, args.sweeps),
            "sweep_ms_in_process": _sweep_ms(engine, job, False, args.sweeps),
        }
    finally:
        beating.dispose()
        engine.dispose()
        pg.drop(name)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every trial of both arms, interleaved, on one embedded server."""
    pg = Postgres()
    try:
        job, keys = _template(pg, args.instances, args.running)
        return [
            _trial(pg, arm, trial, job, keys, args) for trial in range(args.trials) for arm in ARMS
        ]
    finally:
        pg.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeat_writes", description=__doc__)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    if not 0 < args.running <= args.instances:
        parser.error("--running: between 1 and --instances")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rows = run(args)
    console = Console(width=200)
    table = Table(
        title=f"{args.rounds} rounds of {args.running:,} running tries heartbeating"
        f" ({args.batch} a statement), {args.instances:,} task instances"
    )
    for column in (
        "arm", "trial", "heartbeats", "ms", "updates", "HOT %", "new page %",
        "WAL bytes/heartbeat", "sweep ms (self-beating)", "sweep ms (in-process)",
    ):  # fmt: skip
        table.add_column(column)
    for row in sorted(rows, key=lambda r: (r["arm"], r["trial"])):
        table.add_row(
            row["arm"],
            f"#{row['trial']}",
            f"{row['heartbeats']:,}",
            f"{row['ms']:.0f}",
            f"{row['updates']:,}",
            f"{row['hot_pct']:.0f}",
            f"{row['newpage_pct']:.0f}",
            f"{row['wal_bytes_per_beat']:.0f}",
            f"{row['sweep_ms_self_beating']:.2f}",
            f"{row['sweep_ms_in_process']:.2f}",
        )
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
