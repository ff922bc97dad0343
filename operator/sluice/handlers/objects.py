"""Kubernetes object bodies into what the database layer takes, without I/O.

DAG identity across namespaces (the decision):

- `dag_id = metadata.name`. The DAG's namespace is stored beside it
  (`dag.namespace`) and is where its Jobs run. We do not use `namespace.name`:
  the id makes up Job names (`{dag}-{task}-{hash8}-{try}`, see
  `spec/models.py` MAX_JOB_NAME_STEM), a dot is not allowed in a DNS label, and
  the namespace would eat the 50-character budget for nothing, since the Job
  lives in that namespace anyway.
- So a DAG name is unique across the cluster (Airflow's dag_id is global
  too). The first namespace to apply a name owns it while the DAG is active.
  The same name applied in another namespace is refused with
  Ready=False/`NameConflict`, and nothing in the database changes. When the
  owner's DAG object is deleted (`is_active=false`), another namespace may take
  the name over; the run history stays under the dag_id.
- A DAG row written by the CLI (`sluice standalone`, `scheduler --dags`;
  namespace NULL) may be claimed by any namespace, but the CLI cannot take a
  namespace's DAG: `sync_dag` applies the rule (`spec.names.ownership_problem`)
  to every writer.
- A DagRun, Backfill or TaskAction refers to a DAG in its own namespace only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sluice.k8s_names import digest, dns_label
from sluice.spec import podpolicy
from sluice.spec.errors import SpecError, SpecIssue
from sluice.spec.models import DagManifest
from sluice.spec.names import dns_subdomain_problem
from sluice.spec.states import Reprocess
from sluice.spec.validation import parse_dag_manifest

# DagRun objects the scheduler creates for its own runs carry this label and the run's
# id in the annotation below (sluice.status.render). Anyone may write both: they say
# where to look and what a user sees, never which run an object is (that is its uid,
# as the database recorded it: sluice.handlers.ownership, ADR 0031).
ORIGIN_LABEL = "sluice.io/origin"
ORIGIN_SCHEDULER = "scheduler"
RUN_ID_ANNOTATION = "sluice.io/run-id"


# Sluice's own Secrets and ServiceAccounts, names separated by spaces: the chart sets them
# from the ConfigMap its DAG reference policy takes as parameter (ADR 0028).
PROTECTED_SECRETS_ENV = "SLUICE_PROTECTED_SECRETS"
PROTECTED_SERVICE_ACCOUNTS_ENV = "SLUICE_PROTECTED_SERVICE_ACCOUNTS"


@dataclass(frozen=True)
class ProtectedNames:
    """What no DAG's podTemplate may name: an installation's own Secrets and ServiceAccounts."""

    secrets: frozenset[str] = frozenset()
    service_accounts: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ProtectedNames:
        return cls(
            frozenset(environ.get(PROTECTED_SECRETS_ENV, "").split()),
            frozenset(environ.get(PROTECTED_SERVICE_ACCOUNTS_ENV, "").split()),
        )


def protected_reference_issues(manifest: DagManifest, names: ProtectedNames) -> list[SpecIssue]:
    """An issue for each of the DAG's tasks whose pod template names one of `names`."""
    return [
        SpecIssue(f"spec.tasks[{index}].podTemplate.{path}", message)
        for index, task in enumerate(manifest.spec.tasks)
        if task.pod_template
        for path, message in podpolicy.protected_references(
            task.pod_template, names.secrets, names.service_accounts
        )
    ]


def manifest_from_body(
    body: Mapping[str, Any], protected: ProtectedNames = ProtectedNames()
) -> DagManifest:
    """The DagManifest of a DAG object as kopf hands it over; raises SpecError.

    Only apiVersion, kind, metadata (name, namespace, labels, annotations) and
    spec are read: status and the API server's metadata are not spec. A pod
    template that names one of the `protected` names is refused too (the
    admission policy refuses it at apply; this holds where the policy is not
    installed, and for a DAG applied before it was).
    """
    metadata = body.get("metadata")
    meta = metadata if isinstance(metadata, Mapping) else {}
    doc: dict[str, Any] = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "labels", "annotations") if key in meta
        },
        "spec": body.get("spec"),
    }
    manifest = parse_dag_manifest(doc)
    issues = protected_reference_issues(manifest, protected)
    if issues:
        raise SpecError(issues, dag_name=manifest.metadata.name)
    return manifest


def spec_error_of(body: Mapping[str, Any]) -> SpecError | None:
    """None if the body is a valid DAG, else the error with every issue."""
    try:
        manifest_from_body(body)
    except SpecError as error:
        return error
    return None


@dataclass(frozen=True)
class TriggerRequest:
    """What a user-created DagRun object asks for."""

    dag_id: str
    namespace: str | None
    run_id: str
    conf: dict[str, Any] | None
    logical_date: datetime | None
    issues: list[SpecIssue] = field(default_factory=list)
    # The DagRun object's own name and uid: the run's status is published to it, and
    # only this object's handlers act on the run.
    object_name: str | None = None
    object_uid: str | None = None


