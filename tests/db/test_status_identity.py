"""The status publisher publishes a run (or a backfill) only onto the object whose uid it
recorded: an object deleted and created again under the same name is another object.

The API server is tests/fake_kube.py; the runs are made by the scheduling loop
on a fake clock, as in tests/db/test_status_publisher.py.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import kopf
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun, RunPublication
from sluice.handlers import operator
from sluice.handlers.objects import BackfillRequest
from sluice.handlers.store import start_backfill
from sluice.spec.states import Reprocess
from sluice.status import store
from tests.db.test_status_publisher import NS, drain, publisher, register_in
from tests.fake_kube import FakeKube
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    make_loop,
    manifest,
    run_until_idle,
    trigger,
)


@pytest.fixture
def handlers(sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    """The kopf handlers on this test's database."""
    monkeypatch.setattr(operator, "_sessions", sessions)
    monkeypatch.setattr(kopf, "warn", lambda *_, **__: None)


def _recreate(kube: FakeKube, plural: str, name: str) -> dict[str, Any]:
    """Delete the object and create another one under the same name (a new uid), as
    `kubectl delete` and `kubectl apply` of the same file do."""
    old = kube.objects.pop((plural, NS, name))
    new = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1000",
            "labels": old["metadata"].get("labels") or {},
        },
        "spec": old.get("spec") or {},
    }
    kube.objects[(plural, NS, name)] = new
    return new


def _gone(sessions: sessionmaker[Session], run_id: int) -> bool:
    with sessions() as session:
        return bool(
            session.execute(
                select(RunPublication.gone).where(RunPublication.dag_run_id == run_id)
            ).scalar_one()
        )


@pytest.mark.parametrize("made_by", ["user", "scheduler"])
def test_a_runs_status_never_goes_onto_an_object_created_again_under_its_name(
    sessions: sessionmaker[Session], made_by: str
) -> None:
    kube = FakeKube()
    kube.add_dag(NS, "again")
    pub = publisher(sessions, kube)
    register_in(sessions, manifest("again", [{"name": "a"}]))
    clock = FakeClock()
    loop = make_loop(sessions, ScriptedExecutor(), clock)
    if made_by == "user":
        kube.objects[("dagruns", NS, "mine")] = {
            "metadata": {"name": "mine", "namespace": NS, "uid": "u-1", "resourceVersion": "0"},
            "spec": {"dagName": "again"},
        }
        run_id = trigger(sessions, "again", clock.now, run_id="manual__mine__u-1")
        with sessions.begin() as session:
            session.execute(update(DagRun).where(DagRun.id == run_id).values(object_name="mine"))
    else:
        run_id = trigger(sessions, "again", clock.now)
    drain(pub)
    (obj,) = kube.dagruns()
    assert obj["status"]["state"] == "queued"
    new = _recreate(kube, "dagruns", obj["metadata"]["name"])
    run_until_idle(loop)  # the run goes on: running, then success
    drain(pub)
    assert "status" not in new, new["status"]
    assert _gone(sessions, run_id)


def test_a_users_run_is_first_published_only_onto_the_object_that_triggered_it(
    sessions: sessionmaker[Session], handlers: None
) -> None:
    """Deleted and created again before the run's first publication: the new object is
    a new trigger with a run of its own, and never shows the first run."""
    kube = FakeKube()
    kube.add_dag(NS, "first")
    register_in(sessions, manifest("first", [{"name": "a"}]))
    body = {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DagRun",
        "metadata": {"name": "mine", "namespace": NS, "uid": "uid-one", "generation": 1},
        "spec": {"dagName": "first"},
    }
    operator.dagrun_created(body=body, meta=body["metadata"], patch=kopf.Patch(), retry=0)
    with sessions() as session:
        (run_id,) = session.execute(select(DagRun.id)).scalars()
    kube.objects[("dagruns", NS, "mine")] = {
        "metadata": {"name": "mine", "namespace": NS, "uid": "uid-two", "resourceVersion": "5"},
        "spec": {"dagName": "first"},
    }
    pub = publisher(sessions, kube)
    with sessions.begin() as session:  # as if the run had changed after the publisher started
        store.enqueue(session, [run_id])
    drain(pub)
    assert "status" not in kube.dagrun(NS, "mine")
    assert _gone(sessions, run_id)


def test_a_backfills_status_never_goes_onto_an_object_created_again_under_its_name(
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
    request = BackfillRequest(
        dag_id="daily",
        namespace=NS,
        name="daily-fill",
        uid="b-1",
        start=T0 - timedelta(days=3),
        end=T0 - timedelta(days=1),
        max_active_runs=None,
        reprocess=Reprocess.NONE,
    )
    with sessions.begin() as session:
        start_backfill(session, request, clock.now)
    drain(pub)
    assert kube.objects[("backfills", NS, "daily-fill")]["status"]["progress"] == "0/3"
    new = _recreate(kube, "backfills", "daily-fill")
    run_until_idle(make_loop(sessions, ScriptedExecutor(), clock))
    drain(pub)
    assert "status" not in new, new["status"]
