"""Phase 1 of the loop: create the runs the timetables call for, and start queued runs.

Runs are created `queued` and promoted to `running` only while their DAG (or
their backfill) is under its `maxActiveRuns`. DAG rows are taken with
`FOR UPDATE SKIP LOCKED`, so replicas share the work without waiting on one
another, and the unique keys on (dag, run_id) and (dag, logical date, run type)
make a duplicate run impossible even if two replicas disagree (invariant 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, set_next_run
from sluice.db.models import Backfill, Dag, DagRun, TaskInstance
from sluice.spec.compiled import CompiledDag
from sluice.spec.states import ACTIVE_RUN_STATES, RunState, RunType, TaskState
from sluice.spec.timetables import RunInfo


def run_id_for(run_type: RunType, logical_date: datetime) -> str:
    return f"{run_type.value}__{logical_date.isoformat()}"


@dataclass(frozen=True)
class NewRun:
    id: int
    run_id: str


def insert_run(
    session: Session,
    compiled: CompiledDag,
    *,
    run_type: RunType,
    info: RunInfo,
    now: datetime,
    run_id: str | None = None,
    conf: dict[str, Any] | None = None,
    backfill_id: int | None = None,
) -> NewRun | None:
    """Create a queued run and its task instances; None if it already exists."""
    run_id = run_id or run_id_for(run_type, info.logical_date)
    stmt = (
        pg_insert(DagRun)
        .values(
            dag_id=compiled.dag_id,
            run_id=run_id,
            run_type=run_type,
            state=RunState.QUEUED,
            dag_version_id=compiled.version_id,
            backfill_id=backfill_id,
            logical_date=info.logical_date,
            data_interval_start=info.data_interval_start,
            data_interval_end=info.data_interval_end,
            conf=conf or {},
            created_at=now,
            tasks_total=len(compiled.tasks),
            tasks_done=0,
        )
        .on_conflict_do_nothing()
        .returning(DagRun.id)
    )
    new_id = session.execute(stmt).scalar_one_or_none()
    if new_id is None:
        return None
    session.execute(insert(TaskInstance), task_instance_rows(compiled, new_id, info.logical_date))
    return NewRun(new_id, run_id)


def task_instance_rows(
    compiled: CompiledDag, dag_run_id: int, logical_date: datetime
) -> list[dict[str, Any]]:
    weights = compiled.priority_weights
    rows = []
    for name in compiled.order:
        task = compiled.tasks[name]
        rows.append(
            {
                "dag_run_id": dag_run_id,
                "dag_id": compiled.dag_id,
                "task_id": name,
                "state": TaskState.NONE,
                "try_number": 0,
                "max_tries": task.retries,
                "logical_date": logical_date,
                "priority_weight": weights[name],
                "pool": task.pool,
                "pool_slots": task.pool_slots,
                "trigger_rule": task.trigger_rule.value,
                "upstream_task_ids": sorted(task.depends_on),
                "downstream_task_ids": compiled.downstream[name],
                "upstream_states": {},
                "n_success": 0,
                "n_failed": 0,
                "n_skipped": 0,
                "n_upstream_failed": 0,
                # Roots are ready to be looked at; the rest wait for their counters to move.
                "needs_eval": not task.depends_on,
                "depends_on_past": task.depends_on_past or task.wait_for_downstream,
                "wait_for_downstream": task.wait_for_downstream,
            }
        )
    return rows


def _active_runs(dag_id_column: Any, *, backfill: bool) -> Any:
    """Correlated count of a DAG's queued and running runs (of one kind)."""
    kind = DagRun.backfill_id.is_not(None) if backfill else DagRun.backfill_id.is_(None)
    return (
        select(func.count())
        .where(DagRun.dag_id == dag_id_column, DagRun.state.in_(ACTIVE_RUN_STATES), kind)
        .scalar_subquery()
    )


