"""DAG manifests into the database: new immutable versions, and when the next run is due.

`sync_dag` is what `sluice standalone` does for each file and what the kopf
handlers do for each DAG object. It never touches runs already created: they
keep the version they started with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from sluice.db.models import Dag, DagRun, DagVersion
from sluice.spec.compiled import CompiledDag
from sluice.spec.models import DagManifest, DagSpec, spec_hash
from sluice.spec.states import RunType
from sluice.spec.timetables import RunInfo


@dataclass(frozen=True)
class SyncResult:
    dag_id: str
    version_id: int
    new_version: bool


def sync_dag(session: Session, manifest: DagManifest, now: datetime) -> SyncResult:
    """Store `manifest` as the DAG's current version; recompute its next run."""
    spec = manifest.spec
    dag_id = manifest.metadata.name
    session.execute(insert(Dag).values(dag_id=dag_id).on_conflict_do_nothing())
    dag = session.execute(select(Dag).where(Dag.dag_id == dag_id).with_for_update()).scalar_one()

    digest = spec_hash(spec)
    version_id = session.execute(
        select(DagVersion.id).where(DagVersion.dag_id == dag_id, DagVersion.spec_hash == digest)
    ).scalar_one_or_none()
    new_version = version_id is None
    if version_id is None:
        number = session.execute(
            select(func.coalesce(func.max(DagVersion.version_number), 0)).where(
                DagVersion.dag_id == dag_id
            )
        ).scalar_one()
        version = DagVersion(
            dag_id=dag_id,
            version_number=number + 1,
            spec_hash=digest,
            spec=spec_to_json(spec),
        )
        session.add(version)
        session.flush()
        version_id = version.id

    dag.namespace = manifest.metadata.namespace
    dag.current_version_id = version_id
    dag.is_paused = spec.paused
    dag.is_active = True
    dag.schedule = spec.schedule
    dag.timezone = spec.timezone
    dag.catchup = spec.catchup
    dag.max_active_runs = spec.max_active_runs
    dag.max_active_tasks = spec.max_active_tasks
    dag.updated_at = now
    compiled = CompiledDag(dag_id, version_id, spec)
    set_next_run(dag, next_scheduled_run(session, compiled, now))
    session.flush()
    return SyncResult(dag_id, version_id, new_version)


def spec_to_json(spec: DagSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True)


def spec_from_json(data: dict[str, Any]) -> DagSpec:
    return DagSpec.model_validate(data)


def latest_scheduled_run(session: Session, dag_id: str) -> RunInfo | None:
    row = session.execute(
        select(
            DagRun.logical_date,
            DagRun.data_interval_start,
            DagRun.data_interval_end,
        )
        .where(DagRun.dag_id == dag_id, DagRun.run_type == RunType.SCHEDULED)
        .order_by(DagRun.logical_date.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return RunInfo(row[0], row[1], row[2], row[2])


def next_scheduled_run(session: Session, compiled: CompiledDag, now: datetime) -> RunInfo | None:
    spec = compiled.spec
    return compiled.timetable.next_run(
        latest_scheduled_run(session, compiled.dag_id),
        now=now,
        catchup=spec.catchup,
        start_date=spec.start_date,
        end_date=spec.end_date,
    )


def set_next_run(dag: Dag, info: RunInfo | None) -> None:
    dag.next_logical_date = info.logical_date if info else None
    dag.next_data_interval_start = info.data_interval_start if info else None
    dag.next_data_interval_end = info.data_interval_end if info else None
    dag.next_run_after = info.run_after if info else None


def set_paused(session: Session, dag_id: str, paused: bool) -> bool:
    result = session.execute(update(Dag).where(Dag.dag_id == dag_id).values(is_paused=paused))
    return bool(result.rowcount)  # type: ignore[attr-defined]


class SpecCache:
    """Compiled DAG versions by id; versions are immutable, so entries never go stale."""

    def __init__(self) -> None:
        self._by_version: dict[int, CompiledDag] = {}

    def get(self, session: Session, version_id: int) -> CompiledDag:
        compiled = self._by_version.get(version_id)
        if compiled is None:
            row = session.execute(
                select(DagVersion.dag_id, DagVersion.spec).where(DagVersion.id == version_id)
            ).one()
            compiled = CompiledDag(row[0], version_id, spec_from_json(row[1]))
            self._by_version[version_id] = compiled
        return compiled

    def preload(self, session: Session, version_ids: Iterable[int | None]) -> None:
        """Load the versions not cached yet in one query; one that does not parse is left
        out (its `get` raises, for its caller to isolate)."""
        missing = sorted({v for v in version_ids if v is not None and v not in self._by_version})
        if not missing:
            return
        for version_id, dag_id, spec in session.execute(
            select(DagVersion.id, DagVersion.dag_id, DagVersion.spec).where(
                DagVersion.id.in_(missing)
            )
        ):
            with contextlib.suppress(ValueError):  # pydantic's ValidationError is a ValueError
                self._by_version[version_id] = CompiledDag(dag_id, version_id, spec_from_json(spec))

    def current(self, session: Session, dag_id: str) -> CompiledDag:
        version_id = session.execute(
            select(Dag.current_version_id).where(Dag.dag_id == dag_id)
        ).scalar_one_or_none()
        if version_id is None:
            raise LookupError(f"DAG {dag_id!r} is not registered")
        return self.get(session, version_id)


def clear_schedule(session: Session, dag_id: str) -> None:
    """Stop scheduled runs for this DAG (used by `sluice dags test`, which runs one manual run)."""
    session.execute(
        update(Dag)
        .where(Dag.dag_id == dag_id)
        .values(
            next_logical_date=None,
            next_data_interval_start=None,
            next_data_interval_end=None,
            next_run_after=None,
        )
    )
