"""`helm install charts/sluice` on the local cluster, the way a user installs it.

One release in a namespace of its own (restricted Pod Security Standard
enforced), with the bundled Postgres on a hostPath volume bound to its claim
(the local cluster has no provisioner) and the images `hack/load-image.sh`
loads. The schedulers run in pods, so every Job here is theirs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.executors.kubernetes import names

from .cluster import CACHE, CLUSTER_DIR, ROOT, Cluster, apply_crds
from .fleet import dag_manifest
from .replicas import wait_for

pytestmark = pytest.mark.k8s

CHART = ROOT / "charts" / "sluice"
LOCAL_VALUES = CHART / "ci" / "local-values.yaml"


def _helm() -> str:
    local = CACHE / "bin" / "helm"
    found = str(local) if local.is_file() else shutil.which("helm")
    if found is None:
        pytest.fail("helm not found: make helm builds it into ~/.cache/sluice/bin", pytrace=False)
    return found


def _images_loaded(cluster: Cluster) -> bool:
    # The node's image list, as the kubelet reports it.
    node = cluster.get_json("nodes")["items"][0]
    images = node["status"].get("images") or []
    loaded = {n for image in images for n in image.get("names") or []}
    return any("sluice-postgres" in n for n in loaded)


class Release:
    def __init__(self, cluster: Cluster, namespace: str, name: str, helm: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.helm = helm
        self.fullname = f"{name}-sluice"

    def run_helm(self, *args: str, timeout: float = 600) -> str:
        cmd = [self.helm, "--kubeconfig", str(self.cluster.kubeconfig), "-n", self.namespace, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def k(self, *args: str, check: bool = True) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args, check=check).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.k("get", *args, "-o", "json"))

    def can_i(self, account: str, *args: str) -> bool:
        who = f"system:serviceaccount:{self.namespace}:{self.fullname}-{account}"
        out = self.cluster.kubectl("auth", "can-i", *args, "--as", who, check=False).stdout
        return out.strip() == "yes"

    def pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = self.json("pods", "-l", selector)["items"]
        return items

    def dump(self) -> str:
        out = [self.k("get", "pods,jobs,dagruns", "-o", "wide", check=False)]
        for component in ("scheduler", "operator"):
            out.append(
                self.k(
                    "logs",
                    "-l",
                    f"app.kubernetes.io/component={component}",
                    "--tail=40",
                    "--prefix",
                    "--all-containers",
                    check=False,
                )
            )
        return "\n".join(out)


@pytest.fixture
def release(k8s_cluster: Cluster, k8s_namespace: str, tmp_path: Path) -> Iterator[Release]:
    if not _images_loaded(k8s_cluster):
        pytest.fail(
            "localhost/sluice-postgres:15 is not on the node: hack/load-image.sh loads it",
            pytrace=False,
        )
    apply_crds(k8s_cluster)  # as the other k8s tests do: the default Pool's protection is there
    ns = k8s_namespace
    k8s_cluster.kubectl(
        "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite"
    )
    rel = Release(k8s_cluster, ns, f"t{uuid.uuid4().hex[:6]}", _helm())
    # The bundled Postgres's volume: hostPath, reserved for the StatefulSet's claim.
    volume = CLUSTER_DIR / "volumes" / f"{ns}-{rel.name}"
    volume.mkdir(parents=True)
    os.chown(volume, 999, 999)
    volume.chmod(0o700)
    pv = f"{ns}-{rel.name}-postgres"
    k8s_cluster.apply(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "claimRef": {"namespace": ns, "name": f"data-{rel.fullname}-postgres-0"},
                    "hostPath": {"path": str(volume), "type": "Directory"},
                },
            }
        )
    )
    try:
        yield rel
    finally:
        if _installed(rel):
            rel.run_helm("uninstall", rel.name, "--wait", timeout=300)
        k8s_cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)
        shutil.rmtree(volume, ignore_errors=True)


def _installed(rel: Release) -> bool:
    return rel.name in rel.run_helm("list", "-q")


def _wait_run(rel: Release, dag: str, timeout: float) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        for item in rel.json("dagruns")["items"]:
            status = item.get("status") or {}
            if item["spec"]["dagName"] == dag and status.get("state") in ("success", "failed"):
                return dict(item)
        return None

    try:
        return wait_for(f"the run of {dag} to end", ended, timeout=timeout, every=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{rel.dump()}") from None


def test_the_chart_installs_runs_a_dag_through_a_scheduler_pod_kill_and_uninstalls(
    k8s_cluster: Cluster, release: Release
) -> None:
    rel = release
    rel.run_helm(
        "install", rel.name, str(CHART), "-f", str(LOCAL_VALUES),
        "--set", "defaultPoolProtection.enabled=false", "--wait", "--timeout", "8m",
    )  # fmt: skip
    schedulers = rel.pods("scheduler")
    assert len(schedulers) == 3, rel.dump()  # three active replicas by default
    assert all(p["status"]["phase"] == "Running" for p in schedulers), rel.dump()

    # Least privilege, both ways (the chart README lists and justifies each rule).
    must = [
        ("scheduler", "create", "jobs.batch"),
        ("scheduler", "delete", "jobs.batch"),
        ("scheduler", "watch", "pods"),
        ("scheduler", "create", "dagruns.sluice.io"),
        ("scheduler", "patch", "dagruns.sluice.io", "--subresource=status"),
        ("scheduler", "create", "events"),
        ("operator", "watch", "dags.sluice.io"),
        ("operator", "patch", "dags.sluice.io", "--subresource=status"),
    ]
    must_not = [
        ("scheduler", "list", "secrets", "-A"),
        ("scheduler", "get", "secrets"),
        ("scheduler", "create", "pods"),
        ("scheduler", "delete", "namespaces"),
        ("operator", "create", "jobs.batch"),
        ("operator", "list", "secrets", "-A"),
        ("task", "get", "pods"),
        ("task", "create", "jobs.batch"),
    ]
    for account, *what in must:
        assert rel.can_i(account, *what, "-n", rel.namespace), (account, what)
    for account, *what in must_not:
        args = what if "-A" in what else [*what, "-n", rel.namespace]
        assert not rel.can_i(account, *args), (account, what)

    # A DAG whose tasks run while one scheduler pod is killed, twice.
    dag = f"chart-{rel.name}"
    tasks = [{"name": f"t{i}", "args": ["sleep 8; echo ok"]} for i in range(12)]
    manifest = dag_manifest(dag, tasks).replace("busybox:1.36", k8s_cluster.image)
    k8s_cluster.apply(manifest, namespace=rel.namespace)

    def running_jobs() -> list[dict[str, Any]] | None:
        jobs: list[dict[str, Any]] = rel.json("jobs", "-l", names.SELECTOR)["items"]
        return [j for j in jobs if j.get("status", {}).get("active")] or None

    wait_for("task Jobs running", running_jobs, timeout=240, every=1)
    for _ in range(2):
        victim = rel.pods("scheduler")[0]["metadata"]["name"]
        rel.k("delete", "pod", victim, "--grace-period=0", "--force")
        time.sleep(10)

    run = _wait_run(rel, dag, timeout=420)
    assert run["status"]["state"] == "success", f"{run['status']}\n{rel.dump()}"
    jobs = rel.json("jobs", "-l", names.SELECTOR)["items"]
    tries = Counter(
        (j["metadata"]["labels"][names.TI_LABEL], j["metadata"]["labels"][names.TRY_LABEL])
        for j in jobs
    )
    assert all(n == 1 for n in tries.values()), f"a try started twice: {tries}"
    assert len({ti for ti, _ in tries}) == len(tasks), tries

    rel.run_helm("uninstall", rel.name, "--wait", timeout=300)
    instance = f"app.kubernetes.io/instance={rel.name}"
    # Its pods go with their owners (the garbage collector, after their grace period).
    wait_for(
        "the release's pods to go",
        lambda: not rel.k("get", "pods", "-l", instance, "-o", "name").strip(),
        timeout=180,
        every=2,
    )
    left = rel.k(
        "get", "deployments,statefulsets,services,pods,jobs,configmaps,roles,rolebindings,"
        "serviceaccounts,networkpolicies", "-l", instance, "-o", "name",
    )  # fmt: skip
    assert left.strip() == "", left
    # Kept on purpose (charts/sluice/README.md, "Uninstalling"): the database's volume
    # claim and the password it opens with.
    kept = rel.k("get", "secrets", "-l", instance, "-o", "name").split()
    assert kept == [f"secret/{rel.fullname}-postgres"], kept
    cluster_left = k8s_cluster.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", f"app.kubernetes.io/instance={rel.name}",
        "-o", "name",
    ).stdout  # fmt: skip
    assert cluster_left.strip() == "", cluster_left
    # Task pods are history (their Jobs ended); none runs without a scheduler.
    active = [
        p for p in rel.json("pods")["items"] if p["status"]["phase"] in ("Pending", "Running")
    ]
    assert active == [], [p["metadata"]["name"] for p in active]
