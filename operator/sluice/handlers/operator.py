"""The kopf handlers: spec flows in from DAG, DagRun and Pool objects to Postgres.

Run with `kopf run -m sluice.handlers.operator --standalone --namespace NS`
(or `--all-namespaces`); the database is $SLUICE_DATABASE_URL. Each handler
is thin: a pure function reads the object (`objects`), one session does the
database work and commits once (`store`), and the status patch is built by
`status`. A spec that is invalid is not an error: the handler finishes, the
object gets Ready=False with every issue and a Warning Event, and the database
keeps the last valid version. Database trouble is a TemporaryError: kopf
retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.config import require_database_url
from sluice.db.engine import make_engine, session_factory
from sluice.db.models import DEFAULT_POOL
from sluice.handlers import objects, ownership, status, store
from sluice.handlers.crds import GROUP, VERSION
from sluice.scheduler.backfill import BackfillError
from sluice.scheduler.clearing import ActionError
from sluice.scheduler.past import wake_next_runs
from sluice.scheduler.triggers import TriggerError
from sluice.spec.errors import SpecError, SpecIssue

log = logging.getLogger(__name__)
T = TypeVar("T")

FINALIZER = f"{GROUP}/finalizer"
RETRY_DELAY = 3.0
# How long a DagRun waits for its DAG to be registered (applied together, the
# DagRun may be handled first) before it is marked failed.
TRIGGER_RETRIES = 20

_sessions: sessionmaker[Session] | None = None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _sessions
    settings.persistence.finalizer = FINALIZER
    # Annotations only: kopf's default also writes `status.kopf`, which the
    # structural schemas would prune.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events only, not kopf's chatter
    settings.execution.max_workers = 8
    engine = make_engine(require_database_url(None), application_name="sluice-operator")
    _sessions = session_factory(engine)


@kopf.on.cleanup()
def dispose(**_: Any) -> None:
    global _sessions
    if _sessions is not None:
        bind = _sessions.kw.get("bind")
        if bind is not None:
            bind.dispose()
        _sessions = None


@contextmanager
def transaction() -> Iterator[Session]:
    """One session and one commit for one handler call; database errors become retries."""
    if _sessions is None:
        raise kopf.PermanentError("the operator has no database (startup did not run)")
    try:
        with _sessions.begin() as session:
            yield session
    except (OperationalError, DBAPIError) as exc:
        raise kopf.TemporaryError(f"database: {exc}", delay=RETRY_DELAY) from exc


def _now() -> datetime:
    return datetime.now(UTC)


def _generation(meta: Mapping[str, Any]) -> int | None:
    value = meta.get("generation")
    return value if isinstance(value, int) else None


def _set_status(patch: kopf.Patch, fields: Mapping[str, Any]) -> None:
    for key, value in fields.items():
        patch.status[key] = value


# ---- DAG ----


@kopf.on.resume(GROUP, VERSION, "dags")
@kopf.on.create(GROUP, VERSION, "dags")
@kopf.on.update(GROUP, VERSION, "dags")
def dag_applied(
    body: kopf.Body,
    meta: kopf.Meta,
    namespace: str | None,
    name: str | None,
    patch: kopf.Patch,
    **_: Any,
) -> None:
    now = _now()
    generation = _generation(meta)
    previous = body.get("status")
    try:
        manifest = objects.manifest_from_body(body, objects.ProtectedNames.from_env())
    except SpecError as error:
        with transaction() as session:
            kept = store.owned_version(session, str(name), namespace)
        message = status.issues_message(
            error.issues,
            kept_version=kept.number if kept else None,
            kept_broken=kept.broken_reason if kept else None,
        )
        _reject(body, patch, previous, status.INVALID_SPEC, message, generation, now)
        return
    with transaction() as session:
        applied = store.apply_dag(session, manifest, now)
    if not isinstance(applied, store.AppliedDag):
        message = status.issues_message([applied], kept_version=None)
        _reject(body, patch, previous, status.NAME_CONFLICT, message, generation, now)
        return
    what = "new version" if applied.new_version else "unchanged version"
    _set_status(
        patch,
        status.ready_status(
            previous,
            ok=True,
            reason=status.ACCEPTED,
            message=f"{what} {applied.version_number} stored as DAG {applied.dag_id!r}",
            generation=generation,
            now=now,
            extra={"dagId": applied.dag_id, "version": applied.version_number},
        ),
    )


def _reject(
    body: kopf.Body,
    patch: kopf.Patch,
    previous: Any,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> None:
    _set_status(
        patch,
        status.ready_status(
            previous, ok=False, reason=reason, message=message, generation=generation, now=now
        ),
    )
    kopf.warn(body, reason=reason, message=status.event_message(message))


@kopf.on.delete(GROUP, VERSION, "dags")
def dag_deleted(namespace: str | None, name: str | None, **_: Any) -> None:
    with transaction() as session:
        found = store.deactivate_dag(session, str(name), namespace)
    log.info("DAG %s/%s deleted; marked inactive: %s", namespace, name, found)


# ---- DagRun ----


def _store_or_reject(
    body: kopf.Body,
    patch: kopf.Patch,
    retry: int,
    issues: list[SpecIssue],
    work: Callable[[Session], T],
    failed: str,
    refused: type[Exception],
) -> T | None:
    """Do an object's database work; None (and Ready=False with the reason) if its spec has
    issues or the work is refused. A DAG not registered yet is retried for a while (the DAG
    and this object may have been applied together)."""
    now, generation, previous = _now(), _generation(body.get("metadata") or {}), body.get("status")
    if issues:
        message = status.issues_message(issues, kept_version=None)
        _reject(body, patch, previous, status.INVALID_SPEC, message, generation, now)
        return None
    try:
        with transaction() as session:
            return work(session)
    except store.DagNotRegistered as exc:
        if retry < TRIGGER_RETRIES:
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY) from exc
        _reject(body, patch, previous, failed, str(exc), generation, now)
    except refused as exc:
        _reject(body, patch, previous, failed, str(exc), generation, now)
    return None


@kopf.on.create(GROUP, VERSION, "dagruns")
def dagrun_created(
    body: kopf.Body, meta: kopf.Meta, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    """A user's DagRun object triggers a run; the scheduler's own objects (known by the uid
    the database recorded, ADR 0031) are left alone, and an object that only carries the
    scheduler's label is refused with the reason."""
    now = _now()
    generation = _generation(meta)
    previous = body.get("status")
    obj = objects.dagrun_object(body)
    request = objects.trigger_request(body)

    def work(session: Session) -> store.RunSummary | None:
        match store.object_verdict(session, obj):
            case ownership.Owned(by_scheduler=True) | ownership.Pending():
                return None  # the scheduler's; Pending: its uid is being recorded
            case ownership.Unknown(reason) if obj.labelled_scheduler:
                raise TriggerError(reason)
        return store.trigger(session, request, now)

    run = _store_or_reject(
        body, patch, retry, request.issues, work, status.TRIGGER_FAILED, TriggerError
    )
    if run is None:
        return
    _set_status(
        patch,
        status.ready_status(
            previous,
            ok=True,
            reason=status.TRIGGERED,
            message=f"run {run.run_id!r} created",
            generation=generation,
            now=now,
            extra={
                "runId": run.run_id,
                "runType": run.run_type,
                "state": run.state,
                "logicalDate": status.timestamp(run.logical_date),
                "tasksDone": run.tasks_done,
                "tasksTotal": run.tasks_total,
                "tasks": f"{run.tasks_done}/{run.tasks_total}",
            },
        ),
    )


