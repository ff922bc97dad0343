"""The CustomResourceDefinitions of group sluice.io, built here and written to `crds/`.

The schemas mirror the pydantic models in `sluice.spec.models` (camelCase, the
same names, bounds where pydantic has them or where CEL needs one to estimate
cost). The API server rejects what it can state cheaply (types, enums, name
rules, unique task names, a task depending on itself, immutable fields);
everything else (cycles, schedules, time zones, durations) is checked by the
operator with `parse_dag_manifest` and reported in `status.conditions`.

`python -m sluice.handlers.crds crds/` rewrites the YAML files;
`tests/unit/test_handlers_crds.py` fails when they are out of date.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from sluice.handlers.objects import TASK_ACTIONS
from sluice.spec import params as run_params
from sluice.spec import podpolicy, podschema
from sluice.spec.models import TriggerRule, WeightRule
from sluice.spec.states import Reprocess
from sluice.status.render import MAX_REASON, MAX_TASK_ENTRIES

GROUP = "sluice.io"
VERSION = "v1alpha1"
CATEGORY = "sluice"
# Each task name plus the DAG name must fit here (see spec/models.py MAX_JOB_NAME_STEM).
MAX_JOB_NAME_STEM = 50
MAX_TASKS = 1000
MAX_DEPENDS_ON = 64
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Inside a CEL string literal, so the regex's backslash is itself escaped.
RFC3339 = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)

Schema = dict[str, Any]


def _str(max_length: int, description: str = "", **extra: Any) -> Schema:
    schema: Schema = {"type": "string", "maxLength": max_length, **extra}
    if description:
        schema["description"] = description
    return schema


def _int(description: str = "", **extra: Any) -> Schema:
    schema: Schema = {"type": "integer", **extra}
    if description:
        schema["description"] = description
    return schema


def _bool(description: str = "") -> Schema:
    schema: Schema = {"type": "boolean"}
    if description:
        schema["description"] = description
    return schema


def _duration(description: str) -> Schema:
    return {
        "x-kubernetes-int-or-string": True,
        "description": f"{description} ('30s', '5m', '1h30m', seconds, or ISO 8601 'PT5M')",
    }


def _free_object(description: str) -> Schema:
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": description,
    }


def _conditions() -> Schema:
    return {
        "type": "array",
        "maxItems": 8,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": _str(64),
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": _str(128),
                "message": _str(32768),
                "observedGeneration": _int(minimum=0, format="int64"),
                "lastTransitionTime": {"type": "string", "format": "date-time"},
            },
        },
    }


def task_properties() -> dict[str, Schema]:
    """The fields of one task (TaskSpec), by their YAML names."""
    return {
        "name": _str(63, "the task's name, a DNS label", minLength=1, pattern=DNS_LABEL),
        "image": _str(1024, "container image", minLength=1),
        "command": {"type": "array", "maxItems": 64, "items": _str(4096)},
        "args": {"type": "array", "maxItems": 256, "items": _str(65536)},
        "env": {
            "type": "array",
            "maxItems": 128,
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": _str(256, minLength=1), "value": _str(65536)},
            },
        },
        "resources": {
            "type": "object",
            "properties": {
                kind: {
                    "type": "object",
                    "maxProperties": 32,
                    "additionalProperties": {"x-kubernetes-int-or-string": True},
                }
                for kind in ("requests", "limits")
            },
        },
        "dependsOn": {
            "type": "array",
            "maxItems": MAX_DEPENDS_ON,
            "x-kubernetes-list-type": "set",
            "items": _str(63),
            "description": "names of the tasks that must finish first",
        },
        "triggerRule": {"type": "string", "enum": [rule.value for rule in TriggerRule]},
        "retries": _int(minimum=0),
        "retryDelay": _duration("wait before a retry"),
        "retryExponentialBackoff": _bool(),
        "maxRetryDelay": _duration("cap on the retry delay"),
        "executionTimeout": _duration("limit on one try"),
        "pool": _str(253, "a Pool's name", minLength=1),
        "poolSlots": _int(minimum=1),
        "priorityWeight": _int(),
        "weightRule": {"type": "string", "enum": [rule.value for rule in WeightRule]},
        "dependsOnPast": _bool(),
        "waitForDownstream": _bool(),
        "skipOnExitCode": {
            "x-kubernetes-preserve-unknown-fields": True,
            "description": "an exit code (0-255) or a list of them that mark the task skipped",
        },
        "podTemplate": pod_template(),
    }


def pod_template() -> Schema:
    """Kubernetes' PodTemplateSpec (generated: spec/podschema.py) with podpolicy's CEL rules."""
    schema = podschema.schema()
    schema["description"] = (
        "a PodTemplateSpec merged over the pod of each try's Job; it must keep the pod "
        f"restricted ({podpolicy.RESTRICTED}) and get no ServiceAccount token "
        f"(schema: {podschema.document()['source']})"
    )
    spec = schema["properties"]["spec"]
    containers = [spec["properties"][key]["items"] for key in ("containers", "initContainers")]
    at: dict[podpolicy.Where, list[Schema]] = {
        "pod": [spec],
        "podSecurityContext": [spec["properties"]["securityContext"]],
        "container": containers,
        "securityContext": [c["properties"]["securityContext"] for c in containers],
        "volume": [spec["properties"]["volumes"]["items"]],
    }
    for rule in podpolicy.RULES:
        for node in at[rule.where]:
            node.setdefault("x-kubernetes-validations", []).append(
                {"rule": rule.cel, "message": rule.message, "fieldPath": f".{rule.field}"}
            )
    return schema


def _dag_schema() -> Schema:
    task = {
        "type": "object",
        "required": ["name"],
        "properties": task_properties(),
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.dependsOn) || !(self.name in self.dependsOn)",
                "message": "a task cannot depend on itself",
                "fieldPath": ".dependsOn",
            }
        ],
    }
    defaults = {
        "type": "object",
        "description": "task fields every task gets unless it sets them itself",
        "properties": {
            key: value
            for key, value in task_properties().items()
            if key not in ("name", "dependsOn")
        },
    }
    spec: Schema = {
        "type": "object",
        "required": ["tasks"],
        "properties": {
            "schedule": _str(
                256,
                "5-field cron, @once/@hourly/@daily/..., or null for manual runs only",
                nullable=True,
            ),
            "timezone": _str(64, "IANA time zone of the schedule, e.g. Europe/Berlin"),
            "startDate": _str(64, "date or date-time; naive values are in the DAG's time zone"),
            "endDate": _str(64, "date or date-time; no runs after it"),
            "catchup": _bool("create the runs missed since startDate"),
            "maxActiveRuns": _int(minimum=1),
            "maxActiveTasks": _int(minimum=1),
            "paused": _bool(
                "no new runs while paused; applies when the DAG is created and when this "
                "value changes, while `sluice dags pause|unpause` act at runtime (ADR 0011)"
            ),
            "dagrunTimeout": _duration("limit on one run"),
            "defaults": defaults,
            "params": {
                "type": "object",
                "maxProperties": run_params.MAX_PARAMS,
                "x-kubernetes-preserve-unknown-fields": True,
                "description": "Airflow's DAG params: name -> default value (any JSON value); "
                "a run's conf overrides them key by key; tasks read them as JSON in "
                "SLUICE_PARAMS and each scalar one in SLUICE_PARAM_<NAME>",
            },
            "tasks": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_TASKS,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": task,
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.startDate) || !has(self.endDate) || "
                f"!self.startDate.matches('{RFC3339}') || !self.endDate.matches('{RFC3339}') || "
                "timestamp(self.startDate) <= timestamp(self.endDate)",
                "message": "endDate is before startDate",
                "fieldPath": ".endDate",
            },
        ],
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": _int(minimum=0, format="int64"),
            "dagId": _str(63),
            "version": _int(minimum=0, description="the DAG version in the database"),
            "paused": _bool("the pause in force (the manifest's, or `sluice dags pause`)"),
            "activeRuns": _int(minimum=0),
            "lastRun": {
                "type": "object",
                "nullable": True,
                "description": "the run with the latest logical date",
                "properties": {
                    "runId": _str(512),
                    "state": _str(32),
                    "logicalDate": _str(64),
                    "endedAt": {"type": "string", "maxLength": 64, "nullable": True},
                },
            },
            "nextRun": {
                "type": "string",
                "maxLength": 64,
                "nullable": True,
                "description": "logical date of the next scheduled run",
            },
            "broken": {
                "type": "string",
                "maxLength": 1000,
                "nullable": True,
                "description": "why no runs are created: the stored version cannot be loaded",
            },
        },
    }
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": spec, "status": status},
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.matches('{DNS_LABEL}') && "
                f"size(self.metadata.name) < {MAX_JOB_NAME_STEM}",
                "message": "a DAG's name must be a DNS label (lowercase letters, digits, '-') "
                f"of at most {MAX_JOB_NAME_STEM - 1} characters: it makes up Job names",
            },
            {
                "rule": "self.spec.tasks.all(t, "
                f"size(self.metadata.name) + size(t.name) <= {MAX_JOB_NAME_STEM})",
                "message": f"DAG name plus task name must fit in {MAX_JOB_NAME_STEM} "
                "characters (they make up Job names): shorten the task or DAG name",
                "fieldPath": ".spec.tasks",
            },
        ],
    }


def _dagrun_schema() -> Schema:
    spec: Schema = {
        "type": "object",
        "required": ["dagName"],
        "properties": {
            "dagName": _str(
                63,
                "the DAG to run, in this namespace",
                minLength=1,
                pattern=DNS_LABEL,
                **{
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "dagName cannot change"}
                    ]
                },
            ),
            "conf": _free_object(
                "the run's conf (SLUICE_CONF in each task); its keys override the DAG's "
                "params of the same name (SLUICE_PARAMS)"
            ),
            "state": {
                "type": "string",
                "enum": ["success", "failed"],
                "description": 'mark the run as this, as Airflow\'s "mark run as" does: '
                "success makes its unfinished tasks succeed; failed fails its running tasks "
                "and skips the rest (the Marked condition says what happened)",
            },
            "logicalDate": {
                "type": "string",
                "format": "date-time",
                "description": "RFC 3339; default: the time of creation",
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "logicalDate cannot change"}
                ],
            },
        },
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": _int(minimum=0, format="int64"),
            "runId": _str(512),
            "runType": {"type": "string", "enum": ["scheduled", "manual", "backfill"]},
            "state": _str(32),
            "logicalDate": _str(64),
            "dataInterval": {
                "type": "object",
                "properties": {"start": _str(64), "end": _str(64)},
            },
            "startedAt": _str(64),
            "endedAt": _str(64),
            "duration": _str(32, "endedAt - startedAt, once the run ended"),
            "tasksDone": _int(minimum=0),
            "tasksTotal": _int(minimum=0),
            "tasks": _str(32, "tasksDone/tasksTotal, for kubectl get"),
            "taskCounts": {
                "type": "object",
                "description": "how many tasks are in each state",
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
            "taskInstances": {
                "type": "array",
                "description": f"at most {MAX_TASK_ENTRIES} tasks, failed and running first; "
                "`sluice dags runs DAG --run ID` lists them all",
                "maxItems": MAX_TASK_ENTRIES,
                "items": {
                    "type": "object",
                    "required": ["name", "state", "tryNumber"],
                    "properties": {
                        "name": _str(250),
                        "state": _str(32),
                        "tryNumber": _int(minimum=0),
                        "job": _str(63, "the try's Job (kubernetes executor)"),
                        "reason": _str(MAX_REASON, "why it failed, was skipped or retried"),
                        "startedAt": _str(64),
                        "endedAt": _str(64),
                    },
                },
            },
            "taskInstancesOmitted": _int("tasks not in taskInstances", minimum=0),
            "reason": _str(
                128,
                "why the run is in its state (CamelCase): the reason of its Running, Succeeded "
                "or Failed condition",
            ),
            "message": _str(1024, "the same condition's message, e.g. which tasks failed and why"),
        },
    }
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": spec, "status": status},
        "x-kubernetes-validations": [
            {
                "rule": "!has(oldSelf.spec.logicalDate) || has(self.spec.logicalDate)",
                "message": "logicalDate cannot be removed",
            }
        ],
    }


def _pool_schema() -> Schema:
    spec: Schema = {
        "type": "object",
        "required": ["slots"],
        "properties": {
            "slots": _int("task slots; 0 stops new tasks in this pool", minimum=0),
            "description": _str(1024),
        },
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": _int(minimum=0, format="int64"),
            "slots": _int(minimum=0, description="the slots in the database"),
            "running": _int(minimum=0),
            "queued": _int(minimum=0),
            "open": _int(description="slots minus running and queued; negative when shrunk"),
        },
    }
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": spec, "status": status},
    }


def _backfill_schema() -> Schema:
    spec: Schema = {
        "type": "object",
        "required": ["dagName", "startDate", "endDate"],
        "properties": {
            "dagName": _str(63, "the DAG to backfill, in this namespace", pattern=DNS_LABEL),
            "startDate": {"type": "string", "format": "date-time"},
            "endDate": {"type": "string", "format": "date-time"},
            "maxActiveRuns": _int(minimum=1),
            "reprocess": {
                "type": "string",
                "enum": [choice.value for choice in Reprocess],
                "description": "a date whose run has ended: keep it (none, the default), "
                "run it again if it failed (failed), or whatever its end (completed)",
            },
            "rerunFailed": _bool("the same as reprocess: failed"),
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.startDate <= self.endDate",
                "message": "endDate is before startDate",
                "fieldPath": ".endDate",
            },
            {"rule": "self == oldSelf", "message": "a Backfill's spec cannot change"},
        ],
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": _int(minimum=0, format="int64"),
            "state": _str(32),
            "runsTotal": _int(minimum=0),
            "runsDone": _int(minimum=0),
            "progress": _str(32, "runsDone/runsTotal, for kubectl get"),
            "runs": {
                "type": "object",
                "description": "the backfill's runs by state",
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
            "backfillId": _int(minimum=0, description="the backfill in the database"),
        },
    }
    return {"type": "object", "required": ["spec"], "properties": {"spec": spec, "status": status}}


def _task_action_schema() -> Schema:
    spec: Schema = {
        "type": "object",
        "required": ["dagName", "runId", "action"],
        "properties": {
            "dagName": _str(63, "the DAG, in this namespace", pattern=DNS_LABEL),
            "runId": _str(512, "the run's id (a DagRun object's status.runId)", minLength=1),
            "action": {
                "type": "string",
                "enum": list(TASK_ACTIONS),
                "description": "clear: run the tasks again (Airflow's Clear); markSuccess, "
                "markFailed: set their state (Airflow's Mark), then clear the failed tasks "
                "downstream of them",
            },
            "tasks": {
                "type": "array",
                "maxItems": MAX_TASKS,
                "items": _str(63, pattern=DNS_LABEL),
                "description": "the tasks (a clear without any takes every task of the run)",
            },
            "downstream": _bool("and every task after them"),
            "upstream": _bool("and every task before them"),
            "onlyFailed": _bool("a clear of failed and upstream_failed tasks only"),
        },
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "a TaskAction's spec cannot change"},
            {
                "rule": "self.action == 'clear' || (has(self.tasks) && size(self.tasks) > 0)",
                "message": "a mark needs at least one task",
                "fieldPath": ".tasks",
            },
            {
                "rule": "self.action == 'clear' || !has(self.onlyFailed) || !self.onlyFailed",
                "message": "only a clear takes onlyFailed",
                "fieldPath": ".onlyFailed",
            },
        ],
    }
    status: Schema = {
        "type": "object",
        "properties": {
            "conditions": _conditions(),
            "observedGeneration": _int(minimum=0, format="int64"),
            "phase": {"type": "string", "enum": ["Done", "Failed"]},
            "runState": _str(32, "the run's state right after the action"),
            "cleared": {"type": "array", "maxItems": MAX_TASKS, "items": _str(63)},
            "marked": {"type": "array", "maxItems": MAX_TASKS, "items": _str(63)},
            "summary": _str(64, "what changed, for kubectl get"),
        },
    }
    return {"type": "object", "required": ["spec"], "properties": {"spec": spec, "status": status}}


def _column(
    name: str, json_path: str, description: str, type_: str = "string", **extra: Any
) -> Schema:
    """A printer column; its description is what `kubectl explain` and UIs show for it."""
    return {
        "name": name,
        "type": type_,
        "jsonPath": json_path,
        "description": description,
        **extra,
    }


_READY = '.status.conditions[?(@.type=="Ready")].status'
_AGE = _column("Age", ".metadata.creationTimestamp", "time since the object was created", "date")


def _crd(
    kind: str,
    plural: str,
    schema: Schema,
    columns: list[Schema],
    *,
    short_names: list[str] | None = None,
    namespaced: bool = True,
) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "categories": [CATEGORY],
    }
    if short_names:
        names["shortNames"] = short_names
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def definitions() -> dict[str, dict[str, Any]]:
    """File name -> CRD, one per kind."""
    return {
        "dags.yaml": _crd(
            "DAG",
            "dags",
            _dag_schema(),
            [
                _column("Schedule", ".spec.schedule", "the cron expression or preset"),
                _column("Paused", ".status.paused", "no new runs are scheduled", "boolean"),
                _column("Active", ".status.activeRuns", "runs queued or running", "integer"),
                _column(
                    "Last Run",
                    ".status.lastRun.state",
                    "the state of the run with the latest logical date",
                ),
                _column("Next Run", ".status.nextRun", "the next scheduled run's logical date"),
                _column("Ready", _READY, "the spec is in the database as written"),
                _AGE,
            ],
            # Not "dag", which is the singular already.
            short_names=["dg"],
        ),
        "dagruns.yaml": _crd(
            "DagRun",
            "dagruns",
            _dagrun_schema(),
            [
                _column("DAG", ".spec.dagName", "the DAG this is a run of"),
                _column("Type", ".status.runType", "scheduled, manual or backfill"),
                _column("Logical Date", ".status.logicalDate", "the run's logical date"),
                _column("State", ".status.state", "queued, running, success or failed"),
                _column("Tasks", ".status.tasks", "tasks ended of all tasks"),
                _column("Duration", ".status.duration", "how long the run took, once ended"),
                _column("Reason", ".status.reason", "why the run is in its state"),
                _AGE,
                _column(
                    "Message",
                    ".status.message",
                    "what the reason means for this run, e.g. which tasks failed and why",
                    priority=1,
                ),
            ],
            short_names=["dr"],
        ),
        # Cluster-scoped: a pool caps work across every namespace's DAGs, and its
        # name is the key of one `slot_pool` row.
        "pools.yaml": _crd(
            "Pool",
            "pools",
            _pool_schema(),
            [
                _column("Slots", ".spec.slots", "how many tasks may run at once", "integer"),
                _column("Running", ".status.running", "slots taken by running tasks", "integer"),
                _column("Queued", ".status.queued", "slots taken by queued tasks", "integer"),
                _column("Open", ".status.open", "slots minus running and queued", "integer"),
                _AGE,
            ],
            short_names=["pl"],
            namespaced=False,
        ),
        "backfills.yaml": _crd(
            "Backfill",
            "backfills",
            _backfill_schema(),
            [
                _column("DAG", ".spec.dagName", "the DAG backfilled"),
                _column("From", ".spec.startDate", "the first logical date"),
                _column("To", ".spec.endDate", "the last logical date"),
                _column("Progress", ".status.progress", "runs ended of all runs"),
                _column("State", ".status.state", "the backfill's state"),
                _AGE,
            ],
            short_names=["bf"],
        ),
        "taskactions.yaml": _crd(
            "TaskAction",
            "taskactions",
            _task_action_schema(),
            [
                _column("DAG", ".spec.dagName", "the DAG of the run acted on"),
                _column("Run", ".spec.runId", "the run acted on"),
                _column("Action", ".spec.action", "clear, markSuccess or markFailed"),
                _column("Phase", ".status.phase", "Done or Failed, once handled"),
                _column("Changed", ".status.summary", "what the action changed"),
                _AGE,
            ],
        ),
    }


def _admission_policy(
    name: str,
    operations: list[str],
    resource: str,
    validations: list[Schema],
    variables: list[Schema] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy on one of Sluice's resources, and its Deny binding."""
    spec: Schema = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [GROUP],
                    "apiVersions": ["*"],
                    "operations": operations,
                    "resources": [resource],
                }
            ]
        },
    }
    if variables is not None:
        spec["variables"] = variables
    spec["validations"] = validations
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": spec,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


