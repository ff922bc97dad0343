"""Status flows out on the real cluster: every run a DagRun object that tells the truth.

Host-run replicas (tests/k8s/replicas.py) publish their runs to DagRun objects
in the test's namespace (the DAGs come from files, so they have no namespace
of their own and go to `--namespace`); `kubectl get dagruns` and `kubectl get
events` show what a user sees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from .fleet import Fleet, dag_manifest
from .replicas import wait_for

pytestmark = pytest.mark.k8s


def _dagruns(fleet: Fleet, *selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = fleet.cluster.get_json(
        "dagruns", "-n", fleet.namespace, *selector
    )["items"]
    return items


def _ended(fleet: Fleet, dag: str) -> dict[str, Any] | None:
    for item in _dagruns(fleet, "-l", f"sluice.io/dag={dag}"):
        if (item.get("status") or {}).get("state") in ("success", "failed"):
            return item
    return None


def test_scheduled_runs_appear_as_dagruns_and_tell_the_truth(fleet: Fleet) -> None:
    fleet.add_dag(
        "shown-ok",
        dag_manifest(
            "shown-ok",
            [
                {"name": "a", "args": ["echo a"]},
                {"name": "b", "args": ["echo b"], "dependsOn": ["a"]},
            ],
        ),
    )
    fleet.add_dag("shown-bad", dag_manifest("shown-bad", [{"name": "boom", "args": ["exit 3"]}]))
    fleet.start("a")
    fleet.start("b", sync=False)  # two replicas publish: still one object per run
    ok = wait_for("shown-ok's DagRun to end", lambda: _ended(fleet, "shown-ok"), timeout=240)
    bad = wait_for("shown-bad's DagRun to end", lambda: _ended(fleet, "shown-bad"), timeout=240)

    assert fleet.run_state("shown-ok") == ok["status"]["state"] == "success"
    assert ok["status"]["tasks"] == "2/2"
    assert ok["status"]["runType"] == "scheduled"
    assert ok["metadata"]["labels"]["sluice.io/run-type"] == "scheduled"
    assert {c["type"]: c["status"] for c in ok["status"]["conditions"]}["Succeeded"] == "True"
    jobs = {t["name"]: t.get("job") for t in ok["status"]["taskInstances"]}
    assert set(jobs) == {"a", "b"}
    assert all(jobs.values()), jobs

    assert fleet.run_state("shown-bad") == bad["status"]["state"] == "failed"
    (boom,) = bad["status"]["taskInstances"]
    assert (boom["state"], boom["reason"]) == ("failed", "exit code 3"), boom

    assert len(_dagruns(fleet, "-l", "sluice.io/dag=shown-ok")) == 1
    assert len(_dagruns(fleet, "-l", "sluice.io/dag=shown-bad")) == 1

    name = bad["metadata"]["name"]

    def events() -> dict[str, str] | None:
        listed = fleet.cluster.get_json(
            "events", "-n", fleet.namespace, "--field-selector", f"involvedObject.name={name}"
        )["items"]
        found = {e["reason"]: e["message"] for e in listed}
        return found if "RunFailed" in found else None

    found = wait_for("the failed run's Events", events, timeout=60)
    assert "exit code 3" in found["TaskFailed"], found
    assert "RunStarted" in found, found

    table = fleet.cluster.kubectl("get", "dagruns", "-n", fleet.namespace).stdout
    header = table.splitlines()[0].split()
    assert header[:8] == ["NAME", "DAG", "TYPE", "LOGICAL", "DATE", "STATE", "TASKS", "DURATION"]
    assert any(
        line.split()[1:2] == ["shown-ok"] and "success" in line for line in table.splitlines()
    )
    print(table)  # what docs/usage.md, "Runs as DagRun objects", shows


def test_a_backfill_object_runs_ten_intervals_within_its_limit_and_shows_progress(
    fleet: Fleet, db_url: str, kubeconfig: Path
) -> None:
    """The whole path: a DAG and a Backfill applied with kubectl, the operator takes them
    in, host-run replicas run every try as a Job and publish DagRun, DAG and Backfill
    status; deleting the DAG garbage-collects its DagRun objects, and the history stays."""
    from .test_handlers import Operator

    ns = fleet.namespace
    operator = Operator(fleet.cluster, ns, db_url, kubeconfig)
    try:
        dag = json.loads(dag_manifest("filled", [{"name": "t", "args": ["true"]}]))
        dag["spec"].update(schedule="@daily", startDate="2026-11-01T00:00:00Z", catchup=False)
        dag["spec"]["defaults"]["image"] = fleet.cluster.image
        fleet.cluster.apply(json.dumps(dag), namespace=ns)
        operator.ready("dag", "filled")
        fleet.start("a", sync=False)
        fleet.start("b", sync=False)
        fill = {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "Backfill",
            "metadata": {"name": "ten-days"},
            "spec": {
                "dagName": "filled",
                "startDate": "2026-11-10T00:00:00Z",
                "endDate": "2026-11-19T00:00:00Z",
                "maxActiveRuns": 2,
            },
        }
        fleet.cluster.apply(json.dumps(fill), namespace=ns)
        assert operator.ready("backfill", "ten-days")["status"] == "True", operator.output()
        most = 0

        def finished() -> dict[str, Any] | None:
            nonlocal most
            with fleet.sessions() as session:
                running = session.execute(
                    text(
                        "SELECT count(*) FROM dag_run WHERE backfill_id IS NOT NULL"
                        " AND state = 'running'"
                    )
                ).scalar_one()
            most = max(most, int(running))
            body = fleet.cluster.get_json("backfill", "ten-days", "-n", ns)
            status = body.get("status") or {}
            return status if status.get("state") == "success" else None

        status = wait_for("the backfill to succeed", finished, timeout=600, every=1)
        assert status["progress"] == "10/10", status
        assert status["runs"] == {"queued": 0, "running": 0, "success": 10, "failed": 0}, status
        assert most <= 2, f"{most} backfill runs ran at once (maxActiveRuns 2)"
        backfill_runs = _dagruns(fleet, "-l", "sluice.io/run-type=backfill")
        assert len(backfill_runs) == 10
        assert all(r["status"]["state"] == "success" for r in backfill_runs)
        dag_status = fleet.cluster.get_json("dag", "filled", "-n", ns)["status"]
        assert dag_status["lastRun"]["state"] == "success", dag_status
        table = fleet.cluster.kubectl("get", "backfills", "-n", ns).stdout
        assert "10/10" in table, table
        print(table)

        # Deleting a Backfill that has not ended cancels its runs that have not ended.
        slow = json.loads(dag_manifest("slow", [{"name": "t", "args": ["sleep 600"]}]))
        slow["spec"].update(schedule="@daily", startDate="2026-11-01T00:00:00Z", catchup=False)
        slow["spec"]["defaults"]["image"] = fleet.cluster.image
        fleet.cluster.apply(json.dumps(slow), namespace=ns)
        operator.ready("dag", "slow")
        doomed = {
            **fill,
            "metadata": {"name": "doomed"},
            "spec": {**fill["spec"], "dagName": "slow", "maxActiveRuns": 1},
        }
        fleet.cluster.apply(json.dumps(doomed), namespace=ns)
        backfill_id = operator.ready("backfill", "doomed")["_status"]["backfillId"]

        def backfill_runs(state: str) -> int:
            with fleet.sessions() as session:
                return int(
                    session.execute(
                        text("SELECT count(*) FROM dag_run WHERE backfill_id = :b AND state = :s"),
                        {"b": backfill_id, "s": state},
                    ).scalar_one()
                )

        wait_for("a run of the slow backfill to run", lambda: backfill_runs("running"), 120)
        fleet.cluster.kubectl("-n", ns, "delete", "backfill", "doomed", "--timeout=60s")
        assert backfill_runs("failed") == 10, "every unfinished run of it ends"
        with fleet.sessions() as session:
            reasons = set(
                session.execute(
                    text(
                        "SELECT DISTINCT t.reason FROM task_instance t JOIN dag_run r"
                        " ON r.id = t.dag_run_id WHERE r.backfill_id = :b"
                    ),
                    {"b": backfill_id},
                ).scalars()
            )
        assert reasons == {f"cancelled: its Backfill object {ns}/doomed was deleted"}, reasons

        fleet.cluster.kubectl("-n", ns, "delete", "dag", "filled", "--wait=true", "--timeout=60s")
        wait_for(
            "the DAG's DagRun objects to be garbage-collected",
            lambda: not _dagruns(fleet, "-l", "sluice.io/dag=filled"),
            timeout=120,
        )
        with fleet.sessions() as session:  # the history stays queryable
            kept = session.execute(
                text("SELECT count(*) FROM dag_run WHERE dag_id = 'filled'")
            ).scalar_one()
        assert kept >= 10
    finally:
        for kind in ("backfills", "dagruns", "dags"):
            fleet.cluster.kubectl("-n", ns, "delete", kind, "--all", "--timeout=60s", check=False)
        operator.stop()


def test_objects_catch_up_after_the_api_server_was_down(fleet: Fleet) -> None:
    """The API server stopped for 15 s mid-run: the loop went on (its heartbeat moved), the
    running task finished meanwhile, and the DagRun object caught up with the database."""
    fleet.add_dag(
        "outage",
        dag_manifest(
            "outage",
            # One task: after the restart this one-node cluster's node is NotReady for a
            # minute or more (its lease lapsed), and a pod created then does not start.
            [{"name": "a", "args": ["sleep 15"]}],
        ),
    )
    replica = fleet.start("a")

    def running_object() -> dict[str, Any] | None:
        for item in _dagruns(fleet, "-l", "sluice.io/dag=outage"):
            if (item.get("status") or {}).get("state") == "running":
                return item
        return None

    wait_for("the run's object to show it running", running_object, timeout=120)
    fleet.wait_task("outage", "a", lambda t: t.state == "running", "task a running")

    def beat() -> Any:
        with fleet.sessions() as session:
            return session.execute(
                text("SELECT latest_heartbeat FROM scheduler_job WHERE id = :id"),
                {"id": replica.job_id},
            ).scalar_one()

    before = beat()
    fleet.cluster.restart_apiserver(down_for=15)
    assert (beat() - before).total_seconds() >= 10, "the loop stopped while the API server was down"
    ended_as = fleet.wait_run("outage", ("success", "failed"), timeout=240)
    assert ended_as == "success", f"{fleet.state_dump('outage')}\n{fleet.logs()}"
    ended = wait_for("the object to catch up", lambda: _ended(fleet, "outage"), timeout=120)
    assert ended["status"]["state"] == "success", ended["status"]
    assert ended["status"]["tasks"] == "1/1"
