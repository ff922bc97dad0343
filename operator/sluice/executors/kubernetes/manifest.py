"""A try's Job, built from its launch and the executor's settings (pure; no API calls).

How a task's fields and its `podTemplate` make the pod (docs/architecture.md,
"The Job executor"):

1. Sluice's defaults are the base: `restartPolicy: Never`, no service-account
   token, the task ServiceAccount if one is configured, restricted pod security
   (non-root, no privilege escalation, all capabilities dropped, the
   RuntimeDefault seccomp profile), `shareProcessNamespace` (so the heartbeat
   sidecar can stop the work of a try the scheduler has fenced off).
2. The task's `podTemplate` (a PodTemplateSpec: `metadata` and `spec`) is
   merged over them: maps merge key by key, recursively; lists of named items
   (`containers`, `initContainers`, `volumes`, `env`, `volumeMounts`, ...)
   merge item by item by `name`; any other list replaces the default.
3. The task's own fields go on the container named `main` last and win:
   `image`, `command`, `args`, `resources` (when set on the task), and `env`
   (by name, over the template's); then the run context (`SLUICE_*`), which
   no one overrides.
4. Sluice's identity labels and annotations, `restartPolicy: Never` and the
   heartbeat sidecar are set last, whatever the template says.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from sluice.api import protocol
from sluice.executors.base import TaskLaunch
from sluice.executors.kubernetes import names

MAIN = "main"
SIDECAR = "sluice-heartbeat"

RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_POD: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}


class PodTemplateError(ValueError):
    """The task's podTemplate cannot be merged; the message names the field and the fix."""


@dataclass(frozen=True)
class JobSettings:
    namespace: str
    # The Sluice image, for the heartbeat sidecar.
    sidecar_image: str
    # Where task pods reach the task API (a Service in the cluster, the node IP for
    # host-run replicas); None runs tries without the sidecar (no pod heartbeats).
    task_api_url: str | None = None
    heartbeat_interval: float = 10.0
    service_account: str | None = None
    ttl_seconds_after_finished: int = 3600
    image_pull_policy: str | None = None
    sidecar_image_pull_policy: str = "IfNotPresent"
    # The creating replica's watch identity (`sluice.io/replica` on the Job and its pods).
    replica: str | None = None
    # Added to the execution timeout for the Job's backstop deadline (`activeDeadlineSeconds`).
    pod_start_timeout: float = 300.0


def build_job(
    launch: TaskLaunch, settings: JobSettings, *, token: str | None = None
) -> dict[str, Any]:
    """The Job for one try. Raises PodTemplateError for a template that cannot be merged."""
    name = names.job_name(launch.dag_id, launch.run_id, launch.task_id, launch.try_number)
    labels = identity_labels(launch)
    if settings.replica is not None:
        labels[names.REPLICA_LABEL] = settings.replica
    annotations = {
        names.LABEL_PREFIX + "dag": launch.dag_id,
        names.LABEL_PREFIX + "run-id": launch.run_id,
        names.LABEL_PREFIX + "task": launch.task_id,
        names.LABEL_PREFIX + "try": str(launch.try_number),
        names.LABEL_PREFIX + "ti": str(launch.ti_id),
        names.LABEL_PREFIX + "logical-date": launch.logical_date.isoformat(),
    }
    template = _pod_template(launch, settings, token)
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**meta.get("labels", {}), **labels}
    meta["annotations"] = {**meta.get("annotations", {}), **annotations}
    spec: dict[str, Any] = {
        "backoffLimit": 0,  # retries are the scheduler's, never the Job controller's
        "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
        "template": template,
    }
    if launch.execution_timeout is not None:
        # A backstop only: the executor enforces the timeout from the main container's
        # start (`outcome.judge`); this ends the Job if no replica is left to, and counts
        # from the Job's start, so it allows the pod its start timeout too.
        spec["activeDeadlineSeconds"] = max(
            1, math.ceil(launch.execution_timeout.total_seconds() + settings.pod_start_timeout)
        )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def identity_labels(launch: TaskLaunch) -> dict[str, str]:
    return {
        **names.MANAGED_BY,
        names.LABEL_PREFIX + "dag": names.label_value(launch.dag_id),
        names.LABEL_PREFIX + "run-id": names.label_value(launch.run_id),
        names.LABEL_PREFIX + "task": names.label_value(launch.task_id),
        names.TRY_LABEL: str(launch.try_number),
        names.TI_LABEL: str(launch.ti_id),
    }


