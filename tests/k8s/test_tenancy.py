"""One namespace's DagRun objects never act on another's runs, on a real API server.

One kopf operator serves two namespaces, team A's (the test's namespace, with
DAG `hello`) and team B's. Team B forges DagRun objects against team A's runs:
the name of team A's object with `dagName: hello`, and a copy of the
scheduler's object (its name, the `sluice.io/origin` label and
`sluice.io/run-id` annotation); each sets `spec.state: failed` and is deleted.
Team A's runs stay as they were; team A's own objects still act, and an object
created again under a used name acts on its own new run only (ADR 0031). The
scheduler's object is made here as the status publisher makes it: created,
then its uid recorded in `run_publication`.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.db.models import DagRun, RunPublication
from sluice.handlers.objects import scheduler_object_name
from sluice.scheduler.triggers import trigger_run

from .cluster import EXAMPLES, Cluster, apply_crds
from .test_handlers import Operator, wait_for

pytestmark = pytest.mark.k8s

SCHEDULED = "scheduled__2026-12-01T00:00:00+00:00"
HANDLED = "sluice.io/last-handled-configuration"


@pytest.fixture
def team_b(k8s_cluster: Cluster, kubeconfig: Path) -> Iterator[str]:
    """A second namespace, for the forger; deleted afterwards (without waiting)."""
    name = f"sluice-test-b-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        k8s_cluster.kubectl("-n", name, "delete", "dagruns", "--all", "--timeout=30s", check=False)
        k8s_cluster.drop_sluice_finalizers(name)
        k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def two_namespace_operator(
    k8s_cluster: Cluster, kubeconfig: Path, k8s_namespace: str, team_b: str, db_url: str
) -> Iterator[Operator]:
    """The operator serving the test's namespace (team A) and team B's."""
    apply_crds(k8s_cluster)
    kopf = str(Path(sys.executable).with_name("kopf"))
    command = [
        kopf, "run", "-m", "sluice.handlers.operator", "--standalone", "--verbose",
        "--namespace", team_b,
    ]  # fmt: skip
    running = Operator(k8s_cluster, k8s_namespace, db_url, kubeconfig, command)
    try:
        yield running
    finally:
        for ns in (k8s_namespace, team_b):
            for kind in ("dagruns", "dags"):
                k8s_cluster.kubectl("-n", ns, "delete", kind, "--all", "--timeout=30s", check=False)
        running.stop()
        running.log.unlink(missing_ok=True)
        k8s_cluster.drop_sluice_finalizers(k8s_namespace)


def _dagrun(name: str, dag: str, **extra: Any) -> str:
    metadata: dict[str, Any] = {"name": name}
    for key in ("labels", "annotations"):
        if key in extra:
            metadata[key] = extra.pop(key)
    body = {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DagRun",
        "metadata": metadata,
        "spec": {"dagName": dag, **extra},
    }
    return json.dumps(body)


def _get(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("-n", namespace, "get", "dagrun", name, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def _condition(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body = _get(cluster, namespace, name) or {}
        found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == kind]
        return found[0] if found else None

    return wait_for(f"{namespace}/{name}'s {kind} condition", probe, timeout=120)


def _handled(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The object once kopf has finished its handlers (it records what it handled)."""

    def probe() -> dict[str, Any] | None:
        body = _get(cluster, namespace, name)
        return body if body and HANDLED in body["metadata"].get("annotations", {}) else None

    return wait_for(f"{namespace}/{name} handled", probe, timeout=60)


def _states(sessions: sessionmaker[Session]) -> dict[str, str]:
    with sessions() as session:
        rows = session.execute(select(DagRun.run_id, DagRun.state).where(DagRun.dag_id == "hello"))
        return {row.run_id: row.state for row in rows}


