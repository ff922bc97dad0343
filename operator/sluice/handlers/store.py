"""The database side of the handlers: small queries, each run inside the caller's transaction.

The caller (a kopf handler) opens one session per call and commits once; none
of these functions commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, literal, select, union, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from sluice.db.dags import DagNameTaken, SpecCache, sync_dag
from sluice.db.models import (
    DEFAULT_POOL,
    Backfill,
    Dag,
    DagRun,
    DagVersion,
    RunPublication,
    SlotPool,
    StatusOutbox,
    StatusSink,
    TaskAction,
    TaskInstance,
)
from sluice.handlers import ownership
from sluice.handlers.objects import (
    BackfillRequest,
    DagRunObject,
    PoolSpec,
    TaskActionRequest,
    TriggerRequest,
    run_id_for_object,
    scheduler_object_name,
)
from sluice.scheduler import clearing
from sluice.scheduler.backfill import BackfillError, BackfillPlan, create_backfill
from sluice.scheduler.endings import end_runs, mark_run
from sluice.scheduler.triggers import TriggerError, trigger_run
from sluice.spec.errors import SpecIssue
from sluice.spec.models import DagManifest
from sluice.spec.states import ACTIVE_RUN_STATES, TaskState


@dataclass(frozen=True)
class AppliedDag:
    dag_id: str
    version_number: int
    new_version: bool


def apply_dag(session: Session, manifest: DagManifest, now: datetime) -> AppliedDag | SpecIssue:
    """Store the manifest as the DAG's current version, unless another namespace owns the name
    (then the issue, and nothing changed)."""
    try:
        result = sync_dag(session, manifest, now)
    except DagNameTaken as taken:
        return taken.issue
    number = session.execute(
        select(DagVersion.version_number).where(DagVersion.id == result.version_id)
    ).scalar_one()
    return AppliedDag(result.dag_id, number, result.new_version)


@dataclass(frozen=True)
class KeptVersion:
    """The version the scheduler runs for a DAG, and why it cannot, if it is broken."""

    number: int
    broken_reason: str | None


def owned_version(session: Session, dag_id: str, namespace: str | None) -> KeptVersion | None:
    """The current version of this namespace's DAG, if any."""
    row = session.execute(
        select(DagVersion.version_number, Dag.broken_reason)
        .join(Dag, Dag.current_version_id == DagVersion.id)
        .where(Dag.dag_id == dag_id, Dag.namespace.is_not_distinct_from(namespace), Dag.is_active)
    ).one_or_none()
    return None if row is None else KeptVersion(row.version_number, row.broken_reason)


