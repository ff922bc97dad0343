"""A DAG's Jobs run in the DAG's own namespace (ADR 0032), on a `helm install`ed Sluice.

One release for the module serving two namespaces: its own and a team's, both
enforcing the restricted Pod Security Standard (`chart.installed` labels the
release's; the team's is labelled here). A DAG applied in the team's namespace
runs its Job there, as the task ServiceAccount the chart made there (no rights,
no token); a DAG whose podTemplate the CRD accepts but the team namespace's Pod
Security admission refuses (a second container without the restricted profile's
settings) fails its try at once with the admission's message,
long before the pod start timeout (600 s here); so does a pod over the
namespace's LimitRange (an admission refusal no spec validation can foresee).

The schedulers run the image on the node (`localhost/sluice:dev`): it must be
built from this code (`hack/build-images.sh`), or the Jobs run where an older
executor puts them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .chart import Release, installed
from .cluster import Cluster
from .fleet import dag_manifest
from .replicas import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]

POD_START_TIMEOUT = 600


@pytest.fixture(scope="module")
def team(k8s_cluster: Cluster) -> Iterator[str]:
    """A second namespace, enforcing the restricted Pod Security Standard."""
    name = f"sluice-team-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    k8s_cluster.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    try:
        yield name
    finally:
        k8s_cluster.drop_sluice_finalizers(name)
        k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster, team: str) -> Iterator[Release]:
    with installed(k8s_cluster) as release:
        release.install(
            "--set", f"watch.namespaces={{{release.namespace},{team}}}",
            "--set", f"tasks.podStartTimeout={POD_START_TIMEOUT}",
        )  # fmt: skip
        try:
            yield release
        finally:
            # The team's objects first, while the operator runs to take its finalizer off.
            k8s_cluster.kubectl(
                "-n", team, "delete", "dagruns,dags", "--all", "--timeout=120s",
                check=False, timeout=180,
            )  # fmt: skip


def _apply(rel: Release, team: str, manifest: str) -> None:
    rel.cluster.apply(manifest.replace("busybox:1.36", rel.cluster.image), team)


def _ended_run(rel: Release, team: str, dag: str, timeout: float) -> dict[str, Any]:
    """The DagRun object of `dag` in the team's namespace once its state is final."""

    def ended() -> dict[str, Any] | None:
        items = rel.cluster.get_json("dagruns", "-n", team)["items"]
        for item in items:
            status = item.get("status") or {}
            if item["spec"]["dagName"] == dag and status.get("state") in ("success", "failed"):
                return dict(item)
        return None

    try:
        return wait_for(f"the run of {dag} to end", ended, timeout=timeout, every=2)
    except AssertionError as exc:
        dump = rel.cluster.kubectl(
            "-n", team, "get", "dags,dagruns,jobs,pods,events", "-o", "wide", check=False
        ).stdout
        raise AssertionError(f"{exc}\n{team}:\n{dump}\n{rel.dump()}") from None


def _tries(rel: Release, dag: str) -> list[list[str]]:
    """(state, the task's external id, reason) of every try of `dag`, from the database
    (a try row records its executor; the task instance, its latest try's Job)."""
    return rel.sql(
        "SELECT tt.state, coalesce(ti.external_id, ''), coalesce(tt.reason, '')"
        " FROM task_try tt JOIN task_instance ti ON ti.id = tt.task_instance_id"
        f" WHERE ti.dag_id = '{dag}' ORDER BY tt.try_number"
    )