@dataclass(frozen=True)
class DagRunObject:
    """Who a DagRun object is (namespace, name, uid: the API server's, never the user's),
    and what it claims (dagName, the scheduler's label and run-id annotation)."""

    namespace: str
    name: str
    uid: str
    dag_name: str | None
    labelled_scheduler: bool = False
    run_id_annotation: str | None = None


def dagrun_object(body: Mapping[str, Any]) -> DagRunObject:
    meta, spec = _meta_and_spec(body)
    labels, annotations = meta.get("labels"), meta.get("annotations")
    origin = labels.get(ORIGIN_LABEL) if isinstance(labels, Mapping) else None
    run_id = annotations.get(RUN_ID_ANNOTATION) if isinstance(annotations, Mapping) else None
    dag_name = spec.get("dagName")
    return DagRunObject(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        dag_name=dag_name if isinstance(dag_name, str) and dag_name else None,
        labelled_scheduler=origin == ORIGIN_SCHEDULER,
        run_id_annotation=run_id if isinstance(run_id, str) else None,
    )


@dataclass(frozen=True)
class BackfillRequest:
    """What a Backfill object asks for; problems are in `issues` (the CRD checks most)."""

    dag_id: str
    namespace: str | None
    name: str
    uid: str
    start: datetime | None
    end: datetime | None
    max_active_runs: int | None
    reprocess: Reprocess
    issues: list[SpecIssue] = field(default_factory=list)


def backfill_request(body: Mapping[str, Any]) -> BackfillRequest:
    meta, spec = _meta_and_spec(body)
    issues: list[SpecIssue] = []
    dag_name = _dag_name(spec, issues)
    dates: dict[str, datetime | None] = {}
    for key in ("startDate", "endDate"):
        dates[key] = parse_timestamp(spec.get(key))
        if dates[key] is None:
            issues.append(
                SpecIssue(
                    f"spec.{key}",
                    f"{spec.get(key)!r} is not an RFC 3339 date-time like 2026-12-01T00:00:00Z",
                )
            )
    limit = spec.get("maxActiveRuns")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        issues.append(
            SpecIssue("spec.maxActiveRuns", f"must be a whole number >= 1, got {limit!r}")
        )
        limit = None
    reprocess = _reprocess(spec, issues)
    namespace = meta.get("namespace")
    return BackfillRequest(
        dag_id=dag_name,
        namespace=namespace if isinstance(namespace, str) else None,
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        start=dates["startDate"],
        end=dates["endDate"],
        max_active_runs=limit,
        reprocess=reprocess,
        issues=issues,
    )


def _reprocess(spec: Mapping[str, Any], issues: list[SpecIssue]) -> Reprocess:
    """`spec.reprocess`, or `failed` for the older `rerunFailed: true`."""
    text = spec.get("reprocess")
    rerun_failed = spec.get("rerunFailed") is True
    if text is None:
        return Reprocess.FAILED if rerun_failed else Reprocess.NONE
    try:
        reprocess = Reprocess(text)
    except ValueError:
        choices = ", ".join(choice.value for choice in Reprocess)
        issues.append(SpecIssue("spec.reprocess", f"must be one of {choices}, got {text!r}"))
        return Reprocess.NONE
    if rerun_failed and reprocess != Reprocess.FAILED:
        issues.append(
            SpecIssue(
                "spec.rerunFailed",
                f"rerunFailed: true is reprocess: failed; it contradicts reprocess: {text}",
            )
        )
    return reprocess


def scheduler_object_name(dag_id: str, run_id: str) -> str:
    """The name of the DagRun object the scheduler creates for a run it made, the same on
    every replica (two creates make one object)."""
    return dns_label(f"{dag_id}-{run_id}", digest(dag_id, run_id), fallback="run")


def run_id_for_object(name: str, uid: str) -> str:
    """A run id that is the same on every retry for one object, and new for a re-created one."""
    return f"manual__{name}__{uid[:8]}" if uid else f"manual__{name}"


def trigger_request(body: Mapping[str, Any]) -> TriggerRequest:
    """The DagRun object's spec, checked; problems are in `issues` (the CRD checks most)."""
    meta, spec = _meta_and_spec(body)
    issues: list[SpecIssue] = []
    dag_name = _dag_name(spec, issues)
    conf_value = spec.get("conf")
    conf: dict[str, Any] | None = None
    if isinstance(conf_value, Mapping):
        conf = _plain(conf_value)
    elif conf_value is not None:
        issues.append(SpecIssue("spec.conf", "must be an object (key: value)"))
    logical_date: datetime | None = None
    raw_date = spec.get("logicalDate")
    if raw_date is not None:
        logical_date = parse_timestamp(raw_date)
        if logical_date is None:
            issues.append(
                SpecIssue(
                    "spec.logicalDate",
                    f"{raw_date!r} is not an RFC 3339 date-time like 2026-12-01T00:00:00Z",
                )
            )
    namespace = meta.get("namespace")
    return TriggerRequest(
        dag_id=dag_name,
        namespace=namespace if isinstance(namespace, str) else None,
        run_id=run_id_for_object(str(meta.get("name", "")), str(meta.get("uid", ""))),
        conf=conf,
        logical_date=logical_date,
        issues=issues,
        object_name=str(meta.get("name") or "") or None,
        object_uid=str(meta.get("uid") or "") or None,
    )