def deactivate_dag(session: Session, dag_id: str, namespace: str | None) -> bool:
    """Mark the DAG inactive (no new runs); only the owning namespace's DAG object may."""
    result = session.execute(
        update(Dag)
        .where(Dag.dag_id == dag_id, Dag.namespace.is_not_distinct_from(namespace))
        .values(is_active=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def object_verdict(session: Session, obj: DagRunObject) -> ownership.Verdict:
    """Which run this DagRun object is, from what the database recorded (never its labels);
    the run's row is locked first (one lock order: the run row, then its tasks)."""
    return ownership.decide(obj, _object_runs(session, obj))


def _object_runs(session: Session, obj: DagRunObject) -> list[ownership.RunRecord]:
    """The runs tied to the object's uid (its trigger's, or the scheduler's publication),
    and the ones its name and annotation point at (for `ownership.decide` to judge)."""
    if not obj.uid:
        return []
    found = [
        select(DagRun.id).where(DagRun.object_uid == obj.uid),
        select(RunPublication.dag_run_id).where(RunPublication.uid == obj.uid),
    ]
    if obj.dag_name is not None:
        legacy_run_id = run_id_for_object(obj.name, obj.uid)
        found.append(
            select(DagRun.id).where(
                DagRun.dag_id == obj.dag_name,
                DagRun.run_id.in_([legacy_run_id, obj.run_id_annotation or legacy_run_id]),
            )
        )
    rows = session.execute(
        select(
            DagRun.id,
            DagRun.dag_id,
            DagRun.run_id,
            DagRun.state,
            Dag.namespace,
            DagRun.object_namespace,
            DagRun.object_name,
            DagRun.object_uid,
            RunPublication.namespace,
            RunPublication.uid,
            RunPublication.gone,
        )
        .join(Dag, Dag.dag_id == DagRun.dag_id)
        .outerjoin(RunPublication, RunPublication.dag_run_id == DagRun.id)
        .where(DagRun.id.in_(union(*found).scalar_subquery()))
        .order_by(DagRun.id)
        .with_for_update(of=DagRun)
    ).all()
    return [
        ownership.RunRecord(
            id=row[0],
            dag_id=row[1],
            run_id=row[2],
            state=row[3],
            dag_namespace=row[4],
            object_namespace=row[5],
            object_name=row[6],
            object_uid=row[7],
            published_namespace=row[8],
            published_uid=row[9],
            published_gone=bool(row[10]),
            scheduler_object_name=(
                None if row[6] is not None else scheduler_object_name(row[1], row[2])
            ),
        )
        for row in rows
    ]


class MarkRefused(ValueError):
    """The run cannot be marked (ended already, or not found), with the reason."""


def mark_run_as(session: Session, run: ownership.RunRecord, target: str, now: datetime) -> str:
    """Mark the run a DagRun object is (`object_verdict`) `success` or `failed` (its
    `spec.state`); returns the message for its condition. Raises MarkRefused."""
    if run.state == target:
        return f"run {run.run_id} is {target}"
    if run.state not in ACTIVE_RUN_STATES:
        raise MarkRefused(f"run {run.run_id} already ended as {run.state}; it stays {run.state}")
    reason = f"marked {target} (spec.state of the DagRun object)"
    mark_run(session, run.id, target, reason, now)
    return f"run {run.run_id} marked {target}: its unfinished tasks ended with the reason"


def cancel_run(
    session: Session, run: ownership.RunRecord, reason: str, now: datetime
) -> str | None:
    """End the run of a deleted DagRun object (`object_verdict`), as a run past its timeout
    ends: failed, its unfinished tasks skipped with `reason` (their tries' Jobs are then
    stopped by the replicas that run them). The run's id if it was unfinished, else None."""
    if run.state not in ACTIVE_RUN_STATES:
        return None
    end_runs(session, {run.id: reason}, now)
    return run.run_id


def start_backfill(session: Session, request: BackfillRequest, now: datetime) -> BackfillPlan:
    """The backfill a Backfill object asked for: created once (found again by the object's
    uid on a retry), on the scheduler's own backfill machinery.

    Raises DagNotRegistered (maybe the DAG object is still being handled) or
    BackfillError (the backfill cannot be made: no cron schedule, no dates).
    """
    _require_dag(session, request.dag_id, request.namespace, "Backfill")
    existing = session.execute(
        select(Backfill).where(Backfill.object_uid == request.uid)
    ).scalar_one_or_none()
    if existing is not None:
        return BackfillPlan(existing.id)
    if request.start is None or request.end is None:
        raise BackfillError("spec.startDate and spec.endDate are both required")
    plan = create_backfill(
        session,
        SpecCache(),
        request.dag_id,
        request.start,
        request.end,
        now,
        max_active_runs=request.max_active_runs,
        reprocess=request.reprocess,
    )
    session.execute(
        update(Backfill)
        .where(Backfill.id == plan.backfill_id)
        .values(
            object_namespace=request.namespace, object_name=request.name, object_uid=request.uid
        )
    )
    # Status flows out from here (sluice.status), even when every date had a run already.
    session.execute(
        insert(StatusOutbox).from_select(
            ["kind", "key"],
            select(literal("backfill"), literal(str(plan.backfill_id))).where(
                select(StatusSink.id).exists()
            ),
        )
    )
    return plan


def cancel_backfill(
    session: Session, namespace: str | None, uid: str, reason: str, now: datetime
) -> int:
    """End the unfinished runs of the backfill a deleted Backfill object made (as a deleted
    DagRun's run ends): the object is known by its uid in its namespace, never its name.
    Returns how many."""
    if not uid:
        return 0
    backfill_id = session.execute(
        select(Backfill.id).where(
            Backfill.object_uid == uid, Backfill.object_namespace.is_not_distinct_from(namespace)
        )
    ).scalar_one_or_none()
    if backfill_id is None:
        return 0
    runs = list(
        session.execute(
            select(DagRun.id)
            .where(DagRun.backfill_id == backfill_id, DagRun.state.in_(ACTIVE_RUN_STATES))
            .order_by(DagRun.id)
            .with_for_update()  # the run rows first, then their tasks (one lock order)
        ).scalars()
    )
    end_runs(session, dict.fromkeys(runs, reason), now)
    session.execute(update(Backfill).where(Backfill.id == backfill_id).values(completed_at=now))
    return len(runs)


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    state: str
    run_type: str
    logical_date: datetime
    tasks_done: int
    tasks_total: int


class DagNotRegistered(LookupError):
    """The DagRun names a DAG this namespace has not (yet) registered."""


def _require_dag(session: Session, dag_id: str, namespace: str | None, kind: str) -> None:
    """Raise DagNotRegistered unless `namespace` has an active DAG `dag_id`."""
    owner = session.execute(
        select(Dag.namespace, Dag.is_active).where(
            Dag.dag_id == dag_id, Dag.current_version_id.is_not(None)
        )
    ).one_or_none()
    if owner is None or not owner.is_active or owner.namespace != namespace:
        raise DagNotRegistered(
            f"no DAG {dag_id!r} in namespace {namespace!r}; "
            f"apply its DAG object first (a {kind} runs a DAG of its own namespace)"
        )


def trigger(session: Session, request: TriggerRequest, now: datetime) -> RunSummary:
    """The run this DagRun object asked for; created once, found again on a retry.

    Raises DagNotRegistered (maybe the DAG object is still being handled) or
    TriggerError (the run cannot be created).
    """
    _require_dag(session, request.dag_id, request.namespace, "DagRun")
    existing = _run(session, request.dag_id, request.run_id)
    if existing is None:
        trigger_run(
            session,
            SpecCache(),
            request.dag_id,
            now,
            logical_date=request.logical_date,
            conf=request.conf,
            run_id=request.run_id,
        )
        session.execute(
            update(DagRun)
            .where(DagRun.dag_id == request.dag_id, DagRun.run_id == request.run_id)
            .values(
                object_name=request.object_name,
                object_namespace=request.namespace,
                object_uid=request.object_uid,
            )
        )
        existing = _run(session, request.dag_id, request.run_id)
    if existing is None:  # pragma: no cover - trigger_run raised or inserted it
        raise TriggerError(f"run {request.run_id!r} was not created")
    return existing


def _run(session: Session, dag_id: str, run_id: str) -> RunSummary | None:
    row = session.execute(
        select(
            DagRun.run_id,
            DagRun.state,
            DagRun.run_type,
            DagRun.logical_date,
            DagRun.tasks_done,
            DagRun.tasks_total,
        ).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
    ).one_or_none()
    return None if row is None else RunSummary(*row)


@dataclass(frozen=True)
class PoolUsage:
    slots: int
    running: int
    queued: int

    @property
    def open(self) -> int:
        return self.slots - self.running - self.queued


def upsert_pool(session: Session, pool: PoolSpec) -> PoolUsage:
    stmt = insert(SlotPool).values(name=pool.name, slots=pool.slots, description=pool.description)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[SlotPool.name],
            set_={"slots": stmt.excluded.slots, "description": stmt.excluded.description},
        )
    )
    return pool_usage(session, pool.name, pool.slots)


