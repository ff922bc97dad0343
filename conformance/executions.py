"""The executed areas' observations, in the one shape both sides report: runs and their tasks.

Per DAG, once every run has ended: each run by logical date, the state it
ended in, and each task's final state and try number. `runs_of` reads that
from what `sluice standalone --output json` prints; the Airflow side
(`airflow_runs`) reads the same from Airflow's `dag_run` and `task_instance`
rows.

`sluice_runs` runs every selected executed case in one `sluice standalone
DIR --until-idle --output json` on a fresh database (on an embedded Postgres it
starts, or on SLUICE_TEST_DATABASE_URL's server), with the cases' pools
(`create_pools`) and manual runs (`trigger_runs`) made first: real scheduler
processes, the local executor, each task a subprocess. The cases that `wait`
(runs that may never end) run beside it in a second standalone on a database
of their own, stopped after the longest wait. One database for all the others
keeps `make conformance` short; the cases cannot meet there,
since each is a DAG of its own, its limits are its own, and what is compared
is how tasks ended, not when; a case that asks for the order
(`observe: order`) has limits of its own that decide it, which the other
cases, each a DAG of its own in a default pool far from full, do not touch.

The `clearing` cases run on databases of their own too (`_standalone_actions`):
a standalone until idle, `sluice tasks clear|mark` per case and run, then a
second standalone until idle; a case that acts `action-after` seconds in has a
database and standalone of its own, and is acted on while that runs.

The order (`order_of`) is read from each task's last try's start and end, on
both sides: a task's wave is one more than the highest wave among the tasks
that had ended when it started (a task nothing ended before is in wave 1), so
one slot gives one task per wave, in the order they ran, and two tasks that ran
side by side share a wave however their starts fell. Beside the waves, the most
runs (a run spanning its tasks' first start to last end) and tasks that were
running at one instant: with `maxActiveRuns` 1, runs never overlap.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from conformance.cases import Case, instant

TEST_DATABASE_URL = "SLUICE_TEST_DATABASE_URL"
# A run a clearing case acts on has ended, or at least has no task in these states (it
# waits on another run): no try is under way when the action lands, on either side.
ENDED_RUN_STATES = ("success", "failed")
BUSY_TASK_STATES = ("scheduled", "queued", "running", "restarting", "up_for_retry", "deferred")
# Alembic loads its env.py into shared module state: two threads migrating at once (the
# standalones' groups prepare their databases side by side) break each other's run.
_MIGRATING = threading.Lock()


def _upgrade(url: str) -> None:
    from sluice.db.migrate import upgrade

    with _MIGRATING:
        upgrade(url)


def run_record(
    logical_date: datetime, state: str, tasks: Mapping[str, tuple[str, int]]
) -> dict[str, Any]:
    """One run as both sides record it: tasks by name, each `{state, try_number}`."""
    return {
        "logical_date": instant(logical_date),
        "state": state,
        "tasks": {
            name: {"state": task_state, "try_number": try_number}
            for name, (task_state, try_number) in sorted(tasks.items())
        },
    }


class Ran(NamedTuple):
    """One task's last try, as far as the order is concerned."""

    logical_date: str  # an instant, as `instant` spells it
    task: str
    start: datetime | None  # None: it never started (skipped, upstream_failed, ...)
    end: datetime | None


def order_of(tries: Iterable[Ran]) -> dict[str, Any]:
    """The waves tasks ran in and the most runs and tasks at once (see the module doc)."""
    ran = sorted(
        (
            (t.start, t.end, t.logical_date, t.task)
            for t in tries
            if t.start is not None and t.end is not None
        ),
        key=lambda t: (t[0], t[2], t[3]),
    )
    waves: list[list[str]] = []
    ended: list[tuple[datetime, int]] = []  # (end, wave) of the tasks placed so far
    spans: dict[str, tuple[datetime, datetime]] = {}
    for start, end, logical_date, task in ran:
        wave = 1 + max((number for other_end, number in ended if other_end <= start), default=0)
        ended.append((end, wave))
        if wave > len(waves):
            waves.append([])
        waves[wave - 1].append(f"{logical_date} {task}")
        first, last = spans.get(logical_date, (start, end))
        spans[logical_date] = (min(first, start), max(last, end))
    return {
        "waves": [sorted(names) for names in waves],
        "runs_at_once": _most_at_once(list(spans.values())),
        "tasks_at_once": _most_at_once([(start, end) for start, end, _, _ in ran]),
    }


