"""`make conformance-refresh`: record again what a real Airflow decides for every case.

Installs each Airflow unless it is there (`bench.airflow_side.ensure_airflow`: uv,
pinned, under ~/.cache/sluice; 2.10.5 is the benchmark's own venv), writes each
case's Airflow DAG to `airflow_dags/`, and runs `airflow_observer.py` with that
venv's Python, all cases in one process, in an AIRFLOW_HOME of its own. The
schedule area needs no database or scheduler process: Airflow's scheduling code
is called in-process (see `airflow_observer`). The executed areas' cases are
then run to the end by Airflow's own processes on Postgres, a fresh database
each (`airflow_runs`); the observer gives their definition only.

Airflow 3 runs with `[scheduler] create_cron_data_intervals = True`: a cron
schedule then means data intervals between ticks, as in Airflow 2 and in Sluice
(Airflow 3's default, CronTriggerTimetable, runs at each tick with no interval).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.airflow_side import VENV, ensure_airflow
from bench.common import CACHE

from conformance import airflow_dags, records
from conformance.airflow_runs import API as RUNS_API
from conformance.airflow_runs import AirflowRuns
from conformance.cases import Case

OBSERVER = Path(__file__).resolve().parent / "airflow_observer.py"
LOGS = CACHE / "logs"


@dataclass(frozen=True)
class Airflow:
    """One Airflow to observe: where it is installed, how it is pinned, its settings."""

    version: str
    venv: Path
    exclude_newer: str
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return CACHE / f"airflow-conformance-home-{self.version}"


AIRFLOWS = {
    "2.10.5": Airflow("2.10.5", VENV, "2025-02-28T00:00:00Z"),
    "3.3.2": Airflow(
        "3.3.2",
        CACHE / "airflow3-venv",
        "2026-12-01T00:00:00Z",
        {"AIRFLOW__SCHEDULER__CREATE_CRON_DATA_INTERVALS": "True"},
    ),
}
assert tuple(AIRFLOWS) == records.AIRFLOW_VERSIONS


def observer_env(airflow: Airflow) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(airflow.home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DEFAULT_TIMEZONE": "utc",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow.home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "PYTHONDONTWRITEBYTECODE": "1",
            **airflow.settings,
        }
    )
    return env


def write_dags(selected: Sequence[Case], folder: Path = records.AIRFLOW_DAGS) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for case in selected:
        path = folder / airflow_dags.file_name(case)
        path.write_text(airflow_dags.source(case))
        paths[case.name] = path
    return paths


def observe(airflow: Airflow, selected: Sequence[Case], dags: dict[str, Path]) -> dict[str, Any]:
    """This Airflow's observations of every case, from one run of the observer."""
    airflow.home.mkdir(parents=True, exist_ok=True)
    job = {
        "cases": [
            {
                "name": case.name,
                "dag_file": str(dags[case.name]),
                # None for an executed case: the observer gives its definition only.
                "now": case.now.isoformat() if case.now else None,
                "manual_runs": [when.isoformat() for when in case.manual_runs],
                "last_run": [when.isoformat() for when in case.last_run or ()],
            }
            for case in selected
        ]
    }
    with tempfile.TemporaryDirectory(prefix="sluice-conformance-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job))
        result = subprocess.run(
            [str(airflow.venv / "bin" / "python"), str(OBSERVER), str(job_path), str(out_path)],
            env=observer_env(airflow),
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode:
            raise RuntimeError(f"the Airflow observer exited {result.returncode}:\n{result.stderr}")
        observed: dict[str, Any] = json.loads(out_path.read_text())
    if observed["airflow_version"] != airflow.version:
        raise RuntimeError(f"{airflow.venv} holds Airflow {observed['airflow_version']}")
    return observed


def run_executed(
    airflow: Airflow, selected: Sequence[Case], dags: dict[str, Path], jobs: int
) -> dict[str, dict[str, Any]]:
    """The executed cases' observations (`runs`, `order`), each case on Airflow's own
    processes (`airflow_runs`)."""
    executed = [case for case in selected if case.executes]
    if not executed:
        return {}
    logs = LOGS / f"conformance-runs-{airflow.version}"
    runner = AirflowRuns(airflow.version, airflow.venv, observer_env(airflow), logs)
    try:
        runner.prepare()
        return runner.observe(executed, dags, jobs)
    finally:
        runner.close()


def refresh(airflow: Airflow, selected: Sequence[Case], jobs: int = 1) -> list[Path]:
    ensure_airflow(
        LOGS / f"conformance-airflow-{airflow.version}-install.log",
        version=airflow.version,
        venv=airflow.venv,
        exclude_newer=airflow.exclude_newer,
    )
    dags = write_dags(selected)
    observed = observe(airflow, selected, dags)
    for name, executed in run_executed(airflow, selected, dags, jobs).items():
        observed["cases"][name].update(executed)
    api = {**observed["api"], **RUNS_API}
    recorded_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    paths = []
    for case in selected:
        observations = observed["cases"][case.name]
        # How a clearing case's runs were acted on, beside what was observed of them.
        named = [*observations, *(["action"] if case.action is not None else [])]
        paths.append(
            records.save(
                records.Record(
                    version=airflow.version,
                    python=observed["python"],
                    recorded_at=recorded_at,
                    case_sha256=case.digest,
                    api={key: api[key] for key in named},
                    observations=observations,
                ),
                case,
            )
        )
    return paths
