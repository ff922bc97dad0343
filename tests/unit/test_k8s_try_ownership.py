"""A replica moves a try into its watches (relabels its Job and pods) only as the try's
owner in the database, and a create that got no clear answer never leaves a Job running
beside the try's retry (ADR 0033; invariant 1)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.executor import KubernetesExecutor
from sluice.spec.states import TaskState
from tests.unit.test_k8s_executor_poll import Clock, FakeApi, _Created, make_executor
from tests.unit.test_k8s_jobs import launch

KEY = launch().key


def _creates_time_out(api: FakeApi, *, stored: list[bool]) -> None:
    """The next creates time out on the client's side; `stored[i]` says whether the API
    server had stored the i-th one all the same (a timeout after it accepted the Job)."""
    real = api.create_namespaced_custom_object

    def create(*args: Any, **kwargs: Any) -> _Created:
        if not stored:
            return real(*args, **kwargs)
        if stored.pop(0):
            real(*args, **kwargs)
        raise TimeoutError("timed out")  # what the client raises: an OSError

    api.create_namespaced_custom_object = create  # type: ignore[method-assign]


def _label(api: FakeApi) -> str:
    (job,) = api.jobs.values()
    return str(job["metadata"]["labels"][names.REPLICA_LABEL])


def _confirm(executor: KubernetesExecutor) -> None:
    """What the loop does after a transaction that found the try this replica's."""
    executor.heartbeats_recorded([KEY], time.monotonic())


# -- finding 1: a late create must not steal a try -------------------------------------


def test_a_late_create_does_not_move_a_try_another_replica_adopted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """r0's create timed out after the API server stored the Job; r0 was taken for dead
    and r1 adopted the try (the database's compare-and-set, then the move). r0's retried
    create finds the Job under r1's label: it must not move it back (nobody who owns the
    try would watch it, and a pod that never starts would hold its slot for ever)."""
    api = FakeApi()
    stale = make_executor(monkeypatch, Clock(), api, replica="r0")
    _creates_time_out(api, stored=[True])
    stale.start([launch()])
    ext = stale.planned_external_id(launch())

    adopter = make_executor(monkeypatch, Clock(), api, replica="r1")
    adopter.adopt(KEY, ext, elapsed=400.0, timeout=None, skip_on_exit_code=frozenset())
    _confirm(adopter)
    adopter.poll()
    assert _label(api) == "r1"

    for _ in range(3):  # r0 wakes up: its create is retried, finds the Job (409), reads it
        assert stale.poll() == []
    assert _label(api) == "r1"  # not moved back without the database's word
    assert api.calls.count("patch_job") == 1  # r1's move only
    stale.release(KEY)  # r0's fence: the database has the try under r1
    assert stale.alive() == []
    assert stale.poll() == []
    assert _label(api) == "r1"


def test_the_owner_moves_a_job_another_replicas_late_create_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """r0 claimed the try, was taken for dead before its create, and the try was queued
    again and claimed by r2; r0's create then landed. r2's create finds r0's Job: the
    database says r2 owns the try, so r2 moves it and judges it."""
    api = FakeApi()
    late = make_executor(monkeypatch, Clock(), api, replica="r0")
    late.start([launch()])
    owner = make_executor(monkeypatch, Clock(), api, replica="r2")
    owner.start([launch()])
    assert _label(api) == "r0"
    assert owner.poll() == []
    assert _label(api) == "r0"  # read; not moved before the database confirms
    _confirm(owner)
    assert owner.poll() == []
    assert _label(api) == "r2"
    (job,) = api.jobs.values()
    assert owner.cache.job(job["metadata"]["name"]) is not None  # in r2's watches now
    assert owner.alive() == [KEY]


def test_a_confirmation_older_than_the_read_does_not_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi()
    make_executor(monkeypatch, Clock(), api, replica="r0").start([launch()])
    before = time.monotonic()
    adopter = make_executor(monkeypatch, Clock(), api, replica="r1")
    adopter.adopt(
        KEY,
        adopter.planned_external_id(launch()),
        elapsed=1.0,
        timeout=None,
        skip_on_exit_code=frozenset(),
    )
    adopter.heartbeats_recorded([KEY], before)  # the adoption's own commit, before the read
    adopter.poll()
    assert _label(api) == "r0"


def test_a_move_onto_a_job_that_changed_since_it_was_read_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """r1 read the Job and had its ownership confirmed, then paused; meanwhile r2 adopted
    the try and moved the Job. r1's patch carries the version it read: refused (409), so
    r1 reads again and waits for the database again (which names r2: r1 releases it)."""
    api = FakeApi()
    make_executor(monkeypatch, Clock(), api, replica="r0").start([launch()])
    ext = make_executor(monkeypatch, Clock(), api, replica="rx").planned_external_id(launch())
    paused = make_executor(monkeypatch, Clock(), api, replica="r1")
    paused.adopt(KEY, ext, elapsed=1.0, timeout=None, skip_on_exit_code=frozenset())
    _confirm(paused)

    later = make_executor(monkeypatch, Clock(), api, replica="r2")
    later.adopt(KEY, ext, elapsed=1.0, timeout=None, skip_on_exit_code=frozenset())
    _confirm(later)
    later.poll()
    assert _label(api) == "r2"

    assert paused.poll() == []  # its patch refused: the Job changed since its read
    assert _label(api) == "r2"
    assert paused.poll() == []  # read again: waits for a confirmation after this read
    assert _label(api) == "r2"


