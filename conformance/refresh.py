"""`make conformance-refresh`: regenerate `expected/` from a real Airflow.

Installs Airflow 2.10.5 into the benchmark's venv unless it is there
(`bench.airflow_side.ensure_airflow`: uv, pinned, under ~/.cache/sluice), writes
each case's Airflow DAG to `airflow_dags/`, and runs `airflow_observer.py` with
that venv's Python, all cases in one process, in an AIRFLOW_HOME of its own. The
schedule area needs no database or scheduler process: Airflow's scheduling code
is called in-process (see `airflow_observer`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.airflow_side import VENV, ensure_airflow
from bench.common import CACHE

from conformance import airflow_dags, records
from conformance.cases import Case

OBSERVER = Path(__file__).resolve().parent / "airflow_observer.py"
HOME = CACHE / "airflow-conformance-home"
LOG = CACHE / "logs" / "conformance-airflow-install.log"


def observer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(HOME),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DEFAULT_TIMEZONE": "utc",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "PYTHONDONTWRITEBYTECODE": "1",
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


def observe(selected: Sequence[Case], dag_files: dict[str, Path]) -> dict[str, object]:
    """Airflow's observations of every case, from one run of the observer."""
    HOME.mkdir(parents=True, exist_ok=True)
    job = {
        "cases": [
            {
                "name": case.name,
                "dag_file": str(dag_files[case.name]),
                "now": case.now.isoformat(),
                "manual_runs": [when.isoformat() for when in case.manual_runs],
            }
            for case in selected
        ]
    }
    with tempfile.TemporaryDirectory(prefix="sluice-conformance-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job))
        result = subprocess.run(
            [str(VENV / "bin" / "python"), str(OBSERVER), str(job_path), str(out_path)],
            env=observer_env(),
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode:
            raise RuntimeError(f"the Airflow observer exited {result.returncode}:\n{result.stderr}")
        observed: dict[str, object] = json.loads(out_path.read_text())
    return observed


def refresh(selected: Sequence[Case]) -> list[Path]:
    ensure_airflow(LOG)
    dag_files = write_dags(selected)
    observed = observe(selected, dag_files)
    recorded_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    airflow = {
        "version": str(observed["airflow_version"]),
        "python": str(observed["python"]),
        "recorded_at": recorded_at,
    }
    api = dict(observed["api"])  # type: ignore[call-overload]
    by_case = observed["cases"]
    assert isinstance(by_case, dict)
    return [
        records.save(records.Record(case.name, case.digest, airflow, api, by_case[case.name]), case)
        for case in selected
    ]
