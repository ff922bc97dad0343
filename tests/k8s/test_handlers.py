"""The kopf operator against the real cluster and a real Postgres.

Each test starts `kopf run -m sluice.handlers.operator --standalone
--namespace NS` as a subprocess on a fresh database (`db_url`), and deletes
its objects while the operator still runs (the DAG and Pool handlers hold
finalizers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import Dag, DagRun, DagVersion, SlotPool, TaskInstance

from .cluster import EXAMPLES, Cluster, apply_crds

pytestmark = pytest.mark.k8s

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


class Operator:
    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        db_url: str,
        kubeconfig: Path,
        command: list[str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log = Path(tempfile.mkstemp(prefix="sluice-kopf-", suffix=".log")[1])
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), SLUICE_DATABASE_URL=db_url)
        kopf = Path(sys.executable).with_name("kopf")
        command = command or [
            str(kopf), "run", "-m", "sluice.handlers.operator", "--standalone", "--verbose",
        ]  # fmt: skip
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [*command, "--namespace", namespace],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text()[-8000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def get(self, kind: str, name: str, namespaced: bool = True) -> dict[str, Any] | None:
        ns = ["-n", self.namespace] if namespaced else []
        proc = self.cluster.kubectl(*ns, "get", kind, name, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def ready(self, kind: str, name: str, namespaced: bool = True) -> dict[str, Any]:
        """The Ready condition once the operator has set one for the current generation."""

        def probe() -> dict[str, Any] | None:
            assert self.proc.poll() is None, f"operator exited:\n{self.output()}"
            body = self.get(kind, name, namespaced)
            if body is None:
                return None
            generation = body["metadata"].get("generation")
            for condition in body.get("status", {}).get("conditions", []):
                if condition["type"] == "Ready" and condition["observedGeneration"] == generation:
                    return {**condition, "_status": body["status"]}
            return None

        try:
            return wait_for(f"{kind}/{name} Ready", probe)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\noperator log:\n{self.output()}") from None


@pytest.fixture
def operator(
    k8s_cluster: Cluster, kubeconfig: Path, k8s_namespace: str, db_url: str
) -> Iterator[Operator]:
    apply_crds(k8s_cluster)
    running = Operator(k8s_cluster, k8s_namespace, db_url, kubeconfig)
    try:
        yield running
    finally:
        ns = ["-n", k8s_namespace]
        for kind in ("dagruns", "dags"):
            k8s_cluster.kubectl(*ns, "delete", kind, "--all", "--timeout=30s", check=False)
        running.stop()
        running.log.unlink(missing_ok=True)
        # Should the operator have died: release what it still holds.
        for kind in ("dags", "dagruns"):
            names = k8s_cluster.kubectl(*ns, "get", kind, "-o", "name", check=False).stdout
            for name in names.split():
                k8s_cluster.kubectl(
                    *ns, "patch", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                    check=False,
                )  # fmt: skip


def _dag(name: str, **spec: Any) -> str:
    body = {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {"name": name},
        "spec": spec or {"tasks": [{"name": "a", "image": "busybox"}]},
    }
    return json.dumps(body)


def _events(cluster: Cluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = cluster.get_json(
        "events", "-n", namespace,
        "--field-selector", f"involvedObject.name={name},reason={reason}",
    )["items"]  # fmt: skip
    return list(items)


def test_dags_valid_invalid_and_deleted(
    operator: Operator, sessions: sessionmaker[Session], k8s_cluster: Cluster
) -> None:
    ns = operator.namespace
    k8s_cluster.kubectl("-n", ns, "apply", "-f", str(EXAMPLES))
    ready = operator.ready("dag", "hello")
    assert ready["status"] == "True", ready
    assert ready["reason"] == "Accepted"
    assert ready["_status"]["dagId"] == "hello"
    for name in ("branching", "etl-retries"):
        assert operator.ready("dag", name)["status"] == "True"
    with sessions() as session:
        rows = {d.dag_id: d for d in session.scalars(select(Dag))}
        assert {"hello", "branching", "etl-retries"} <= set(rows)
        assert rows["hello"].namespace == ns
        assert rows["hello"].is_active
        assert rows["hello"].current_version_id is not None

    # Valid for the API server, invalid for Sluice: a cycle, a bad duration, a bad schedule.
    invalid = {
        "schedule": "every tuesday",
        "tasks": [
            {"name": "a", "image": "busybox", "dependsOn": ["b"], "retryDelay": "soon"},
            {"name": "b", "image": "busybox", "dependsOn": ["a"]},
        ],
    }
    k8s_cluster.apply(_dag("broken", **invalid), namespace=ns)
    ready = operator.ready("dag", "broken")
    assert ready["status"] == "False"
    assert ready["reason"] == "InvalidSpec"
    assert "spec.tasks[0].retryDelay" in ready["message"], ready["message"]
    assert "spec.schedule" in ready["message"]
    events = wait_for(
        "InvalidSpec event", lambda: _events(k8s_cluster, ns, "broken", "InvalidSpec")
    )
    assert events[0]["type"] == "Warning"
    assert "spec.tasks[0].retryDelay" in events[0]["message"]
    with sessions() as session:
        assert session.get(Dag, "broken") is None

    # An invalid update loses nothing: the stored version stays, the status says so.
    hello = operator.get("dag", "hello")
    assert hello is not None
    k8s_cluster.kubectl(
        "-n", ns, "patch", "dag", "hello", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/tasks/0/retryDelay", "value": "soon"}]',
    )  # fmt: skip
    ready = operator.ready("dag", "hello")
    assert ready["status"] == "False"
    assert "keeps running version 1" in ready["message"]
    with sessions() as session:
        versions = session.scalars(select(DagVersion).where(DagVersion.dag_id == "hello")).all()
        assert len(versions) == 1

    k8s_cluster.kubectl("-n", ns, "delete", "dag", "hello", "--timeout=30s")
    with sessions() as session:
        dag = session.get(Dag, "hello")
        assert dag is not None
        assert not dag.is_active


def test_name_taken_by_another_namespace(
    operator: Operator, sessions: sessionmaker[Session], k8s_cluster: Cluster
) -> None:
    with sessions.begin() as session:
        session.add(Dag(dag_id="shared", namespace="someone-else", current_version_id=1))
    k8s_cluster.apply(_dag("shared"), namespace=operator.namespace)
    ready = operator.ready("dag", "shared")
    assert ready["reason"] == "NameConflict"
    assert "'someone-else'" in ready["message"]
    k8s_cluster.kubectl("-n", operator.namespace, "delete", "dag", "shared", "--timeout=30s")
    with sessions() as session:
        dag = session.get(Dag, "shared")
        assert dag is not None
        assert dag.is_active  # the other namespace's DAG is not touched


def test_dagrun_creates_a_run(
    operator: Operator, sessions: sessionmaker[Session], k8s_cluster: Cluster
) -> None:
    ns = operator.namespace
    run = {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DagRun",
        "metadata": {"name": "by-hand"},
        "spec": {"dagName": "hello", "conf": {"k": "v"}, "logicalDate": "2026-12-03T04:05:06Z"},
    }
    # Applied together: the DagRun may be handled before its DAG is registered.
    k8s_cluster.apply(json.dumps(run), namespace=ns)
    k8s_cluster.kubectl("-n", ns, "apply", "-f", str(EXAMPLES / "hello.yaml"))
    ready = operator.ready("dagrun", "by-hand")
    assert ready["status"] == "True", ready
    status = ready["_status"]
    assert status["runType"] == "manual"
    assert status["state"] == "queued"
    assert status["logicalDate"] == "2026-12-03T04:05:06Z"
    assert status["tasks"] == "0/4"
    with sessions() as session:
        row = session.scalars(select(DagRun).where(DagRun.run_id == status["runId"])).one()
        assert row.dag_id == "hello"
        assert row.conf == {"k": "v"}
        assert row.tasks_total == 4
    out = k8s_cluster.kubectl("-n", ns, "get", "dagruns").stdout
    assert "manual" in out
    assert "2026-12-03T04:05:06Z" in out
    with sessions() as session:
        assert row.object_name == "by-hand"  # where the publisher sends the run's status

    # kubectl writes act: a patched `paused` pauses the DAG (ADR 0011) ...
    k8s_cluster.kubectl(
        "-n", ns, "patch", "dag", "hello", "--type=merge", "-p", '{"spec":{"paused":true}}'
    )

    def paused() -> bool | None:
        with sessions() as session:
            return session.scalars(select(Dag.is_paused).where(Dag.dag_id == "hello")).one() or None

    wait_for("the DAG paused in the database", paused)
    # ... `spec.state` marks a run as Airflow's "mark run as" does ...
    marked = {**run, "metadata": {"name": "to-mark"}, "spec": {"dagName": "hello"}}
    k8s_cluster.apply(json.dumps(marked), namespace=ns)
    run_id = operator.ready("dagrun", "to-mark")["_status"]["runId"]
    k8s_cluster.kubectl(
        "-n", ns, "patch", "dagrun", "to-mark", "--type=merge", "-p", '{"spec":{"state":"failed"}}'
    )  # fmt: skip

    def marked_condition() -> dict[str, Any] | None:
        body = operator.get("dagrun", "to-mark") or {}
        found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == "Marked"]
        return found[0] if found else None

    condition = wait_for("the Marked condition", marked_condition)
    assert condition["status"] == "True", condition
    with sessions() as session:
        assert (
            session.scalars(select(DagRun.state).where(DagRun.run_id == run_id)).one() == "failed"
        )
    # ... and deleting the DagRun of a run that has not ended cancels the run (ADR 0018).
    k8s_cluster.kubectl("-n", ns, "delete", "dagrun", "by-hand", "--wait=true", "--timeout=60s")
    with sessions() as session:
        ended = session.scalars(select(DagRun).where(DagRun.run_id == status["runId"])).one()
        assert ended.state == "failed"
        reasons = set(
            session.scalars(select(TaskInstance.reason).where(TaskInstance.dag_run_id == ended.id))
        )
    assert reasons == {f"cancelled: its DagRun object {ns}/by-hand was deleted"}

    missing = {**run, "metadata": {"name": "no-dag"}, "spec": {"dagName": "nope"}}
    k8s_cluster.apply(json.dumps(missing), namespace=ns)
    # Retried for a while (the DAG may be on its way), then Ready=False/TriggerFailed.
    wait_for("a retry for the missing DAG", lambda: "no DAG 'nope'" in operator.output())
    body = operator.get("dagrun", "no-dag")
    assert body is not None
    assert "runId" not in body.get("status", {})


def test_pool_create_update_delete(
    operator: Operator, sessions: sessionmaker[Session], k8s_cluster: Cluster
) -> None:
    name = f"sluice-test-{uuid.uuid4().hex[:8]}"
    pool = {"apiVersion": "sluice.io/v1alpha1", "kind": "Pool", "metadata": {"name": name}}
    try:
        k8s_cluster.apply(json.dumps({**pool, "spec": {"slots": 3, "description": "gpus"}}))
        ready = operator.ready("pool", name, namespaced=False)
        assert ready["status"] == "True"
        assert ready["_status"]["open"] == 3
        k8s_cluster.apply(json.dumps({**pool, "spec": {"slots": 5}}))
        ready = operator.ready("pool", name, namespaced=False)
        assert ready["_status"]["open"] == 5
        with sessions() as session:
            row = session.scalars(select(SlotPool).where(SlotPool.name == name)).one()
            assert (row.slots, row.description) == (5, "")
        k8s_cluster.kubectl("delete", "pool", name, "--timeout=30s")
        with sessions() as session:
            assert session.scalars(select(SlotPool).where(SlotPool.name == name)).first() is None
    finally:
        k8s_cluster.kubectl("delete", "pool", name, "--timeout=30s", check=False)


def test_operator_replicas_peer_and_one_serves_at_a_time(
    k8s_cluster: Cluster, kubeconfig: Path, k8s_namespace: str, db_url: str
) -> None:
    """`sluice operator` replicas share a kopf peering object: the highest priority serves,
    the others pause; when it stops, the next resumes once its record is stale."""
    apply_crds(k8s_cluster)
    k8s_cluster.wait_established("crd/kopfpeerings.kopf.dev", "crd/clusterkopfpeerings.kopf.dev")
    sluice = str(Path(sys.executable).with_name("sluice"))
    peering = ["--peering", "sluice-test", "--peering-lifetime", "6"]

    def start(priority: int) -> Operator:
        command = [sluice, "operator", *peering, "--priority", str(priority)]
        return Operator(k8s_cluster, k8s_namespace, db_url, kubeconfig, command)

    high, low = start(20), None
    try:
        # A replica starts paused and resumes once no peer outranks it (kopf logs that).
        wait_for("the high replica to serve", lambda: "Resuming operations" in high.output(), 60)
        low = start(10)
        wait_for("the low replica to start", lambda: "operator_settings" in low.output(), 60)
        time.sleep(3)  # it has seen the high one's record (kept fresh every few seconds)
        k8s_cluster.apply(_dag("peer-one"), namespace=k8s_namespace)
        assert high.ready("dag", "peer-one")["status"] == "True", high.output()
        assert "dag_applied" in high.output()
        assert "dag_applied" not in low.output(), low.output()

        high.stop()
        k8s_cluster.apply(_dag("peer-two"), namespace=k8s_namespace)
        assert low.ready("dag", "peer-two")["status"] == "True", low.output()
        assert "dag_applied" in low.output()
    finally:
        for kind in ("dagruns", "dags"):
            k8s_cluster.kubectl(
                "-n", k8s_namespace, "delete", kind, "--all", "--timeout=30s", check=False
            )
        for replica in (high, low):
            if replica is not None:
                replica.stop()
