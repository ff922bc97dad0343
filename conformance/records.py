"""Airflow's recorded observations: `expected/<case>.json`, one file per case.

Each record says which Airflow produced it (version, Python, when), which of
Airflow's APIs made each observation, and the sha256 of the case file it was
made from: a case edited since is reported stale instead of compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.airflow_dags import file_name, source
from conformance.cases import ROOT, Case

EXPECTED = ROOT / "expected"
AIRFLOW_DAGS = ROOT / "airflow_dags"


@dataclass(frozen=True)
class Record:
    case: str
    case_sha256: str
    airflow: dict[str, str]
    api: dict[str, str]
    observations: dict[str, Any]

    @property
    def airflow_label(self) -> str:
        return f"Airflow {self.airflow['version']} (recorded {self.airflow['recorded_at'][:10]})"


def path_for(case: Case, root: Path = EXPECTED) -> Path:
    return root / f"{case.name}.json"


def load(case: Case, root: Path = EXPECTED) -> Record | None:
    path = path_for(case, root)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return Record(
        case=data["case"],
        case_sha256=data["case_sha256"],
        airflow=data["airflow"],
        api=data["api"],
        observations=data["observations"],
    )


def save(record: Record, case: Case, root: Path = EXPECTED) -> Path:
    path = path_for(case, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "case": record.case,
        "case_file": case.relative_path,
        "case_sha256": record.case_sha256,
        "airflow": record.airflow,
        "api": record.api,
        "observations": record.observations,
    }
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def staleness(case: Case, record: Record, dags: Path = AIRFLOW_DAGS) -> str | None:
    """Why the record no longer fits the case (edited case, regenerated DAG), or None."""
    if record.case_sha256 != case.digest:
        return f"{case.relative_path} changed since Airflow was observed"
    committed = dags / file_name(case)
    if not committed.exists() or committed.read_text() != source(case):
        return f"the generated Airflow DAG differs from {committed.relative_to(ROOT.parent)}"
    return None
