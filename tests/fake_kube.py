"""An in-memory stand-in for the API server's DagRun, DAG and Event endpoints.

It keeps what the status publisher relies on: a resourceVersion that moves on
every write, a merge patch that carries `metadata.resourceVersion` is refused
with 409 when the object has moved on, creates of an existing name are 409,
missing objects are 404, a delete with a uid precondition that is not the
object's is 409, and `down` makes every call fail as a refused connection
would; `refuse` answers a verb with a Status of the test's choosing (403, 422,
a namespace that is gone). Responses look like `_preload_content=False` ones
(`.data`).
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException


@dataclass
class _Response:
    data: bytes


def _ok(body: Any) -> _Response:
    return _Response(json.dumps(body).encode())


def _error(status: int, message: str, **status_fields: Any) -> ApiException:
    exc = ApiException(status=status, reason=message)
    exc.body = json.dumps({"kind": "Status", "message": message, "code": status, **status_fields})
    return exc


def refusal(status: int, reason: str, message: str, **details: str) -> ApiException:
    """A Status the API server answers with, e.g. `refusal(403, "Forbidden", ...)`, or a
    missing namespace: `refusal(404, "NotFound", ..., kind="namespaces", name="x")`."""
    return _error(status, message, reason=reason, **({"details": details} if details else {}))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies `application/merge-patch+json`: objects merge
    key by key, `null` deletes a key, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return json.loads(json.dumps(patch))
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


@dataclass
class FakeKube:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (verb, name)
    down: bool = False
    missing_kinds: set[str] = field(default_factory=set)  # CRDs not installed (plural names)
    refuse: dict[str, ApiException] = field(default_factory=dict)  # verb -> its answer

    def __post_init__(self) -> None:
        self._versions = itertools.count(1)
        self._lock = threading.Lock()

    def _check(self, verb: str, name: str) -> None:
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        self.calls.append((verb, name))
        if verb in self.refuse:
            raise self.refuse[verb]

    def add_dag(self, namespace: str, name: str) -> str:
        uid = str(uuid.uuid4())
        self.objects[("dags", namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "0"}
        }
        return uid

    def touch(self, namespace: str, name: str) -> None:
        """Another writer (kopf, a user) changes the object."""
        with self._lock:
            self.objects[("dagruns", namespace, name)]["metadata"]["resourceVersion"] = str(
                next(self._versions)
            )

    def dagrun(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[("dagruns", namespace, name)]

    def dagruns(self) -> list[dict[str, Any]]:
        return [body for (plural, _, _), body in self.objects.items() if plural == "dagruns"]

    # -- CustomObjectsApi -------------------------------------------------------------

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any], **_: Any
    ) -> _Response:
        name = body["metadata"]["name"]
        self._check("create", name)
        if plural in self.missing_kinds:
            raise _error(404, "the server could not find the requested resource")
        with self._lock:
            if (plural, namespace, name) in self.objects:
                raise _error(409, f"{plural} {name!r} already exists")
            stored = json.loads(json.dumps(body))
            stored["metadata"].update(
                uid=str(uuid.uuid4()), resourceVersion=str(next(self._versions)), generation=1
            )
            self.objects[(plural, namespace, name)] = stored
            return _ok(stored)

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **_: Any
    ) -> _Response:
        self._check("get", name)
        found = self.objects.get((plural, namespace, name))
        if found is None:
            raise _error(404, f"{plural} {name!r} not found")
        return _ok(found)

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **_: Any
    ) -> _Response:
        self._check("list", namespace)
        items = [b for (p, ns, _), b in self.objects.items() if p == plural and ns == namespace]
        return _ok({"items": items})

    def patch_namespaced_custom_object_status(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: dict[str, Any],
        **_: Any,
    ) -> _Response:
        self._check("patch", name)
        with self._lock:
            found = self.objects.get((plural, namespace, name))
            if found is None:
                raise _error(404, f"{plural} {name!r} not found")
            expected = (body.get("metadata") or {}).get("resourceVersion")
            if expected is not None and expected != found["metadata"]["resourceVersion"]:
                raise _error(409, "the object has been modified")
            found["status"] = merge_patch(found.get("status") or {}, body["status"])
            found["metadata"]["resourceVersion"] = str(next(self._versions))
            return _ok(found)

    def delete_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Any = None,
        **_: Any,
    ) -> _Response:
        """A delete; with `body.preconditions.uid` (a V1DeleteOptions) refused with 409
        unless the object has that uid, as the API server does."""
        self._check("delete", name)
        with self._lock:
            found = self.objects.get((plural, namespace, name))
            if found is None:
                raise _error(404, f"{plural} {name!r} not found", reason="NotFound")
            uid = getattr(getattr(body, "preconditions", None), "uid", None)
            if uid is not None and uid != found["metadata"]["uid"]:
                raise _error(
                    409,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta:"
                    f" {found['metadata']['uid']}",
                    reason="Conflict",
                )
            del self.objects[(plural, namespace, name)]
            return _ok({"kind": "Status", "status": "Success"})

    def delete(self, namespace: str, name: str) -> None:
        del self.objects[("dagruns", namespace, name)]

    def add_pool(self, name: str) -> None:
        self.objects[("pools", "", name)] = {
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "0"}
        }

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kwargs: Any
    ) -> _Response:
        return self.get_namespaced_custom_object(group, version, "", plural, name, **kwargs)

    def patch_cluster_custom_object_status(
        self, group: str, version: str, plural: str, name: str, body: dict[str, Any], **kwargs: Any
    ) -> _Response:
        return self.patch_namespaced_custom_object_status(
            group, version, "", plural, name, body, **kwargs
        )

    # -- CoreV1Api --------------------------------------------------------------------

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> _Response:
        self._check("event", body["involvedObject"]["name"])
        self.events.append(body)
        return _ok(body)
