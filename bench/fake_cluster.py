"""A stand-in Kubernetes cluster for `bench/steady_cpu.py`: API server, kubelet and sidecars.

Enough of the API server, over plain HTTP/1.1 on 127.0.0.1, for `sluice scheduler
--executor kubernetes` to run unchanged against it: Jobs and pods (LIST, and WATCH
from a resourceVersion with chunked events and a bookmark before the server ends a
watch, as the real one does), Job create, read and delete; and, through the tests'
in-memory `FakeKube`, the status publisher's DagRun, DAG and Pool objects and Events.

Every Job created gets one pod whose life follows what the local cluster showed
(bench/README.md, "Job executor on the local cluster"): created, bound, the
kubelet's status patches (sandbox, sidecar started, main running, main ended, pod
Succeeded, the Job controller's finalizer removed), and the Job controller's
status updates (active, ready, uncounted, Complete): about 8 pod and 5 Job watch
events per task, with managedFields, so each event is about as large as a real
one. The try lasts `task_seconds` (with a seeded spread); while its sidecar runs,
it posts a heartbeat to the task API every `heartbeat_interval`, as `sluice
heartbeat` does.

No TLS, no authentication, no real node: what it costs is not the point, only
that the replicas do the same work as against a real cluster.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes.client.exceptions import ApiException

from sluice.api import protocol
from tests.fake_kube import FakeKube

NODE = "bench-node"


def write_kubeconfig(path: Path, server: str) -> None:
    """A kubeconfig for `server` (plain HTTP, no user) at `path`."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "fake", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )


BOOKMARK_KIND = {"jobs": ("Job", "batch/v1"), "pods": ("Pod", "v1")}