def pool_usage(session: Session, name: str, slots: int) -> PoolUsage:
    used = dict(
        session.execute(
            select(TaskInstance.state, func.coalesce(func.sum(TaskInstance.pool_slots), 0))
            .where(
                TaskInstance.pool == name,
                TaskInstance.state.in_([TaskState.RUNNING, TaskState.QUEUED]),
            )
            .group_by(TaskInstance.state)
        ).all()
    )
    return PoolUsage(slots, int(used.get(TaskState.RUNNING, 0)), int(used.get(TaskState.QUEUED, 0)))


def delete_pool(session: Session, name: str) -> bool:
    """Delete the pool's row; the default pool is never deleted (returns False)."""
    if name == DEFAULT_POOL:
        return False
    session.execute(delete(SlotPool).where(SlotPool.name == name))
    return True


def apply_task_action(
    session: Session, request: TaskActionRequest, now: datetime
) -> dict[str, Any]:
    """Clear or mark tasks of a run as a TaskAction object asks, once per object uid: a
    replay (a retry, an operator restarted before it patched the status) returns what the
    first time did. Raises DagNotRegistered, or ActionError (no such run or task)."""
    done = session.get(TaskAction, request.uid)
    if done is not None:
        return done.outcome
    _require_dag(session, request.dag_id, request.namespace, "TaskAction")
    run = clearing.find_run(session, request.dag_id, request.run_id)
    reason = f"{request.action} by TaskAction {request.namespace}/{request.name}"
    if request.action == "clear":
        outcome = clearing.clear(
            session,
            SpecCache(),
            run,
            request.tasks,
            upstream=request.upstream,
            downstream=request.downstream,
            only_failed=request.only_failed,
            reason=reason,
            now=now,
        )
    else:
        target = TaskState.SUCCESS if request.action == "markSuccess" else TaskState.FAILED
        outcome = clearing.mark(
            session,
            SpecCache(),
            run,
            request.tasks,
            target,
            upstream=request.upstream,
            downstream=request.downstream,
            reason=reason,
            now=now,
        )
    record = {
        "runId": outcome.run_id,
        "runState": outcome.run_state,
        "cleared": [change.task_id for change in outcome.cleared],
        "marked": [change.task_id for change in outcome.marked],
        "dagRun": _run_object(session, run),
    }
    session.add(
        TaskAction(
            uid=request.uid,
            namespace=request.namespace or "",
            name=request.name,
            dag_run_id=run.id,
            action=request.action,
            outcome=record,
            done_at=now,
        )
    )
    return record


def _run_object(session: Session, run: DagRun) -> dict[str, str] | None:
    """The DagRun object of a run (a user's, or the one the scheduler published), for an
    Event on it; None if it has none."""
    if run.object_namespace and run.object_name and run.object_uid:
        return {"namespace": run.object_namespace, "name": run.object_name, "uid": run.object_uid}
    published = session.get(RunPublication, run.id)
    if published is None or published.uid is None or published.gone:
        return None
    return {"namespace": published.namespace, "name": published.object_name, "uid": published.uid}


def run_pk(session: Session, dag_id: str, run_id: str) -> int:
    """The database id of a DAG's run."""
    return clearing.find_run(session, dag_id, run_id).id