def test_a_replica_taken_for_dead_does_not_end_a_job_moved_since_it_looked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """r0 wakes from a pause past its try's pod start timeout, before its watch delivers the
    move r1 made: judged on its old copy, the try would fail and its Job (r1's now) be
    deleted. The delete names the version judged; refused, r0 reports nothing."""
    clock, api = Clock(), FakeApi()
    stale = make_executor(monkeypatch, clock, api, replica="r0")
    stale.start([launch()])
    assert stale.poll() == []
    (job,) = api.jobs.values()
    job["metadata"]["labels"][names.REPLICA_LABEL] = "r1"  # r1 adopted it and moved it
    api._bump(job)
    clock.now += timedelta(seconds=120)  # past the pod start timeout (60 s)
    assert stale.poll() == []
    assert api.deleted == []
    assert stale.alive() == [KEY]
    jobs = stale.cache._kinds["jobs"]
    stale.cache._apply(jobs, {"type": "DELETED", "object": job})  # the watch catches up
    assert stale.poll() == []
    assert stale.alive() == []  # handed over
    assert api.deleted == []


# -- finding 2: a create with no clear answer ------------------------------------------


def test_a_create_with_no_clear_answer_takes_the_job_it_made_instead_of_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every create timed out, the first after the API server stored the Job: at the pod
    start timeout the try's Job is looked for and found, and the try goes on with it
    rather than failing while its Job runs (and a retry starting beside it)."""
    clock, api = Clock(), FakeApi()
    executor = make_executor(monkeypatch, clock, api)
    _creates_time_out(api, stored=[True, False, False, False])
    executor.start([launch()])
    (job,) = api.jobs.values()
    pods = executor.cache._kinds["pods"]
    pod = api.add_pod(job, {"running": {}})  # it carries this replica's label: watched
    executor.cache._apply(pods, {"type": "ADDED", "object": pod})
    clock.now += timedelta(seconds=30)
    assert executor.poll() == []
    clock.now += timedelta(seconds=30)  # the pod start timeout (60 s)
    assert executor.poll() == []  # found: not failed
    assert executor.alive() == [KEY]
    assert api.deleted == []
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
    api._bump(pod)
    executor.cache._apply(pods, {"type": "MODIFIED", "object": pod})
    (event,) = executor.poll()
    assert (event.key, event.state) == (KEY, TaskState.SUCCESS)


def test_a_create_with_no_clear_answer_and_no_job_fails_the_try(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, api = Clock(), FakeApi()
    executor = make_executor(monkeypatch, clock, api)
    _creates_time_out(api, stored=[False, False, False])
    executor.start([launch()])
    clock.now += timedelta(seconds=30)
    assert executor.poll() == []
    api.fail_next["read_job"] = [503]  # cannot look yet: not failed on a guess
    clock.now += timedelta(seconds=30)
    assert executor.poll() == []
    assert executor.alive() == [KEY]
    (event,) = executor.poll()  # looked: no Job
    assert event.state == TaskState.FAILED
    assert "could not create Job" in (event.reason or "")
    assert api.jobs == {}


def test_a_try_whose_create_is_still_tried_is_alive_to_the_zombie_sweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not "never started" (a zombie verdict, and a retry, while a create may still land):
    its own pod start timeout decides, after looking for its Job."""
    clock, api = Clock(), FakeApi()
    executor = make_executor(monkeypatch, clock, api)
    _creates_time_out(api, stored=[False, False])
    executor.start([launch()])
    seen = executor.inspect(KEY, executor.planned_external_id(launch()))
    assert (seen.state, seen.running, seen.restartable_within) == ("alive", False, None)


# -- a try fenced after it ended keeps its Job ----------------------------------------


def _finish(job: dict[str, Any]) -> None:
    job.setdefault("status", {})["conditions"] = [{"type": "Complete", "status": "True"}]


def test_a_try_fenced_after_another_replica_saw_it_end_keeps_its_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two replicas sweep a dead one's try at once: one adopts it (and waits for the
    database's word before moving it), the other sees its Job finished and records the
    end. The adopter's next heartbeat finds the try ended under its own id and fences it:
    the Job has nothing left to run, and is kept (its record, its pod's log) for its TTL.
    A Job still running is deleted, as ever."""
    api = FakeApi()
    owner = make_executor(monkeypatch, Clock(), api, replica="r0")
    owner.start([launch()])
    (job,) = api.created
    api.add_pod(job, {"running": {}})
    ext = owner.external_ids()[KEY]

    adopter = make_executor(monkeypatch, Clock(), api, replica="r1")
    assert adopter.inspect(KEY, ext).state == "alive"
    adopter.adopt(KEY, ext, elapsed=5.0, timeout=None, skip_on_exit_code=frozenset())
    adopter.poll()  # reads the Job and pods for the move; not confirmed yet
    _finish(job)  # it ends; another replica's sweep records its success
    adopter.kill(KEY, "the database no longer has this try running", ext)
    assert api.deleted == []
    assert adopter.external_ids() == {}

    # By its external id alone (a try this replica does not track): the same rule.
    adopter.kill(KEY, "the database no longer has this try running", ext)
    assert api.deleted == []
    del job["status"]["conditions"]
    adopter.kill(KEY, "the database no longer has this try running", ext)
    assert api.deleted == [(job["metadata"]["namespace"], job["metadata"]["name"])]