DEFAULT_POOL_POLICY = "sluice-default-pool-protection.yaml"


def default_pool_protection() -> list[dict[str, Any]]:
    """An admission policy that refuses to delete the Pool named `default`."""
    return _admission_policy(
        "sluice.io-default-pool",
        ["DELETE"],
        "pools",
        [
            {
                "expression": "oldObject.metadata.name != 'default'",
                "message": "the default pool cannot be deleted; "
                "set its slots instead (0 stops new tasks in it)",
                "reason": "Forbidden",
            }
        ],
    )


DAG_REFERENCE_POLICY = "sluice-dag-reference-protection.yaml"
DAG_REFERENCE_POLICY_NAME = "sluice.io-dag-references"


def _secret_named(name: str) -> str:
    """CEL: is `name` (an expression) one of Sluice's Secrets or a Helm release record?"""
    return (
        f"({name} in variables.secrets || "
        f"{name}.startsWith('{podpolicy.HELM_RELEASE_SECRET_PREFIX}'))"
    )


# The chart's default names; the chart writes its own release's into its copy.
DEFAULT_PROTECTED_SECRETS = ("sluice-postgres", "sluice-task-api")
DEFAULT_PROTECTED_SERVICE_ACCOUNTS = ("sluice-scheduler", "sluice-operator")


