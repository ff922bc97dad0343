"""Airflow's recorded observations: `expected/<case>.json`, one entry per Airflow version.

Each entry says which Airflow produced it (version, Python, when), which of its
APIs made each observation, and a sha256 of the case it was made from (its DAG
and scenario, `Case.digest`): a case edited since is reported stale instead of
compared. `make conformance`
expects an entry for every version in AIRFLOW_VERSIONS.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conformance.airflow_dags import file_name, source
from conformance.cases import ROOT, Case

EXPECTED = ROOT / "expected"
AIRFLOW_DAGS = ROOT / "airflow_dags"
AIRFLOW_VERSIONS = ("2.10.5", "3.3.2")


@dataclass(frozen=True)
class Record:
    version: str
    python: str
    recorded_at: str
    case_sha256: str
    api: dict[str, str]
    observations: dict[str, Any]

    @property
    def label(self) -> str:
        return f"Airflow {self.version} (recorded {self.recorded_at[:10]})"


def path_for(case: Case, root: Path = EXPECTED) -> Path:
    return root / f"{case.name}.json"


def load(case: Case, root: Path = EXPECTED) -> dict[str, Record]:
    """The case's records by Airflow version ({} if it was never recorded)."""
    path = path_for(case, root)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {version: Record(version=version, **entry) for version, entry in data["airflow"].items()}


def save(record: Record, case: Case, root: Path = EXPECTED) -> Path:
    """Write `record` into the case's file, beside the other versions' records."""
    path = path_for(case, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = {version: _entry(kept) for version, kept in load(case, root).items()}
    entries[record.version] = _entry(record)
    data = {"case": case.name, "case_file": case.relative_path, "airflow": entries}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _entry(record: Record) -> dict[str, Any]:
    entry = asdict(record)
    del entry["version"]
    return entry


def staleness(case: Case, record: Record, dags: Path = AIRFLOW_DAGS) -> str | None:
    """Why the record no longer fits the case (edited case, regenerated DAG), or None."""
    if record.case_sha256 != case.digest:
        return f"{case.relative_path} changed since Airflow {record.version} ran it"
    committed = dags / file_name(case)
    if not committed.exists() or committed.read_text() != source(case):
        shown = (
            committed.relative_to(ROOT.parent)
            if committed.is_relative_to(ROOT.parent)
            else committed
        )
        return f"the generated Airflow DAG differs from {shown}"
    return None
