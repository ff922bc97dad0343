"""The Job executor across namespaces: a try's Job runs in its DAG's namespace (or the
pinned one), is known by (namespace, name) in the cache, the API calls and its external
id, and a pod the API server refuses fails its try at once with the refusal's message."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.executor import KubernetesExecutor
from sluice.spec.states import TaskState
from tests.unit.test_k8s_executor_poll import Clock, FakeApi, make_executor, sync
from tests.unit.test_k8s_jobs import launch

PSA_REFUSAL = (
    'Error creating: pods "hello-extract-2-425b1be9dd-abcde" is forbidden: violates '
    'PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "main" '
    "must set securityContext.allowPrivilegeEscalation=false), runAsNonRoot != true (pod or "
    'container "main" must set securityContext.runAsNonRoot=true)'
)


def _event(job: dict[str, Any], message: str, *, version: int = 5) -> dict[str, Any]:
    """The Job controller's Warning Event when its pod create was refused."""
    meta = job["metadata"]
    return {
        "type": "ADDED",
        "object": {
            "metadata": {
                "name": f"{meta['name']}.18a{version}",
                "namespace": meta["namespace"],
                "uid": f"event-{version}",
                "resourceVersion": str(version),
            },
            "involvedObject": {
                "kind": "Job",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": "FailedCreate",
            "type": "Warning",
            "message": message,
            "lastTimestamp": f"2026-12-01T00:00:0{version % 10}Z",
        },
    }


def _apply(executor: KubernetesExecutor, namespace: str, kind: str, event: Any) -> None:
    cache = executor.watches.scope(namespace).cache
    cache._apply(cache._kinds[kind], event)


def _pod_event(job: dict[str, Any], main_state: dict[str, Any], version: int) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "type": "MODIFIED",
        "object": {
            "metadata": {
                "name": f"{name}-x",
                "namespace": job["metadata"]["namespace"],
                "uid": f"pod-{job['metadata']['uid']}",
                "resourceVersion": str(version),
                "creationTimestamp": job["metadata"]["creationTimestamp"],
                "labels": {
                    **job["spec"]["template"]["metadata"]["labels"],
                    "batch.kubernetes.io/job-name": name,
                },
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "main", "state": main_state}],
            },
        },
    }


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