def cel_list(names: Iterable[str]) -> str:
    """A CEL list literal of names (DNS names: nothing in them needs escaping)."""
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def dag_reference_protection(
    secrets: Iterable[str] = DEFAULT_PROTECTED_SECRETS,
    service_accounts: Iterable[str] = DEFAULT_PROTECTED_SERVICE_ACCOUNTS,
) -> list[dict[str, Any]]:
    """An admission policy, and its binding, that refuse a DAG naming Sluice's own Secrets or
    ServiceAccounts (or a Helm release record) in a podTemplate.

    Which names are Sluice's only an installation knows: they are the policy's
    `secrets` and `accounts` variables, CEL list literals. The chart renders a
    policy of its own per release with its names in them (templates/
    dag-reference-protection.yaml); this one, with the chart's default names, is
    for `kubectl apply -f crds/`. The same rule, in the same words, is
    `podpolicy.protected_references`, which the operator applies as well.
    """
    templates = (
        "object.spec.tasks.filter(t, has(t.podTemplate) && has(t.podTemplate.spec))"
        ".map(t, t.podTemplate.spec) + "
        "(has(object.spec.defaults) && has(object.spec.defaults.podTemplate) && "
        "has(object.spec.defaults.podTemplate.spec) ? [object.spec.defaults.podTemplate.spec] : [])"
    )
    containers = (
        "(has(s.containers) ? s.containers : []) + (has(s.initContainers) ? s.initContainers : [])"
    )
    volumes_ok = (
        "!has(s.volumes) || s.volumes.all(v, "
        f"(!has(v.secret) || !has(v.secret.secretName) || !{_secret_named('v.secret.secretName')})"
        " && (!has(v.csi) || !has(v.csi.nodePublishSecretRef) || "
        "!has(v.csi.nodePublishSecretRef.name) || "
        f"!{_secret_named('v.csi.nodePublishSecretRef.name')})"
        " && (!has(v.projected) || !has(v.projected.sources) || v.projected.sources.all(p, "
        f"!has(p.secret) || !has(p.secret.name) || !{_secret_named('p.secret.name')})))"
    )
    env_ok = (
        f"({containers}).all(c, "
        "(!has(c.env) || c.env.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || "
        "!has(e.valueFrom.secretKeyRef.name) || "
        f"!{_secret_named('e.valueFrom.secretKeyRef.name')}))"
        " && (!has(c.envFrom) || c.envFrom.all(e, !has(e.secretRef) || !has(e.secretRef.name) || "
        f"!{_secret_named('e.secretRef.name')})))"
    )
    accounts_ok = (
        "(!has(s.serviceAccountName) || !(s.serviceAccountName in variables.accounts)) && "
        "(!has(s.serviceAccount) || !(s.serviceAccount in variables.accounts))"
    )
    where = "spec.tasks[*].podTemplate or spec.defaults.podTemplate"
    return _admission_policy(
        DAG_REFERENCE_POLICY_NAME,
        ["CREATE", "UPDATE"],
        "dags",
        [
            {
                "expression": f"variables.specs.all(s, {accounts_ok})",
                "message": f"{where}: serviceAccountName: " + podpolicy.PROTECTED_SERVICE_ACCOUNT,
                "reason": "Forbidden",
            },
            {
                "expression": f"variables.specs.all(s, ({volumes_ok}) && {env_ok})",
                "message": f"{where}: a Secret reference: " + podpolicy.PROTECTED_SECRET,
                "reason": "Forbidden",
            },
        ],
        variables=[
            {"name": "specs", "expression": templates},
            {"name": "secrets", "expression": cel_list(secrets)},
            {"name": "accounts", "expression": cel_list(service_accounts)},
        ],
    )


