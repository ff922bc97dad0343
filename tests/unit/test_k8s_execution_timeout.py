"""A task's executionTimeout counts from its main container's start, as Airflow's counts
execution only: time spent Pending (an image pull, a wait for a node) belongs to the pod
start timeout. The executor's poll enforces it; the Job's deadline is a backstop."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sluice.executors.kubernetes.manifest import JobSettings, build_job
from sluice.executors.kubernetes.outcome import judge
from sluice.spec.states import TaskState
from tests.unit.test_k8s_executor_poll import Clock, FakeApi, make_executor
from tests.unit.test_k8s_jobs import T0, job_obj, launch, pod_obj

STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _running_since(seconds: float) -> dict[str, object]:
    return {"running": {"startedAt": (T0 + timedelta(seconds=seconds)).strftime(STAMP)}}


def test_the_timeout_counts_from_the_main_containers_start_not_the_jobs() -> None:
    pod = pod_obj(_running_since(500), phase="Running")  # Pending for 500 s first

    def at(seconds: float) -> object:
        return judge(
            job_obj(),
            pod,
            now=T0 + timedelta(seconds=seconds),
            started=T0,
            pod_start_timeout=600,
            skip_on_exit_code=frozenset(),
            execution_timeout=60,
        )

    assert at(559).phase == "running"  # 559 s since the Job, 59 s of execution
    late = at(560)
    assert (late.phase, late.state, late.delete) == ("ended", TaskState.FAILED, True)
    assert late.reason == "execution timeout (60s) exceeded after running 60s"


def test_the_jobs_deadline_is_a_backstop_past_the_pod_start_timeout() -> None:
    settings = JobSettings(namespace="work", sidecar_image="s", pod_start_timeout=45)
    job = build_job(launch(execution_timeout=timedelta(seconds=5)), settings)
    assert job["spec"]["activeDeadlineSeconds"] == 50


def test_the_poll_fails_a_try_running_past_its_timeout_and_deletes_its_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, api = Clock(), FakeApi()
    executor = make_executor(monkeypatch, clock, api)  # pod start timeout 60 s
    executor.start([launch(execution_timeout=timedelta(seconds=30))])
    job = api.created[0]
    clock.now = T0 + timedelta(seconds=50)  # its image took 50 s to pull
    pods = executor.cache._kinds["pods"]
    pod = api.add_pod(job, _running_since(50))
    executor.cache._apply(pods, {"type": "ADDED", "object": pod})
    assert executor.poll() == []
    clock.now = T0 + timedelta(seconds=79)  # 79 s since the Job, 29 s of execution
    assert executor.poll() == []
    assert api.deleted == []
    clock.now = T0 + timedelta(seconds=80)  # no event: time alone changes the verdict
    (event,) = executor.poll()
    assert (event.key, event.state) == (launch().key, TaskState.FAILED)
    assert event.reason == "execution timeout (30s) exceeded after running 30s"
    assert api.deleted == [("work", job["metadata"]["name"])]
    assert executor.alive() == []


def test_an_adopted_try_keeps_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    first = make_executor(monkeypatch, Clock(), api, replica="r0")
    first.start([launch()])
    job = api.created[0]
    api.add_pod(job, _running_since(10))
    clock = Clock()
    adopter = make_executor(monkeypatch, clock, api, replica="r1")
    adopter.adopt(
        launch().key,
        job["metadata"]["name"],
        elapsed=5,
        timeout=20.0,
        skip_on_exit_code=frozenset(),
    )
    adopter.heartbeats_recorded([launch().key], float("inf"))  # its ownership confirmed
    clock.now = T0 + timedelta(seconds=29)
    assert adopter.poll() == []
    clock.now = T0 + timedelta(seconds=30)
    (event,) = adopter.poll()
    assert event.reason == "execution timeout (20s) exceeded after running 20s"