def _schedulers_object(
    cluster: Cluster, operator: Operator, sessions: sessionmaker[Session]
) -> tuple[str, dict[str, Any]]:
    """A run of `hello` and its DagRun object, made as the status publisher makes them:
    created with the label and annotation, then its uid recorded. Returns (the object's
    name, its metadata's labels and annotations)."""
    ns = operator.namespace
    with sessions.begin() as session:
        run = trigger_run(session, SpecCache(), "hello", datetime.now(UTC), run_id=SCHEDULED)
        run_row_id = run.id
    name = scheduler_object_name("hello", SCHEDULED)
    marks = {
        "labels": {"sluice.io/origin": "scheduler", "sluice.io/dag": "hello"},
        "annotations": {"sluice.io/run-id": SCHEDULED},
    }
    cluster.apply(_dagrun(name, "hello", logicalDate="2026-12-01T00:00:00Z", **marks), ns)
    # Its create handler leaves it alone (Pending: the uid is not recorded yet).
    handled = _handled(cluster, ns, name)
    assert "conditions" not in handled.get("status", {}), handled.get("status")
    with sessions.begin() as session:
        session.add(
            RunPublication(
                dag_run_id=run_row_id,
                namespace=ns,
                object_name=name,
                uid=handled["metadata"]["uid"],
                resource_version=handled["metadata"]["resourceVersion"],
                gone=False,
            )
        )
    return name, marks


def test_forged_dagruns_in_another_namespace_touch_nothing(
    two_namespace_operator: Operator,
    team_b: str,
    sessions: sessionmaker[Session],
    k8s_cluster: Cluster,
) -> None:
    operator = two_namespace_operator
    team_a = operator.namespace
    k8s_cluster.kubectl("-n", team_a, "apply", "-f", str(EXAMPLES / "hello.yaml"))
    assert operator.ready("dag", "hello")["status"] == "True"
    k8s_cluster.apply(_dagrun("by-hand", "hello"), team_a)
    users_run = operator.ready("dagrun", "by-hand")["_status"]["runId"]
    scheduler_name, marks = _schedulers_object(k8s_cluster, operator, sessions)
    before = _states(sessions)
    assert before == {users_run: "queued", SCHEDULED: "queued"}

    # Team B: team A's object's name and DAG (its create is retried: no such DAG in team
    # B), and a copy of the scheduler's object (refused at create: not the scheduler's).
    k8s_cluster.apply(_dagrun("by-hand", "hello"), team_b)
    k8s_cluster.apply(_dagrun(scheduler_name, "hello", **marks), team_b)
    refused = _condition(k8s_cluster, team_b, scheduler_name, "Ready")
    assert (refused["status"], refused["reason"]) == ("False", "TriggerFailed"), refused
    assert "sluice.io/origin" in refused["message"]
    _handled(k8s_cluster, team_b, scheduler_name)
    for name in ("by-hand", scheduler_name):
        k8s_cluster.kubectl(
            "-n", team_b, "patch", "dagrun", name, "--type=merge",
            "-p", '{"spec":{"state":"failed"}}',
        )  # fmt: skip
        marked = _condition(k8s_cluster, team_b, name, "Marked")
        assert (marked["status"], marked["reason"]) == ("False", "MarkRefused"), marked
    for name in ("by-hand", scheduler_name):
        k8s_cluster.kubectl(
            "-n", team_b, "delete", "dagrun", name, "--wait=true", "--timeout=60s"
        )  # fmt: skip
    assert _states(sessions) == before, operator.output()

    # Team A's own objects still act: the scheduler's is marked, the user's cancelled ...
    k8s_cluster.kubectl(
        "-n", team_a, "patch", "dagrun", scheduler_name, "--type=merge",
        "-p", '{"spec":{"state":"success"}}',
    )  # fmt: skip
    marked = _condition(k8s_cluster, team_a, scheduler_name, "Marked")
    assert marked["status"] == "True", marked
    k8s_cluster.kubectl("-n", team_a, "delete", "dagrun", "by-hand", "--wait=true", "--timeout=60s")
    assert _states(sessions) == {users_run: "failed", SCHEDULED: "success"}

    # ... and the same name again is a new object: a new run, the only one it acts on.
    k8s_cluster.apply(_dagrun("by-hand", "hello"), team_a)
    again = operator.ready("dagrun", "by-hand")["_status"]["runId"]
    assert again != users_run
    k8s_cluster.kubectl("-n", team_a, "delete", "dagrun", "by-hand", "--wait=true", "--timeout=60s")
    assert _states(sessions) == {users_run: "failed", SCHEDULED: "success", again: "failed"}