def _wait_for_record(verdict: ownership.Verdict, retry: int) -> None:
    """The scheduler's object whose uid is not recorded yet: try again in a moment (kopf
    keeps the object meanwhile); after TRIGGER_RETRIES, go on without acting."""
    if isinstance(verdict, ownership.Pending) and retry < TRIGGER_RETRIES:
        raise kopf.TemporaryError(
            f"run {verdict.run.run_id}: its DagRun object's uid is not recorded yet",
            delay=RETRY_DELAY,
        )


@kopf.on.field(GROUP, VERSION, "dagruns", field="spec.state")
def dagrun_marked(
    body: kopf.Body, meta: kopf.Meta, patch: kopf.Patch, new: Any, retry: int, **_: Any
) -> None:
    """`spec.state: success|failed` marks the object's own run as Airflow's "mark run as"
    does; the outcome is the `Marked` condition (the run's own state flows out as usual)."""
    if new not in ("success", "failed"):
        return
    now = _now()
    obj = objects.dagrun_object(body)
    try:
        with transaction() as session:
            verdict = store.object_verdict(session, obj)
            _wait_for_record(verdict, retry)
            if isinstance(verdict, ownership.Unknown):
                raise store.MarkRefused(verdict.reason)
            if isinstance(verdict, ownership.Pending):
                raise store.MarkRefused(
                    f"run {verdict.run.run_id}: the scheduler has not recorded this object's"
                    " uid yet; set spec.state again once the object shows the run's status"
                )
            ok, message = True, store.mark_run_as(session, verdict.run, str(new), now)
    except store.MarkRefused as exc:
        ok, message = False, str(exc)
        kopf.warn(body, reason=status.MARK_REFUSED, message=status.event_message(message))
    conditions = [
        c for c in (body.get("status") or {}).get("conditions", []) if c.get("type") != "Marked"
    ]
    reason = status.MARKED if ok else status.MARK_REFUSED
    marked = status.condition("Marked", ok, reason, message, _generation(meta), now)
    _set_status(patch, {"conditions": [*conditions, marked]})