KOPF_PEERING = "kopf-peering.yaml"


def kopf_peering_crds() -> list[dict[str, Any]]:
    """kopf's peering resources (kopf.dev/v1), so operator replicas serve one at a time.

    Written from kopf's documentation of the kinds (docs.kopf.dev, "Peering"): a
    status of free form, where each operator records its priority and lifetime.
    """

    def crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kopf.dev"},
            "spec": {
                "group": "kopf.dev",
                "scope": scope,
                "names": {"kind": kind, "plural": plural, "singular": plural[:-1]},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "status": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }

    return [
        crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        crd("KopfPeering", "kopfpeerings", "Namespaced"),
    ]


HEADER = "# Generated by `python -m sluice.handlers.crds crds/`; do not edit by hand.\n"


def render(document: object) -> str:
    return HEADER + yaml.safe_dump(document, sort_keys=False, width=100)


def rendered_files() -> dict[str, str]:
    files = {name: render(crd) for name, crd in definitions().items()}
    files[DEFAULT_POOL_POLICY] = HEADER + yaml.safe_dump_all(
        default_pool_protection(), sort_keys=False, width=100
    )
    files[DAG_REFERENCE_POLICY] = HEADER + yaml.safe_dump_all(
        dag_reference_protection(), sort_keys=False, width=100
    )
    files[KOPF_PEERING] = HEADER + yaml.safe_dump_all(
        kopf_peering_crds(), sort_keys=False, width=100
    )
    return files


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "crds")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in rendered_files().items():
        (target / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
