"""The Job executor's poll over its watch cache: a try is judged again only when its Job or
pod changed, or when its pod start timeout runs out; no API server (the watches are not
started, their events are applied by hand)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from sluice.executors.kubernetes import executor as executor_module
from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.executor import KubernetesExecutor, KubernetesSettings
from sluice.executors.kubernetes.manifest import MAIN
from sluice.executors.kubernetes.outcome import Verdict
from sluice.executors.kubernetes.watch import TryCache
from sluice.spec.states import TaskState
from tests.unit.test_k8s_jobs import T0, launch


@dataclass
class _Created:
    data: bytes


class FakeApi:
    """Jobs and pods as the API server keeps them, by namespace: a create gets a uid, a
    version and a creation time; reads, label selectors (`a,b=c` form), merge patches of
    labels and spec fields, deletes; `fail_next[name] = [503, ...]` makes the next calls
    of that name raise an ApiException with those statuses. `where` records each call's
    namespace."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []  # (namespace, Job name)
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self.where: list[tuple[str, str]] = []  # (call, namespace)
        self.fail_next: dict[str, list[int]] = {}
        # Calls made without a `_request_timeout` (a dead connection would hang the loop).
        self.untimed: list[str] = []
        self._version = 1

    def _call(self, name: str, namespace: str = "", **kwargs: Any) -> None:
        self.calls.append(name)
        self.where.append((name, namespace))
        if kwargs.get("_request_timeout") is None:
            self.untimed.append(name)
        if self.fail_next.get(name):
            raise ApiException(status=self.fail_next[name].pop(0), reason="test")

    def _bump(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Any, **kw: Any
    ) -> _Created:
        assert (group, version, plural) == ("batch", "v1", "jobs")
        assert body["metadata"]["namespace"] == namespace  # else the API server refuses it
        self._call("create_job", namespace, **kw)
        if (namespace, body["metadata"]["name"]) in self.jobs:
            raise ApiException(status=409, reason="AlreadyExists")
        job = json.loads(json.dumps(body))
        job["metadata"].update(
            uid=f"uid-{len(self.created)}",
            creationTimestamp=T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        self._bump(job)
        self.created.append(job)
        self.jobs[(namespace, job["metadata"]["name"])] = job
        return _Created(json.dumps(job).encode())

    def read_namespaced_job(self, name: str, namespace: str, **kw: Any) -> _Created:
        self._call("read_job", namespace, **kw)
        if (namespace, name) not in self.jobs:
            raise ApiException(status=404, reason="Not Found")
        return _Created(json.dumps(self.jobs[(namespace, name)]).encode())

    def patch_namespaced_job(self, name: str, namespace: str, body: Any, **kw: Any) -> _Created:
        assert kw["_content_type"] == "application/merge-patch+json"
        self._call("patch_job", namespace, **kw)
        if (namespace, name) not in self.jobs:
            raise ApiException(status=404, reason="Not Found")
        return _Created(json.dumps(self._patch(self.jobs[(namespace, name)], body)).encode())

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kw: Any) -> _Created:
        assert kw["_content_type"] == "application/merge-patch+json"
        self._call("patch_pod", namespace, **kw)
        if (namespace, name) not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return _Created(json.dumps(self._patch(self.pods[(namespace, name)], body)).encode())

    def _patch(self, obj: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        expected = meta.get("resourceVersion")
        if expected is not None and expected != obj["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict: the object has been modified")
        obj["metadata"].setdefault("labels", {}).update(meta.get("labels") or {})
        obj.setdefault("spec", {}).update(body.get("spec") or {})
        self._bump(obj)
        return obj

    def list_namespaced_pod(self, namespace: str, *, label_selector: str, **kw: Any) -> _Created:
        self._call("list_pods", namespace, **kw)
        wanted = dict(part.split("=") for part in label_selector.split(","))
        items = [
            pod
            for (where, _), pod in self.pods.items()
            if where == namespace
            and all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]
        return _Created(json.dumps({"items": items}).encode())

    def delete_namespaced_job(self, name: str, namespace: str, **kw: Any) -> None:
        self._call("delete_job", namespace, **kw)
        options = kw.get("body")
        expected = None if options is None else options.preconditions.resource_version
        job = self.jobs.get((namespace, name))
        if job is not None and expected not in (None, job["metadata"]["resourceVersion"]):
            raise ApiException(status=409, reason="Conflict: precondition failed")
        self.deleted.append((namespace, name))

    def add_pod(self, job: dict[str, Any], main_state: dict[str, Any]) -> dict[str, Any]:
        """The pod the Job controller makes, with the template's labels."""
        pod = _pod(job, 0, main_state)
        pod["metadata"]["labels"] = {
            **job["spec"]["template"]["metadata"]["labels"],
            "batch.kubernetes.io/job-name": job["metadata"]["name"],
        }
        self._bump(pod)
        self.pods[(job["metadata"]["namespace"], pod["metadata"]["name"])] = pod
        return pod


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def make_executor(
    monkeypatch: pytest.MonkeyPatch,
    clock: Clock,
    api: FakeApi,
    replica: str = "r1",
    *,
    job_namespace: str | None = None,
) -> KubernetesExecutor:
    monkeypatch.setattr(TryCache, "start", lambda self: None)  # no watches: events by hand
    executor = KubernetesExecutor(
        KubernetesSettings(
            namespace="work",
            sluice_image="img",
            pod_start_timeout=60,
            job_namespace=job_namespace,
        ),
        api_factory=lambda: None,  # type: ignore[arg-type,return-value]
        clock=clock,
        sync_timeout=0,
        replica=replica,
    )
    executor._batch = executor._custom = executor._core = api  # type: ignore[assignment]
    sync(executor.cache)
    return executor


def sync(cache: TryCache) -> None:
    """Every watch of the cache synced: a bookmark, as after a first LIST."""
    for kind in ("jobs", "pods", "events"):
        cache._apply(
            cache._kinds[kind],
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}},
        )