def test_a_dag_in_a_served_namespace_runs_its_job_there_as_the_task_account(
    rel: Release, team: str
) -> None:
    task_account = f"{rel.fullname}-task"
    scheduler = f"system:serviceaccount:{rel.namespace}:{rel.fullname}-scheduler"
    task = f"system:serviceaccount:{team}:{task_account}"

    def can(who: str, *args: str) -> bool:
        out = rel.cluster.kubectl("auth", "can-i", *args, "--as", who, check=False).stdout
        return out.strip() == "yes"

    # The schedulers' Job rights in the served namespaces, and not elsewhere.
    assert can(scheduler, "create", "jobs.batch", "-n", team)
    assert can(scheduler, "watch", "events", "-n", team)
    assert not can(scheduler, "create", "jobs.batch", "-n", "default")
    assert not can(scheduler, "get", "secrets", "-n", team)
    # The task account exists there, with no rights and no token.
    account = rel.cluster.get_json("serviceaccount", task_account, "-n", team)
    assert account["automountServiceAccountToken"] is False
    assert not can(task, "get", "pods", "-n", team)
    assert not can(task, "create", "jobs.batch", "-n", team)

    dag = f"tenant-{rel.name}"
    _apply(rel, team, dag_manifest(dag, [{"name": "t", "args": ["echo ran in $(hostname)"]}]))
    run = _ended_run(rel, team, dag, timeout=300)
    assert run["status"]["state"] == "success", f"{run['status']}\n{rel.dump()}"

    (job,) = rel.cluster.get_json("jobs", "-n", team, "-l", f"sluice.io/dag={dag}")["items"]
    assert job["metadata"]["namespace"] == team
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == task_account
    assert pod_spec["automountServiceAccountToken"] is False
    assert rel.jobs(dag) == []  # nothing of the team's in the release's namespace
    ((state, external_id, _),) = _tries(rel, dag)
    assert (state, external_id) == ("success", f"{team}/{job['metadata']['name']}")
    # The heartbeat sidecar reached the task API across namespaces (its Service's FQDN).
    sidecar = pod_spec["initContainers"][0]
    url = next(e["value"] for e in sidecar["env"] if e["name"] == "SLUICE_TASK_API_URL")
    assert url == f"http://{rel.fullname}-task-api.{rel.namespace}.svc:8080"


def test_a_pod_the_namespaces_admission_refuses_fails_its_try_at_once(
    rel: Release, team: str
) -> None:
    """A podTemplate the CRD and Sluice accept, but `restricted` refuses (a second
    container that does not set `allowPrivilegeEscalation: false` and drop every
    capability, as the restricted profile requires of every container; Sluice sets them
    on `main` and its sidecar only): the Job is created, its pod never is. The try fails
    with the admission's words within seconds, not after the pod start timeout."""
    dag = f"refused-{rel.name}"
    template = {
        "spec": {
            "containers": [
                {"name": "helper", "image": rel.cluster.image, "command": ["sleep", "1"]}
            ]
        }
    }
    manifest = json.loads(dag_manifest(dag, [{"name": "t", "args": ["echo never"]}]))
    manifest["spec"]["tasks"][0]["podTemplate"] = template
    began = time.monotonic()
    _apply(rel, team, json.dumps(manifest))
    run = _ended_run(rel, team, dag, timeout=240)
    took = time.monotonic() - began
    assert run["status"]["state"] == "failed", f"{run['status']}\n{rel.dump()}"
    assert took < POD_START_TIMEOUT / 2, f"{took:.0f}s: not at once"
    ((state, _, reason),) = _tries(rel, dag)
    assert state == "failed"
    assert reason.startswith("the API server refused the try's pod: "), reason
    assert 'violates PodSecurity "restricted:latest"' in reason, reason
    assert "allowPrivilegeEscalation" in reason, reason
    # Its Job is deleted: the Job controller would try again with the same pod forever.
    wait_for(
        "the refused try's Job deleted",
        lambda: not rel.cluster.get_json("jobs", "-n", team, "-l", f"sluice.io/dag={dag}")["items"],
        timeout=60,
    )


def test_a_pod_over_the_namespaces_limit_range_fails_its_try_at_once(
    rel: Release, team: str
) -> None:
    """The LimitRange admission plugin refuses the pod (its main container asks for more
    memory than the namespace allows): the try fails with its words, at once."""
    limits = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "small"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "256Mi"}}]},
        }
    )
    rel.cluster.apply(limits, team)
    try:
        dag = f"limited-{rel.name}"
        task = {"name": "t", "args": ["echo never"], "resources": {"limits": {"memory": "1Gi"}}}
        began = time.monotonic()
        _apply(rel, team, dag_manifest(dag, [task]))
        run = _ended_run(rel, team, dag, timeout=240)
        took = time.monotonic() - began
        assert run["status"]["state"] == "failed", f"{run['status']}\n{rel.dump()}"
        assert took < POD_START_TIMEOUT / 2, f"{took:.0f}s: not at once"
        ((state, _, reason),) = _tries(rel, dag)
        assert state == "failed"
        assert reason.startswith("the API server refused the try's pod: "), reason
        assert "maximum memory usage per Container is 256Mi" in reason, reason
    finally:
        rel.cluster.kubectl("-n", team, "delete", "limitrange", "small", check=False)
