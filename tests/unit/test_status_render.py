"""A run as its DagRun object shows it: names, the bounded status, conditions, Events."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sluice.spec.states import TaskState
from sluice.status import render
from sluice.status.render import RunView, TaskView

T0 = datetime(2026, 12, 1, tzinfo=UTC)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def run(state: str = "running", tasks: list[TaskView] | None = None, **extra: object) -> RunView:
    tasks = (
        tasks if tasks is not None else [TaskView("a", "success", 1), TaskView("b", "running", 1)]
    )
    values: dict[str, object] = {
        "id": 7,
        "dag_id": "etl",
        "namespace": "team-a",
        "run_id": "scheduled__2026-12-01T00:00:00+00:00",
        "run_type": "scheduled",
        "state": state,
        "logical_date": T0,
        "data_interval_start": T0,
        "data_interval_end": T0 + timedelta(days=1),
        "created_at": T0 + timedelta(days=1),
        "start_date": T0 + timedelta(days=1, seconds=1),
        "end_date": None,
        "tasks_total": len(tasks),
        "tasks_done": sum(t.state in ("success", "failed", "skipped") for t in tasks),
        "tasks": tasks,
    }
    values.update(extra)
    return RunView(**values)  # type: ignore[arg-type]


def test_object_names_are_dns_labels_the_same_everywhere_and_distinct_for_long_names() -> None:
    name = render.object_name(run())
    assert DNS_LABEL.match(name)
    assert len(name) <= 63
    assert name.startswith("etl-scheduled-2026-12-01t00-00-00-00-00-")
    assert render.object_name(run()) == name
    long = "d" * 63
    one = render.object_name(run(dag_id=long, run_id="manual__" + "x" * 200 + "1"))
    two = render.object_name(run(dag_id=long, run_id="manual__" + "x" * 200 + "2"))
    assert one != two
    assert len(one) <= 63
    assert DNS_LABEL.match(one)
    assert render.object_name(run(object_name="my-trigger")) == "my-trigger"


def test_a_new_object_is_owned_by_its_dag_and_labelled() -> None:
    body = render.new_object(run(), "uid-1")
    meta = body["metadata"]
    assert meta["labels"]["sluice.io/dag"] == "etl"
    assert meta["labels"]["sluice.io/run-type"] == "scheduled"
    assert meta["labels"]["sluice.io/origin"] == "scheduler"
    assert meta["ownerReferences"] == [
        {"apiVersion": "sluice.io/v1alpha1", "kind": "DAG", "name": "etl", "uid": "uid-1"}
    ]
    assert body["spec"] == {"dagName": "etl", "logicalDate": "2026-12-01T00:00:00Z"}
    assert "ownerReferences" not in render.new_object(run(), None)["metadata"]


def test_the_status_says_state_dates_counts_and_tasks() -> None:
    ended = run(
        "success",
        [TaskView("a", "success", 1, "etl-a-1-abc"), TaskView("b", "success", 2)],
        end_date=T0 + timedelta(days=1, seconds=66),
    )
    status = render.status_of(ended, generation=1)
    assert status["state"] == "success"
    assert status["tasks"] == "2/2"
    assert status["duration"] == "1m5s"
    assert status["dataInterval"] == {
        "start": "2026-12-01T00:00:00Z",
        "end": "2026-12-02T00:00:00Z",
    }
    assert {k: v for k, v in status["taskCounts"].items() if v} == {"success": 2}
    assert set(status["taskCounts"]) == {s.value for s in TaskState}  # zeros too
    assert status["taskInstances"][0] == {
        "name": "a",
        "state": "success",
        "tryNumber": 1,
        "job": "etl-a-1-abc",
    }
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Succeeded"]["status"] == "True"
    assert conditions["Running"]["status"] == "False"
    assert conditions["Failed"]["status"] == "False"
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    assert render.status_of(run())["duration"] is None


def test_a_failed_runs_condition_names_the_failed_tasks_and_the_reason() -> None:
    failed = run(
        "failed",
        [TaskView("a", "failed", 2, reason="exit code 3"), TaskView("b", "upstream_failed", 0)],
        end_date=T0 + timedelta(days=2),
    )
    (condition,) = [c for c in render.status_of(failed)["conditions"] if c["type"] == "Failed"]
    assert condition["status"] == "True"
    assert condition["message"] == "failed: a, b; a: exit code 3"
    status = render.status_of(failed)
    assert (status["reason"], status["message"]) == ("TasksFailed", condition["message"])


@pytest.mark.parametrize(
    ("state", "reason", "message"),
    [
        ("queued", "Queued", "waiting for a free run slot (maxActiveRuns)"),
        ("running", "Started", "tasks are being scheduled"),
        ("success", "AllTasksDone", "every task ended as its trigger rule asks"),
        ("failed", "TasksFailed", "the run failed"),
    ],
)
def test_the_status_lifts_the_reason_and_message_of_the_runs_state(
    state: str, reason: str, message: str
) -> None:
    """kubectl get dagruns shows them (the Reason column, and Message with -o wide)."""
    ended = T0 + timedelta(days=1) if state in ("success", "failed") else None
    status = render.status_of(run(state, end_date=ended))
    assert (status["reason"], status["message"]) == (reason, message)


def test_a_2000_task_status_stays_small_and_shows_the_failures_first() -> None:
    tasks = [TaskView(f"task-{i:04d}", "success", 1) for i in range(2000)]
    tasks[1500] = TaskView("task-1500", "failed", 3, reason="x" * 5000)
    status = render.status_of(run("running", tasks))
    size = len(json.dumps(status))
    assert size < 60_000, size
    assert len(status["taskInstances"]) == render.MAX_TASK_ENTRIES
    assert status["taskInstancesOmitted"] == 2000 - render.MAX_TASK_ENTRIES
    names = [t["name"] for t in status["taskInstances"]]
    assert "task-1500" in names
    (failed,) = [t for t in status["taskInstances"] if t["name"] == "task-1500"]
    assert len(failed["reason"]) == render.MAX_REASON
    assert {k: v for k, v in status["taskCounts"].items() if v} == {"failed": 1, "success": 1999}


def reasons(events: list[render.EventSpec]) -> list[str]:
    return [e.reason for e in events]


def test_events_say_what_changed_since_the_last_publication() -> None:
    queued = run("queued", [TaskView("a", "none", 0)], start_date=None)
    assert reasons(render.events_between(None, queued)) == []
    started = replace(queued, state="running", start_date=T0)
    assert reasons(render.events_between(render.summary_of(queued), started)) == ["RunStarted"]
    retrying = replace(started, tasks=[TaskView("a", "up_for_retry", 1, reason="exit code 1")])
    events = render.events_between(render.summary_of(started), retrying)
    assert reasons(events) == ["RetryScheduled"]
    assert events[0].message == "a try 1 failed: exit code 1; try 2 is scheduled"
    # Nothing new: no Event twice.
    assert render.events_between(render.summary_of(retrying), retrying) == []
    zombie = replace(
        started,
        state="failed",
        end_date=T0 + timedelta(minutes=2),
        tasks=[TaskView("a", "failed", 2, reason="zombie: its pod is gone")],
    )
    events = render.events_between(render.summary_of(retrying), zombie)
    assert reasons(events) == ["ZombieDetected", "RunFailed"]
    assert all(e.type == "Warning" for e in events)


def test_a_retry_that_came_and_went_between_two_publications_is_still_told() -> None:
    first = run("running", [TaskView("a", "running", 1)])
    second = replace(first, tasks=[TaskView("a", "running", 2)])
    assert reasons(render.events_between(render.summary_of(first), second)) == ["RetryScheduled"]


def test_a_timed_out_run_says_so_and_many_failures_are_summed_up() -> None:
    before = run("running", [TaskView(f"t{i:02d}", "running", 1) for i in range(30)])
    after = replace(
        before,
        state="failed",
        end_date=T0 + timedelta(days=1, hours=1),
        tasks=[TaskView(f"t{i:02d}", "skipped", 1, reason="dagrun timeout") for i in range(30)],
    )
    assert reasons(render.events_between(render.summary_of(before), after)) == [
        "RunTimedOut",
        "RunFailed",
    ]
    failing = replace(
        after, tasks=[TaskView(f"t{i:02d}", "failed", 1, reason="exit code 1") for i in range(30)]
    )
    events = render.events_between(render.summary_of(before), failing)
    assert reasons(events).count("TaskFailed") == render.MAX_EVENTS - 1
    assert "MoreTaskEvents" in reasons(events)
    assert events[-1].reason == "RunFailed"