def test_a_try_runs_in_its_dags_namespace_and_its_external_id_says_where(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    executor = make_executor(monkeypatch, Clock(), api)
    executor.start([launch(ti_id=1, namespace="team-a"), launch(ti_id=2, task_id="cli")])
    team_a, default = api.created
    assert team_a["metadata"]["namespace"] == "team-a"
    assert ("create_job", "team-a") in api.where
    # A DAG registered without a namespace (the CLI, standalone): the default namespace.
    assert default["metadata"]["namespace"] == "work"
    ids = executor.external_ids()
    assert ids[(1, 2)] == f"team-a/{team_a['metadata']['name']}"
    assert ids[(2, 2)] == f"work/{default['metadata']['name']}"
    assert executor.planned_external_id(launch(ti_id=1, namespace="team-a")) == ids[(1, 2)]
    # Watched from its first try there, with this replica's selection.
    scope = executor.watches.get("team-a")
    assert scope is not None
    assert scope.cache.selector == "sluice.io/ti,sluice.io/replica=r1"
    assert scope.cache.job(team_a["metadata"]["name"]) is not None
    assert executor.watches.scope("work").cache.job(team_a["metadata"]["name"]) is None


def test_a_pinned_job_namespace_takes_every_try_whatever_its_dags(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    executor = make_executor(monkeypatch, Clock(), api, job_namespace="jobs")
    executor.start([launch(namespace="team-a")])
    (job,) = api.created
    assert job["metadata"]["namespace"] == "jobs"
    assert executor.external_ids() == {(7, 2): f"jobs/{job['metadata']['name']}"}
    assert executor.watches.get("team-a") is None
    # An id recorded before ids named their namespace is the pinned namespace's.
    assert executor.locate(job["metadata"]["name"]) == ("jobs", job["metadata"]["name"])


def test_the_same_job_name_in_two_namespaces_is_two_tries(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    """Two namespaces may hold a Job of the same name: the cache, the verdicts, the
    deletes and the handing over keep them apart."""
    clock = Clock()
    executor = make_executor(monkeypatch, clock, api)
    executor.start([launch(ti_id=1, namespace="team-a"), launch(ti_id=2, namespace="team-b")])
    a, b = api.created
    assert a["metadata"]["name"] == b["metadata"]["name"]  # same DAG, run, task and try
    sync(executor.watches.scope("team-a").cache)
    sync(executor.watches.scope("team-b").cache)
    assert executor.poll() == []

    _apply(executor, "team-a", "pods", _pod_event(a, {"terminated": {"exitCode": 0}}, 10))
    _apply(executor, "team-b", "pods", _pod_event(b, {"running": {}}, 11))
    (event,) = executor.poll()
    assert (event.key, event.state) == ((1, 2), TaskState.SUCCESS)
    assert executor.alive() == [(2, 2)]

    # team-a's Job taken over by another replica says nothing about team-b's.
    moved = json.loads(json.dumps(a))
    moved["metadata"]["labels"][names.REPLICA_LABEL] = "r9"
    _apply(executor, "team-a", "jobs", {"type": "DELETED", "object": moved})
    assert executor.poll() == []
    assert executor.alive() == [(2, 2)]

    executor.kill((2, 2), "fenced")
    assert api.deleted == [("team-b", b["metadata"]["name"])]


def test_one_namespaces_lost_watches_do_not_stop_another_being_judged(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    clock = Clock()
    executor = make_executor(monkeypatch, clock, api)
    executor.start([launch(ti_id=1, namespace="team-a"), launch(ti_id=2, namespace="team-b")])
    assert len(api.created) == 2
    sync(executor.watches.scope("team-a").cache)  # team-b's watches never sync (no rights)
    clock.now += timedelta(seconds=120)  # past the pod start timeout (60 s)
    (event,) = executor.poll()
    assert event.key == (1, 2)  # team-a's: did not start
    assert "did not start" in (event.reason or "")
    assert executor.alive() == [(2, 2)]  # team-b's: not judged on what no watch has seen
    assert executor.inspect((2, 2), None).state == "unreachable"


def test_adopt_inspect_and_kill_act_in_the_tries_namespace(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    first = make_executor(monkeypatch, Clock(), api, replica="r0")
    first.start([launch(namespace="team-b")])
    (job,) = api.created
    api.add_pod(job, {"running": {}})
    ext = first.external_ids()[(7, 2)]
    assert ext.startswith("team-b/")

    adopter = make_executor(monkeypatch, Clock(), api, replica="r1")
    api.where.clear()
    assert adopter.inspect((7, 2), ext).state == "alive"
    assert api.where == [("read_job", "team-b"), ("list_pods", "team-b")]
    adopter.adopt((7, 2), ext, elapsed=5.0, timeout=None, skip_on_exit_code=frozenset())
    adopter.heartbeats_recorded([(7, 2)], time.monotonic())  # the database: r1 owns it
    adopter.poll()
    assert {where for _, where in api.where} == {"team-b"}
    assert job["metadata"]["labels"][names.REPLICA_LABEL] == "r1"
    assert adopter.watches.scope("team-b").cache.job(job["metadata"]["name"]) is not None
    assert adopter.external_ids() == {(7, 2): ext}
    adopter.kill((7, 2), "fenced")
    assert api.deleted == [("team-b", job["metadata"]["name"])]


def test_a_pod_refused_by_admission_fails_the_try_at_once_with_the_refusal(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    """Pod Security admission refuses the pod (the namespace enforces `restricted`): the
    Job controller records FailedCreate on the Job and tries again, forever. The try fails
    at the next poll with the API server's words, and its Job is deleted; it does not wait
    out the pod start timeout to fail as "no pod was created"."""
    clock = Clock()
    executor = make_executor(monkeypatch, clock, api)
    executor.start([launch(namespace="team-a")])
    (job,) = api.created
    sync(executor.watches.scope("team-a").cache)
    assert executor.poll() == []
    clock.now += timedelta(seconds=1)
    _apply(executor, "team-a", "events", _event(job, PSA_REFUSAL))
    (event,) = executor.poll()
    assert event.state == TaskState.FAILED
    assert event.reason is not None
    assert event.reason.startswith("the API server refused the try's pod: pods ")
    assert 'violates PodSecurity "restricted:latest"' in event.reason
    assert "securityContext.runAsNonRoot=true" in event.reason
    assert api.deleted == [("team-a", job["metadata"]["name"])]


def test_a_refusal_that_may_pass_waits_for_the_pod_start_timeout_and_names_itself(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    clock = Clock()
    executor = make_executor(monkeypatch, clock, api)
    executor.start([launch()])
    (job,) = api.created
    quota = (
        'Error creating: pods "x" is forbidden: exceeded quota: compute, requested: '
        "cpu=1, used: cpu=4, limited: cpu=4"
    )
    _apply(executor, "work", "events", _event(job, quota))
    assert executor.poll() == []  # a quota frees up as other pods end
    clock.now += timedelta(seconds=60)
    (event,) = executor.poll()
    assert event.state == TaskState.FAILED
    assert "refused the try's pod for 60s (pod start timeout 60s)" in (event.reason or "")
    assert "exceeded quota: compute" in (event.reason or "")


def test_a_refusal_of_an_earlier_job_of_the_same_name_is_not_this_ones(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    executor = make_executor(monkeypatch, Clock(), api)
    executor.start([launch()])
    (job,) = api.created
    old = json.loads(json.dumps(job))
    old["metadata"]["uid"] = "uid-of-a-deleted-job"
    _apply(executor, "work", "events", _event(old, PSA_REFUSAL))
    assert executor.poll() == []
    assert executor.alive() == [(7, 2)]


def test_a_namespace_no_try_of_this_replica_is_in_is_not_watched_nor_needed_to_inspect(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    """The schedulers may have no rights in the default namespace (the release's, when it
    is not served): nothing watches it until a try runs there, and the zombie sweep's reads
    of another replica's try do not wait on it."""
    first = make_executor(monkeypatch, Clock(), api, replica="r0")
    first.start([launch(namespace="team-b")])
    (job,) = api.created
    api.add_pod(job, {"running": {}})
    monkeypatch.setattr("sluice.executors.kubernetes.watch.TryCache.start", lambda self: None)
    fresh = KubernetesExecutor(
        first.settings,
        api_factory=lambda: None,  # type: ignore[arg-type,return-value]
        clock=Clock(),
        sync_timeout=0,
        replica="r1",
    )
    fresh._batch = fresh._custom = fresh._core = api  # type: ignore[assignment]
    assert fresh.watches.all() == []
    assert fresh.inspect((7, 2), first.external_ids()[(7, 2)]).state == "alive"


def test_a_namespace_that_refuses_the_job_is_not_watched(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    """The schedulers have no rights in a DAG's namespace (it is not served): the try fails
    at once with the API server's 403, and no watch is started there to fail forever."""
    executor = make_executor(monkeypatch, Clock(), api)
    api.fail_next["create_job"] = [403]
    executor.start([launch(namespace="elsewhere")])
    (event,) = executor.poll()
    assert event.state == TaskState.FAILED
    assert (event.reason or "").startswith("the API server refused Job elsewhere/hello-")
    assert executor.watches.get("elsewhere") is None


def test_one_namespaces_outage_does_not_stretch_anothers_pod_start_timeout(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    clock = Clock()
    executor = make_executor(monkeypatch, clock, api)
    executor.start([launch(ti_id=1, namespace="team-a"), launch(ti_id=2, namespace="team-b")])
    sync(executor.watches.scope("team-a").cache)
    clock.now += timedelta(seconds=1)
    assert executor.poll() == []  # team-b's watches cannot see it yet
    clock.now += timedelta(seconds=49)
    sync(executor.watches.scope("team-b").cache)  # 49 s blind, plus 30 s to settle
    assert executor.poll() == []
    clock.now += timedelta(seconds=10)  # 60 s: team-a's pod start timeout, not stretched
    (event,) = executor.poll()
    assert event.key == (1, 2)
    clock.now += timedelta(seconds=78)  # team-b's: 60 s it could see, plus 79 s it could not
    assert executor.poll() == []
    clock.now += timedelta(seconds=1)
    (event,) = executor.poll()
    assert event.key == (2, 2)
    assert "did not start within the pod start timeout" in (event.reason or "")


def test_kill_deletes_an_untracked_tries_job_where_its_external_id_says(
    monkeypatch: pytest.MonkeyPatch, api: FakeApi
) -> None:
    """A try this replica never had or dropped (a restart, a hand-over): killing it still
    deletes its Job, by the namespace and name its external id gives."""
    executor = make_executor(monkeypatch, Clock(), api)
    executor.kill((5, 1), "the database no longer has this try running", "team-a/etl-load-1-abc")
    assert api.deleted == [("team-a", "etl-load-1-abc")]
    executor.kill((6, 1), "no id: nothing to find it by")
    assert api.deleted == [("team-a", "etl-load-1-abc")]