def create_due_runs(session: Session, specs: SpecCache, now: datetime, limit: int) -> int:
    """Create up to `limit` scheduled runs whose data interval has ended."""
    dags = (
        session.execute(
            select(Dag)
            .where(
                Dag.is_active,
                Dag.is_paused.is_(False),
                Dag.next_run_after <= now,
                _active_runs(Dag.dag_id, backfill=False) < Dag.max_active_runs,
            )
            .order_by(Dag.next_run_after, Dag.dag_id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        .scalars()
        .all()
    )
    created = 0
    for dag in dags:
        if created >= limit or dag.current_version_id is None:
            break
        compiled = specs.get(session, dag.current_version_id)
        created += _create_runs_for_dag(session, dag, compiled, now, limit - created)
    return created


def _create_runs_for_dag(
    session: Session, dag: Dag, compiled: CompiledDag, now: datetime, budget: int
) -> int:
    spec = compiled.spec
    active = session.execute(
        select(func.count()).where(
            DagRun.dag_id == dag.dag_id,
            DagRun.state.in_(ACTIVE_RUN_STATES),
            DagRun.backfill_id.is_(None),
        )
    ).scalar_one()
    room = min(budget, dag.max_active_runs - active)
    created = 0
    info = _stored_next_run(dag)
    while info is not None and info.run_after <= now and created < room:
        if not spec.catchup:
            # A DAG unpaused after a long pause starts from the latest interval, not the stored one.
            info = compiled.timetable.skip_to_latest(info, now=now)
        if insert_run(session, compiled, run_type=RunType.SCHEDULED, info=info, now=now):
            created += 1
        info = compiled.timetable.next_run(
            info,
            now=now,
            catchup=spec.catchup,
            start_date=spec.start_date,
            end_date=spec.end_date,
        )
    set_next_run(dag, info)
    return created


def _stored_next_run(dag: Dag) -> RunInfo | None:
    if dag.next_logical_date is None:
        return None
    assert dag.next_data_interval_start is not None
    assert dag.next_data_interval_end is not None
    assert dag.next_run_after is not None
    return RunInfo(
        dag.next_logical_date,
        dag.next_data_interval_start,
        dag.next_data_interval_end,
        dag.next_run_after,
    )


def start_queued_runs(session: Session, now: datetime, limit: int) -> int:
    """Promote queued runs to running, oldest logical date first, within maxActiveRuns.

    The DAG row is locked first (SKIP LOCKED) so two replicas never both count
    the same DAG's running runs and overshoot its limit.
    """
    dag_ids = (
        session.execute(
            select(Dag.dag_id)
            .where(
                Dag.is_paused.is_(False),
                select(DagRun.id)
                .where(DagRun.dag_id == Dag.dag_id, DagRun.state == RunState.QUEUED)
                .exists(),
            )
            .order_by(Dag.dag_id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        .scalars()
        .all()
    )
    if not dag_ids:
        return 0
    # Each active run's rank among its DAG's (or backfill's) active runs, and that group's limit.
    group = func.coalesce(DagRun.backfill_id, 0)
    ranked = (
        select(
            DagRun.id,
            DagRun.state,
            func.row_number()
            .over(
                partition_by=(DagRun.dag_id, group),
                order_by=(
                    (DagRun.state == RunState.RUNNING).desc(),
                    DagRun.logical_date,
                    DagRun.id,
                ),
            )
            .label("rank"),
            func.coalesce(Backfill.max_active_runs, Dag.max_active_runs).label("cap"),
        )
        .join(Dag, Dag.dag_id == DagRun.dag_id)
        .outerjoin(Backfill, Backfill.id == DagRun.backfill_id)
        .where(DagRun.dag_id.in_(dag_ids), DagRun.state.in_(ACTIVE_RUN_STATES))
        .subquery()
    )
    to_start = (
        select(ranked.c.id)
        .where(ranked.c.state == RunState.QUEUED, ranked.c.rank <= ranked.c.cap)
        .scalar_subquery()
    )
    result = session.execute(
        update(DagRun)
        .where(and_(DagRun.id.in_(to_start), DagRun.state == RunState.QUEUED))
        .values(state=RunState.RUNNING, start_date=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
