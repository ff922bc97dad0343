"""Status flows out: triggers fill the status outbox, publishers patch DagRun objects.

The API server here is tests/fake_kube.py (resourceVersion preconditions,
409s and 404s as the real one answers them); tests/k8s/test_status.py runs the
same path against the local cluster. The scheduling loop runs on a fake
clock; the publishers on the database's real time (the outbox's rows are
stamped by `now()` in the triggers).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Dag, DagRun, RunPublication, StatusOutbox, TaskInstance
from sluice.handlers.objects import BackfillRequest
from sluice.handlers.store import cancel_backfill
from sluice.handlers.store import start_backfill as store_backfill
from sluice.spec.states import Reprocess, TaskState
from sluice.status import render, store
from sluice.status.publisher import StatusPublisher
from tests.fake_kube import FakeKube
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    count_queries,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)

NS = "team-a"


class Clock:
    """The real time plus an offset a test moves forward."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def publisher(
    sessions: sessionmaker[Session], kube: FakeKube, clock: Any = None, **options: Any
) -> StatusPublisher:
    made = StatusPublisher(
        sessions,
        client.ApiClient,
        clock=clock or Clock(),
        default_namespace=NS,
        **{"min_interval": 0.0, **options},
    )
    made.custom = kube  # type: ignore[assignment]
    made.core = kube  # type: ignore[assignment]
    with sessions.begin() as session:
        store.enable(session)
    return made


def register_in(sessions: sessionmaker[Session], m: Any, namespace: str = NS) -> None:
    """A DAG applied as an object of `namespace` (a file's DAG has none)."""
    register(sessions, m)
    with sessions.begin() as session:
        session.execute(
            update(Dag).where(Dag.dag_id == m.metadata.name).values(namespace=namespace)
        )


def outbox_rows(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.execute(select(func.count()).select_from(StatusOutbox)).scalar_one())


def db_state(sessions: sessionmaker[Session], run_id: int) -> str:
    with sessions() as session:
        return str(session.execute(select(DagRun.state).where(DagRun.id == run_id)).scalar_one())


def drain(*publishers: StatusPublisher, rounds: int = 20) -> None:
    for _ in range(rounds):
        if sum(p.run_once() for p in publishers) == 0:
            return
    raise AssertionError("the status outbox did not drain")


def test_nothing_is_captured_before_a_publisher_enables_it(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, manifest("quiet", [{"name": "a"}]))
    clock = FakeClock()
    trigger(sessions, "quiet", clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor(), clock))
    assert outbox_rows(sessions) == 0


def test_state_changes_enqueue_their_run_once_per_statement_and_heartbeats_nothing(
    sessions: sessionmaker[Session],
) -> None:
    with sessions.begin() as session:
        store.enable(session)
    register(sessions, manifest("capture", [{"name": "a"}, {"name": "b"}]))
    clock = FakeClock()
    run_id = trigger(sessions, "capture", clock.now)
    with sessions() as session:  # the new run, and its DAG (active runs, last run)
        rows = session.execute(select(StatusOutbox.kind, StatusOutbox.dag_run_id, StatusOutbox.key))
        assert set(rows.all()) == {("dag", None, "capture"), ("run", run_id, None)}
    with sessions.begin() as session:
        session.execute(text("DELETE FROM status_outbox"))
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == run_id)
            .values(last_heartbeat_at=clock.now)
        )
    assert outbox_rows(sessions) == 0
    with sessions.begin() as session:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_run_id == run_id)
            .values(state=TaskState.SCHEDULED)
        )
    with sessions() as session:
        assert session.execute(select(StatusOutbox.dag_run_id)).scalars().all() == [run_id]