def _pod_template(launch: TaskLaunch, settings: JobSettings, token: str | None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": True,
        "securityContext": copy.deepcopy(RESTRICTED_POD),
        "containers": [
            {
                "name": MAIN,
                "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
                # A failed container's last log lines become its termination message
                # (unless it wrote one), which ends its try's reason (outcome.output_tail).
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
    }
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    base: dict[str, Any] = {"metadata": {}, "spec": pod_spec}
    user = launch.pod_template or {}
    unknown = sorted(set(user) - {"metadata", "spec"})
    if unknown:
        raise PodTemplateError(
            f"podTemplate has {', '.join(unknown)} at its top level: a podTemplate is a "
            "PodTemplateSpec, so put pod fields under `spec` (and labels under `metadata`)"
        )
    template: dict[str, Any] = _merge(base, copy.deepcopy(user), "podTemplate")
    spec: dict[str, Any] = template["spec"]
    spec["restartPolicy"] = "Never"
    main = _main_container(spec)
    if launch.image:
        main["image"] = launch.image
    if "image" not in main:
        raise PodTemplateError(
            "the task has no image: set `image` on the task or in `spec.defaults`"
        )
    if settings.image_pull_policy and "imagePullPolicy" not in main:
        main["imagePullPolicy"] = settings.image_pull_policy
    if launch.command:
        main["command"] = list(launch.command)
    if launch.args:
        main["args"] = list(launch.args)
    if launch.resources:
        main["resources"] = {k: dict(v) for k, v in launch.resources.items()}
    env = {e["name"]: e for e in main.get("env", [])}
    for key, value in launch.env.items():
        env[key] = {"name": key, "value": value}
    # The run context is data (a conf or a param may hold any text): Kubernetes would expand
    # `$(VAR)` in it and make `$$` one `$`, so each `$` is written `$$`, which it makes `$`.
    for key, value in launch.context_env().items():
        env[key] = {"name": key, "value": value.replace("$", "$$")}
    main["env"] = list(env.values())
    if settings.task_api_url is not None:
        _add_sidecar(spec, launch, settings, token)
    return template


def _main_container(spec: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = spec["containers"]
    for container in containers:
        if container.get("name") == MAIN:
            return container
    raise AssertionError("the base pod always has a main container")


def _add_sidecar(
    spec: dict[str, Any], launch: TaskLaunch, settings: JobSettings, token: str | None
) -> None:
    """The heartbeat sidecar: a native sidecar (an init container that keeps running)."""
    sidecar = {
        "name": SIDECAR,
        "image": settings.sidecar_image,
        "imagePullPolicy": settings.sidecar_image_pull_policy,
        "restartPolicy": "Always",
        "command": ["sluice", "heartbeat"],
        "env": [
            {"name": protocol.URL_ENV, "value": settings.task_api_url},
            {"name": protocol.TI_ID_ENV, "value": str(launch.ti_id)},
            {"name": protocol.TRY_NUMBER_ENV, "value": str(launch.try_number)},
            {"name": protocol.TOKEN_ENV, "value": token or ""},
            {"name": protocol.INTERVAL_ENV, "value": f"{settings.heartbeat_interval:g}"},
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"memory": "96Mi"},
        },
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
    }
    others = [c for c in spec.get("initContainers", []) if c.get("name") != SIDECAR]
    spec["initContainers"] = [sidecar, *others]


_NAMED_LISTS = {
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "env",
    "volumeMounts",
    "ports",
    "imagePullSecrets",
    "volumeDevices",
}


def _merge(base: Any, over: Any, path: str) -> Any:
    """`over` merged onto `base` (see the module docstring)."""
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = _merge(base[key], value, f"{path}.{key}") if key in base else value
        return merged
    if (
        isinstance(base, list)
        and isinstance(over, list)
        and path.rsplit(".", 1)[-1] in _NAMED_LISTS
    ):
        merged_items = {item.get("name"): item for item in base if isinstance(item, dict)}
        order = list(merged_items)
        for index, item in enumerate(over):
            if not isinstance(item, dict) or not item.get("name"):
                raise PodTemplateError(f"{path}[{index}] needs a `name` (items are merged by name)")
            name = item["name"]
            if name in merged_items:
                merged_items[name] = _merge(merged_items[name], item, f"{path}[{name}]")
            else:
                merged_items[name] = item
                order.append(name)
        return [merged_items[name] for name in order]
    if isinstance(base, dict) and over is not None and not isinstance(over, dict):
        raise PodTemplateError(f"{path} must be a mapping, not {type(over).__name__}")
    return over
