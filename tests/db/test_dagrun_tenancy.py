"""A DagRun object acts only on the run the database ties to its uid, in its own namespace.

The kopf handlers are called as kopf calls them (a body, a patch) on a real
Postgres. Team A owns DAG `etl` in namespace `team-a`; team B forges objects in
`team-b`: the name of team A's object, the dagName of team A's DAG, the
`sluice.io/origin` label and `sluice.io/run-id` annotation copied from the
scheduler's object. Nothing of team A's may change. An object deleted and
created again under the same name is a new object: its handlers act on its own
run, never the old one's.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import kopf
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Dag, DagRun, RunPublication
from sluice.handlers import operator
from sluice.spec.states import RunState
from sluice.status import render, store
from tests.support import FakeClock, manifest, register, trigger

TEAM_A, TEAM_B = "team-a", "team-b"


@pytest.fixture
def warnings(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, str]]:
    """The handlers on this test's database; the Warning Events they post, as (reason,
    message)."""
    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(operator, "_sessions", sessions)
    monkeypatch.setattr(
        kopf, "warn", lambda body, *, reason, message: posted.append((reason, message))
    )
    return posted


def _dags(sessions: sessionmaker[Session], clock: FakeClock) -> None:
    """Team A's DAG `etl`, team B's DAG `own`, each registered by its namespace."""
    for namespace, name in ((TEAM_A, "etl"), (TEAM_B, "own")):
        register(sessions, manifest(name, [{"name": "a"}]), clock.now)
        with sessions.begin() as session:
            session.execute(update(Dag).where(Dag.dag_id == name).values(namespace=namespace))


def _dagrun(
    namespace: str,
    name: str,
    dag: str,
    *,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or str(uuid.uuid4()),
        "generation": 1,
    }
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DagRun",
        "metadata": metadata,
        "spec": {"dagName": dag, **spec},
    }


def _created(body: dict[str, Any], retry: int = 0) -> dict[str, Any]:
    """The create handler's status patch for `body`."""
    patch = kopf.Patch()
    operator.dagrun_created(body=body, meta=body["metadata"], patch=patch, retry=retry)
    return dict(patch.get("status") or {})


def _deleted(body: dict[str, Any], retry: int = 0) -> None:
    meta = body["metadata"]
    operator.dagrun_deleted(
        body=body, meta=meta, name=meta["name"], namespace=meta["namespace"], retry=retry
    )


def _marked(body: dict[str, Any], state: str, retry: int = 0) -> dict[str, Any]:
    """The `Marked` condition the mark handler sets on `body` for `spec.state: state`."""
    body = {**body, "spec": {**body["spec"], "state": state}}
    patch = kopf.Patch()
    operator.dagrun_marked(body=body, meta=body["metadata"], patch=patch, new=state, retry=retry)
    (condition,) = [c for c in patch["status"]["conditions"] if c["type"] == "Marked"]
    return dict(condition)


def _states(sessions: sessionmaker[Session], dag: str) -> dict[str, str]:
    with sessions() as session:
        rows = session.execute(select(DagRun.run_id, DagRun.state).where(DagRun.dag_id == dag))
        return {row.run_id: row.state for row in rows}


def _scheduled_run(sessions: sessionmaker[Session], now: datetime, uid: str) -> tuple[str, str]:
    """A run the scheduler made for `etl`, published to the object it created (`uid`), as
    the status publisher records it; returns (run id, object name)."""
    row_id = trigger(sessions, "etl", now, run_id="scheduled__2026-12-01T00:00:00+00:00")
    with sessions.begin() as session:
        run = store.read_runs(session, [row_id], None)[row_id]
        name = render.object_name(run)
        session.add(
            RunPublication(
                dag_run_id=row_id,
                namespace=TEAM_A,
                object_name=name,
                uid=uid,
                resource_version="7",
                generation=1,
                gone=False,
            )
        )
        return run.run_id, name


def test_forged_objects_in_another_namespace_cannot_cancel_or_mark_a_users_run(
    sessions: sessionmaker[Session], warnings: list[tuple[str, str]]
) -> None:
    clock = FakeClock()
    _dags(sessions, clock)
    mine = _dagrun(TEAM_A, "nightly", "etl")
    run_id = _created(mine)["runId"]
    # Team B: the same name and dagName (its own create is refused: not its DAG) ...
    forged = _dagrun(TEAM_B, "nightly", "etl")
    refused = _created(forged, retry=operator.TRIGGER_RETRIES)
    assert refused["conditions"][0]["reason"] == "TriggerFailed"
    assert _marked(forged, "failed")["status"] == "False"
    _deleted(forged)
    # ... and the run id of team A's run, as the scheduler's objects carry it.
    copied = _dagrun(
        TEAM_B,
        "copied",
        "etl",
        labels={"sluice.io/origin": "scheduler"},
        annotations={"sluice.io/run-id": run_id},
    )
    assert _marked(copied, "success", retry=operator.TRIGGER_RETRIES)["status"] == "False"
    _deleted(copied, retry=operator.TRIGGER_RETRIES)
    assert _states(sessions, "etl") == {run_id: RunState.QUEUED}
    # Team A's own object still acts on its run.
    _deleted(mine)
    assert _states(sessions, "etl") == {run_id: RunState.FAILED}