@kopf.on.delete(GROUP, VERSION, "dagruns")
def dagrun_deleted(
    body: kopf.Body, name: str | None, namespace: str | None, retry: int, **_: Any
) -> None:
    """Deleting the object of a run that has not ended cancels the run (ADR 0018): the run
    the database ties to this object's uid, nothing else (ADR 0031)."""
    obj = objects.dagrun_object(body)
    reason = f"cancelled: its DagRun object {namespace}/{name} was deleted"
    with transaction() as session:
        verdict = store.object_verdict(session, obj)
        _wait_for_record(verdict, retry)
        if not isinstance(verdict, ownership.Owned):
            log.info("DagRun %s/%s deleted: no run of its own to cancel", namespace, name)
            return
        cancelled = store.cancel_run(session, verdict.run, reason, _now())
    if cancelled is not None:
        log.info(
            "DagRun %s/%s deleted: run %s of %s cancelled",
            namespace,
            name,
            cancelled,
            verdict.run.dag_id,
        )


# ---- Backfill ----


@kopf.on.create(GROUP, VERSION, "backfills")
def backfill_created(
    body: kopf.Body, meta: kopf.Meta, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    """A Backfill object starts the scheduler's backfill machinery; its progress flows out
    through the status publisher (sluice.status)."""
    now = _now()
    generation = _generation(meta)
    previous = body.get("status")
    request = objects.backfill_request(body)
    plan = _store_or_reject(
        body,
        patch,
        retry,
        request.issues,
        lambda session: store.start_backfill(session, request, now),
        status.BACKFILL_FAILED,
        BackfillError,
    )
    if plan is None:
        return
    skipped = f", {len(plan.skipped)} dates skipped (a run exists)" if plan.skipped else ""
    _set_status(
        patch,
        status.ready_status(
            previous,
            ok=True,
            reason=status.BACKFILL_STARTED,
            message=f"{len(plan.created)} runs created, {len(plan.rerun)} rerun{skipped}",
            generation=generation,
            now=now,
            extra={"backfillId": plan.backfill_id},
        ),
    )


@kopf.on.delete(GROUP, VERSION, "backfills")
def backfill_deleted(meta: kopf.Meta, name: str | None, namespace: str | None, **_: Any) -> None:
    """Deleting a Backfill cancels its runs that have not ended (ADR 0018)."""
    reason = f"cancelled: its Backfill object {namespace}/{name} was deleted"
    with transaction() as session:
        uid = str(meta.get("uid") or "")
        cancelled = store.cancel_backfill(session, namespace, uid, reason, _now())
    log.info("Backfill %s/%s deleted: %d runs cancelled", namespace, name, cancelled)


# ---- TaskAction ----


@kopf.on.create(GROUP, VERSION, "taskactions")
def task_action_created(
    body: kopf.Body, meta: kopf.Meta, patch: kopf.Patch, retry: int, **_: Any
) -> None:
    """A TaskAction object clears or marks tasks of one run of its namespace's DAG, once
    (by its uid, whatever replays it: ADR 0038); what it did goes in its status, and an
    Event on it and on the run's DagRun object."""
    now = _now()
    request = objects.task_action_request(body)
    record = _store_or_reject(
        body,
        patch,
        retry,
        request.issues,
        lambda session: store.apply_task_action(session, request, now),
        status.ACTION_FAILED,
        ActionError,
    )
    if record is None:
        _set_status(patch, {"phase": "Failed"})
        return
    if record["marked"]:
        # What was marked may be what the next run's dependsOnPast tasks wait for.
        with transaction() as session:
            wake_next_runs(session, [store.run_pk(session, request.dag_id, request.run_id)])
    message = _action_message(request.action, record)
    reason = status.TASKS_CLEARED if request.action == "clear" else status.TASKS_MARKED
    _set_status(
        patch,
        status.ready_status(
            body.get("status"),
            ok=True,
            reason=reason,
            message=message,
            generation=_generation(meta),
            now=now,
            extra={
                "phase": "Done",
                "runState": record["runState"],
                "cleared": record["cleared"],
                "marked": record["marked"],
                "summary": f"{len(record['marked'])} marked, {len(record['cleared'])} cleared",
            },
        ),
    )
    # kopf.event, not kopf.info: the operator posts kopf's own messages from WARNING up only
    # (`configure`), and these are Normal Events of ours.
    kopf.event(body, type="Normal", reason=reason, message=status.event_message(message))
    run_object = record.get("dagRun")
    if run_object:
        kopf.event(
            kopf.Body(
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DagRun", "metadata": run_object}
            ),
            type="Normal",
            reason=reason,
            message=status.event_message(
                f"{message} (TaskAction {request.namespace}/{request.name})"
            ),
        )


def _action_message(action: str, record: Mapping[str, Any]) -> str:
    parts = []
    if record["marked"]:
        target = "success" if action == "markSuccess" else "failed"
        parts.append(f"marked {target}: {', '.join(record['marked'])}")
    if record["cleared"]:
        parts.append(f"cleared: {', '.join(record['cleared'])}")
    did = "; ".join(parts) or "nothing matched: no task instance changed"
    return f"run {record['runId']}: {did}; the run is {record['runState']}"


# ---- Pool ----


@kopf.on.resume(GROUP, VERSION, "pools")
@kopf.on.create(GROUP, VERSION, "pools")
@kopf.on.update(GROUP, VERSION, "pools")
def pool_applied(body: kopf.Body, meta: kopf.Meta, patch: kopf.Patch, **_: Any) -> None:
    now = _now()
    generation = _generation(meta)
    previous = body.get("status")
    spec = objects.pool_spec(body)
    if not isinstance(spec, objects.PoolSpec):
        message = status.issues_message([spec], kept_version=None)
        _reject(body, patch, previous, status.INVALID_SPEC, message, generation, now)
        return
    with transaction() as session:
        usage = store.upsert_pool(session, spec)
    _set_status(
        patch,
        status.ready_status(
            previous,
            ok=True,
            reason=status.POOL_SYNCED,
            message=f"pool {spec.name!r} has {spec.slots} slots"
            + ("; the default pool cannot be deleted" if spec.name == DEFAULT_POOL else ""),
            generation=generation,
            now=now,
            extra={"running": usage.running, "queued": usage.queued, "open": usage.open},
        ),
    )


@kopf.on.delete(GROUP, VERSION, "pools")
def pool_deleted(body: kopf.Body, name: str | None, **_: Any) -> None:
    with transaction() as session:
        deleted = store.delete_pool(session, str(name))
    if not deleted:
        # The admission policy in crds/ normally refuses this delete. Without it the
        # object goes, but the row stays: tasks without a pool must run somewhere.
        kopf.warn(
            body,
            reason=status.DEFAULT_POOL_PROTECTED,
            message="the default pool cannot be deleted; its database row is kept",
        )
