"""A DAG's DagRun objects keep a bounded history; the database keeps every run.

Real Postgres and the fake API server of tests/db/test_status_publisher.py
(its delete honours a uid precondition as the API server does). Runs end by
an update of their row, as the loop ends them, each at a time of its own, so
which objects are the newest is known.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import kopf
import pytest
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun, RunPublication, StatusOutbox
from sluice.handlers import operator
from sluice.metrics import families
from sluice.status import history, refusals, render, store
from sluice.status.publisher import DROPPED
from tests.db.test_status_publisher import NS, Clock, drain, outbox_rows, publisher, register_in
from tests.fake_kube import FakeKube, refusal
from tests.support import T0, count_queries, manifest, trigger


@pytest.fixture
def handlers(sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    """The kopf handlers on this test's database."""
    monkeypatch.setattr(operator, "_sessions", sessions)
    monkeypatch.setattr(kopf, "warn", lambda *_, **__: None)


def _runs(sessions: sessionmaker[Session], dag: str, n: int) -> list[int]:
    register_in(sessions, manifest(dag, [{"name": "a"}], schedule=None, maxActiveRuns=n))
    return [trigger(sessions, dag, T0, logical_date=T0 + timedelta(hours=i)) for i in range(n)]


def _end(sessions: sessionmaker[Session], run_id: int, minute: int, state: str = "success") -> None:
    with sessions.begin() as session:
        session.execute(
            update(DagRun)
            .where(DagRun.id == run_id)
            .values(state=state, end_date=T0 + timedelta(minutes=minute))
        )


def _names(sessions: sessionmaker[Session], run_ids: list[int]) -> set[str]:
    with sessions() as session:
        views = store.read_runs(session, run_ids, NS)
    return {render.object_name(views[i]) for i in run_ids}


def _shown(kube: FakeKube) -> set[str]:
    return {obj["metadata"]["name"] for obj in kube.dagruns()}


def _pruned() -> float:
    value: float = families.DAGRUN_OBJECTS_PRUNED._value.get()
    return value


def _gone(sessions: sessionmaker[Session]) -> dict[int, bool]:
    with sessions() as session:
        return dict(session.execute(select(RunPublication.dag_run_id, RunPublication.gone)).all())


def test_a_dag_keeps_the_objects_of_its_newest_ended_runs_and_the_database_every_run(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=2)
    runs = _runs(sessions, "minutely", 5)
    other = _runs(sessions, "other", 3)  # another DAG's history is its own
    drain(pub)
    assert len(kube.dagruns()) == 8
    before = _pruned()
    # They end out of their logical order: the newest by end time are runs[0] and runs[3].
    for run_id, minute in zip(runs, (50, 10, 20, 40, 30), strict=True):
        _end(sessions, run_id, minute, "failed" if minute == 20 else "success")
    for minute, run_id in enumerate(other):
        _end(sessions, run_id, minute)
    drain(pub)
    assert _shown(kube) == _names(sessions, [runs[0], runs[3], other[1], other[2]])
    assert pub.counts.pruned == 4
    assert _pruned() == before + 4
    with sessions() as session:  # every run is still there, as it ended
        states = session.execute(select(DagRun.state).where(DagRun.dag_id == "minutely"))
        assert sorted(states.scalars()) == ["failed", "success", "success", "success", "success"]
        assert session.execute(select(func.count()).select_from(StatusOutbox)).scalar_one() == 0
    gone = _gone(sessions)
    assert [gone[r] for r in runs] == [False, True, True, False, True]
    # A later change to a run whose object was deleted creates no object again.
    with sessions.begin() as session:
        store.enqueue(session, runs)
    drain(pub)
    assert len(kube.dagruns()) == 4


def test_only_ended_runs_objects_count_and_go(sessions: sessionmaker[Session]) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=1)
    runs = _runs(sessions, "mixed", 5)
    drain(pub)
    for minute, run_id in enumerate(runs[:3]):
        _end(sessions, run_id, minute)
    drain(pub)
    # The newest ended run's object, and both active runs' (queued: never deleted).
    assert _shown(kube) == _names(sessions, [runs[2], runs[3], runs[4]])


def test_a_limit_of_0_keeps_every_object(sessions: sessionmaker[Session]) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=0)
    runs = _runs(sessions, "all", 4)
    for minute, run_id in enumerate(runs):
        _end(sessions, run_id, minute)
    drain(pub)
    assert pub.resync() >= 0
    drain(pub)
    assert len(kube.dagruns()) == 4
    assert not any(verb == "delete" for verb, _ in kube.calls)


