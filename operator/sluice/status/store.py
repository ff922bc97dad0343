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

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from sluice.db.models import (
    Dag,
    DagRun,
    RunPublication,
    StatusOutbox,
    StatusSink,
    TaskInstance,
)
from sluice.status.render import RunView, TaskView

_TAKE = text(
    """
    UPDATE status_outbox SET not_before = :lease_end, attempts = attempts + 1
     WHERE id IN (SELECT id FROM status_outbox WHERE not_before <= :now
                  ORDER BY not_before, id LIMIT :limit FOR UPDATE SKIP LOCKED)
    RETURNING id, dag_run_id, attempts
    """
)


@dataclass(frozen=True)
class Taken:
    """The outbox rows of one run taken in one cycle (several changes, one publication)."""

    dag_run_id: int
    row_ids: list[int]
    attempts: int


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


def enable(session: Session) -> None:
    """From now on the triggers fill the status outbox (idempotent)."""
    session.execute(insert(StatusSink).values(id=1).on_conflict_do_nothing())


def take(session: Session, now: datetime, *, limit: int, lease: float) -> list[Taken]:
    rows = session.execute(
        _TAKE, {"now": now, "lease_end": now + timedelta(seconds=lease), "limit": limit}
    ).all()
    by_run: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row_id, run_id, attempts in rows:
        by_run[run_id].append((row_id, attempts))
    return [
        Taken(run_id, sorted(i for i, _ in items), max(a for _, a in items))
        for run_id, items in sorted(by_run.items())
    ]


def enqueue(session: Session, run_ids: Iterable[int]) -> None:
    ids = sorted(set(run_ids))
    if ids:
        session.execute(insert(StatusOutbox), [{"dag_run_id": i} for i in ids])


def release(session: Session, row_ids: Sequence[int], not_before: datetime) -> None:
    """Give taken rows back, to be taken again from `not_before` on."""
    if row_ids:
        session.execute(
            update(StatusOutbox)
            .where(StatusOutbox.id.in_(row_ids))
            .values(not_before=not_before)
            .execution_options(synchronize_session=False)
        )


def done(session: Session, row_ids: Sequence[int]) -> None:
    if row_ids:
        session.execute(
            delete(StatusOutbox)
            .where(StatusOutbox.id.in_(row_ids))
            .execution_options(synchronize_session=False)
        )


def read_runs(
    session: Session, run_ids: Sequence[int], default_namespace: str | None
) -> dict[int, RunView]:
    """The runs as they are now (a run whose DAG has no namespace goes to the default one;
    without a default it is not published)."""
    if not run_ids:
        return {}
    runs = session.execute(
        select(DagRun, Dag.namespace)
        .join(Dag, Dag.dag_id == DagRun.dag_id)
        .where(DagRun.id.in_(run_ids))
    ).all()
    tasks: dict[int, list[TaskView]] = defaultdict(list)
    for ti in session.execute(
        select(
            TaskInstance.dag_run_id,
            TaskInstance.task_id,
            TaskInstance.state,
            TaskInstance.try_number,
            TaskInstance.external_id,
            TaskInstance.reason,
            TaskInstance.start_date,
            TaskInstance.end_date,
        ).where(TaskInstance.dag_run_id.in_([run.id for run, _ in runs]))
    ):
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
    for run, namespace in runs:
        where = namespace or default_namespace
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
            tasks=tasks[run.id],
        )
    return out


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
        )
        for row in session.execute(
            select(RunPublication).where(RunPublication.dag_run_id.in_(run_ids))
        ).scalars()
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
    statement = (
        insert(RunPublication)
        .values(dag_run_id=run_id, **values)
        .on_conflict_do_update(
            index_elements=[RunPublication.dag_run_id],
            set_=values,
            where=RunPublication.resource_version.is_not_distinct_from(expected_version),
        )
        .returning(RunPublication.dag_run_id)
    )
    return session.execute(statement).first() is not None


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
