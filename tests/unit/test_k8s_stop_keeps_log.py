"""A try stopped while its pod runs (killed as a zombie, cancelled, timed out) keeps its
pod, and so its log, for the archive (issue 30): the pod gets `activeDeadlineSeconds: 1`
and its kubelet stops it; the Job is deleted only when there is no pod running on a node
to stop that way, or the API server refuses the patch."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sluice.executors.kubernetes.executor import KubernetesExecutor
from sluice.spec.states import TaskState
from tests.unit.test_k8s_executor_poll import Clock, FakeApi, make_executor
from tests.unit.test_k8s_jobs import T0, launch

KEY = launch().key
STARTED = T0.strftime("%Y-%m-%dT%H:%M:%SZ")


def _running(api: FakeApi, job: dict[str, Any], *, on_node: bool = True) -> dict[str, Any]:
    pod = api.add_pod(job, {"running": {"startedAt": STARTED}})
    if on_node:
        pod["spec"] = {"nodeName": "node-1"}
        pod["status"]["startTime"] = STARTED
    else:
        pod["status"]["phase"] = "Pending"
    return pod


def _started(monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> tuple[
    KubernetesExecutor, FakeApi, Clock, dict[str, Any]
]:  # fmt: skip
    api, clock = FakeApi(), Clock()
    executor = make_executor(monkeypatch, clock, api)
    executor.start([launch(**overrides)])
    (job,) = api.created
    return executor, api, clock, job


def test_killing_a_running_try_stops_its_pod_and_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    executor, api, _, job = _started(monkeypatch)
    pod = _running(api, job)
    executor.kill(KEY, "zombie: no heartbeat for 300s")
    assert pod["spec"]["activeDeadlineSeconds"] == 1
    assert api.deleted == []  # the Job, its pod and the pod's log stay until the TTL
    assert executor.external_ids() == {}
    # By its external id alone (a try this replica does not track): the same.
    pod["spec"].pop("activeDeadlineSeconds")
    executor.kill(KEY, "cancelled", f"work/{job['metadata']['name']}")
    assert pod["spec"]["activeDeadlineSeconds"] == 1
    assert api.deleted == []


@pytest.mark.parametrize(
    "case",
    ["no pod yet", "pod not on a node yet", "pod list refused", "patch refused"],
)
def test_a_try_whose_pod_cannot_be_stopped_so_has_its_job_deleted(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A Job with no pod yet would make one; a pending pod's deadline counts from a start
    still to come; an API server that will not say or will not patch: deleted, as before."""
    executor, api, _, job = _started(monkeypatch)
    if case != "no pod yet":
        _running(api, job, on_node=case != "pod not on a node yet")
    if case == "pod list refused":
        api.fail_next["list_pods"] = [500]
    if case == "patch refused":
        api.fail_next["patch_pod"] = [403]
    executor.kill(KEY, "cancelled")
    assert api.deleted == [("work", job["metadata"]["name"])]


def test_a_try_whose_pod_already_ended_keeps_its_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its pod has ended (the Job controller has not said so yet): nothing to stop."""
    executor, api, _, job = _started(monkeypatch)
    pod = _running(api, job)
    pod["status"]["phase"] = "Failed"
    executor.kill(KEY, "cancelled")
    assert "activeDeadlineSeconds" not in pod["spec"]
    assert api.deleted == []


def _timed_out(executor: KubernetesExecutor, pod: dict[str, Any], clock: Clock) -> list[Any]:
    pods = executor.cache._kinds["pods"]
    executor.cache._apply(pods, {"type": "ADDED", "object": pod})
    clock.now = T0 + timedelta(seconds=90)
    return executor.poll()


def test_a_timed_out_try_stops_its_pod_as_judged_and_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    executor, api, clock, job = _started(monkeypatch, execution_timeout=timedelta(seconds=60))
    pod = _running(api, job)
    (event,) = _timed_out(executor, dict(pod), clock)
    assert event.state == TaskState.FAILED
    assert (event.reason or "").startswith("execution timeout (60s) exceeded")
    assert pod["spec"]["activeDeadlineSeconds"] == 1
    assert api.deleted == []
    assert "patch_pod" in api.calls


def test_a_timed_out_try_whose_pod_changed_since_it_was_judged_is_judged_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pod moved to another replica since (a relabel changes its version): this
    replica's patch is refused, it reports nothing and judges again on newer objects."""
    executor, api, clock, job = _started(monkeypatch, execution_timeout=timedelta(seconds=60))
    pod = _running(api, job)
    seen = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "0"}}
    assert _timed_out(executor, seen, clock) == []
    assert "activeDeadlineSeconds" not in pod["spec"]
    assert api.deleted == []
    assert executor.external_ids()  # still this replica's, to be judged again