def test_a_users_object_counts_and_its_deletion_cancels_nothing(
    sessions: sessionmaker[Session], handlers: None
) -> None:
    """A DagRun a user created to trigger a run is one of the DAG's objects like the
    scheduler's (as Argo's workflow GC does not tell them apart); deleting it, as
    deleting any ended run's object, cancels nothing (ADR 0018)."""
    kube = FakeKube()
    kube.add_dag(NS, "manual")
    pub = publisher(sessions, kube, history_limit=2)
    register_in(sessions, manifest("manual", [{"name": "a"}], schedule=None, maxActiveRuns=4))
    body = {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DagRun",
        "metadata": {"name": "by-hand", "namespace": NS, "uid": "uid-hand", "generation": 1},
        "spec": {"dagName": "manual"},
    }
    operator.dagrun_created(body=body, meta=body["metadata"], patch=kopf.Patch(), retry=0)
    kube.objects[("dagruns", NS, "by-hand")] = {
        "metadata": {**body["metadata"], "resourceVersion": "1"},
        "spec": body["spec"],
    }
    with sessions() as session:
        (users,) = session.execute(select(DagRun.id)).scalars()
    scheduled = [
        trigger(sessions, "manual", T0, logical_date=T0 + timedelta(hours=i)) for i in (1, 2)
    ]
    drain(pub)
    assert len(kube.dagruns()) == 3
    for minute, run_id in enumerate([users, *scheduled]):
        _end(sessions, run_id, minute)
    drain(pub)
    assert ("dagruns", NS, "by-hand") not in kube.objects  # the oldest ended
    assert len(kube.dagruns()) == 2
    operator.dagrun_deleted(body=body, name="by-hand", namespace=NS, retry=0)  # kopf's turn
    with sessions() as session:
        run = session.execute(select(DagRun).where(DagRun.id == users)).scalar_one()
        assert (run.state, run.end_date) == ("success", T0)


def test_an_object_created_again_under_the_name_is_never_deleted(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=0)
    runs = _runs(sessions, "renamed", 3)
    for minute, run_id in enumerate(runs):
        _end(sessions, run_id, minute)
    drain(pub)
    (oldest,) = _names(sessions, [runs[0]])
    replaced: dict[str, Any] = copy.deepcopy(kube.dagrun(NS, oldest))
    replaced["metadata"]["uid"] = "someone-elses"
    kube.objects[("dagruns", NS, oldest)] = replaced  # deleted and created again
    pub.history_limit = 1  # lowered, and the replica restarted: its resync prunes
    pub.resync()
    drain(pub)
    assert kube.dagrun(NS, oldest)["metadata"]["uid"] == "someone-elses"
    assert _shown(kube) == _names(sessions, [runs[0], runs[2]])
    assert pub.counts.pruned == 1  # runs[1]'s; the precondition refused the other delete
    assert ("delete", oldest) in kube.calls


def test_a_cycle_deletes_a_bounded_number_and_the_next_cycles_go_on(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=0, prunes_per_cycle=3)
    runs = _runs(sessions, "backlog", 10)
    for minute, run_id in enumerate(runs):
        _end(sessions, run_id, minute)
    drain(pub)
    pub.history_limit = 2
    with sessions.begin() as session:  # what a start-up's resync enqueues (at most 50 each)
        assert history.enqueue(session, ["backlog"], keep=2, per_dag=5) == 5
    deletes = []
    for _ in range(10):
        before = sum(1 for verb, _ in kube.calls if verb == "delete")
        if pub.run_once() == 0:
            break
        deletes.append(sum(1 for verb, _ in kube.calls if verb == "delete") - before)
    assert max(deletes) == 3
    assert sum(deletes) == 8
    assert _shown(kube) == _names(sessions, runs[-2:])  # the oldest went first


def test_a_run_taken_again_before_its_object_is_deleted_keeps_it(
    sessions: sessionmaker[Session],
) -> None:
    """A backfill may take an ended run again (reprocess) between the deletion being
    enqueued and made: an active run's object is never deleted; it is shown again."""
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=0)
    runs = _runs(sessions, "again", 2)
    for minute, run_id in enumerate(runs):
        _end(sessions, run_id, minute)
    drain(pub)
    with sessions.begin() as session:
        assert history.enqueue(session, ["again"], keep=1, per_dag=50) == 1
        session.execute(
            update(DagRun).where(DagRun.id == runs[0]).values(state="queued", end_date=None)
        )
    drain(pub)
    assert len(kube.dagruns()) == 2
    assert not _gone(sessions)[runs[0]]
    (name,) = _names(sessions, [runs[0]])
    assert kube.dagrun(NS, name)["status"]["state"] == "queued"