def _most_at_once(spans: Sequence[tuple[datetime, datetime]]) -> int:
    # An end and a start at the same instant do not overlap: ends count first.
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def runs_of(summaries: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each DAG's runs, by logical date, from `sluice standalone --output json`'s `runs`."""
    by_dag: dict[str, list[dict[str, Any]]] = {}
    for run in sorted(summaries, key=lambda r: (r["dag"], r["logical_date"])):
        tasks = {task["task"]: (task["state"], task["try_number"]) for task in run["tasks"]}
        record = run_record(datetime.fromisoformat(run["logical_date"]), run["state"], tasks)
        by_dag.setdefault(run["dag"], []).append(record)
    return by_dag


def tries_of(summaries: Sequence[Mapping[str, Any]]) -> dict[str, list[Ran]]:
    """Each DAG's tasks' last tries (start and end), from the same JSON."""
    by_dag: dict[str, list[Ran]] = {}
    for run in summaries:
        logical_date = instant(datetime.fromisoformat(run["logical_date"]))
        assert logical_date is not None
        by_dag.setdefault(run["dag"], []).extend(
            Ran(logical_date, task["task"], _instant(task["start"]), _instant(task["end"]))
            for task in run["tasks"]
        )
    return by_dag


def sluice_runs(selected: Sequence[Case]) -> dict[str, dict[str, Any]]:
    """Run the cases' DAGs to the end with `sluice standalone`; their observations (`runs`,
    and `order` and `triggers` where asked) by case name."""
    if not selected:
        return {}
    # The cases that wait a fixed time run beside the others, in a standalone of their
    # own stopped after the longest wait (their runs may never end: --until-idle would
    # not return).
    # The backfill cases run on a third database: their backfills start once their other
    # runs have ended, between two standalones (`_standalone_backfills`).
    ending = [
        case
        for case in selected
        if case.wait is None and case.backfill is None and case.action is None
    ]
    waiting = [case for case in selected if case.wait is not None]
    backfilling = [case for case in selected if case.backfill is not None]
    # The clearing cases likewise, between two standalones (`_standalone_actions`): those
    # that act once their runs have ended on a database of their own, and each that acts
    # a fixed time after its first run (`action-after`) on one of its own.
    acting = [case for case in selected if case.action is not None]
    action_groups: list[tuple[list[Case], float | None]] = []
    at_end = [case for case in acting if case.action and case.action.after is None]
    if at_end:
        action_groups.append((at_end, None))
    action_groups.extend(
        ([case], case.action.after)
        for case in acting
        if case.action and case.action.after is not None
    )
    groups = [
        (group, stop_after)
        for group, stop_after in (
            (ending, None),
            (waiting, max((case.wait or 0.0 for case in waiting), default=0.0)),
        )
        if group
    ]
    summaries: list[dict[str, Any]] = []
    triggered: dict[str, list[dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="sluice-conformance-") as tmp,
        database_server(Path(tmp)) as admin_url,
        ThreadPoolExecutor(max_workers=3 + len(action_groups)) as pool,
    ):
        jobs = [
            pool.submit(_standalone, group, admin_url, Path(tmp) / str(number), stop_after)
            for number, (group, stop_after) in enumerate(groups)
        ]
        if backfilling:
            jobs.append(
                pool.submit(_standalone_backfills, backfilling, admin_url, Path(tmp) / "backfill")
            )
        jobs.extend(
            pool.submit(
                _standalone_actions, group, admin_url, Path(tmp) / f"action-{number}", after
            )
            for number, (group, after) in enumerate(action_groups)
        )
        for job in jobs:
            found, asked = job.result()
            summaries.extend(found)
            triggered.update(asked)
    by_dag = runs_of(summaries)
    tries = tries_of(summaries)
    observed: dict[str, dict[str, Any]] = {}
    for case in selected:
        observed[case.name] = {"runs": by_dag.get(case.name, [])}
        if "order" in case.observe:
            observed[case.name]["order"] = order_of(tries.get(case.name, []))
        if case.triggers:
            observed[case.name]["triggers"] = triggered[case.name]
    return observed


def _standalone(
    selected: Sequence[Case], admin_url: str, workdir: Path, stop_after: float | None
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """One `sluice standalone` over these cases on a new database of the server: its runs,
    and the manual runs asked for first."""
    from conformance.standalone import run_standalone  # the CLI, as a subprocess

    workdir.mkdir()
    with fresh_database(admin_url) as url:
        create_pools(url, selected)
        triggered = trigger_runs(url, selected)
        summaries = run_standalone(
            selected, workdir, database_url=url, failed_runs_ok=True, stop_after=stop_after
        )
    return summaries, triggered


def _standalone_backfills(
    selected: Sequence[Case], admin_url: str, workdir: Path
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The backfill cases, on a new database of the server: `sluice standalone --until-idle`
    runs their scheduled and manual runs to the end, then `sluice backfill` (the CLI, as a
    subprocess) creates each case's backfill, and a second standalone on the same database
    runs the backfills to the end (docs/semantics.md, "Backfill"): every run, and the manual runs
    asked for first."""
    from conformance.standalone import run_standalone, sluice_command

    workdir.mkdir()
    with fresh_database(admin_url) as url:
        create_pools(url, selected)
        triggered = trigger_runs(url, selected)
        run_standalone(selected, workdir / "before", database_url=url, failed_runs_ok=True)
        for case in selected:
            command = backfill_command(case, url)
            result = subprocess.run(
                [*sluice_command(), *command], capture_output=True, text=True, check=False
            )
            if result.returncode:
                raise RuntimeError(
                    f"{case.name}: sluice {' '.join(command[:1])} exited {result.returncode}:"
                    f"\n{result.stdout}{result.stderr}"
                )
        summaries = run_standalone(
            selected, workdir / "after", database_url=url, failed_runs_ok=True
        )
    return summaries, triggered