def test_a_run_is_published_to_an_object_owned_by_its_dag_with_events(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    dag_uid = kube.add_dag(NS, "flaky")
    pub = publisher(sessions, kube)
    register_in(sessions, manifest("flaky", [{"name": "a", "retries": 1}]))
    clock = FakeClock()
    executor = ScriptedExecutor({"a": [TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    run_id = trigger(sessions, "flaky", clock.now)
    for _ in range(60):
        busy = loop.tick().busy
        pub.run_once()
        clock.advance(seconds=30)  # past the retry delay
        if not busy and db_state(sessions, run_id) == "success":
            break
    drain(pub)
    (obj,) = kube.dagruns()
    assert obj["metadata"]["ownerReferences"][0]["uid"] == dag_uid
    assert obj["metadata"]["labels"]["sluice.io/dag"] == "flaky"
    status = obj["status"]
    assert status["state"] == "success"
    assert status["tasks"] == "1/1"
    (entry,) = status["taskInstances"]
    assert (entry["name"], entry["state"], entry["tryNumber"]) == ("a", "success", 2)
    reasons = [e["reason"] for e in kube.events]
    assert reasons[0] == "RunStarted"
    assert reasons[-1] == "RunSucceeded"
    assert "RetryScheduled" in reasons
    assert all(e["involvedObject"]["uid"] == obj["metadata"]["uid"] for e in kube.events)


def test_two_publishers_racing_make_one_object_per_run_with_the_final_state(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    first, second = publisher(sessions, kube), publisher(sessions, kube)
    register(sessions, manifest("race", [{"name": f"t{i}"} for i in range(8)], maxActiveRuns=4))
    clock = FakeClock()
    run_ids = [
        trigger(sessions, "race", clock.now, logical_date=clock.now - timedelta(hours=h))
        for h in range(4)
    ]
    done = threading.Event()

    def publish(p: StatusPublisher) -> None:
        while not done.is_set():
            p.run_once()

    threads = [threading.Thread(target=publish, args=(p,)) for p in (first, second)]
    for thread in threads:
        thread.start()
    try:
        run_until_idle(make_loop(sessions, ScriptedExecutor(), clock))
    finally:
        done.set()
        for thread in threads:
            thread.join()
    drain(first, second)
    objects = kube.dagruns()
    assert len(objects) == len(run_ids)
    assert [c for c in kube.calls if c[0] == "create"].__len__() >= len(run_ids)
    for obj in objects:
        assert obj["status"]["state"] == "success", obj["status"]
        assert obj["status"]["tasks"] == "8/8"


def test_an_api_server_that_is_down_loses_nothing(sessions: sessionmaker[Session]) -> None:
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock)
    register_in(sessions, manifest("outage", [{"name": "a"}]))
    loop_clock = FakeClock()
    run_id = trigger(sessions, "outage", loop_clock.now)
    drain(pub)
    kube.down = True
    run_until_idle(make_loop(sessions, ScriptedExecutor(), loop_clock))
    assert db_state(sessions, run_id) == "success"
    pub.run_once()
    assert pub.counts.failures >= 1
    assert outbox_rows(sessions) > 0  # given back, not lost
    kube.down = False
    clock.advance(60)  # past the backoff
    drain(pub)
    (obj,) = kube.dagruns()
    assert obj["status"]["state"] == "success"


def test_a_run_is_patched_at_most_once_per_interval_however_fast_it_changes(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock, min_interval=1.0)
    register_in(sessions, manifest("busy", [{"name": f"t{i}"} for i in range(20)]))
    loop_clock = FakeClock()
    trigger(sessions, "busy", loop_clock.now)
    loop = make_loop(sessions, ScriptedExecutor(), loop_clock, max_tis_per_query=2)
    pub.run_once()
    patches_at_start = sum(1 for verb, _ in kube.calls if verb == "patch")
    for _ in range(10):  # ten ticks of changes within the same second
        loop.tick()
        pub.run_once()
    assert sum(1 for verb, _ in kube.calls if verb == "patch") == patches_at_start
    assert pub.counts.deferred >= 1
    clock.advance(1.0)
    run_until_idle(loop)
    pub.run_once()
    assert sum(1 for verb, _ in kube.calls if verb == "patch") == patches_at_start + 1


def test_a_conflict_reads_the_object_again_and_publishes(sessions: sessionmaker[Session]) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube)
    register_in(sessions, manifest("touched", [{"name": "a"}]))
    loop_clock = FakeClock()
    trigger(sessions, "touched", loop_clock.now)
    drain(pub)
    (obj,) = kube.dagruns()
    kube.touch(NS, obj["metadata"]["name"])  # kopf or a user wrote to it meanwhile
    run_until_idle(make_loop(sessions, ScriptedExecutor(), loop_clock))
    drain(pub)
    assert pub.counts.conflicts == 1
    assert kube.dagrun(NS, obj["metadata"]["name"])["status"]["state"] == "success"


def test_a_users_object_gets_the_status_and_once_deleted_is_not_created_again(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube)
    register_in(sessions, manifest("mine", [{"name": "a"}]))
    loop_clock = FakeClock()
    run_id = trigger(sessions, "mine", loop_clock.now, run_id="manual__my-run__abc")
    with sessions.begin() as session:
        session.execute(update(DagRun).where(DagRun.id == run_id).values(object_name="my-run"))
    kube.objects[("dagruns", NS, "my-run")] = {
        "metadata": {"name": "my-run", "namespace": NS, "uid": "u-1", "resourceVersion": "0"},
        "spec": {"dagName": "mine"},
    }
    drain(pub)
    assert kube.dagrun(NS, "my-run")["status"]["state"] == "queued"
    kube.delete(NS, "my-run")
    run_until_idle(make_loop(sessions, ScriptedExecutor(), loop_clock))
    drain(pub)
    assert kube.dagruns() == []
    with sessions() as session:
        assert session.execute(
            select(RunPublication.gone).where(RunPublication.dag_run_id == run_id)
        ).scalar_one()


def test_resync_finds_objects_that_show_another_state(sessions: sessionmaker[Session]) -> None:
    kube = FakeKube()
    # The loop's fake clock ended the run days before the publisher's (real) now.
    pub = publisher(sessions, kube, horizon=timedelta(days=30))
    register_in(sessions, manifest("drift", [{"name": "a"}]))
    loop_clock = FakeClock()
    trigger(sessions, "drift", loop_clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor(), loop_clock))
    drain(pub)
    (obj,) = kube.dagruns()
    obj["status"]["state"] = "running"  # e.g. restored from a backup, or edited by hand
    assert pub.resync() == 1
    drain(pub)
    assert obj["status"]["state"] == "success"


@pytest.mark.parametrize("namespace", [None])
def test_a_dag_without_a_namespace_is_published_to_the_default_one(
    sessions: sessionmaker[Session], namespace: str | None
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube)
    register(sessions, manifest("file-dag", [{"name": "a"}]))
    trigger(sessions, "file-dag", FakeClock().now)
    drain(pub)
    (obj,) = kube.dagruns()
    assert obj["metadata"]["namespace"] == NS
    assert "ownerReferences" not in obj["metadata"]
    assert (
        render.object_name(
            render.RunView(**{**_view_fields(sessions), "tasks": []})  # the same name again
        )
        == obj["metadata"]["name"]
    )


def _view_fields(sessions: sessionmaker[Session]) -> dict[str, Any]:
    with sessions() as session:
        run = session.execute(select(DagRun)).scalar_one()
        return {
            "id": run.id,
            "dag_id": run.dag_id,
            "namespace": NS,
            "run_id": run.run_id,
            "run_type": run.run_type,
            "state": run.state,
            "logical_date": run.logical_date,
            "data_interval_start": run.data_interval_start,
            "data_interval_end": run.data_interval_end,
            "created_at": run.created_at,
            "start_date": run.start_date,
            "end_date": run.end_date,
            "tasks_total": run.tasks_total,
            "tasks_done": run.tasks_done,
        }


def test_a_missing_dagrun_crd_is_reported_with_the_fix(sessions: sessionmaker[Session]) -> None:
    kube = FakeKube(missing_kinds={"dagruns"})
    pub = publisher(sessions, kube)
    register_in(sessions, manifest("nocrd", [{"name": "a"}]))
    run_id = trigger(sessions, "nocrd", FakeClock().now)
    with sessions() as session:
        run = store.read_runs(session, [run_id], NS)[run_id]
    outcome = pub._publish(run, None)
    assert outcome.kind == "failed"
    assert "kubectl apply -f crds/" in outcome.error
    assert "--no-publish-status" in outcome.error
    pub.run_once()
    assert outbox_rows(sessions) == 1  # kept for when the CRD is there


def test_a_failing_object_backs_off_however_many_changes_it_gets(
    sessions: sessionmaker[Session],
) -> None:
    """Every change to a run adds an outbox row; the backoff after a failed publication is
    the run's, so a new row waits it out instead of starting again at 2 s (with the
    DagRun CRD missing, 3 replicas once tried 12 times a second)."""
    kube = FakeKube(missing_kinds={"dagruns"})
    clock = Clock()
    pub = publisher(sessions, kube, clock)
    register_in(sessions, manifest("storm", [{"name": "a"}], schedule=None))
    run_id = trigger(sessions, "storm", FakeClock().now)

    def change(state: str) -> None:  # what a report does: a new row for the run
        with sessions.begin() as session:
            session.execute(update(DagRun).where(DagRun.id == run_id).values(state=state))

    def tries() -> int:
        return sum(1 for verb, _ in kube.calls if verb == "create")

    pub.run_once()
    assert (tries(), pub.counts.failures) == (1, 1)  # backoff 2 s
    for state in ("running", "queued", "running"):
        change(state)
        clock.advance(0.5)
        pub.run_once()
    assert tries() == 1  # the new rows waited with the run
    assert pub.counts.held == 3
    clock.advance(1.0)  # 2.5 s since the failure
    pub.run_once()
    assert (tries(), pub.counts.failures) == (2, 2)  # tried again; backoff 4 s
    change("queued")
    clock.advance(3.0)
    pub.run_once()
    assert tries() == 2
    kube.missing_kinds.clear()  # the CRD is applied
    clock.advance(1.5)
    drain(pub)
    assert tries() == 3
    assert kube.dagruns()[0]["status"]["state"] == "queued"
    change("running")
    drain(pub)  # published: no backoff left
    assert kube.dagruns()[0]["status"]["state"] == "running"
    assert outbox_rows(sessions) == 0


def test_a_dags_object_shows_its_active_runs_and_its_latest_run(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube)
    register_in(sessions, manifest("shown", [{"name": "a"}], schedule=None))
    register_in(sessions, manifest("other", [{"name": "a"}], schedule=None))
    kube.add_dag(NS, "shown")
    kube.add_dag(NS, "other")
    first = trigger(sessions, "shown", T0)
    trigger(sessions, "shown", T0 + timedelta(days=2))
    middle = trigger(sessions, "shown", T0 + timedelta(days=1))
    with sessions.begin() as session:
        session.execute(update(DagRun).where(DagRun.id == first).values(state="success"))
        session.execute(update(DagRun).where(DagRun.id == middle).values(state="running"))
    drain(pub)
    status = kube.objects[("dags", NS, "shown")]["status"]
    assert status["activeRuns"] == 2  # one queued, one running; the success is not
    assert status["lastRun"]["logicalDate"].startswith("2026-12-03")  # the latest date
    assert status["version"] == 1
    assert status["paused"] is False
    # A DAG with no run has no last run, and the other DAG's runs are not counted.
    assert kube.objects[("dags", NS, "other")].get("status", {}).get("lastRun") is None


def _backfill_request(dag: str, uid: str, days: int, **extra: Any) -> BackfillRequest:
    return BackfillRequest(
        dag_id=dag,
        namespace=NS,
        name=f"{dag}-fill",
        uid=uid,
        start=T0 - timedelta(days=days),
        end=T0 - timedelta(days=1),
        max_active_runs=extra.get("max_active_runs"),
        reprocess=Reprocess.NONE,
    )


def test_a_backfill_objects_progress_and_its_dags_status_are_published(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    kube.add_dag(NS, "daily")
    kube.objects[("backfills", NS, "daily-fill")] = {
        "metadata": {"name": "daily-fill", "namespace": NS, "uid": "b-1", "resourceVersion": "0"}
    }
    pub = publisher(sessions, kube)
    register_in(
        sessions,
        manifest("daily", [{"name": "a"}], schedule="@daily", startDate="2026-11-01T00:00:00Z"),
    )
    clock = FakeClock()
    with sessions.begin() as session:
        plan = store_backfill(
            session, _backfill_request("daily", "b-1", 5, max_active_runs=2), clock.now
        )
    assert len(plan.created) == 5
    drain(pub)
    fill = kube.objects[("backfills", NS, "daily-fill")]["status"]
    assert (fill["state"], fill["progress"]) == ("running", "0/5")
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    for _ in range(40):
        loop.tick()
        pub.run_once()
        with sessions() as session:
            active = session.execute(
                select(func.count()).where(
                    DagRun.backfill_id.is_not(None), DagRun.state == "running"
                )
            ).scalar_one()
        assert active <= 2, "the backfill's maxActiveRuns"
    drain(pub)
    fill = kube.objects[("backfills", NS, "daily-fill")]["status"]
    assert fill == {
        "state": "success",
        "runsTotal": 5,
        "runsDone": 5,
        "progress": "5/5",
        "runs": {"queued": 0, "running": 0, "success": 5, "failed": 0},
    }
    dag = kube.objects[("dags", NS, "daily")]["status"]
    assert dag["activeRuns"] == 0
    assert dag["paused"] is False
    assert dag["lastRun"]["state"] == "success"
    assert dag["lastRun"]["logicalDate"] >= "2026-11-30"
    assert dag["version"] == 1


def test_deleting_a_backfill_cancels_its_unfinished_runs(sessions: sessionmaker[Session]) -> None:
    register_in(
        sessions,
        manifest("weekly", [{"name": "a"}], schedule="@daily", startDate="2026-11-01T00:00:00Z"),
    )
    clock = FakeClock()
    with sessions.begin() as session:
        store_backfill(session, _backfill_request("weekly", "b-2", 7, max_active_runs=1), clock.now)
    executor = ScriptedExecutor()
    executor.hold = {"a"}
    loop = make_loop(sessions, executor, clock)
    for _ in range(5):
        loop.tick()
    with sessions.begin() as session:  # only the object's own namespace knows it
        assert cancel_backfill(session, "team-b", "b-2", "cancelled: gone", clock.now) == 0
    with sessions.begin() as session:
        assert cancel_backfill(session, NS, "b-2", "cancelled: gone", clock.now) == 7
    with sessions() as session:
        states = (
            session.execute(select(DagRun.state).where(DagRun.backfill_id.is_not(None)))
            .scalars()
            .all()
        )
    assert sorted(states) == ["failed"] * 7
    with sessions.begin() as session:  # a retried delete finds nothing left to cancel
        assert cancel_backfill(session, NS, "b-2", "cancelled: gone", clock.now) == 0
    with sessions.begin() as session:  # and a retried create finds the backfill it made
        again = store_backfill(session, _backfill_request("weekly", "b-2", 7), clock.now)
        assert again.created == []


def test_pool_objects_show_their_usage_and_are_patched_only_when_it_changes(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    kube.add_pool("gpu")
    pub = publisher(sessions, kube)
    with sessions.begin() as session:
        session.execute(
            text("INSERT INTO slot_pool (name, slots, description) VALUES ('gpu', 2, '')")
        )
    register_in(
        sessions, manifest("pooled", [{"name": "a", "pool": "gpu"}, {"name": "b", "pool": "gpu"}])
    )
    clock = FakeClock()
    trigger(sessions, "pooled", clock.now)
    executor = ScriptedExecutor()
    executor.hold = {"a", "b"}
    loop = make_loop(sessions, executor, clock)
    for _ in range(5):
        loop.tick()
    assert pub.publish_pools() == 1
    gpu = kube.objects[("pools", "", "gpu")]["status"]
    assert gpu == {"slots": 2, "running": 2, "queued": 0, "open": 0}
    patches = sum(1 for verb, _ in kube.calls if verb == "patch")
    assert pub.publish_pools() == 0  # nothing changed: no patch
    assert sum(1 for verb, _ in kube.calls if verb == "patch") == patches
    executor.hold = set()
    run_until_idle(loop)
    pub.publish_pools()
    assert kube.objects[("pools", "", "gpu")]["status"]["running"] == 0


def test_rows_a_dead_publisher_took_come_back_after_the_lease(
    sessions: sessionmaker[Session],
) -> None:
    """A replica that took rows and died before publishing loses nothing: the rows were
    leased, not deleted, and another publisher takes them once the lease ends."""
    kube = FakeKube()
    clock = Clock()
    survivor = publisher(sessions, kube, clock, lease=30.0)
    register_in(sessions, manifest("leased", [{"name": "a"}]))
    trigger(sessions, "leased", FakeClock().now)
    with sessions.begin() as session:  # the dead one's take, never published
        assert store.take(session, clock(), limit=100, lease=30.0)
    assert survivor.run_once() == 0  # leased: not ready yet
    assert kube.dagruns() == []
    clock.advance(31)
    drain(survivor)
    (obj,) = kube.dagruns()
    assert obj["status"]["state"] == "queued"


def test_a_cycles_statements_do_not_grow_with_its_runs_but_for_one_upsert_each(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Deferring (the rate limit), dropping and deleting rows are a statement each per
    cycle, whatever the number of runs in it; publishing adds one upsert per run."""
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock, min_interval=1.0)
    register_in(sessions, manifest("one", [{"name": "a"}], schedule=None))
    register_in(sessions, manifest("ten", [{"name": "a"}], schedule=None, maxActiveRuns=10))
    trigger(sessions, "one", T0)
    for i in range(10):
        trigger(sessions, "ten", T0, logical_date=T0 + timedelta(hours=i))
    drain(pub)  # every run published once: a change within the second is deferred

    def cycle(dag: str) -> int:
        with sessions.begin() as session:
            session.execute(text("DELETE FROM status_outbox"))
            store.enqueue(
                session,
                session.execute(select(DagRun.id).where(DagRun.dag_id == dag)).scalars(),
            )
        with count_queries(engine) as statements:
            pub.run_once()
        return len(statements)

    assert cycle("one") == cycle("ten")  # deferred
    assert pub.counts.deferred == 11
    clock.advance(1.0)
    published = pub.counts.published
    assert cycle("ten") - cycle("one") == 9  # published: one upsert per run
    assert pub.counts.published == published + 11


def test_an_idle_publisher_waits_to_be_woken_then_publishes_within_its_interval(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, interval=0.05, idle_interval=600.0, pool_interval=600.0)
    cycles = []
    run_once = pub.run_once

    def counted() -> int:
        cycles.append(1)
        return run_once()

    pub.run_once = counted  # type: ignore[method-assign]
    register_in(sessions, manifest("idle", [{"name": "a"}], schedule=None))
    pub.start()
    try:
        deadline = time.monotonic() + 30
        while not cycles:  # the first cycle, at start
            assert time.monotonic() < deadline
            time.sleep(0.01)
        trigger(sessions, "idle", T0)  # a row in the outbox; nobody wakes the publisher
        time.sleep(0.5)  # ten intervals: an idle publisher used to take it by now
        assert len(cycles) == 1
        assert kube.dagruns() == []
        pub.wake()  # what the replica's loop does after a tick that changed something
        while not kube.dagruns():
            assert time.monotonic() < deadline, "woken, but nothing was published"
            time.sleep(0.01)
    finally:
        pub.stop()


def test_a_publisher_comes_back_for_the_rows_it_deferred_without_being_woken(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(
        sessions, kube, interval=0.05, idle_interval=600.0, pool_interval=600.0, min_interval=0.5
    )
    register_in(sessions, manifest("again", [{"name": "a"}], schedule=None))
    run_id = trigger(sessions, "again", T0)
    drain(pub)  # published once: a change within min_interval is deferred
    with sessions.begin() as session:
        session.execute(update(DagRun).where(DagRun.id == run_id).values(state="running"))
    pub.start()
    try:
        deadline = time.monotonic() + 30
        while (
            kube.dagrun(NS, render.object_name(_view(sessions, run_id)))
            .get("status", {})
            .get("state")
            != "running"
        ):
            assert time.monotonic() < deadline, "the deferred row was never published"
            time.sleep(0.01)
    finally:
        pub.stop()


def _view(sessions: sessionmaker[Session], run_id: int) -> render.RunView:
    with sessions() as session:
        return store.read_runs(session, [run_id], NS)[run_id]


def test_the_changes_of_a_burst_after_a_wake_are_one_patch(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, interval=0.5, idle_interval=600.0, pool_interval=600.0)
    register_in(sessions, manifest("burst", [{"name": "a"}], schedule=None))
    run_id = trigger(sessions, "burst", T0)
    drain(pub)  # the run's object exists
    patches = sum(1 for verb, _ in kube.calls if verb == "patch")
    pub.start()
    try:
        time.sleep(1.0)  # its first cycle (nothing new) and the interval after it: idle
        with sessions.begin() as session:  # a report: the run starts...
            session.execute(update(DagRun).where(DagRun.id == run_id).values(state="running"))
        pub.wake()
        time.sleep(0.1)  # ...and the next tick, milliseconds later, ends it
        with sessions.begin() as session:
            session.execute(update(DagRun).where(DagRun.id == run_id).values(state="success"))
        pub.wake()
        deadline = time.monotonic() + 30
        name = render.object_name(_view(sessions, run_id))
        while kube.dagrun(NS, name).get("status", {}).get("state") != "success":
            assert time.monotonic() < deadline, "the burst was never published"
            time.sleep(0.01)
    finally:
        pub.stop()
    assert sum(1 for verb, _ in kube.calls if verb == "patch") == patches + 1


def test_live_replicas_share_the_pool_sampling(sessions: sessionmaker[Session]) -> None:
    """Alone, a publisher samples the pools once per `pool_interval`; told that ten
    replicas share (the loop counts them at its heartbeat), once per ten intervals."""
    kube = FakeKube()
    pub = publisher(sessions, kube, interval=0.01, idle_interval=600.0, pool_interval=0.2)
    samples: list[float] = []
    publish_pools = pub.publish_pools

    def counted() -> int:
        samples.append(time.monotonic())
        return publish_pools()

    pub.publish_pools = counted  # type: ignore[method-assign]
    pub.start()
    try:
        time.sleep(2.0)
        alone = len(samples)
        pub.share(10)
        pub.wake()  # the idle wait ends at the next sampling as the new interval puts it
        shared_from = time.monotonic()
        time.sleep(2.0)
        shared = sum(1 for at in samples if at > shared_from)
    finally:
        pub.stop()
    assert alone >= 5  # ten intervals of 0.2 s (a slow machine may miss a few)
    assert shared <= 1  # one interval of 2 s: at most the sampling its phase put first