# A TaskAction's `spec.action`: Airflow's "Clear", "Mark success" and "Mark failed".
TASK_ACTIONS = ("clear", "markSuccess", "markFailed")


@dataclass(frozen=True)
class TaskActionRequest:
    """What a TaskAction object asks of one run's tasks (`scheduler.clearing`); problems are
    in `issues` (the CRD checks most)."""

    dag_id: str
    namespace: str | None
    name: str
    uid: str
    run_id: str
    action: str
    tasks: list[str]
    downstream: bool
    upstream: bool
    only_failed: bool
    issues: list[SpecIssue] = field(default_factory=list)


def task_action_request(body: Mapping[str, Any]) -> TaskActionRequest:
    meta, spec = _meta_and_spec(body)
    issues: list[SpecIssue] = []
    dag_name = _dag_name(spec, issues)
    run_id = spec.get("runId")
    if not isinstance(run_id, str) or not run_id:
        issues.append(
            SpecIssue(
                "spec.runId",
                "required: the run's id (`kubectl get dagrun NAME -o jsonpath={.status.runId}`)",
            )
        )
        run_id = ""
    action = spec.get("action")
    if action not in TASK_ACTIONS:
        issues.append(
            SpecIssue("spec.action", f"must be one of {', '.join(TASK_ACTIONS)}, got {action!r}")
        )
        action = ""
    raw_tasks = spec.get("tasks", [])
    if not isinstance(raw_tasks, list) or not all(isinstance(t, str) and t for t in raw_tasks):
        issues.append(SpecIssue("spec.tasks", "must be a list of task names"))
        raw_tasks = []
    if action != "clear" and action and not raw_tasks:
        issues.append(SpecIssue("spec.tasks", f"{action} needs at least one task"))
    flags = {key: spec.get(key) is True for key in ("downstream", "upstream", "onlyFailed")}
    if action != "clear" and flags["onlyFailed"]:
        issues.append(SpecIssue("spec.onlyFailed", "only a clear takes onlyFailed"))
    namespace = meta.get("namespace")
    return TaskActionRequest(
        dag_id=dag_name,
        namespace=namespace if isinstance(namespace, str) else None,
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        run_id=run_id,
        action=str(action),
        tasks=list(raw_tasks),
        downstream=flags["downstream"],
        upstream=flags["upstream"],
        only_failed=flags["onlyFailed"],
        issues=issues,
    )


def _meta_and_spec(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """An object's metadata and spec, each empty when missing or not a mapping."""
    metadata, spec = body.get("metadata"), body.get("spec")
    return (
        metadata if isinstance(metadata, Mapping) else {},
        spec if isinstance(spec, Mapping) else {},
    )


def _dag_name(spec: Mapping[str, Any], issues: list[SpecIssue]) -> str:
    """`spec.dagName` ("" with an issue when it is missing)."""
    dag_name = spec.get("dagName")
    if isinstance(dag_name, str) and dag_name:
        return dag_name
    issues.append(SpecIssue("spec.dagName", "required: the name of a DAG in this namespace"))
    return ""


def parse_timestamp(value: object) -> datetime | None:
    """An aware datetime from an RFC 3339 string (or a datetime), else None."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else None
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@dataclass(frozen=True)
class PoolSpec:
    name: str
    slots: int
    description: str


def pool_spec(body: Mapping[str, Any]) -> PoolSpec | SpecIssue:
    """The Pool object's name, slots and description, or the first problem."""
    meta, spec = _meta_and_spec(body)
    name = meta.get("name")
    slots = spec.get("slots")
    description = spec.get("description") or ""
    if not isinstance(name, str) or not name:
        return SpecIssue("metadata.name", "required")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 0:
        return SpecIssue("spec.slots", f"must be a whole number >= 0, got {slots!r}")
    if not isinstance(description, str):
        return SpecIssue("spec.description", "must be a string")
    return PoolSpec(name, slots, description)


def pool_issues(body: Mapping[str, Any]) -> list[SpecIssue]:
    """Every problem a Pool object has before it is applied: its name (an object name, as a
    task's `pool` is) and `pool_spec`'s rules. Used by `sluice dags validate` and the SDK."""
    meta, _ = _meta_and_spec(body)
    name = meta.get("name")
    issues: list[SpecIssue] = []
    if isinstance(name, str) and name:
        problem = dns_subdomain_problem(name)
        if problem:
            issues.append(SpecIssue("metadata.name", problem))
    found = pool_spec(body)
    if isinstance(found, SpecIssue):
        issues.append(found)
    return issues


def _plain(value: Mapping[Any, Any]) -> dict[str, Any]:
    def copy(item: object) -> object:
        if isinstance(item, Mapping):
            return {str(key): copy(inner) for key, inner in item.items()}
        if isinstance(item, list | tuple):
            return [copy(inner) for inner in item]
        return item

    return {str(key): copy(item) for key, item in value.items()}
