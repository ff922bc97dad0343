"""Two replicas' loops on the real database, with the Job executor on a fake API server:
a replica taken for dead whose create lands late must not take the try back from the
replica the database gave it to (ADR 0033). The database's word reaches the executor
through the loop's heartbeat of its tries (`heartbeats_recorded` for the tries it kept,
`release` for the ones it lost)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.executor import KubernetesExecutor, KubernetesSettings
from sluice.executors.kubernetes.watch import TryCache
from sluice.spec.states import TaskState
from tests.support import FakeClock, make_loop, manifest, register, ti_row, trigger
from tests.unit.test_k8s_executor_poll import FakeApi, _Created, sync

FAST = {"zombie_threshold": 10, "zombie_check_interval": 1, "scheduler_dead_after": 5}


def _executor(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, api: FakeApi, replica: str
) -> KubernetesExecutor:
    monkeypatch.setattr(TryCache, "start", lambda self: None)  # no watches: events by hand
    executor = KubernetesExecutor(
        KubernetesSettings(namespace="work", sluice_image="img", pod_start_timeout=600),
        api_factory=lambda: None,  # type: ignore[arg-type,return-value]
        clock=clock,
        sync_timeout=0,
        replica=replica,
    )
    executor._batch = executor._custom = executor._core = api  # type: ignore[assignment]
    sync(executor.cache)
    return executor


def test_a_late_create_by_a_replica_taken_for_dead_does_not_steal_the_try(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, api = FakeClock(), FakeApi()
    register(sessions, manifest("own", [{"name": "t"}]), clock.now)
    trigger(sessions, "own", clock.now)

    # Replica A's creates time out (the first after the API server stored the Job).
    real_create = api.create_namespaced_custom_object
    timing_out = [True]

    def create(*args: Any, **kwargs: Any) -> _Created:
        if not timing_out:
            return real_create(*args, **kwargs)
        if not api.jobs:
            real_create(*args, **kwargs)
        raise TimeoutError("timed out")

    api.create_namespaced_custom_object = create  # type: ignore[method-assign]
    a = _executor(monkeypatch, clock, api, "ra")
    loop_a = make_loop(sessions, a, clock, **FAST)
    for _ in range(3):
        loop_a.tick()
        clock.advance(seconds=1)
    assert len(a.alive()) == 1  # claimed; its Job exists, though A never heard so
    (job,) = api.jobs.values()

    # A pauses; B takes it for dead and adopts the try (the Job is there, starting).
    b = _executor(monkeypatch, clock, api, "rb")
    loop_b = make_loop(sessions, b, clock, **FAST)
    clock.advance(seconds=15)
    for _ in range(4):
        assert not loop_b.tick().errors
        clock.advance(seconds=1)
    with sessions() as session:
        ti = ti_row(session, "own", "t")
    assert (ti.state, ti.running_by_job_id) == (TaskState.RUNNING, loop_b.job_id)
    assert job["metadata"]["labels"][names.REPLICA_LABEL] == "rb"
    assert b.alive() == [(ti.id, ti.try_number)]

    # A wakes up: its create is retried and finds the Job (409) under B's label.
    timing_out.clear()
    for _ in range(3):
        loop_a.tick()
        clock.advance(seconds=1)
    assert job["metadata"]["labels"][names.REPLICA_LABEL] == "rb"  # still B's
    assert a.alive() == []  # released: the database has it under B
    assert api.calls.count("patch_job") == 1  # B's move only
    with sessions() as session:
        assert ti_row(session, "own", "t").running_by_job_id == loop_b.job_id
