"""DAG manifests into the database: new immutable versions, and when the next run is due.

`sync_dag` is what `sluice standalone` does for each file and what the kopf
handlers do for each DAG object. It never touches runs already created: they
keep the version they started with. A version's spec is stored with the schema
version of its shape and read back through `sluice.spec.upgrades`, so versions
stored by an older release stay loadable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from sluice.db.models import Dag, DagRun, DagVersion
from sluice.spec import names, upgrades, validation
from sluice.spec.compiled import CompiledDag
from sluice.spec.errors import SpecIssue
from sluice.spec.models import DagManifest, DagSpec, spec_hash
from sluice.spec.states import RunType
from sluice.spec.timetables import RunInfo


@dataclass(frozen=True)
class SyncResult:
    dag_id: str
    version_id: int
    new_version: bool


class DagNameTaken(ValueError):
    """The manifest's DAG name belongs to another namespace's active DAG."""

    def __init__(self, issue: SpecIssue) -> None:
        self.issue = issue
        super().__init__(str(issue))


def sync_dag(session: Session, manifest: DagManifest, now: datetime) -> SyncResult:
    """Store `manifest` as the DAG's current version; recompute its next run.

    Raises DagNameTaken, changing nothing, if another namespace owns the name
    (`names.ownership_problem`; the row is locked first, so two writers cannot
    both pass). The manifest's `paused` sets the DAG's pause when the DAG is
    created (or comes back after its object was deleted) and when its value
    differs from the last sync's; otherwise a pause or unpause made at runtime
    stands (ADR 0011).
    """
    spec = manifest.spec
    dag_id = manifest.metadata.name
    namespace = manifest.metadata.namespace
    session.execute(insert(Dag).values(dag_id=dag_id).on_conflict_do_nothing())
    dag = session.execute(select(Dag).where(Dag.dag_id == dag_id).with_for_update()).scalar_one()
    # A row just inserted has no version yet: it is new, and nobody owns it.
    created = dag.current_version_id is None or not dag.is_active
    problem = names.ownership_problem(
        dag_id, namespace, owner_namespace=dag.namespace, owner_active=not created
    )
    if problem is not None:
        raise DagNameTaken(problem)

    digest = spec_hash(spec)
    version_id = session.execute(
        select(DagVersion.id).where(DagVersion.dag_id == dag_id, DagVersion.spec_hash == digest)
    ).scalar_one_or_none()
    if version_id is None:
        version_id = _current_if_same(session, dag, digest)
    elif dag.broken_reason is not None:
        _repair_if_unloadable(session, version_id, spec)
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
            spec_schema_version=upgrades.SPEC_SCHEMA_VERSION,
        )
        session.add(version)
        session.flush()
        version_id = version.id

    if created or spec.paused != dag.manifest_paused:
        dag.is_paused = spec.paused
    dag.manifest_paused = spec.paused
    dag.namespace = namespace
    dag.current_version_id = version_id
    dag.is_active = True
    dag.schedule = spec.schedule
    dag.timezone = spec.timezone
    dag.catchup = spec.catchup
    dag.max_active_runs = spec.max_active_runs
    dag.max_active_tasks = spec.max_active_tasks
    dag.broken_reason = None  # the current version now loads: new, or checked above
    dag.broken_at = None
    dag.updated_at = now
    compiled = CompiledDag(dag_id, version_id, spec)
    set_next_run(dag, next_scheduled_run(session, compiled, now))
    session.flush()
    return SyncResult(dag_id, version_id, new_version)


def _current_if_same(session: Session, dag: Dag, digest: str) -> int | None:
    """The DAG's current version if it holds this spec in an older schema's shape.

    A new schema version changes a spec's dump, so its hash: without this, the
    first sync after an upgrade would store every unchanged DAG as a new version.
    """
    row = session.execute(
        select(DagVersion.spec, DagVersion.spec_schema_version).where(
            DagVersion.id == dag.current_version_id,
            DagVersion.spec_schema_version < upgrades.SPEC_SCHEMA_VERSION,
        )
    ).one_or_none()
    if row is None:
        return None
    try:
        current = spec_from_json(row.spec, row.spec_schema_version)
    except ValueError:
        return None  # unreadable: the manifest's spec is stored as a new version
    return dag.current_version_id if spec_hash(current) == digest else None


def _repair_if_unloadable(session: Session, version_id: int, spec: DagSpec) -> None:
    """Rewrite a stored version that no longer loads from the spec that hashes to it.

    For a broken DAG applied again unchanged: the manifest hashes to the stored
    version, so it is that version, and the row is what was lost (hand-edited, or
    written by a newer release in a shape this one cannot read).
    """
    row = session.execute(
        select(DagVersion.spec, DagVersion.spec_schema_version).where(DagVersion.id == version_id)
    ).one()
    try:
        spec_from_json(row.spec, row.spec_schema_version)
    except ValueError:
        session.execute(
            update(DagVersion)
            .where(DagVersion.id == version_id)
            .values(spec=spec_to_json(spec), spec_schema_version=upgrades.SPEC_SCHEMA_VERSION)
        )


def spec_to_json(spec: DagSpec) -> dict[str, Any]:
    """The stored form of a spec, in the shape of `upgrades.SPEC_SCHEMA_VERSION`."""
    return spec.model_dump(mode="json", by_alias=True)


def spec_from_json(data: object, schema_version: int) -> DagSpec:
    """A stored spec, upgraded from the shape it was written in, then validated.

    Raises ValueError: `upgrades.SpecSchemaError` for a schema version this release
    cannot read, pydantic's ValidationError for a spec the model rejects.
    """
    return DagSpec.model_validate(upgrades.upgrade_spec(data, schema_version))


class StoredSpecError(ValueError):
    """A stored DAG version that cannot be loaded: which one, why, and the fix."""


_ISSUES_SHOWN = 5


def load_stored_spec(
    dag_id: str, version_id: int, number: int, data: object, schema_version: int
) -> DagSpec:
    """`spec_from_json`, with any failure as a StoredSpecError that names the version."""
    try:
        return spec_from_json(data, schema_version)
    except ValidationError as exc:
        problem = _validation_problem(exc)
    except upgrades.SpecSchemaError as exc:
        problem = str(exc)
    raise StoredSpecError(
        f"DAG {dag_id!r} version {number} (dag_version.id {version_id}) cannot be loaded: {problem}"
    )


def _validation_problem(exc: ValidationError) -> str:
    issues = validation.translate_errors(exc.errors(), model=DagSpec)
    shown = "; ".join(
        f"spec.{issue.path}: {issue.message}" if issue.path else f"spec: {issue.message}"
        for issue in issues[:_ISSUES_SHOWN]
    )
    if len(issues) > _ISSUES_SHOWN:
        shown += f" (and {len(issues) - _ISSUES_SHOWN} more)"
    return f"{shown}; apply the DAG's manifest again to store a valid version"


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
    return compiled.next_run(latest_scheduled_run(session, compiled.dag_id), now)


def set_next_run(dag: Dag, info: RunInfo | None) -> None:
    dag.next_logical_date = info.logical_date if info else None
    dag.next_data_interval_start = info.data_interval_start if info else None
    dag.next_data_interval_end = info.data_interval_end if info else None
    dag.next_run_after = info.run_after if info else None


def set_paused(session: Session, dag_id: str, paused: bool) -> bool:
    """Pause or unpause at runtime (`sluice dags pause`); False if there is no such DAG.

    Syncing the same manifest again does not undo it; a change of the manifest's
    `paused` does (ADR 0011).
    """
    result = session.execute(update(Dag).where(Dag.dag_id == dag_id).values(is_paused=paused))
    return bool(result.rowcount)  # type: ignore[attr-defined]


_STORED = select(
    DagVersion.id,
    DagVersion.dag_id,
    DagVersion.version_number,
    DagVersion.spec,
    DagVersion.spec_schema_version,
)


class SpecCache:
    """Compiled DAG versions by id; versions are immutable, so entries never go stale."""

    def __init__(self) -> None:
        self._by_version: dict[int, CompiledDag] = {}

    def get(self, session: Session, version_id: int) -> CompiledDag:
        """The compiled version; raises StoredSpecError if it is missing or cannot be loaded."""
        compiled = self._by_version.get(version_id)
        if compiled is None:
            row = session.execute(_STORED.where(DagVersion.id == version_id)).one_or_none()
            if row is None:
                raise StoredSpecError(
                    f"dag_version.id {version_id} does not exist; apply the DAG's manifest "
                    "again to store a version"
                )
            spec = load_stored_spec(
                row.dag_id, version_id, row.version_number, row.spec, row.spec_schema_version
            )
            compiled = CompiledDag(row.dag_id, version_id, spec)
            self._by_version[version_id] = compiled
        return compiled

    def preload(self, session: Session, version_ids: Iterable[int | None]) -> None:
        """Load the versions not cached yet in one query; one that does not load is left
        out (its `get` raises, for its caller to isolate)."""
        missing = sorted({v for v in version_ids if v is not None and v not in self._by_version})
        if not missing:
            return
        for row in session.execute(_STORED.where(DagVersion.id.in_(missing))):
            with contextlib.suppress(ValueError):
                spec = spec_from_json(row.spec, row.spec_schema_version)
                self._by_version[row.id] = CompiledDag(row.dag_id, row.id, spec)

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
