"""The executed areas' observations, in the one shape both sides report: runs and their tasks.

Per DAG, once every run has ended: each run by logical date, the state it
ended in, and each task's final state and try number. `runs_of` reads that
from what `sluice standalone --output json` prints; the Airflow side
(`airflow_runs`) reads the same from Airflow's `dag_run` and `task_instance`
rows.

`sluice_runs` runs every selected executed case in one `sluice standalone
DIR --until-idle --output json` on a fresh database: real scheduler
processes, the local executor, each task a subprocess. One database for all
of them keeps `make conformance` to seconds; the cases cannot meet there,
since each is a DAG of its own, its limits are its own, and what is compared
is how tasks ended, not when or in which order.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from conformance.cases import Case, instant

TEST_DATABASE_URL = "SLUICE_TEST_DATABASE_URL"


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


def runs_of(summaries: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each DAG's runs, by logical date, from `sluice standalone --output json`'s `runs`."""
    by_dag: dict[str, list[dict[str, Any]]] = {}
    for run in sorted(summaries, key=lambda r: (r["dag"], r["logical_date"])):
        tasks = {task["task"]: (task["state"], task["try_number"]) for task in run["tasks"]}
        record = run_record(datetime.fromisoformat(run["logical_date"]), run["state"], tasks)
        by_dag.setdefault(run["dag"], []).append(record)
    return by_dag


def sluice_runs(selected: Sequence[Case]) -> dict[str, list[dict[str, Any]]]:
    """Run the cases' DAGs to the end with `sluice standalone`; their runs by case name."""
    from conformance.standalone import run_standalone  # the CLI, as a subprocess

    if not selected:
        return {}
    with (
        tempfile.TemporaryDirectory(prefix="sluice-conformance-runs-") as tmp,
        fresh_database() as url,
    ):
        summaries = run_standalone(selected, Path(tmp), database_url=url, failed_runs_ok=True)
    by_dag = runs_of(summaries)
    return {case.name: by_dag.get(case.name, []) for case in selected}


@contextmanager
def fresh_database() -> Iterator[str | None]:
    """A new database on the server SLUICE_TEST_DATABASE_URL names (dropped afterwards), as
    the test suite uses it; without it None: `sluice standalone` then starts an embedded
    Postgres of its own in a temporary directory, the test suite's default."""
    admin_url = os.environ.get(TEST_DATABASE_URL)
    if not admin_url:
        yield None
        return
    from sqlalchemy import create_engine, text

    from sluice.db.engine import normalize_url

    admin_url = normalize_url(admin_url)
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