@pytest.fixture
def setup(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[KubernetesExecutor, Clock, list[str]]:
    clock = Clock()
    executor = make_executor(monkeypatch, clock, FakeApi())
    judged: list[str] = []
    real = executor_module.judge

    def counting(job: Any, pod: Any, **kwargs: Any) -> Verdict:
        judged.append(job["metadata"]["name"] if job else "?")
        return real(job, pod, **kwargs)

    monkeypatch.setattr(executor_module, "judge", counting)
    return executor, clock, judged


def _pod(job: dict[str, Any], version: int, main_state: dict[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "metadata": {
            "name": f"{name}-x",
            "uid": f"pod-{name}",
            "resourceVersion": str(version),
            "creationTimestamp": job["metadata"]["creationTimestamp"],
            "labels": {"batch.kubernetes.io/job-name": name, "sluice.io/ti": "7"},
        },
        "status": {"phase": "Running", "containerStatuses": [{"name": MAIN, "state": main_state}]},
    }


def test_a_try_is_judged_again_only_when_its_job_or_pod_changed(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    executor, clock, judged = setup
    executor.start([launch()])
    assert executor.poll() == []
    assert len(judged) == 1  # a new try: judged at once
    for _ in range(5):
        clock.now += timedelta(seconds=1)
        assert executor.poll() == []
    assert len(judged) == 1  # nothing changed, not late yet: the same verdict, not judged again

    job = executor._batch.created[0]  # type: ignore[attr-defined]
    pods = executor.cache._kinds["pods"]
    executor.cache._apply(pods, {"type": "ADDED", "object": _pod(job, 2, {"running": {}})})
    assert executor.poll() == []
    assert len(judged) == 2
    assert executor.poll() == []
    assert len(judged) == 2

    ended = {"terminated": {"exitCode": 0}}
    executor.cache._apply(pods, {"type": "MODIFIED", "object": _pod(job, 3, ended)})
    (event,) = executor.poll()
    assert (event.state, event.key) == (TaskState.SUCCESS, launch().key)
    # Where it ran goes with its end: the archiver reads that pod's log by name.
    assert (event.pod, event.node) == (f"work/{job['metadata']['name']}-x", None)
    assert executor.alive() == []


def test_a_starting_try_still_fails_when_its_pod_start_timeout_runs_out_unwatched(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    executor, clock, judged = setup
    executor.start([launch()])
    assert executor.poll() == []
    clock.now += timedelta(seconds=59)
    assert executor.poll() == []
    assert len(judged) == 1
    clock.now += timedelta(seconds=1)  # no event at all: the timeout alone changes the verdict
    (event,) = executor.poll()
    assert event.state == TaskState.FAILED
    assert "did not start within the pod start timeout" in (event.reason or "")
    assert executor._batch.deleted == [("work", executor._batch.created[0]["metadata"]["name"])]  # type: ignore[attr-defined]


def test_a_relist_judges_every_try_again(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    executor, _, judged = setup
    executor.start([launch(ti_id=1), launch(ti_id=2, task_id="load")])
    executor.poll()
    assert len(judged) == 2
    executor.cache._everything = True  # what a relist (after a 410 or an outage) sets
    executor.poll()
    assert len(judged) == 4


def test_inspect_proves_a_try_never_started_only_when_neither_job_nor_pod_exists(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    """Another replica's view: no Job under the try's name and no pod is the proof that lets
    a dead replica's claimed try be queued again (a finished Job is kept for
    ttlSecondsAfterFinished); a Job that exists, even ended, is no such proof."""
    executor, _, _ = setup
    name = executor.planned_external_id(launch())
    assert name is not None
    seen = executor.inspect((99, 1), name)
    assert seen.state == "gone"
    assert seen.restartable_within == executor.settings.ttl_seconds_after_finished
    assert seen.evidence["started"] is False
    assert f"{seen.evidence['namespace']}/{seen.evidence['job_name']}" == name

    executor.start([launch()])  # the Job exists now (in the cache, as the create returned it)
    other = executor.inspect((99, 1), name)
    assert other.state == "alive"
    assert other.restartable_within is None
    job = executor._batch.created[0]  # type: ignore[attr-defined]
    job["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailure"}]}
    executor.cache.put_job(job)
    lost = executor.inspect((99, 1), name)  # failed, its pod gone: a zombie's, not a restart
    assert lost.state == "gone"
    assert lost.restartable_within is None


def _other_replicas_try(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A try that replica `r0` started; its pod runs."""
    first = make_executor(monkeypatch, Clock(), api, replica="r0")
    first.start([launch()])
    job = api.created[0]
    api.add_pod(job, {"running": {"startedAt": "2026-12-01T00:00:01Z"}})
    return job


def test_jobs_and_their_pods_carry_the_creating_replicas_label_and_its_watch_selects_on_it(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    executor, _, _ = setup
    executor.start([launch()])
    job = executor._batch.created[0]  # type: ignore[attr-defined]
    assert job["metadata"]["labels"][names.REPLICA_LABEL] == "r1"
    assert job["spec"]["template"]["metadata"]["labels"][names.REPLICA_LABEL] == "r1"
    assert executor.cache.selector == "sluice.io/ti,sluice.io/replica=r1"
    assert names.new_replica_id() != names.new_replica_id()


def test_an_adopted_try_is_moved_into_the_adopters_watches_before_it_is_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi()
    job = _other_replicas_try(api, monkeypatch)
    name = job["metadata"]["name"]
    clock = Clock()
    adopter = make_executor(monkeypatch, clock, api, replica="r1")

    seen = adopter.inspect(launch().key, name)  # not in r1's watches: read from the server
    assert (seen.state, seen.running) == ("alive", True)
    assert api.calls[-2:] == ["read_job", "list_pods"]

    adopter.adopt(launch().key, name, elapsed=5.0, timeout=None, skip_on_exit_code=frozenset())
    assert api.calls[-2:] == ["read_job", "list_pods"]  # read, not moved: not known to own it
    assert adopter.poll() == []
    assert "patch_job" not in api.calls
    adopter.heartbeats_recorded([launch().key], time.monotonic())  # the database: r1 owns it
    api.fail_next["patch_pod"] = [503]  # the API server hiccups: moved at a later poll
    assert adopter.poll() == []
    assert adopter.cache.job(name) is not None  # the Job moved, its pod not yet
    clock.now += timedelta(seconds=120)  # past the pod start timeout (60 s)
    api.fail_next["patch_pod"] = [503, 503]  # two more polls fail to move its pod
    # Not judged while its pod is not in r1's watches: judged on the Job alone, the try
    # would look as if its pod never started, and fail.
    assert adopter.poll() == []
    assert adopter.poll() == []
    assert adopter.alive() == [launch().key]
    assert adopter.poll() == []  # moved now, and judged: running
    assert api.calls.count("patch_job") == 1  # the Job is not moved twice
    assert api.calls.count("patch_pod") == 4
    assert job["metadata"]["labels"][names.REPLICA_LABEL] == "r1"
    (pod,) = api.pods.values()
    assert pod["metadata"]["labels"][names.REPLICA_LABEL] == "r1"
    assert adopter.cache.newest_pod(name) is not None  # cached from the patch response
    assert adopter.alive() == [launch().key]

    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
    api._bump(pod)
    adopter.cache._apply(adopter.cache._kinds["pods"], {"type": "MODIFIED", "object": pod})
    (event,) = adopter.poll()
    assert (event.key, event.state) == (launch().key, TaskState.SUCCESS)
    assert "create_job" not in api.calls[1:]  # adopted, never started again


def test_a_pod_made_after_the_move_is_moved_when_its_job_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi()
    first = make_executor(monkeypatch, Clock(), api, replica="r0")
    first.start([launch()])  # r0 died before the Job controller made the pod
    job = api.created[0]
    adopter = make_executor(monkeypatch, Clock(), api, replica="r1")
    adopter.adopt(
        launch().key,
        job["metadata"]["name"],
        elapsed=1.0,
        timeout=None,
        skip_on_exit_code=frozenset(),
    )
    adopter.heartbeats_recorded([launch().key], time.monotonic())
    assert adopter.poll() == []
    assert job["metadata"]["labels"][names.REPLICA_LABEL] == "r1"
    assert api.calls.count("patch_pod") == 0  # no pod yet
    pod = api.add_pod(job, {"running": {}})  # made from the template: r0's label
    assert pod["metadata"]["labels"][names.REPLICA_LABEL] == "r0"
    job["status"] = {"active": 1}
    api._bump(job)
    adopter.cache._apply(adopter.cache._kinds["jobs"], {"type": "MODIFIED", "object": job})
    assert adopter.poll() == []  # read again; moved once the database confirms again
    adopter.heartbeats_recorded([launch().key], time.monotonic())
    assert adopter.poll() == []
    assert pod["metadata"]["labels"][names.REPLICA_LABEL] == "r1"


def test_a_try_another_replica_adopted_is_handed_over_not_reported(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    """A replica taken for dead (but running) sees its try's Job and pod leave its watches
    with the adopter's label: it drops the try and reports nothing (the Job was not
    deleted); a Job deleted for real leaves with its own label and is judged as ever."""
    executor, _, _ = setup
    executor.start([launch(ti_id=1), launch(ti_id=2, task_id="load")])
    executor.poll()
    adopted, deleted = executor._batch.created  # type: ignore[attr-defined]
    moved = json.loads(json.dumps(adopted))
    moved["metadata"]["labels"][names.REPLICA_LABEL] = "r2"
    jobs = executor.cache._kinds["jobs"]
    executor.cache._apply(jobs, {"type": "DELETED", "object": moved})
    executor.cache._apply(jobs, {"type": "DELETED", "object": deleted})
    assert executor.poll() == []
    assert executor.alive() == [(2, 2)]  # lost, for the zombie sweep to judge
    assert executor.cache.take_handed_over() == set()


def test_inspect_cannot_tell_when_another_replicas_try_cannot_be_read(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    executor, clock, _ = setup
    api = executor._batch
    api.fail_next["read_job"] = [500]  # type: ignore[attr-defined]
    seen = executor.inspect((99, 1), "some-job")
    assert seen.state == "unreachable"  # never a zombie on a stale heartbeat alone
    # The sweep's next reads answer at once, for a while: one timeout per sweep, not per try.
    calls = len(api.calls)  # type: ignore[attr-defined]
    assert executor.inspect((98, 1), "other-job").state == "unreachable"
    assert len(api.calls) == calls  # type: ignore[attr-defined]
    clock.now += timedelta(seconds=executor_module.READ_BACKOFF)
    assert executor.inspect((98, 1), "other-job").state == "gone"  # read: no Job, no pod


def _refusal(status: int, message: str, *, as_bytes: bool) -> ApiException:
    """As the client raises it: the body is bytes when the request did not preload."""
    exc = ApiException(status=status, reason="test")
    body = json.dumps({"message": message})
    exc.body = body.encode() if as_bytes else body
    return exc


def _refusing(api: FakeApi, refusals: list[ApiException]) -> None:
    """The next creates raise these, in order; then creates succeed."""
    real_create = api.create_namespaced_custom_object

    def create(*args: Any, **kwargs: Any) -> _Created:
        if refusals:
            raise refusals.pop(0)
        return real_create(*args, **kwargs)

    api.create_namespaced_custom_object = create  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("status", "message", "retried"),
    [
        (503, "etcdserver: leader changed", True),
        (429, "too many requests", True),
        # This replica's token stopped working (its pod was deleted while it still runs).
        (401, "Unauthorized", True),
        (403, 'jobs "x" is forbidden: exceeded quota: work, requested: count/jobs=1', True),
        (403, 'jobs is forbidden: User "x" cannot create resource "jobs"', False),
        (422, "Job.batch is invalid", False),
    ],
)
@pytest.mark.parametrize("as_bytes", [True, False])
def test_a_refused_create_fails_the_try_only_when_the_refusal_is_about_the_job(
    monkeypatch: pytest.MonkeyPatch, status: int, message: str, retried: bool, as_bytes: bool
) -> None:
    clock, api = Clock(), FakeApi()
    executor = make_executor(monkeypatch, clock, api)
    _refusing(api, [_refusal(status, message, as_bytes=as_bytes)])
    executor.start([launch()])
    events = executor.poll()
    if retried:
        assert events == []  # not failed: created again at this poll
        assert len(api.created) == 1
        assert executor.alive() == [(7, 2)]
    else:
        (event,) = events
        assert event.state == TaskState.FAILED
        assert "the API server refused Job" in (event.reason or "")
        assert message in (event.reason or "")
        assert api.created == []
        assert executor.alive() == []


def test_a_create_refused_until_the_pod_start_timeout_fails_with_the_last_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, api = Clock(), FakeApi()
    executor = make_executor(monkeypatch, clock, api)
    _refusing(api, [_refusal(401, "Unauthorized", as_bytes=True) for _ in range(3)])
    executor.start([launch()])
    clock.now += timedelta(seconds=30)
    assert executor.poll() == []
    clock.now += timedelta(seconds=30)  # the pod start timeout (60 s) runs out
    (event,) = executor.poll()
    assert event.state == TaskState.FAILED
    assert "could not create Job" in (event.reason or "")
    assert "401" in (event.reason or "")
    assert api.created == []
