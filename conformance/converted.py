"""The suite's Airflow DAG files converted back by `sluice convert`: the converter's proof.

Each case's generated Airflow DAG (`airflow_dags/<name>.py`, the very file the
recorded Airflows ran) is converted without running it, and the converted
manifest stands in for the case's own: it is observed exactly as the case is
(in-process for the schedule area, under `sluice standalone` for the executed
ones, in their own standalone runs) and judged against the same recorded
Airflow observations, its definition included (so a field the converter read
otherwise than Airflow's DagBag did is a difference). A conversion with a gap
fails the case. `equivalence` tells, beside that, whether the converted spec
is the case's own, field by field.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from conformance import records
from conformance.airflow_dags import file_name
from conformance.cases import Case
from sluice.convert import convert_file
from sluice.spec.models import DagManifest
from sluice.spec.validation import load_dag_documents

IMAGE = "busybox:1.36"  # the cases' own image (the local executor does not read it)

_WORKDIR = tempfile.TemporaryDirectory(prefix="sluice-conformance-converted-")


class ConversionFailed(AssertionError):
    """The case's Airflow DAG did not convert cleanly; the message lists why."""


def source(case: Case, dags: Path = records.AIRFLOW_DAGS) -> Path:
    return dags / file_name(case)


def converted(case: Case, dags: Path = records.AIRFLOW_DAGS) -> Case:
    """The case with the converted manifest (written to a file of its own) as its DAG."""
    conversion = convert_file(source(case, dags), image=IMAGE)
    if conversion.gaps or len(conversion.documents) != 1:
        found = "; ".join(f.render() for f in conversion.gaps) or (
            f"{len(conversion.documents)} DAGs converted, expected 1"
        )
        raise ConversionFailed(f"{case.name}: {found}")
    (document,) = conversion.documents
    (manifest,) = load_dag_documents(document.text)
    if not isinstance(manifest, DagManifest):
        raise ConversionFailed(f"{case.name}: the converted manifest is not valid: {manifest}")
    path = Path(_WORKDIR.name) / case.area / f"{case.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document.text)
    return dataclasses.replace(case, manifest=manifest, path=path)


def equivalence(case: Case, subject: Case) -> list[str]:
    """How the converted spec differs from the case's own (`defaults` is how a spec is
    written, not what it says: each task is compared with its defaults applied)."""
    ours = _comparable(case.manifest)
    theirs = _comparable(subject.manifest)
    return [
        f"{key}: case {ours.get(key)!r}, converted {theirs.get(key)!r}"
        for key in sorted(set(ours) | set(theirs))
        if ours.get(key) != theirs.get(key)
    ]


def _comparable(manifest: DagManifest) -> dict[str, Any]:
    spec = manifest.spec.model_dump(mode="json", by_alias=True, exclude={"defaults", "tasks"})
    flat: dict[str, Any] = {"name": manifest.metadata.name, "paused": manifest.spec.paused}
    flat.update({f"spec.{key}": value for key, value in spec.items()})
    for task in manifest.spec.tasks:
        for key, value in task.model_dump(mode="json", by_alias=True).items():
            flat[f"tasks.{task.name}.{key}"] = value
    return flat
