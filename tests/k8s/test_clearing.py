"""Clearing and marking tasks from kubectl (issue 31), with the chart on the local cluster.

What a user does: a DagRun failed at a task; a TaskAction object clears that
task and its downstream, and the task reruns as a new Job (try 2) beside the
kept Job of try 1, the run ends successful, and the TaskAction's status and an
Event on the DagRun object say what was done. A task cleared while it runs is
stopped first (its pod stopped, its try ended with the reason) and runs again
as try 2, never beside try 1; marking a task success lets the run finish.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .chart import Release, installed
from .cluster import Cluster
from .fleet import dag_manifest
from .replicas import wait_for
from .test_chart_operations import FAST_SCHEDULER_ARGS

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster) -> Iterator[Release]:
    with installed(k8s_cluster) as release:
        release.install(
            "--set-json", "scheduler.extraArgs=" + json.dumps(FAST_SCHEDULER_ARGS),
            "--set", "tasks.podStartTimeout=60",
        )  # fmt: skip
        yield release


def _action(rel: Release, name: str, dag: str, run_id: str, **spec: Any) -> dict[str, Any]:
    """Apply a TaskAction and wait until the operator has done it; its object."""
    rel.apply(
        json.dumps(
            {
                "apiVersion": "sluice.io/v1alpha1",
                "kind": "TaskAction",
                "metadata": {"name": name},
                "spec": {"dagName": dag, "runId": run_id, **spec},
            }
        )
    )

    def done() -> dict[str, Any] | None:
        obj: dict[str, Any] = rel.json("taskaction", name)
        return obj if (obj.get("status") or {}).get("phase") else None

    return wait_for(f"TaskAction {name} done", done, 120, every=1)


def _job_tries(rel: Release, dag: str, task: str) -> list[str]:
    return sorted(
        job["metadata"]["labels"]["sluice.io/try"]
        for job in rel.jobs(dag)
        if job["metadata"]["labels"].get("sluice.io/task") == task
    )


def _pod_running(rel: Release, dag: str) -> bool:
    return any(
        pod["status"].get("phase") == "Running"
        for pod in rel.json("pods", "-l", f"sluice.io/dag={dag}")["items"]
    )


def test_a_cleared_failed_task_reruns_as_a_new_job(rel: Release) -> None:
    dag = "clear-failed"
    rel.apply(
        dag_manifest(
            dag,
            [
                {"name": "extract", "args": ['echo "try $SLUICE_TRY_NUMBER"; '
                                             '[ "$SLUICE_TRY_NUMBER" -ge 2 ]']},
                {"name": "load", "args": ["echo loaded"], "dependsOn": ["extract"]},
            ],
        )
    )  # fmt: skip
    run = rel.wait_run(dag, timeout=300)
    assert run["status"]["state"] == "failed", run["status"]
    run_id, run_object = run["status"]["runId"], run["metadata"]["name"]

    action = _action(rel, "rerun-extract", dag, run_id, action="clear", tasks=["extract"],
                     downstream=True)  # fmt: skip
    status = action["status"]
    assert (status["phase"], status["cleared"], status["summary"]) == (
        "Done",
        ["extract", "load"],
        "0 marked, 2 cleared",
    )
    table = rel.k("get", "taskactions")
    assert "rerun-extract" in table
    assert "0 marked, 2 cleared" in table

    wait_for(
        "the run succeeded",
        lambda: rel.json("dagrun", run_object)["status"].get("state") == "success",
        300,
        every=2,
    )
    assert _job_tries(rel, dag, "extract") == ["1", "2"]  # try 1's Job kept, try 2 new
    rows = rel.sql(
        "SELECT tt.try_number, tt.state FROM task_try tt JOIN task_instance ti"
        f" ON ti.id = tt.task_instance_id WHERE ti.dag_id = '{dag}' AND ti.task_id = 'extract'"
        " ORDER BY tt.try_number"
    )
    assert rows == [["1", "failed"], ["2", "success"]]
    events = rel.json("events", "--field-selector", f"involvedObject.name={run_object}")
    assert "TasksCleared" in {event["reason"] for event in events["items"]}


def test_a_running_task_cleared_is_stopped_before_it_runs_again(rel: Release) -> None:
    dag = "clear-running"
    rel.apply(
        dag_manifest(
            dag,
            [{"name": "slow", "args": ['[ "$SLUICE_TRY_NUMBER" -ge 2 ] || sleep 600; echo done']}],
        )
    )
    # Its pod running on the node: a pod not started yet is deleted with its Job, not
    # stopped (ADR 0037), and there would be nothing to check below.
    wait_for("slow's pod running", lambda: _pod_running(rel, dag), 240, every=1)
    ((run_id,),) = rel.sql(f"SELECT run_id FROM dag_run WHERE dag_id = '{dag}'")
    _action(rel, "restart-slow", dag, run_id, action="clear", tasks=["slow"])
    run = rel.wait_run(dag, timeout=300, run_id=run_id)
    assert run["status"]["state"] == "success", run["status"]
    rows = rel.sql(
        "SELECT tt.try_number, tt.state, tt.reason, tt.end_date <= (SELECT start_date FROM"
        " task_try WHERE task_instance_id = ti.id AND try_number = 2) FROM task_try tt"
        f" JOIN task_instance ti ON ti.id = tt.task_instance_id WHERE ti.dag_id = '{dag}'"
        " ORDER BY tt.try_number"
    )
    assert [row[:2] for row in rows] == [["1", "failed"], ["2", "success"]]
    assert rows[0][2].startswith("cleared while running"), rows[0]
    assert rows[0][3] == "t", "try 2 started before try 1 had ended"
    # Try 1's pod was stopped (kept, for its log: ADR 0037), not left running.
    (pod,) = [
        p
        for p in rel.json("pods", "-l", f"sluice.io/dag={dag}")["items"]
        if p["metadata"]["labels"].get("sluice.io/try") == "1"
    ]
    assert pod["status"]["phase"] == "Failed", pod["status"]


def test_marking_a_running_task_success_ends_the_run(rel: Release) -> None:
    dag = "mark-running"
    rel.apply(dag_manifest(dag, [{"name": "stuck", "args": ["sleep 600"]}]))
    wait_for("stuck running", lambda: rel.running_jobs(dag), 240, every=1)
    ((run_id,),) = rel.sql(f"SELECT run_id FROM dag_run WHERE dag_id = '{dag}'")
    action = _action(rel, "unstick", dag, run_id, action="markSuccess", tasks=["stuck"])
    assert action["status"]["marked"] == ["stuck"]
    run = rel.wait_run(dag, timeout=300, run_id=run_id)
    assert run["status"]["state"] == "success", run["status"]
    wait_for("stuck's pod stopped", lambda: not rel.running_jobs(dag), 120, every=2)
