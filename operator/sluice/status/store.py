"""The status publisher's database side: take changed runs, read them, record publications.

Rows of `status_outbox` are written by triggers in the transaction of the
change (migration 0008). A publisher takes ready rows with `FOR UPDATE SKIP
LOCKED` and leases them (`not_before` moves past the lease) rather than
deleting them: they are deleted only once the run is published, so a replica
that dies mid-way loses nothing, its rows come back when the lease ends. A
row written while a run is being published is not among the taken ones and
publishes the run again.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, Text, bindparam, func, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from sluice.db.models import (
    Backfill,
    Dag,
    DagRun,
    ObjectPublication,
    RunPublication,
    SlotPool,
    StatusOutbox,
    StatusSink,
    TaskInstance,
)
from sluice.spec.states import ACTIVE_RUN_STATES
from sluice.status.render import BackfillView, DagView, RunView, TaskView

_TAKE = text(
    """
    UPDATE status_outbox SET not_before = :lease_end, attempts = attempts + 1
     WHERE id IN (SELECT id FROM status_outbox WHERE not_before <= :now
                  ORDER BY not_before, id LIMIT :limit FOR UPDATE SKIP LOCKED)
    RETURNING id, kind, COALESCE(CAST(dag_run_id AS text), key), attempts
    """
)

RUN, DAG, BACKFILL = "run", "dag", "backfill"


@dataclass(frozen=True)
class Taken:
    """The outbox rows of one object taken in one cycle (several changes, one publication)."""

    kind: str  # run, dag or backfill
    key: str  # the run's id, the DAG's id, the backfill's id
    row_ids: list[int]
    attempts: int

    @property
    def dag_run_id(self) -> int:
        return int(self.key)


@dataclass(frozen=True)
class Publication:
    namespace: str
    object_name: str
    uid: str | None
    resource_version: str | None
    generation: int | None
    published_at: datetime | None
    summary: dict[str, Any] | None
    gone: bool
    dag_id: str | None = None  # recorded since migration 0014


def enable(session: Session) -> None:
    """From now on the triggers fill the status outbox (idempotent)."""
    session.execute(insert(StatusSink).values(id=1).on_conflict_do_nothing())


def take(session: Session, now: datetime, *, limit: int, lease: float) -> list[Taken]:
    rows = session.execute(
        _TAKE, {"now": now, "lease_end": now + timedelta(seconds=lease), "limit": limit}
    ).all()
    by_object: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for row_id, kind, key, attempts in rows:
        if key is not None:
            by_object[(kind, key)].append((row_id, attempts))
    return [
        Taken(kind, key, sorted(i for i, _ in items), max(a for _, a in items))
        for (kind, key), items in sorted(by_object.items())
    ]


def enqueue(session: Session, run_ids: Iterable[int]) -> None:
    ids = sorted(set(run_ids))
    if ids:
        session.execute(insert(StatusOutbox), [{"dag_run_id": i} for i in ids])


_RELEASE = text(
    """
    UPDATE status_outbox o SET not_before = v.not_before
      FROM unnest(CAST(:ids AS bigint[]), CAST(:times AS timestamptz[])) AS v(id, not_before)
     WHERE o.id = v.id
    """
)


def release_each(session: Session, releases: Sequence[tuple[Sequence[int], datetime]]) -> None:
    """Give taken rows back, each object's to be taken again from its own time on (one
    statement for them all)."""
    pairs = [(row_id, when) for row_ids, when in releases for row_id in row_ids]
    if pairs:
        session.execute(
            _RELEASE, {"ids": [i for i, _ in pairs], "times": [when for _, when in pairs]}
        )


_DONE = text("DELETE FROM status_outbox WHERE id = ANY(CAST(:ids AS bigint[]))")


def done(session: Session, row_ids: Sequence[int]) -> None:
    if row_ids:
        session.execute(_DONE, {"ids": list(row_ids)})


def read_runs(
    session: Session, run_ids: Sequence[int], default_namespace: str | None
) -> dict[int, RunView]:
    """The runs as they are now (a run whose DAG has no namespace goes to the default one;
    without a default it is not published)."""
    if not run_ids:
        return {}
    runs = session.execute(_READ_RUNS, {"ids": list(run_ids)}).all()
    tasks: dict[int, list[TaskView]] = defaultdict(list)
    for ti in session.execute(_READ_TASKS, {"ids": [run.id for run in runs]}):
        tasks[ti.dag_run_id].append(
            TaskView(
                ti.task_id,
                ti.state,
                ti.try_number,
                ti.external_id,
                ti.reason,
                ti.start_date,
                ti.end_date,
            )
        )
    out = {}
    for run in runs:
        where = run.namespace or default_namespace
        if where is None:
            continue
        out[run.id] = RunView(
            id=run.id,
            dag_id=run.dag_id,
            namespace=where,
            run_id=run.run_id,
            run_type=run.run_type,
            state=run.state,
            logical_date=run.logical_date,
            data_interval_start=run.data_interval_start,
            data_interval_end=run.data_interval_end,
            created_at=run.created_at,
            start_date=run.start_date,
            end_date=run.end_date,
            tasks_total=run.tasks_total,
            tasks_done=run.tasks_done,
            object_name=run.object_name,
            object_uid=run.object_uid,
            tasks=tasks[run.id],
        )
    return out


# What a run's view needs, as columns (rows, not ORM objects: nothing here is written).
_RUN_COLUMNS = (
    DagRun.id,
    DagRun.dag_id,
    DagRun.run_id,
    DagRun.run_type,
    DagRun.state,
    DagRun.logical_date,
    DagRun.data_interval_start,
    DagRun.data_interval_end,
    DagRun.created_at,
    DagRun.start_date,
    DagRun.end_date,
    DagRun.tasks_total,
    DagRun.tasks_done,
    DagRun.object_name,
    DagRun.object_uid,
)
# Built once (a run's every change reads them): each call only binds the ids.
_READ_RUNS = (
    select(*_RUN_COLUMNS, Dag.namespace)
    .join(Dag, Dag.dag_id == DagRun.dag_id)
    .where(DagRun.id.in_(bindparam("ids", expanding=True)))
)
_READ_TASKS = select(
    TaskInstance.dag_run_id,
    TaskInstance.task_id,
    TaskInstance.state,
    TaskInstance.try_number,
    TaskInstance.external_id,
    TaskInstance.reason,
    TaskInstance.start_date,
    TaskInstance.end_date,
).where(TaskInstance.dag_run_id.in_(bindparam("ids", expanding=True)))
_READ_PUBLICATIONS = select(
    RunPublication.dag_run_id,
    RunPublication.namespace,
    RunPublication.object_name,
    RunPublication.uid,
    RunPublication.resource_version,
    RunPublication.generation,
    RunPublication.published_at,
    RunPublication.summary,
    RunPublication.gone,
    RunPublication.dag_id,
).where(RunPublication.dag_run_id.in_(bindparam("ids", expanding=True)))


def read_publications(session: Session, run_ids: Sequence[int]) -> dict[int, Publication]:
    if not run_ids:
        return {}
    return {
        row.dag_run_id: Publication(
            row.namespace,
            row.object_name,
            row.uid,
            row.resource_version,
            row.generation,
            row.published_at,
            row.summary,
            row.gone,
            row.dag_id,
        )
        for row in session.execute(_READ_PUBLICATIONS, {"ids": list(run_ids)})
    }


def record(
    session: Session,
    run_id: int,
    *,
    expected_version: str | None,
    values: dict[str, Any],
) -> bool:
    """Record what was published, unless another replica recorded a newer publication
    first (compare-and-set on the resourceVersion this one started from)."""
    return _record(session, RunPublication, {"dag_run_id": run_id}, expected_version, values)


def _record(
    session: Session,
    model: type[RunPublication] | type[ObjectPublication],
    key: dict[str, Any],
    expected_version: str | None,
    values: dict[str, Any],
) -> bool:
    """Insert the publication, or update it only if it is still at `expected_version`."""
    statement = _upsert(model.__table__, tuple(key), tuple(values))
    params = {**key, **values, "expected_version": expected_version}
    return session.execute(statement, params).first() is not None


@functools.cache
def _upsert(table: Table, key: tuple[str, ...], values: tuple[str, ...]) -> Any:
    """The upsert of one shape of publication (which columns it sets), built once: a
    publication's columns come in a few shapes, and building the statement every time
    cost more than running it."""
    insert_ = insert(table).values(
        {name: bindparam(name, type_=table.c[name].type) for name in (*key, *values)}
    )
    return insert_.on_conflict_do_update(
        index_elements=[table.c[name] for name in key],
        set_={name: insert_.excluded[name] for name in values},
        where=table.c.resource_version.is_not_distinct_from(
            bindparam("expected_version", type_=Text())
        ),
    ).returning(table.c[key[0]])


def resync(session: Session, now: datetime, *, horizon: timedelta) -> int:
    """Enqueue every run whose object may not show the database's state: active runs and
    runs ended within `horizon` never published, and any whose last publication shows
    another state. Returns how many were enqueued."""
    statement = text(
        """
        INSERT INTO status_outbox (dag_run_id)
        SELECT r.id FROM dag_run r LEFT JOIN run_publication p ON p.dag_run_id = r.id
         WHERE (p.dag_run_id IS NULL
                AND (r.state IN ('queued', 'running') OR r.end_date >= :since))
            OR (p.dag_run_id IS NOT NULL AND NOT p.gone AND p.state IS DISTINCT FROM r.state)
        """
    )
    result = session.execute(statement, {"since": now - horizon})
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def published_recently(session: Session, since: datetime) -> list[tuple[int, str, str, str]]:
    """(run id, namespace, object name, the run's state now) of the runs published to an
    object that still exists, active or ended since `since`: what a start-up comparison
    with the API server looks at."""
    rows = session.execute(
        select(
            DagRun.id,
            RunPublication.namespace,
            RunPublication.object_name,
            DagRun.state,
        )
        .join(RunPublication, RunPublication.dag_run_id == DagRun.id)
        .where(
            ~RunPublication.gone,
            DagRun.state.in_(("queued", "running")) | (DagRun.end_date >= since),
        )
    ).all()
    return [(row[0], row[1], row[2], row[3]) for row in rows]


_READ_DAGS = text(
    """
    SELECT d.dag_id, d.namespace, v.version_number, d.is_paused, d.is_active,
           d.next_logical_date, d.broken_reason, a.active,
           l.run_id, l.state, l.logical_date, l.end_date
      FROM dag d
      LEFT JOIN dag_version v ON v.id = d.current_version_id
      CROSS JOIN LATERAL (
            SELECT count(*) AS active FROM dag_run r
             WHERE r.dag_id = d.dag_id AND r.state = ANY(CAST(:active_states AS text[]))
           ) a
      LEFT JOIN LATERAL (
            SELECT r.run_id, r.state, r.logical_date, r.end_date FROM dag_run r
             WHERE r.dag_id = d.dag_id
             ORDER BY r.logical_date DESC, r.id DESC
             LIMIT 1
           ) l ON true
     WHERE d.dag_id = ANY(CAST(:ids AS text[])) AND d.namespace IS NOT NULL
    """
)


def read_dags(session: Session, dag_ids: Sequence[str]) -> dict[str, DagView]:
    """The DAGs that have an object (a namespace), with their active and latest runs (one
    statement: a run's every change publishes its DAG's object too)."""
    if not dag_ids:
        return {}
    rows = session.execute(
        _READ_DAGS,
        {"ids": list(dag_ids), "active_states": sorted(str(s) for s in ACTIVE_RUN_STATES)},
    ).all()
    return {
        row.dag_id: DagView(
            dag_id=row.dag_id,
            namespace=str(row.namespace),
            version=row.version_number,
            paused=row.is_paused,
            active=row.is_active,
            active_runs=int(row.active),
            next_logical_date=row.next_logical_date,
            broken_reason=row.broken_reason,
            last_run_id=row.run_id,
            last_run_state=row.state,
            last_run_logical_date=row.logical_date,
            last_run_ended_at=row.end_date,
        )
        for row in rows
    }


def read_backfills(session: Session, ids: Sequence[str]) -> dict[str, BackfillView]:
    """The backfills a Backfill object made, with their runs counted by state."""
    numbers = [int(i) for i in ids if i.isdigit()]
    if not numbers:
        return {}
    rows = session.execute(
        select(Backfill).where(Backfill.id.in_(numbers), Backfill.object_name.is_not(None))
    ).scalars()
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for backfill_id, state, n in session.execute(
        select(DagRun.backfill_id, DagRun.state, func.count())
        .where(DagRun.backfill_id.in_(numbers))
        .group_by(DagRun.backfill_id, DagRun.state)
    ):
        if backfill_id is not None:
            counts[backfill_id][state] = int(n)
    return {
        str(b.id): BackfillView(
            id=b.id,
            dag_id=b.dag_id,
            namespace=str(b.object_namespace),
            object_name=str(b.object_name),
            runs=counts[b.id],
            object_uid=b.object_uid,
        )
        for b in rows
    }


def read_object_publications(
    session: Session, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], ObjectPublication]:
    if not keys:
        return {}
    return {
        (row.kind, row.key): row
        for row in session.execute(_READ_OBJECT_PUBLICATIONS, {"keys": list(keys)}).scalars()
    }


_READ_OBJECT_PUBLICATIONS = select(ObjectPublication).where(
    tuple_(ObjectPublication.kind, ObjectPublication.key).in_(bindparam("keys", expanding=True))
)


def record_object(
    session: Session,
    kind: str,
    key: str,
    *,
    expected_version: str | None,
    values: dict[str, Any],
) -> bool:
    """As `record`, for a DAG's, a Backfill's or a Pool's object."""
    return _record(session, ObjectPublication, {"kind": kind, "key": key}, expected_version, values)


def pools_in_use(session: Session) -> dict[str, tuple[int, int, int]]:
    """Every pool: (slots, slots of running tries, slots of queued tries)."""
    used: dict[tuple[str, str], int] = {
        (pool, state): int(n)
        for pool, state, n in session.execute(
            select(TaskInstance.pool, TaskInstance.state, func.sum(TaskInstance.pool_slots))
            .where(TaskInstance.state.in_(("running", "queued")))
            .group_by(TaskInstance.pool, TaskInstance.state)
        )
    }
    return {
        name: (slots, used.get((name, "running"), 0), used.get((name, "queued"), 0))
        for name, slots in session.execute(select(SlotPool.name, SlotPool.slots))
    }
