"""The UI's actions on a cluster: the kubectl path, written with the user's own token.

On a cluster the UI changes nothing in the database (its connection is read-only):
an action is the object a user would `kubectl apply`, created or patched as them,
so the API server's RBAC decides it and the operator carries it out, through the
same handlers as kubectl's:

- pause/unpause: a merge patch of the DAG object's `spec.paused`;
- trigger: a DagRun object (`spec.dagName`, `spec.conf`);
- clear, mark success/failed: a TaskAction object (ADR 0038);
- mark a run success/failed: a merge patch of its DagRun object's `spec.state`;
  cancel it: delete that object (ADR 0018).

The API server's refusal comes back as the page's answer (403 with its message,
422 with the field it names); nothing is written then.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aiohttp import web
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sluice.handlers.crds import GROUP, VERSION

ACTIONS = {"clear": "clear", "success": "markSuccess", "failed": "markFailed"}


def _refused(exc: ApiException) -> web.HTTPException:
    """The API server's answer, as the page's."""
    message = exc.reason or "refused"
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(exc.body or "{}").get("message") or message
    text = f"refused by the Kubernetes API server: {message}"
    if exc.status == 403:
        return web.HTTPForbidden(text=text)
    if exc.status == 404:
        return web.HTTPNotFound(text=text)
    if exc.status in (400, 409, 422):
        return web.HTTPBadRequest(text=text)
    return web.HTTPBadGateway(text=text)


def _objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def pause(api: client.ApiClient, namespace: str, dag: str, paused: bool) -> None:
    try:
        _objects(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "dags", dag, {"spec": {"paused": paused}}
        )
    except ApiException as exc:
        raise _refused(exc) from None


def _create(
    api: client.ApiClient, namespace: str, kind: str, plural: str, dag: str, user: str,
    spec: dict[str, Any],
) -> str:  # fmt: skip
    """Create a `kind` object for `dag` as the user; returns its name."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {
            "generateName": f"{dag[:50]}-ui-",
            "annotations": {"sluice.io/requested-by": user},
        },
        "spec": {"dagName": dag, **spec},
    }
    try:
        made = _objects(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, body
        )
    except ApiException as exc:
        raise _refused(exc) from None
    return str(made["metadata"]["name"])  # type: ignore[index]


def trigger(
    api: client.ApiClient, namespace: str, dag: str, conf: dict[str, Any] | None, user: str
) -> str:
    """Create a DagRun object for `dag`; returns its name."""
    spec = {"conf": conf} if conf is not None else {}
    return _create(api, namespace, "DagRun", "dagruns", dag, user, spec)


def task_action(
    api: client.ApiClient,
    namespace: str,
    dag: str,
    run_id: str,
    task: str,
    action: str,
    *,
    downstream: bool,
    user: str,
) -> str:
    """Create a TaskAction object (clear, or mark success/failed); returns its name."""
    if action not in ACTIONS:
        raise web.HTTPBadRequest(text=f"action {action!r}: one of clear, success, failed")
    spec = {"runId": run_id, "action": ACTIONS[action], "tasks": [task], "downstream": downstream}
    return _create(api, namespace, "TaskAction", "taskactions", dag, user, spec)


def run_action(api: client.ApiClient, namespace: str, name: str, action: str) -> None:
    """Mark the run's DagRun object (`spec.state`) or, to cancel the run, delete it."""
    objects = _objects(api)
    try:
        if action == "cancel":
            objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "dagruns", name)
        elif action in ("success", "failed"):
            objects.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "dagruns", name, {"spec": {"state": action}}
            )
        else:
            raise web.HTTPBadRequest(text=f"action {action!r}: one of success, failed, cancel")
    except ApiException as exc:
        raise _refused(exc) from None
