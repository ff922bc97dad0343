"""The Job executor's poll over its watch cache: a try is judged again only when its Job or
pod changed, or when its pod start timeout runs out; no API server (the watches are not
started, their events are applied by hand)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from sluice.executors.kubernetes import executor as executor_module
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
    """Creates Jobs as the API server answers (a uid, a version, a creation time)."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Any, **_: Any
    ) -> _Created:
        assert (group, version, plural) == ("batch", "v1", "jobs")
        job = json.loads(json.dumps(body))
        job["metadata"].update(
            uid=f"uid-{len(self.created)}",
            resourceVersion="1",
            creationTimestamp=T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        self.created.append(job)
        return _Created(json.dumps(job).encode())

    def delete_namespaced_job(self, name: str, namespace: str, **_: Any) -> None:
        self.deleted.append(name)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def setup(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[KubernetesExecutor, Clock, list[str]]:
    monkeypatch.setattr(TryCache, "start", lambda self: None)  # no watches: events by hand
    clock = Clock()
    executor = KubernetesExecutor(
        KubernetesSettings(namespace="work", sluice_image="img", pod_start_timeout=60),
        api_factory=lambda: None,  # type: ignore[arg-type,return-value]
        clock=clock,
        sync_timeout=0,
    )
    executor._batch = executor._custom = FakeApi()  # type: ignore[assignment]
    for kind in ("jobs", "pods"):  # synced: a bookmark, as after a first LIST
        executor.cache._apply(
            executor.cache._kinds[kind],
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}},
        )
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
    assert executor._batch.deleted == [executor._batch.created[0]["metadata"]["name"]]  # type: ignore[attr-defined]


def test_a_relist_judges_every_try_again(
    setup: tuple[KubernetesExecutor, Clock, list[str]],
) -> None:
    executor, _, judged = setup
    executor.start([launch(ti_id=1), launch(ti_id=2)])
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
    assert seen.evidence["job_name"] == name

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
