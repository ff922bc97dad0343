"""The executed areas on Airflow: each case's DAG run to the end by real Airflow processes.

Per Airflow version, one embedded Postgres server (the benchmark's
`bench.common.Postgres`) and `airflow db migrate` once into a template
database; then, per case, a fresh database cloned from it, a DAG folder holding
only the case's generated DAG, an AIRFLOW_HOME and log folder of its own, and
Airflow's own processes with the LocalExecutor: for 2.10.5 `airflow scheduler`
(its DAG processor runs inside it); for 3.3.2 `airflow api-server --apps
execution` (the Task SDK's task processes report to it), `airflow
dag-processor` and `airflow scheduler`. New DAGs are not paused, so the case's
`@once` DAG (startDate in the past) gets its one run at once, and a DAG with
catchup and a past endDate its runs one after another. A case's pools
(`Case.pools`) are rows of `slot_pool` before Airflow starts. When the DAG has
as many runs as its schedule gives by now (Sluice's timetable counts them:
with `max_active_runs` Airflow creates the next run only once one ends, so
"every run has ended" alone could stop between two) and every one has ended,
and still after a few seconds more, its `dag_run` and `task_instance` rows are
read (run state by logical date; each task's state and try_number; where the
case asks, the order from each task's start_date and end_date), the processes
are stopped and the database dropped. A `clearing` case is acted on first, once
its runs have ended (or `action-after` seconds after its first run), with the
processes still running (`_act`: `airflow tasks clear`, or `airflow_mark.py`
for a mark), and read once every run has ended again. Cases run `jobs` at a
time; each keeps its processes' logs under
~/.cache/sluice/logs/conformance-runs-VERSION/CASE/.

This module runs in Sluice's venv and talks to Airflow only through its CLI and
its database; it imports nothing from Airflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from bench.common import Postgres
from sqlalchemy import Engine, create_engine, text

from conformance.cases import Case, instant
from conformance.executions import (
    BUSY_TASK_STATES,
    ENDED_RUN_STATES,
    Ran,
    order_of,
    run_record,
    trigger_record,
)

API = {
    "runs": (
        "real processes, LocalExecutor, a fresh Postgres database per case (2.x: airflow "
        "scheduler; 3.x: airflow api-server --apps execution, dag-processor, scheduler); "
        "once every dag_run of the DAG has ended: dag_run.state by logical date, "
        "task_instance.state and try_number"
    ),
    "order": (
        "the same rows: task_instance.start_date and end_date (the last try's), as waves "
        "and the most runs and tasks at once (conformance.executions.order_of)"
    ),
    "triggers": (
        "airflow dags trigger DAG --exec-date (2.x) / --logical-date (3.x) DATE [-c CONF] "
        "once serialized_dag has the DAG: created if it exits 0, else refused"
    ),
    "action": (
        "once the runs acted on have ended, the scheduler still running: airflow tasks "
        "clear DAG [-t TASKS] -s DATE -e DATE [-d] [-u] [-f] -y (2.x: -t a regex, "
        "^(TASK)$; 3.x: a task name, matched as a substring); or, to mark, "
        "set_task_instance_state(task_id, run_id, state, upstream, downstream, "
        "commit=True) on the DAG read from serialized_dag (conformance/airflow_mark.py), "
        "what the REST API's PATCH of a task instance calls; then until every run has "
        "ended again"
    ),
}
MARKER = Path(__file__).resolve().parent / "airflow_mark.py"
SETTLE = 3.0
CASE_TIMEOUT = 300.0
JWT_SECRET = "sluice-conformance-not-a-secret"


def psycopg2_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg2://")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def airflow_env(
    base: dict[str, str], major: int, url: str, dags: Path, home: Path, port: int
) -> dict[str, str]:
    """`base` (the observer's environment for this Airflow) on Postgres, with the
    LocalExecutor, new DAGs unpaused, and everything written under `home`."""
    env = {
        **base,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": psycopg2_url(url),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW__WEBSERVER__SECRET_KEY": JWT_SECRET,
    }
    if major >= 3:
        env.update(
            {
                "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
                # asyncpg is not installed and nothing used here needs the async engine.
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": "",
                # A task process waits this long for the API server (default 5 s): on a
                # loaded machine a request timed out and failed the task (httpx.ReadTimeout).
                "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            }
        )
    return env


def processes(major: int, port: int) -> list[list[str]]:
    """The Airflow commands that run a DAG, as this major version splits them."""
    if major < 3:
        return [["scheduler", "--skip-serve-logs"]]
    return [
        ["api-server", "--apps", "execution", "--port", str(port), "--workers", "1"],
        ["dag-processor"],
        ["scheduler", "--skip-serve-logs"],
    ]


class AirflowRuns:
    """One Airflow version's server and template; `observe` runs cases on them."""

    def __init__(self, version: str, venv: Path, base_env: dict[str, str], logs: Path) -> None:
        self.version = version
        self.major = int(version.split(".", 1)[0])
        self.airflow = str(venv / "bin" / "airflow")
        self.base_env = base_env
        self.logs = logs
        self.template = "conformance_airflow_" + version.replace(".", "_")
        self.pg = Postgres()

    def close(self) -> None:
        self.pg.stop()

    def prepare(self) -> None:
        """`airflow db migrate` into the template every case's database is cloned from."""
        url = self.pg.create(self.template)
        home = self.logs / "template"
        _reset(home)
        env = airflow_env(self.base_env, self.major, url, home / "dags", home, free_port())
        (home / "dags").mkdir()
        with (home / "db-migrate.log").open("wb") as out:
            result = subprocess.run(
                [self.airflow, "db", "migrate"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
                timeout=600,
            )
        if result.returncode:
            raise RuntimeError(f"airflow db migrate exited {result.returncode}; see {home}")
        self.pg.set_template(self.template)

    def observe(
        self, selected: Sequence[Case], dag_files: dict[str, Path], jobs: int = 1
    ) -> dict[str, dict[str, Any]]:
        """Each case's observations (`runs`, and `order` where asked), by case name."""
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            runs = pool.map(lambda case: self.run_case(case, dag_files[case.name]), selected)
            return {case.name: found for case, found in zip(selected, runs, strict=True)}

    def run_case(self, case: Case, dag_file: Path) -> dict[str, Any]:
        database = "conformance_" + case.name.replace("-", "_")
        home = self.logs / case.name
        _reset(home)
        dags = home / "dags"
        dags.mkdir()
        shutil.copy(dag_file, dags / dag_file.name)
        port = free_port()
        url = self.pg.create(database, self.template)
        env = airflow_env(self.base_env, self.major, url, dags, home, port)
        engine = create_engine(psycopg2_url(url))
        with engine.begin() as conn:
            for name, slots in case.pools:
                conn.execute(
                    text(
                        "INSERT INTO slot_pool (pool, slots, description, include_deferred)"
                        " VALUES (:pool, :slots, 'a conformance case''s pool', false)"
                    ),
                    {"pool": name, "slots": slots},
                )
        started: dict[str, subprocess.Popen[bytes]] = {}
        logs: list[IO[bytes]] = []
        try:
            for command in processes(self.major, port):
                logs.append((home / f"{command[0]}.log").open("wb"))
                started[command[0]] = subprocess.Popen(
                    [self.airflow, *command],
                    env=env,
                    cwd=home,
                    stdout=logs[-1],
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its task processes go with it on stop
                )
            triggered = self._trigger(engine, case, env, home, started)
            created = sum(item["created"] for item in triggered)
            expected = expected_runs(case) + created
            if case.action is not None:
                ask = case.action
                if ask.after is None:
                    self._wait_for_runs(engine, case.name, max(1, expected), started, home)
                else:
                    self._wait_since_first_run(engine, case.name, ask.after, started, home)
                total = max(self._act(engine, case, env, home, started), expected)
                self._wait_for_runs(engine, case.name, total, started, home)
            elif case.backfill is None:
                self._wait_for_runs(engine, case.name, max(1, expected), started, home, case.wait)
            else:
                if expected:
                    self._wait_for_runs(engine, case.name, expected, started, home)
                else:
                    self._wait_parsed(engine, case, home, started)
                total = self._backfill(engine, case, env, home, started)
                self._wait_for_runs(engine, case.name, total, started, home)
            observed = self._read_runs(engine, case)
            if case.triggers:
                observed["triggers"] = triggered
            return observed
        finally:
            _stop(list(started.values()))
            for log in logs:
                log.close()
            engine.dispose()
            self.pg.drop(database)

    def _trigger(
        self,
        engine: Engine,
        case: Case,
        env: dict[str, str],
        home: Path,
        procs: dict[str, subprocess.Popen[bytes]],
    ) -> list[dict[str, Any]]:
        """`airflow dags trigger` for each of the case's manual runs, once the DAG is
        serialized (what the command reads): created (exit 0) or refused (its output)."""
        if not case.triggers:
            return []
        self._wait_parsed(engine, case, home, procs)
        option = "--exec-date" if self.major < 3 else "--logical-date"
        conf = [] if case.trigger_conf is None else ["-c", json.dumps(case.trigger_conf)]
        found = []
        with (home / "triggers.log").open("w") as log:
            for when in case.triggers:
                result = subprocess.run(
                    [self.airflow, "dags", "trigger", case.name, option, str(instant(when)), *conf],
                    env=env,
                    cwd=home,
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=300,
                )
                shown = shlex.join([case.name, option, str(instant(when)), *conf])
                log.write(f"$ airflow dags trigger {shown}\n")
                log.write(f"exit {result.returncode}\n{result.stdout}{result.stderr}\n")
                refused = None
                if result.returncode:
                    lines = [line for line in result.stderr.splitlines() if line.strip()]
                    refused = lines[-1] if lines else f"exit {result.returncode}"
                found.append(trigger_record(when, refused))
        return found

    def _wait_parsed(
        self,
        engine: Engine,
        case: Case,
        home: Path,
        procs: dict[str, subprocess.Popen[bytes]],
    ) -> None:
        """Until serialized_dag has the case's DAG (what `dags trigger` and a backfill read)."""
        deadline = time.monotonic() + CASE_TIMEOUT
        while True:
            with engine.connect() as conn:
                parsed = conn.execute(
                    text("SELECT count(*) FROM serialized_dag WHERE dag_id = :dag"),
                    {"dag": case.name},
                ).scalar_one()
            if parsed:
                return
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{case.name}: airflow {name} exited; see {home}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{case.name}: the DAG was never parsed; see {home}")
            time.sleep(0.5)

    def _backfill(
        self,
        engine: Engine,
        case: Case,
        env: dict[str, str],
        home: Path,
        procs: dict[str, subprocess.Popen[bytes]],
    ) -> int:
        """The case's backfill, once its other runs have ended; how many runs the DAG has
        when it is done (the dates it had, and the range's dates whose interval has ended).

        Airflow 2.10.5: `airflow dags backfill`, a BackfillJob that runs the tasks itself
        with the executor and returns when it is done; the scheduler is stopped first, so
        runs `--reset-dagruns` puts back to queued are the backfill's alone. Airflow
        3.3.2: `airflow backfill create`, whose runs the running scheduler executes."""
        ask = case.backfill
        assert ask is not None
        start, end = str(instant(ask.start)), str(instant(ask.end))
        if self.major < 3:
            _stop([procs.pop(name) for name in list(procs)])
            command = ["dags", "backfill", case.name, "-s", start, "-e", end]
            command += {
                "none": [],
                "failed": ["--rerun-failed-tasks"],
                "completed": ["--reset-dagruns", "--yes"],
            }[ask.reprocess]
        else:
            command = ["backfill", "create", "--dag-id", case.name]
            command += ["--from-date", start, "--to-date", end]
            command += ["--reprocess-behavior", ask.reprocess]
            if ask.max_active_runs is not None:
                command += ["--max-active-runs", str(ask.max_active_runs)]
        with engine.connect() as conn:
            dates = {
                str(instant(row[0]))
                for row in conn.execute(
                    text(
                        f"SELECT {'execution_date' if self.major < 3 else 'logical_date'}"
                        " FROM dag_run WHERE dag_id = :dag"
                    ),
                    {"dag": case.name},
                )
            }
        result = subprocess.run(
            [self.airflow, *command],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            check=False,
            timeout=CASE_TIMEOUT,
        )
        with (home / "backfill.log").open("w") as log:
            log.write(f"$ airflow {' '.join(command)}\nexit {result.returncode}\n")
            log.write(f"{result.stdout}{result.stderr}\n")
        return len(dates | backfill_dates(case))

    def _act(
        self,
        engine: Engine,
        case: Case,
        env: dict[str, str],
        home: Path,
        procs: dict[str, subprocess.Popen[bytes]],
    ) -> int:
        """The case's clear or mark on the runs it is for, once each has ended (or has no
        task under way: it waits on another run), with the scheduler still running; how
        many runs the DAG has (all to end again).

        Clear: `airflow tasks clear DAG [-t TASKS] -s DATE -e DATE [-d] [-u] [-f] -y`, one
        per run asked for (one over every run's dates when none is), which queues the
        runs it cleared for the running scheduler. Mark: `airflow_mark.py` in Airflow's
        venv, `set_task_instance_state(..., commit=True)` per run, what the REST API's
        PATCH of a task instance calls."""
        ask = case.action
        assert ask is not None
        logical = "execution_date" if self.major < 3 else "logical_date"
        deadline = time.monotonic() + CASE_TIMEOUT
        while True:
            with engine.connect() as conn:
                runs = conn.execute(
                    text(
                        f"SELECT run_id, {logical} AS logical_date, state FROM dag_run"
                        " WHERE dag_id = :dag ORDER BY 2, 1"
                    ),
                    {"dag": case.name},
                ).all()
                busy = set(
                    conn.execute(
                        text(
                            "SELECT DISTINCT run_id FROM task_instance WHERE dag_id = :dag"
                            " AND state = ANY(:busy)"
                        ),
                        {"dag": case.name, "busy": list(BUSY_TASK_STATES)},
                    ).scalars()
                )
            chosen = [run for run in runs if ask.covers(run.logical_date)]
            if all(run.state in ENDED_RUN_STATES or run.run_id not in busy for run in chosen):
                break
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{case.name}: airflow {name} exited; see {home}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{case.name}: the runs to act on never ended; see {home}")
            time.sleep(0.5)
        found = {run.logical_date for run in chosen}
        missing = [instant(when) for when in ask.runs if when not in found]
        if missing or not chosen:
            raise RuntimeError(f"{case.name}: no run to act on at {missing}; see {home}")
        if ask.verb == "clear":
            windows = (
                [(when, when) for when in sorted(found)] if ask.runs else [(min(found), max(found))]
            )
            commands = [self.clear_command(case, start, end) for start, end in windows]
        else:
            commands = [self.mark_command(case, [run.run_id for run in chosen])]
        with (home / "action.log").open("w") as log:
            for command in commands:
                result = subprocess.run(
                    command,
                    env=env,
                    cwd=home,
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=CASE_TIMEOUT,
                )
                log.write(f"$ {' '.join(command)}\nexit {result.returncode}\n")
                log.write(f"{result.stdout}{result.stderr}\n")
                if result.returncode:
                    raise RuntimeError(
                        f"{case.name}: {command[1]} exited {result.returncode}; see {home}"
                    )
        return len(runs)

    def clear_command(self, case: Case, start: datetime, end: datetime) -> list[str]:
        """`airflow tasks clear` of the case's tasks over these logical dates. The task
        option is a regex in 2.10.5 (`re.findall` on each task id: anchored here), a
        substring in 3.3.2 (`partial_subset(task_ids=...)` with a string): a case's task
        names are then chosen so that none is part of another."""
        ask = case.action
        assert ask is not None
        command = [self.airflow, "tasks", "clear", case.name]
        if ask.tasks:
            if self.major < 3:
                command += ["-t", "^(" + "|".join(re.escape(task) for task in ask.tasks) + ")$"]
            else:
                if len(ask.tasks) != 1:
                    raise ValueError(f"{case.name}: Airflow 3's -t selects one task name")
                command += ["-t", ask.tasks[0]]
        command += ["-s", str(instant(start)), "-e", str(instant(end))]
        command += [flag for on, flag in ((ask.downstream, "-d"), (ask.upstream, "-u")) if on]
        command += ["-f"] if ask.only_failed else []
        return [*command, "-y"]

    def mark_command(self, case: Case, run_ids: Sequence[str]) -> list[str]:
        ask = case.action
        assert ask is not None
        job = {
            "dag_id": case.name,
            "task_id": ask.tasks[0],
            "state": ask.state,
            "upstream": ask.upstream,
            "downstream": ask.downstream,
            "run_ids": list(run_ids),
        }
        return [str(Path(self.airflow).parent / "python"), str(MARKER), json.dumps(job)]

    def _wait_since_first_run(
        self,
        engine: Engine,
        dag_id: str,
        seconds: float,
        procs: dict[str, subprocess.Popen[bytes]],
        home: Path,
    ) -> None:
        """Until `seconds` after the DAG's first run appeared, ended or not."""
        deadline = time.monotonic() + CASE_TIMEOUT
        while True:
            with engine.connect() as conn:
                total = conn.execute(
                    text("SELECT count(*) FROM dag_run WHERE dag_id = :dag"), {"dag": dag_id}
                ).scalar_one()
            if total:
                time.sleep(seconds)
                return
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{dag_id}: airflow {name} exited; see {home}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dag_id}: no run appeared; see {home}")
            time.sleep(0.5)

    def _wait_for_runs(
        self,
        engine: Engine,
        dag_id: str,
        expected: int,
        procs: dict[str, subprocess.Popen[bytes]],
        home: Path,
        wait: float | None = None,
    ) -> None:
        """Until the DAG has `expected` runs, all ended (and still so SETTLE s later); or,
        with `wait`, until that many seconds after its first run appeared at the latest."""
        deadline = time.monotonic() + CASE_TIMEOUT
        settled: int | None = None  # the run count seen all ended, SETTLE seconds ago
        first_run: float | None = None
        while True:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{dag_id}: airflow {name} exited {proc.returncode}; see {home}"
                    )
            with engine.connect() as conn:
                total, ended = conn.execute(
                    text(
                        "SELECT count(*), count(*) FILTER (WHERE state IN ('success', 'failed'))"
                        " FROM dag_run WHERE dag_id = :dag"
                    ),
                    {"dag": dag_id},
                ).one()
            if total and first_run is None:
                first_run = time.monotonic()
            if wait is not None and first_run is not None and time.monotonic() - first_run > wait:
                return
            if total >= expected and total == ended:
                if settled == total:
                    return
                settled = total
                time.sleep(SETTLE)
                continue
            settled = None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{dag_id}: Airflow {self.version}'s runs did not end within "
                    f"{CASE_TIMEOUT:.0f} s ({ended} of {total} ended, {expected} expected); "
                    f"see {home}"
                )
            time.sleep(0.5)

    def _read_runs(self, engine: Engine, case: Case) -> dict[str, Any]:
        dag_id = case.name
        logical = "execution_date" if self.major < 3 else "logical_date"
        with engine.connect() as conn:
            runs = conn.execute(
                text(
                    f"SELECT run_id, {logical} AS logical_date, state FROM dag_run"
                    " WHERE dag_id = :dag ORDER BY 2, 1"
                ),
                {"dag": dag_id},
            ).all()
            tasks = conn.execute(
                text(
                    "SELECT run_id, task_id, state, try_number, start_date, end_date"
                    " FROM task_instance"
                    " WHERE dag_id = :dag AND map_index = -1"
                ),
                {"dag": dag_id},
            ).all()
        by_run: dict[str, dict[str, tuple[str, int]]] = {}
        for task in tasks:
            # A task the scheduler never set has no state (NULL): Sluice calls that `none`.
            by_run.setdefault(task.run_id, {})[task.task_id] = (
                task.state or "none",
                task.try_number,
            )
        observed: dict[str, Any] = {
            "runs": [
                run_record(run.logical_date, run.state, by_run.get(run.run_id, {})) for run in runs
            ]
        }
        if "order" in case.observe:
            logical_dates = {run.run_id: str(instant(run.logical_date)) for run in runs}
            observed["order"] = order_of(
                Ran(logical_dates[task.run_id], task.task_id, task.start_date, task.end_date)
                for task in tasks
                if task.run_id in logical_dates
            )
        return observed


def expected_runs(case: Case) -> int:
    """How many scheduled runs the case's DAG has by now: Sluice's timetable counts them."""
    from datetime import UTC, datetime

    from conformance.sluice_side import schedule
    from sluice.spec.compiled import CompiledDag

    compiled = CompiledDag(case.name, 0, case.manifest.spec)
    return len(schedule(compiled, datetime.now(UTC))["scheduled"])


def backfill_dates(case: Case) -> set[str]:
    """The logical dates of the case's backfill range whose data interval has ended by
    now (Sluice's timetable gives them)."""
    from datetime import UTC, datetime

    from sluice.spec.compiled import CompiledDag

    assert case.backfill is not None
    compiled = CompiledDag(case.name, 0, case.manifest.spec)
    now = datetime.now(UTC)
    return {
        str(instant(info.logical_date))
        for info in compiled.timetable.runs_between(case.backfill.start, case.backfill.end)
        if info.data_interval_end <= now
    }


def _reset(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)


def _stop(procs: list[subprocess.Popen[bytes]], grace: float = 20.0) -> None:
    """SIGTERM each process's group (the process and what it started), SIGKILL it if it
    has not exited within `grace`."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError):  # a task process left behind
            os.killpg(proc.pid, signal.SIGKILL)