def test_forged_copies_of_the_schedulers_object_cannot_touch_its_run(
    sessions: sessionmaker[Session], warnings: list[tuple[str, str]]
) -> None:
    clock = FakeClock()
    _dags(sessions, clock)
    scheduler_uid = str(uuid.uuid4())
    run_id, name = _scheduled_run(sessions, clock.now, scheduler_uid)
    copied = {
        "labels": {"sluice.io/origin": "scheduler", "sluice.io/dag": "etl"},
        "annotations": {"sluice.io/run-id": run_id},
    }
    last = operator.TRIGGER_RETRIES  # no more waiting for the publisher to record a uid
    for namespace in (TEAM_B, TEAM_A):  # team A's own namespace too: the uid is not its
        forged = _dagrun(namespace, name, "etl", **copied)  # type: ignore[arg-type]
        created = _created(forged, retry=last)
        assert created["conditions"][0]["reason"] == "TriggerFailed"
        assert "sluice.io/origin" in created["conditions"][0]["message"]
        assert _marked(forged, "failed", retry=last)["status"] == "False"
        _deleted(forged, retry=last)
        assert _states(sessions, "etl") == {run_id: RunState.QUEUED}
    # The object the scheduler made (its uid is in run_publication) marks the run.
    real = _dagrun(TEAM_A, name, "etl", uid=scheduler_uid, **copied)  # type: ignore[arg-type]
    assert _created(real) == {}  # the scheduler's own object: no trigger, no status
    assert _marked(real, "success")["status"] == "True"
    assert _states(sessions, "etl") == {run_id: RunState.SUCCESS}


def test_an_object_created_again_under_the_same_name_acts_on_its_own_run(
    sessions: sessionmaker[Session], warnings: list[tuple[str, str]]
) -> None:
    clock = FakeClock()
    _dags(sessions, clock)
    first = _dagrun(TEAM_A, "again", "etl")
    first_run = _created(first)["runId"]
    _deleted(first)  # cancels the first run (ADR 0018)
    second = _dagrun(TEAM_A, "again", "etl")  # the same name, a new uid: a new trigger
    second_run = _created(second)["runId"]
    assert second_run != first_run
    assert _states(sessions, "etl") == {first_run: RunState.FAILED, second_run: RunState.QUEUED}
    marked = _marked(second, "success")
    assert marked["status"] == "True", marked
    assert _states(sessions, "etl") == {first_run: RunState.FAILED, second_run: RunState.SUCCESS}
    third = _dagrun(TEAM_A, "again", "etl")
    third_run = _created(third)["runId"]
    _deleted(second)  # the second object's run ended already: nothing else is cancelled
    assert _states(sessions, "etl")[third_run] == RunState.QUEUED
    _deleted(third)
    assert _states(sessions, "etl")[third_run] == RunState.FAILED


def test_the_schedulers_object_created_again_is_refused_with_the_reason(
    sessions: sessionmaker[Session], warnings: list[tuple[str, str]]
) -> None:
    """Deleted (its run cancelled), then applied again from a saved copy: the copy is no
    trigger (it would run the date again) and not the scheduler's object either."""
    clock = FakeClock()
    _dags(sessions, clock)
    scheduler_uid = str(uuid.uuid4())
    run_id, name = _scheduled_run(sessions, clock.now, scheduler_uid)
    saved = {
        "labels": {"sluice.io/origin": "scheduler"},
        "annotations": {"sluice.io/run-id": run_id},
    }
    _deleted(_dagrun(TEAM_A, name, "etl", uid=scheduler_uid, **saved))  # type: ignore[arg-type]
    assert _states(sessions, "etl") == {run_id: RunState.FAILED}
    again = _dagrun(TEAM_A, name, "etl", **saved)  # type: ignore[arg-type]
    status = _created(again, retry=operator.TRIGGER_RETRIES)
    ready = status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "TriggerFailed")
    assert "remove the label sluice.io/origin" in ready["message"], ready["message"]
    assert _states(sessions, "etl") == {run_id: RunState.FAILED}
    with sessions() as session:
        assert session.execute(select(DagRun.id).where(DagRun.object_name == name)).all() == []


def test_the_schedulers_object_before_its_uid_is_recorded_waits_and_acts_on_nothing(
    sessions: sessionmaker[Session], warnings: list[tuple[str, str]]
) -> None:
    """The publisher creates its object, then records the uid the API server gave it: in
    between, the object's create handler does nothing, and a delete or a mark waits for the
    uid (kopf retries), then gives up rather than act on a name."""
    clock = FakeClock()
    _dags(sessions, clock)
    row_id = trigger(sessions, "etl", clock.now, run_id="scheduled__2026-12-02T00:00:00+00:00")
    with sessions() as session:
        run = store.read_runs(session, [row_id], None)[row_id]
    labelled = {
        "labels": {"sluice.io/origin": "scheduler"},
        "annotations": {"sluice.io/run-id": run.run_id},
    }
    made = _dagrun(TEAM_A, render.object_name(run), "etl", **labelled)  # type: ignore[arg-type]
    assert _created(made) == {}
    with pytest.raises(kopf.TemporaryError):
        _deleted(made)
    with pytest.raises(kopf.TemporaryError):
        _marked(made, "failed")
    last = operator.TRIGGER_RETRIES
    assert _marked(made, "failed", retry=last)["status"] == "False"
    _deleted(made, retry=last)
    # The same object in team B is not the scheduler's at all: refused at once.
    copied = _dagrun(TEAM_B, render.object_name(run), "etl", **labelled)  # type: ignore[arg-type]
    assert _created(copied)["conditions"][0]["reason"] == "TriggerFailed"
    assert _states(sessions, "etl") == {run.run_id: RunState.QUEUED}
