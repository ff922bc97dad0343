"""TaskAction objects: the kopf handler, called as kopf calls it, on a real Postgres.

Team A owns DAG `etl` (extract -> load) in `team-a`, and its run failed at
extract. A TaskAction in `team-a` clears or marks that run's tasks once, by its
uid, however often kopf replays it, with what it did in its status and an Event
on it and on the run's DagRun object; one in `team-b` naming team A's DAG is
refused and changes nothing.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Dag, DagRun, RunPublication, TaskAction, TaskInstance
from sluice.handlers import operator
from sluice.spec.states import TaskState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)

TEAM_A, TEAM_B = "team-a", "team-b"


@pytest.fixture
def events(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, str, str, str]]:
    """The handlers on this test's database; the Events they post, as (type, object kind,
    object name, reason)."""
    posted: list[tuple[str, str, str, str]] = []
    monkeypatch.setattr(operator, "_sessions", sessions)

    def post(body: Any, *, type: str, reason: str, message: str) -> None:
        posted.append((type, body.get("kind", "TaskAction"), body["metadata"]["name"], reason))

    def warn(body: Any, *, reason: str, message: str) -> None:
        post(body, type="Warning", reason=reason, message=message)

    def info(body: Any, *, reason: str, message: str) -> None:
        raise AssertionError("kopf.info posts nothing: the operator's posting level is WARNING")

    monkeypatch.setattr(kopf, "warn", warn)
    monkeypatch.setattr(kopf, "event", post)
    monkeypatch.setattr(kopf, "info", info)
    return posted


@pytest.fixture
def failed(sessions: sessionmaker[Session]) -> tuple[str, ScriptedExecutor, FakeClock]:
    """Team A's `etl` with a failed run (published as DagRun object `etl-run`)."""
    clock = FakeClock()
    register(sessions, manifest("etl", chain("extract", "load"), schedule=None), clock.now)
    with sessions.begin() as session:
        session.execute(update(Dag).where(Dag.dag_id == "etl").values(namespace=TEAM_A))
    run_pk = trigger(sessions, "etl", clock.now)
    executor = ScriptedExecutor({"extract": [TaskState.FAILED]})
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions.begin() as session:
        session.add(
            RunPublication(
                dag_run_id=run_pk, namespace=TEAM_A, object_name="etl-run", uid="run-uid"
            )
        )
        return session.get_one(DagRun, run_pk).run_id, executor, clock


def _action(namespace: str, name: str, uid: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "TaskAction",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": 1},
        "spec": spec,
    }


def _created(body: dict[str, Any], retry: int = 0) -> dict[str, Any]:
    patch = kopf.Patch()
    operator.task_action_created(body=body, meta=body["metadata"], patch=patch, retry=retry)
    return dict(patch.get("status") or {})


def _states(sessions: sessionmaker[Session]) -> dict[str, tuple[str, int]]:
    with sessions() as session:
        return {
            ti.task_id: (ti.state, ti.try_number)
            for ti in session.execute(select(TaskInstance)).scalars()
        }


def test_a_clear_is_done_once_whatever_replays_it(
    sessions: sessionmaker[Session],
    events: list[tuple[str, str, str, str]],
    failed: tuple[str, ScriptedExecutor, FakeClock],
) -> None:
    run_id, executor, clock = failed
    body = _action(TEAM_A, "rerun", "a-1", dagName="etl", runId=run_id, action="clear",
                   tasks=["extract"], downstream=True)  # fmt: skip
    status = _created(body)
    assert status["phase"] == "Done"
    assert (status["cleared"], status["marked"], status["runState"]) == (
        ["extract", "load"],
        [],
        "queued",
    )
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("True", "TasksCleared")
    assert ready["message"] == f"run {run_id}: cleared: extract, load; the run is queued"
    assert events == [
        ("Normal", "TaskAction", "rerun", "TasksCleared"),
        ("Normal", "DagRun", "etl-run", "TasksCleared"),
    ]
    run_until_idle(make_loop(sessions, executor, clock))
    assert _states(sessions) == {"extract": ("success", 2), "load": ("success", 1)}

    # kopf replays the creation (the status patch was lost): the record answers, no clear.
    again = _created(body)
    assert again["cleared"] == ["extract", "load"]
    assert _states(sessions) == {"extract": ("success", 2), "load": ("success", 1)}
    with sessions() as session:
        assert session.execute(select(TaskAction.uid)).scalars().all() == ["a-1"]


def test_mark_success_resumes_the_run(
    sessions: sessionmaker[Session],
    events: list[tuple[str, str, str, str]],
    failed: tuple[str, ScriptedExecutor, FakeClock],
) -> None:
    run_id, executor, clock = failed
    status = _created(_action(TEAM_A, "ok", "a-2", dagName="etl", runId=run_id,
                              action="markSuccess", tasks=["extract"]))  # fmt: skip
    assert (status["marked"], status["cleared"], status["runState"]) == (
        ["extract"],
        ["load"],
        "queued",
    )
    run_until_idle(make_loop(sessions, executor, clock))
    assert _states(sessions) == {"extract": ("success", 1), "load": ("success", 1)}


@pytest.mark.parametrize(
    ("namespace", "spec", "message"),
    [
        (TEAM_B, {"dagName": "etl"}, "no DAG 'etl' in namespace 'team-b'"),
        (TEAM_A, {"dagName": "etl", "runId": "nope"}, "DAG 'etl' has no run 'nope'"),
        (TEAM_A, {"dagName": "etl", "tasks": ["x"]}, "--task 'x': DAG 'etl' has no such task"),
        (TEAM_A, {"dagName": "etl", "action": "markSuccess"}, "spec.tasks"),
    ],
)
def test_refused_actions_change_nothing_and_say_why(
    sessions: sessionmaker[Session],
    events: list[tuple[str, str, str, str]],
    failed: tuple[str, ScriptedExecutor, FakeClock],
    namespace: str,
    spec: dict[str, Any],
    message: str,
) -> None:
    run_id = failed[0]
    full = {"runId": run_id, "action": "clear", **spec}
    status = _created(_action(namespace, "bad", "b-1", **full), retry=operator.TRIGGER_RETRIES)
    assert status["phase"] == "Failed"
    (ready,) = status["conditions"]
    assert ready["status"] == "False"
    assert message in ready["message"]
    assert [e[0] for e in events] == ["Warning"]
    assert _states(sessions) == {"extract": ("failed", 1), "load": ("upstream_failed", 0)}
    with sessions() as session:
        assert session.execute(select(TaskAction)).first() is None
