"""Which run a DagRun object is: decided from what the database recorded, without I/O.

Anyone who may create a DagRun in some namespace may give it any name, any
`spec.dagName`, and the scheduler's `sluice.io/origin` label and
`sluice.io/run-id` annotation; no one chooses its uid, and its namespace is
where it lives. So a DagRun object's handlers (delete cancels, `spec.state`
marks, create triggers) act on a run only when the database ties the run to
this object's uid in this object's namespace: `dag_run.object_uid` for the
object that triggered the run, `run_publication.uid` for the object the
scheduler created to show it. An object deleted and created again under the
same name has a new uid: it is another object, never the old run's (ADR 0031).

The scheduler creates its object before it can record the object's uid (the
API server gives the uid), so for a moment its own object is unknown: it is
`Pending` when it is exactly the object the scheduler makes for the run its
annotation names (the run's DAG lives in this namespace and the name is the
one the scheduler derives from the run), the run has no object recorded yet.
Pending never acts on a run; the handlers wait for the uid to be recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sluice.handlers.objects import (
    ORIGIN_LABEL,
    ORIGIN_SCHEDULER,
    RUN_ID_ANNOTATION,
    DagRunObject,
    run_id_for_object,
)


@dataclass(frozen=True)
class RunRecord:
    """A run as the database ties it to DagRun objects."""

    id: int
    dag_id: str
    run_id: str
    state: str
    dag_namespace: str | None
    # The user's object that triggered it (NULL uid: triggered before migration 0013).
    object_namespace: str | None
    object_name: str | None
    object_uid: str | None
    # Where the scheduler published it (run_publication); the name it gives the object
    # it creates for a run it made (None for a user's run).
    published_namespace: str | None
    published_uid: str | None
    published_gone: bool
    scheduler_object_name: str | None


@dataclass(frozen=True)
class Owned:
    """The object is this run's: the one that triggered it, or the scheduler's own."""

    run: RunRecord
    by_scheduler: bool


@dataclass(frozen=True)
class Pending:
    """The scheduler's object of this run, whose uid the scheduler has not recorded yet."""

    run: RunRecord


@dataclass(frozen=True)
class Unknown:
    """No run is this object's; `reason` says why, for a condition or an Event."""

    reason: str


Verdict = Owned | Pending | Unknown


def decide(obj: DagRunObject, runs: Iterable[RunRecord]) -> Verdict:
    """Which of `runs` (the rows found by the object's uid, name or annotation) is `obj`'s."""
    candidates = list(runs)
    if obj.uid:
        for run in candidates:
            if run.object_uid == obj.uid and run.object_namespace == obj.namespace:
                return Owned(run, by_scheduler=False)
        for run in candidates:
            if run.published_uid == obj.uid and run.published_namespace == obj.namespace:
                return Owned(run, by_scheduler=True)
        for run in candidates:
            if _triggered_before_uids_were_kept(obj, run):
                return Owned(run, by_scheduler=False)
    for run in candidates:
        if obj.labelled_scheduler and _schedulers_object_being_recorded(obj, run):
            return Pending(run)
    where = f"{obj.namespace}/{obj.name} (uid {obj.uid or 'none'})"
    if obj.labelled_scheduler:
        return Unknown(
            f"DagRun {where} is labelled {ORIGIN_LABEL}={ORIGIN_SCHEDULER}, but the scheduler"
            " did not create it: no run of the scheduler is published to this object. It"
            " acts on no run; remove the label sluice.io/origin and the annotation"
            f" {RUN_ID_ANNOTATION} to trigger a run with it"
        )
    return Unknown(
        f"DagRun {where} triggered no run and shows none of the scheduler's: a DagRun"
        " object acts only on the run it triggered, or the run the scheduler made it for"
    )


def _triggered_before_uids_were_kept(obj: DagRunObject, run: RunRecord) -> bool:
    """A run triggered before migration 0013 by this object: its run id was made from the
    object's name and uid."""
    return (
        run.object_uid is None
        and run.object_namespace == obj.namespace
        and run.object_name == obj.name
        and run.dag_id == obj.dag_name
        and run.run_id == run_id_for_object(obj.name, obj.uid)
    )


def _schedulers_object_being_recorded(obj: DagRunObject, run: RunRecord) -> bool:
    return (
        run.object_name is None
        and run.run_id == obj.run_id_annotation
        and run.dag_id == obj.dag_name
        and run.scheduler_object_name == obj.name
        and (run.dag_namespace is None or run.dag_namespace == obj.namespace)
        and run.published_uid is None
        and not run.published_gone
    )