def _stamp(at: float | None = None) -> str:
    return datetime.fromtimestamp(at or time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fields_v1(value: Any) -> Any:
    """An object's fieldsV1 form (managedFields): every key as `f:key`, named list items
    as `k:{...}`, as the API server records who set what."""
    if isinstance(value, dict):
        return {f"f:{k}": fields_v1(v) for k, v in value.items()}
    if (
        isinstance(value, list)
        and value
        and all(isinstance(i, dict) and "name" in i for i in value)
    ):
        return {
            "k:" + json.dumps({"name": i["name"]}, separators=(",", ":")): fields_v1(i)
            for i in value
        }
    return {}


def _managed(
    manager: str, fields: dict[str, Any], subresource: str | None = None
) -> dict[str, Any]:
    entry = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": _stamp(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(fields),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Does a label selector of `key` and `key=value` terms (comma-separated) match?"""
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


class _Store:
    """Jobs and pods with a shared resourceVersion, and the history watches replay."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.versions = itertools.count(1000)
        self.version = 999
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"jobs": {}, "pods": {}}
        # (rv, plural, event line, the object's labels: what a watch's selector matches)
        self.history: list[tuple[int, str, bytes, dict[str, str]]] = []
        self.events = {"jobs": 0, "pods": 0}

    def write(self, plural: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store (or with DELETED forget) an object and publish its event; under `lock`."""
        self.version = next(self.versions)
        obj["metadata"]["resourceVersion"] = str(self.version)
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.objects[plural].pop(name, None)
        else:
            self.objects[plural][name] = obj
        line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
        labels = dict(obj["metadata"].get("labels") or {})
        self.history.append((self.version, plural, line, labels))
        self.events[plural] += 1
        if len(self.history) > 50_000:
            del self.history[:10_000]
        self.lock.notify_all()
        return obj


class FakeCluster:
    """The API server, the kubelet and the sidecars: `start()` returns its URL."""

    def __init__(
        self,
        namespace: str,
        *,
        task_seconds: float = 40.0,
        spread: float = 0.5,
        heartbeat_interval: float = 10.0,
        seed: int = 7,
    ) -> None:
        self.namespace = namespace
        self.task_seconds = task_seconds
        self.spread = spread
        self.heartbeat_interval = heartbeat_interval
        self.random = random.Random(seed)
        self.store = _Store()
        self.kube = FakeKube()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._due_lock = threading.Condition()
        self._beating: dict[str, tuple[float, str, str]] = {}  # pod -> (next, url path, token)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self.heartbeats = {"sent": 0, "refused": 0, "failed": 0}
        self.jobs_created = 0
        self.api_url = ""

    # -- running ----------------------------------------------------------------------

    def start(self) -> str:
        cluster = self

        class Handler(_Handler):
            owner = cluster

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        for target, name in (
            (self._server.serve_forever, "fake-apiserver"),
            (self._kubelet, "fake-kubelet"),
            (self._sidecars, "fake-sidecars"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._stop.set()
        with self._due_lock:
            self._due_lock.notify_all()
        with self.store.lock:
            self.store.lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def running_pods(self) -> int:
        with self.store.lock:
            return sum(
                1
                for pod in self.store.objects["pods"].values()
                if pod["status"].get("phase") in ("Pending", "Running")
            )

    # -- the kubelet and the Job controller -------------------------------------------

    def _at(self, delay: float, action: Callable[[], None]) -> None:
        with self._due_lock:
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), action))
            self._due_lock.notify()

    def _kubelet(self) -> None:
        while not self._stop.is_set():
            with self._due_lock:
                while not self._due or self._due[0][0] > time.monotonic():
                    if self._stop.is_set():
                        return
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._due_lock.wait(wait)
                _, _, action = heapq.heappop(self._due)
            with self.store.lock:
                action()

    def create_job(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        meta = body["metadata"]
        name = meta["name"]
        with self.store.lock:
            if name in self.store.objects["jobs"]:
                return 409, _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            uid = str(uuid.uuid4())
            job = json.loads(json.dumps(body))
            job["metadata"].update(
                uid=uid, generation=1, creationTimestamp=_stamp(), namespace=self.namespace
            )
            template = job["spec"]["template"]
            template["metadata"]["labels"].update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                }
            )
            job["spec"].update(
                completionMode="NonIndexed",
                completions=1,
                parallelism=1,
                manualSelector=False,
                podReplacementPolicy="TerminatingOrFailed",
                suspend=False,
                selector={"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            )
            job["metadata"]["managedFields"] = [
                _managed("sluice", {"metadata": meta, "spec": job["spec"]})
            ]
            job["status"] = {}
            created = self.store.write("jobs", "ADDED", job)
            self.jobs_created += 1
            response = json.loads(json.dumps(created))
        span = self.task_seconds * (1 + self.random.uniform(-self.spread, self.spread))
        self._plan_pod(name, span)
        return 201, response

    def _plan_pod(self, job_name: str, span: float) -> None:
        pod_name = f"{job_name}-{uuid.uuid4().hex[:5]}"
        self._at(0.02, lambda: self._pod_created(job_name, pod_name))
        self._at(0.05, lambda: self._pod_bound(pod_name))
        self._at(0.3 * span, lambda: self._pod_sandbox(pod_name))
        self._at(0.7 * span, lambda: self._sidecar_started(pod_name))
        self._at(0.85 * span, lambda: self._main_running(job_name, pod_name))
        self._at(span, lambda: self._main_ended(pod_name))
        self._at(span + 0.3, lambda: self._pod_succeeded(job_name, pod_name))
        self._at(span + 0.4, lambda: self._finalizer_removed(pod_name))
        self._at(span + 0.6, lambda: self._job_complete(job_name))

    def _job(self, name: str) -> dict[str, Any] | None:
        job = self.store.objects["jobs"].get(name)
        return None if job is None else json.loads(json.dumps(job))

    def _pod(self, name: str) -> dict[str, Any] | None:
        pod = self.store.objects["pods"].get(name)
        return None if pod is None else json.loads(json.dumps(pod))

    def _job_status(self, name: str, status: dict[str, Any]) -> None:
        job = self._job(name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        job["status"].update(status)
        job["metadata"]["managedFields"] = [
            *job["metadata"]["managedFields"][:1],
            _managed("kube-controller-manager", {"status": job["status"]}, "status"),
        ]
        self.store.write("jobs", "MODIFIED", job)

    def _pod_created(self, job_name: str, pod_name: str) -> None:
        job = self._job(job_name)
        if job is None:
            return
        template = job["spec"]["template"]
        spec = json.loads(json.dumps(template["spec"]))
        spec.update(
            dnsPolicy="ClusterFirst",
            preemptionPolicy="PreemptLowerPriority",
            priority=0,
            schedulerName="default-scheduler",
            terminationGracePeriodSeconds=30,
            tolerations=[
                {
                    "effect": "NoExecute",
                    "key": f"node.kubernetes.io/{why}",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                }
                for why in ("not-ready", "unreachable")
            ],
        )
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
        metadata = {
            "name": pod_name,
            "generateName": f"{job_name}-",
            "namespace": self.namespace,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": _stamp(),
            "labels": dict(template["metadata"]["labels"]),
            "annotations": dict(template["metadata"].get("annotations") or {}),
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        metadata["managedFields"] = [
            _managed("kube-controller-manager", {"metadata": dict(metadata), "spec": spec})
        ]
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": metadata,
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "Burstable"},
        }
        self.store.write("pods", "ADDED", pod)
        self._job_status(
            job_name,
            {
                "active": 1,
                "ready": 0,
                "terminating": 0,
                "startTime": _stamp(),
                "uncountedTerminatedPods": {},
            },
        )

    def _kubelet_status(self, pod: dict[str, Any]) -> None:
        pod["metadata"]["managedFields"] = [
            *pod["metadata"]["managedFields"][:2],
            _managed("kubelet", {"status": pod["status"]}, "status"),
        ]
        self.store.write("pods", "MODIFIED", pod)

    def _pod_bound(self, pod_name: str) -> None:
        pod = self._pod(pod_name)
        if pod is None:
            return
        pod["spec"]["nodeName"] = NODE
        pod["status"]["conditions"] = [_condition("PodScheduled", "True")]
        pod["metadata"]["managedFields"].append(
            _managed("kube-scheduler", {"status": {"conditions": pod["status"]["conditions"]}})
        )
        self.store.write("pods", "MODIFIED", pod)

    def _containers(self, pod: dict[str, Any], sidecar: Any, main: Any) -> None:
        spec = pod["spec"]
        status = pod["status"]
        status["initContainerStatuses"] = [
            _container_status(c, sidecar) for c in spec.get("initContainers", [])
        ]
        status["containerStatuses"] = [_container_status(c, main) for c in spec["containers"]]

    def _pod_sandbox(self, pod_name: str) -> None:
        pod = self._pod(pod_name)
        if pod is None:
            return
        status = pod["status"]
        status.update(
            hostIP="10.0.0.2",
            hostIPs=[{"ip": "10.0.0.2"}],
            podIP="10.244.0.9",
            podIPs=[{"ip": "10.244.0.9"}],
            startTime=_stamp(),
        )
        status["conditions"] = [
            _condition("PodReadyToStartContainers", "True"),
            _condition("Initialized", "False", "ContainersNotInitialized"),
            _condition("Ready", "False", "ContainersNotReady"),
            _condition("ContainersReady", "False", "ContainersNotReady"),
            _condition("PodScheduled", "True"),
        ]
        waiting = {"waiting": {"reason": "PodInitializing"}}
        self._containers(pod, {"waiting": {"reason": "ContainerCreating"}}, waiting)
        self._kubelet_status(pod)

    def _sidecar_started(self, pod_name: str) -> None:
        pod = self._pod(pod_name)
        if pod is None:
            return
        _set_condition(pod, "Initialized", "True")
        running = {"running": {"startedAt": _stamp()}}
        self._containers(pod, running, {"waiting": {"reason": "ContainerCreating"}})
        self._kubelet_status(pod)
        env = {
            e["name"]: e.get("value", "") for e in pod["spec"]["initContainers"][0].get("env", [])
        }
        url = env.get(protocol.URL_ENV)
        if url:
            path = url + protocol.heartbeat_path(
                int(env[protocol.TI_ID_ENV]), int(env[protocol.TRY_NUMBER_ENV])
            )
            with self._due_lock:
                self._beating[pod_name] = (time.monotonic(), path, env[protocol.TOKEN_ENV])

    def _main_running(self, job_name: str, pod_name: str) -> None:
        pod = self._pod(pod_name)
        if pod is None:
            return
        pod["status"]["phase"] = "Running"
        for kind in ("Ready", "ContainersReady"):
            _set_condition(pod, kind, "True")
        started = {"running": {"startedAt": _stamp()}}
        self._containers(pod, started, started)
        self._kubelet_status(pod)
        self._job_status(job_name, {"ready": 1})

    def _main_ended(self, pod_name: str) -> None:
        pod = self._pod(pod_name)
        if pod is None:
            return
        for kind in ("Ready", "ContainersReady"):
            _set_condition(pod, kind, "False", "PodCompleted")
        ended = {"terminated": _terminated(0)}
        self._containers(pod, {"running": {"startedAt": _stamp()}}, ended)
        self._kubelet_status(pod)

    def _pod_succeeded(self, job_name: str, pod_name: str) -> None:
        with self._due_lock:
            self._beating.pop(pod_name, None)
        pod = self._pod(pod_name)
        if pod is None:
            return
        pod["status"]["phase"] = "Succeeded"
        _set_condition(pod, "PodReadyToStartContainers", "False")
        self._containers(pod, {"terminated": _terminated(0)}, {"terminated": _terminated(0)})
        self._kubelet_status(pod)
        uncounted = {"succeeded": [pod["metadata"]["uid"]]}
        self._job_status(job_name, {"active": 0, "ready": 0, "uncountedTerminatedPods": uncounted})

    def _finalizer_removed(self, pod_name: str) -> None:
        pod = self._pod(pod_name)
        if pod is None:
            return
        pod["metadata"].pop("finalizers", None)
        self.store.write("pods", "MODIFIED", pod)

    def _job_complete(self, job_name: str) -> None:
        now = _stamp()
        self._job_status(
            job_name,
            {
                "succeeded": 1,
                "uncountedTerminatedPods": {},
                "completionTime": now,
                "conditions": [
                    _condition("SuccessCriteriaMet", "True", "CompletionsReached"),
                    _condition("Complete", "True", "CompletionsReached"),
                ],
            },
        )

    def delete_job(self, name: str) -> tuple[int, dict[str, Any]]:
        with self.store.lock:
            job = self._job(name)
            if job is None:
                return 404, _status(404, "NotFound", f'jobs.batch "{name}" not found')
            for pod_name, pod in list(self.store.objects["pods"].items()):
                if pod["metadata"]["labels"].get("job-name") == name:
                    with self._due_lock:
                        self._beating.pop(pod_name, None)
                    self.store.write("pods", "DELETED", json.loads(json.dumps(pod)))
            self.store.write("jobs", "DELETED", job)
        return 200, _status(200, "Success", "deleted")

    # -- the sidecars -----------------------------------------------------------------

    def _sidecars(self) -> None:
        while not self._stop.wait(0.2):
            now = time.monotonic()
            with self._due_lock:
                due = [(pod, path, token) for pod, (at, path, token) in self._beating.items()]
                due = [d for d in due if self._beating[d[0]][0] <= now]
                for pod, path, token in due:
                    self._beating[pod] = (now + self.heartbeat_interval, path, token)
            for pod, path, token in due:
                self._post_heartbeat(pod, path, token)

    def _post_heartbeat(self, pod: str, url: str, token: str) -> None:
        request = urllib.request.Request(
            url, method="POST", data=b"", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5):
                self.heartbeats["sent"] += 1
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 409):  # the try is not wanted: the sidecar stops its task
                self.heartbeats["refused"] += 1
                with self._due_lock:
                    self._beating.pop(pod, None)
            else:
                self.heartbeats["failed"] += 1
        except OSError:
            self.heartbeats["failed"] += 1


def _condition(kind: str, status: str, reason: str | None = None) -> dict[str, Any]:
    out = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": _stamp()}
    if reason:
        out["reason"] = reason
    return out


def _set_condition(pod: dict[str, Any], kind: str, status: str, reason: str | None = None) -> None:
    conditions = [c for c in pod["status"].get("conditions", []) if c["type"] != kind]
    pod["status"]["conditions"] = [*conditions, _condition(kind, status, reason)]


def _terminated(code: int) -> dict[str, Any]:
    return {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": _stamp(),
        "finishedAt": _stamp(),
        "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
    }


def _container_status(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    running = "running" in state
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": f"{container.get('image', '')}@sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}",
        "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": state,
        "lastState": {},
        "volumeMounts": [],
    }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A replica that stopped mid-request: nothing to report."""


class _Handler(BaseHTTPRequestHandler):
    owner: FakeCluster
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as a real API server's sockets have: with Nagle on, a response
    # written as headers then body waits out the client's delayed ACK, about 40 ms a
    # request on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    # -- plumbing ---------------------------------------------------------------------

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _send(self, code: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, verb: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        segments = [s for s in parts.path.split("/") if s]
        try:
            self._dispatch(verb, segments, query)
        except ApiException as exc:
            body = exc.body or json.dumps(_status(exc.status or 500, "", str(exc.reason)))
            self._send(exc.status or 500, body.encode() if isinstance(body, str) else body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    # -- routes -----------------------------------------------------------------------

    def _dispatch(self, verb: str, s: list[str], query: dict[str, str]) -> None:
        cluster = self.owner
        kube = cluster.kube
        match (verb, s):
            case ("GET", ["apis", "batch", "v1", "namespaces", _, "jobs"]):
                self._list_or_watch("jobs", query)
            case ("GET", ["api", "v1", "namespaces", _, "pods"]):
                self._list_or_watch("pods", query)
            case ("POST", ["apis", "batch", "v1", "namespaces", _, "jobs"]):
                self._send(*cluster.create_job(self._body()))
            case ("GET", ["apis", "batch", "v1", "namespaces", _, "jobs", name]):
                with cluster.store.lock:
                    job = cluster._job(name)
                if job is None:
                    self._send(404, _status(404, "NotFound", f'jobs.batch "{name}" not found'))
                else:
                    self._send(200, job)
            case ("DELETE", ["apis", "batch", "v1", "namespaces", _, "jobs", name]):
                self._body()
                self._send(*cluster.delete_job(name))
            case ("POST", ["api", "v1", "namespaces", ns, "events"]):
                self._send(201, kube.create_namespaced_event(ns, self._body()).data)
            case ("POST", ["apis", group, version, "namespaces", ns, plural]):
                body = self._body()
                created = kube.create_namespaced_custom_object(group, version, ns, plural, body)
                self._send(201, created.data)
            case ("GET", ["apis", group, version, "namespaces", ns, plural]):
                self._send(200, kube.list_namespaced_custom_object(group, version, ns, plural).data)
            case ("GET", ["apis", group, version, "namespaces", ns, plural, name]):
                found = kube.get_namespaced_custom_object(group, version, ns, plural, name)
                self._send(200, found.data)
            case ("PATCH", ["apis", group, version, "namespaces", ns, plural, name, "status"]):
                body = self._body()
                patched = kube.patch_namespaced_custom_object_status(
                    group, version, ns, plural, name, body
                )
                self._send(200, patched.data)
            case ("GET", ["apis", group, version, plural, name]):
                self._send(200, kube.get_cluster_custom_object(group, version, plural, name).data)
            case ("PATCH", ["apis", group, version, plural, name, "status"]):
                body = self._body()
                patched = kube.patch_cluster_custom_object_status(
                    group, version, plural, name, body
                )
                self._send(200, patched.data)
            case _:
                self._send(404, _status(404, "NotFound", f"no route for {verb} {self.path}"))

    def _list_or_watch(self, plural: str, query: dict[str, str]) -> None:
        store = self.owner.store
        selector = query.get("labelSelector", "")
        if query.get("watch") not in ("true", "1"):
            with store.lock:
                items = [
                    o
                    for o in store.objects[plural].values()
                    if selects(selector, o["metadata"].get("labels") or {})
                ]
                body = {"metadata": {"resourceVersion": str(store.version)}, "items": items}
                data = json.dumps(body).encode()
            self._send(200, data)
            return
        since = int(query.get("resourceVersion") or 0)
        ends = time.monotonic() + float(query.get("timeoutSeconds") or 60)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = since
        while not self.owner._stop.is_set() and time.monotonic() < ends:
            with store.lock:
                first = bisect.bisect_right(store.history, sent, key=lambda e: e[0])
                lines = [
                    (rv, line)
                    for rv, p, line, labels in store.history[first:]
                    if p == plural and selects(selector, labels)
                ]
                if not lines and first < len(store.history):
                    sent = store.history[-1][0]  # only events this watch does not select came
                    continue
                if not lines:
                    left = ends - time.monotonic()
                    if left <= 0:
                        break
                    store.lock.wait(min(left, 1.0))
                    continue
            for rv, line in lines:
                self._chunk(line)
                sent = rv
        kind, api_version = BOOKMARK_KIND[plural]
        version = sent  # every event of this kind up to here was sent
        bookmark = {
            "type": "BOOKMARK",
            "object": {
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(version)},
            },
        }
        self._chunk(json.dumps(bookmark).encode() + b"\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