def test_two_replicas_enqueue_each_deletion_once(sessions: sessionmaker[Session]) -> None:
    """One replica's enqueue holds its publications' locks until it commits; another's,
    meanwhile, skips them, and after the commit finds them `gone`: one `prune` row each."""
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=0)
    runs = _runs(sessions, "twice", 4)
    for minute, run_id in enumerate(runs):
        _end(sessions, run_id, minute)
    drain(pub)
    with sessions.begin() as first:
        assert history.enqueue(first, ["twice"], keep=1, per_dag=50) == 3
        with sessions.begin() as second:
            assert history.enqueue(second, ["twice"], keep=1, per_dag=50) == 0
    with sessions.begin() as third:
        assert history.enqueue(third, ["twice"], keep=1, per_dag=50) == 0
    with sessions() as session:
        kinds = session.execute(select(StatusOutbox.kind, StatusOutbox.dag_run_id)).all()
    assert sorted(kinds) == sorted((history.PRUNE, r) for r in runs[:3])


def test_a_dags_excess_is_found_through_the_partial_index(sessions: sessionmaker[Session]) -> None:
    """The statement reads the DAG's objects still there through ix_run_publication_history
    (migration 0014), never its whole history: with sequential scans off, the plan uses it
    (a predicate that did not match the index's would leave a sequential scan)."""
    with sessions.begin() as session:
        session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            row[0]
            for row in session.execute(
                text(f"EXPLAIN {history._ENQUEUE.text}"),
                {"dag_ids": ["a"], "keep": 100, "per_dag": 50, "active": ["queued", "running"]},
            )
        )
    assert plan.count("ix_run_publication_history") >= 2, plan


def test_a_deletion_refused_for_good_is_dropped_and_said_on_the_object(
    sessions: sessionmaker[Session],
) -> None:
    """A scheduler without the right to delete DagRuns (RBAC made by hand): the deletion
    is retried as any refused publication, then dropped with an Event on the object,
    which stays; nothing is deleted and the outbox empties."""
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock, history_limit=0)
    runs = _runs(sessions, "forbidden", 2)
    for minute, run_id in enumerate(runs):
        _end(sessions, run_id, minute)
    drain(pub)
    kube.refuse["delete"] = refusal(403, "Forbidden", "cannot delete resource dagruns")
    before = families.STATUS_DROPPED.labels(history.PRUNE, refusals.FORBIDDEN)._value.get()
    pub.history_limit = 1
    pub.resync()
    for _ in range(refusals.MAX_FAILURES + 2):
        pub.run_once()
        clock.advance(31)
    assert outbox_rows(sessions) == 0
    assert len(kube.dagruns()) == 2
    assert sum(1 for verb, _ in kube.calls if verb == "delete") == refusals.MAX_FAILURES
    after = families.STATUS_DROPPED.labels(history.PRUNE, refusals.FORBIDDEN)._value.get()
    assert after == before + 1
    (event,) = [e for e in kube.events if e["reason"] == DROPPED]
    assert event["involvedObject"]["name"] in _names(sessions, [runs[0]])
    assert "could not delete this DagRun object" in event["message"]


def test_a_cycles_statements_do_not_grow_with_the_objects_it_deletes(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    """Taking, checking and deleting the rows of 1 or 5 deletions, and enqueueing what
    comes next, are the same statements: the deletions are API calls, not queries."""
    kube = FakeKube()
    pub = publisher(sessions, kube, history_limit=0)
    for dag in ("one", "five"):
        for minute, run_id in enumerate(_runs(sessions, dag, 6)):
            _end(sessions, run_id, minute)
    drain(pub)

    def cycle(dag: str, keep: int) -> int:
        with sessions.begin() as session:
            assert history.enqueue(session, [dag], keep=keep, per_dag=50) == 6 - keep
        with count_queries(engine) as statements:
            pub.run_once()
        return len(statements)

    pub.history_limit = 5
    assert cycle("one", 5) == cycle("five", 1)
    assert pub.counts.pruned == 6