def backfill_command(case: Case, database_url: str) -> list[str]:
    """`sluice backfill` for the case's backfill (its arguments, after `sluice`)."""
    ask = case.backfill
    assert ask is not None
    command = ["backfill", case.name, "--start", str(instant(ask.start))]
    command += ["--end", str(instant(ask.end)), "--reprocess", ask.reprocess]
    if ask.max_active_runs is not None:
        command += ["--max-active-runs", str(ask.max_active_runs)]
    return [*command, "--database-url", database_url]


def _standalone_actions(
    selected: Sequence[Case], admin_url: str, workdir: Path, after: float | None
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The clearing cases, on a new database of the server, with the manual runs asked for
    first: every run, and those manual runs.

    Without `after`: `sluice standalone --until-idle` runs the DAGs' runs to the end,
    `sluice tasks clear|mark` (the CLI, as a subprocess) acts on each case's runs, and a
    second standalone on the same database runs them to the end again. With `after`
    (one case): the action comes that many seconds after the standalone started, while
    it runs (a run may be waiting on the one acted on, a task still running), and the
    same standalone runs until idle; if it was idle before then, as without."""
    from conformance.standalone import run_standalone

    workdir.mkdir()
    with fresh_database(admin_url) as url:
        create_pools(url, selected)
        triggered = trigger_runs(url, selected)
        acted: list[bool] = []

        def act() -> None:
            _act(selected, url)
            acted.append(True)

        if after is None:
            run_standalone(selected, workdir / "before", database_url=url, failed_runs_ok=True)
        else:
            summaries = run_standalone(
                selected,
                workdir / "during",
                database_url=url,
                failed_runs_ok=True,
                during=(after, act),
            )
        if not acted:
            act()
            summaries = run_standalone(
                selected, workdir / "after", database_url=url, failed_runs_ok=True
            )
    return summaries, triggered


def _act(selected: Sequence[Case], url: str, timeout: float = 300.0) -> None:
    """Each case's `sluice tasks clear|mark` commands on the runs the database has, once
    the runs acted on have no task under way (the standalone may still be running, as
    Airflow's side waits for them too), at most `timeout` seconds."""
    import json
    import time

    from conformance.standalone import sluice_command
    from sluice.db.engine import make_engine, session_factory
    from sluice.summaries import as_json, read_runs

    engine = make_engine(url)
    deadline = time.monotonic() + timeout
    try:
        while True:
            with session_factory(engine)() as session:
                runs = json.loads(json.dumps(as_json(read_runs(session))))["runs"]
            try:
                commands = [
                    (case, command)
                    for case in selected
                    for command in action_commands(case, runs, url)
                ]
                break
            except NotReady:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        engine.dispose()
    for case, command in commands:
        result = subprocess.run(
            [*sluice_command(), *command], capture_output=True, text=True, check=False
        )
        if result.returncode:
            raise RuntimeError(
                f"{case.name}: sluice {' '.join(command[:2])} exited {result.returncode}:"
                f"\n{result.stdout}{result.stderr}"
            )


class NotReady(RuntimeError):
    """A run a clearing case acts on still has a task under way."""


def action_commands(
    case: Case, runs: Sequence[Mapping[str, Any]], database_url: str
) -> list[list[str]]:
    """`sluice tasks clear|mark` (its arguments, after `sluice`) for each of the case's runs
    the action is for, from a standalone's JSON `runs`; each must have ended, or have no
    task under way (else NotReady)."""
    ask = case.action
    assert ask is not None
    chosen = [
        run
        for run in sorted(runs, key=lambda r: r["logical_date"])
        if run["dag"] == case.name and ask.covers(datetime.fromisoformat(run["logical_date"]))
    ]
    found = {datetime.fromisoformat(run["logical_date"]) for run in chosen}
    missing = [instant(when) for when in ask.runs if when not in found]
    if missing or not chosen:
        raise RuntimeError(
            f"{case.name}: no run to act on ({', '.join(map(str, missing)) or 'the DAG has none'})"
        )
    busy = [
        run["run_id"]
        for run in chosen
        if run["state"] not in ENDED_RUN_STATES
        and any(task["state"] in BUSY_TASK_STATES for task in run["tasks"])
    ]
    if busy:
        raise NotReady(f"{case.name}: the runs to act on have a task under way ({', '.join(busy)})")
    options = [option for flag, option in ((ask.downstream, "-d"), (ask.upstream, "-u")) if flag]
    if ask.only_failed:
        options.append("--only-failed")
    commands = []
    for run in chosen:
        verb = ["clear", case.name] if ask.verb == "clear" else ["mark", case.name, str(ask.state)]
        tasks = [item for task in ask.tasks for item in ("--task", task)]
        commands.append(
            [
                "tasks",
                *verb,
                "--run",
                run["run_id"],
                *tasks,
                *options,
                "--yes",
                "--database-url",
                database_url,
            ]
        )
    return commands


def create_pools(url: str, selected: Sequence[Case]) -> None:
    """The cases' pools, as a Pool object's handler stores them, in a migrated database."""
    from sluice.db.engine import make_engine, session_factory
    from sluice.handlers.objects import PoolSpec
    from sluice.handlers.store import upsert_pool

    pools = [pool for case in selected for pool in case.pools]
    if not pools:
        return
    _upgrade(url)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            for name, slots in pools:
                upsert_pool(session, PoolSpec(name, slots, "a conformance case's pool"))
            session.commit()
    finally:
        engine.dispose()


def trigger_runs(url: str, selected: Sequence[Case]) -> dict[str, list[dict[str, Any]]]:
    """The cases' manual runs (`Case.triggers`), asked for as `sluice dags trigger` asks
    (`trigger_run`) once the DAG is registered (`sync_dag`, as standalone registers it):
    whether each was created, and if not why, by case name."""
    from sluice.db.dags import SpecCache, sync_dag
    from sluice.db.engine import make_engine, session_factory
    from sluice.scheduler.loop import utcnow
    from sluice.scheduler.triggers import TriggerError, trigger_run

    asking = [case for case in selected if case.triggers]
    if not asking:
        return {}
    _upgrade(url)
    engine = make_engine(url)
    found: dict[str, list[dict[str, Any]]] = {}
    try:
        with session_factory(engine)() as session:
            for case in asking:
                sync_dag(session, case.manifest, utcnow())
                session.commit()
                found[case.name] = []
                for when in case.triggers:
                    try:
                        trigger_run(
                            session,
                            SpecCache(),
                            case.name,
                            utcnow(),
                            logical_date=when,
                            conf=case.trigger_conf,
                        )
                    except TriggerError as exc:
                        session.rollback()
                        found[case.name].append(trigger_record(when, str(exc)))
                        continue
                    session.commit()
                    found[case.name].append(trigger_record(when, None))
    finally:
        engine.dispose()
    return found


def trigger_record(logical_date: datetime, refused: str | None) -> dict[str, Any]:
    """One manual run asked for, as both sides record it (`refused`: why, if it was)."""
    return {"logical_date": instant(logical_date), "created": refused is None, "refused": refused}


@contextmanager
def database_server(workdir: Path) -> Iterator[str]:
    """The server SLUICE_TEST_DATABASE_URL names, as the test suite uses it; without it an
    embedded Postgres in `workdir` (the test suite's default), stopped and removed
    afterwards. Its URL, to make databases on (`fresh_database`)."""
    from sluice.db.engine import normalize_url

    admin_url = os.environ.get(TEST_DATABASE_URL)
    if admin_url:
        yield normalize_url(admin_url)
        return
    from sluice.db.embedded import start_embedded_postgres

    server = start_embedded_postgres(workdir / "pgdata", keep_data=False)
    try:
        yield normalize_url(server.url)
    finally:
        server.stop()


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """A new database on the server, dropped afterwards."""
    from sqlalchemy import create_engine, text

    name = f"sluice_conformance_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        base, sep, query = admin_url.partition("?")
        yield f"{base.rsplit('/', 1)[0]}/{name}{sep}{query}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
