"""`helm install charts/sluice` on the local cluster, the way a user installs it.

One release in a namespace of its own (restricted Pod Security Standard
enforced), with the bundled Postgres on a hostPath volume bound to its claim
(the local cluster has no provisioner) and the images `hack/load-image.sh`
loads. The schedulers run in pods, so every Job here is theirs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .chart import Release, installed
from .cluster import Cluster
from .fleet import dag_manifest
from .replicas import wait_for

pytestmark = pytest.mark.k8s


@pytest.fixture
def release(k8s_cluster: Cluster, k8s_namespace: str) -> Iterator[Release]:
    with installed(k8s_cluster, k8s_namespace) as rel:
        yield rel


def test_the_chart_installs_runs_a_dag_through_a_scheduler_pod_kill_and_uninstalls(
    k8s_cluster: Cluster, release: Release
) -> None:
    rel = release
    rel.install()
    schedulers = rel.pods("scheduler")
    assert len(schedulers) == 3, rel.dump()  # three active replicas by default
    assert all(p["status"]["phase"] == "Running" for p in schedulers), rel.dump()

    # Least privilege, both ways (the chart README lists and justifies each rule).
    must = [
        ("scheduler", "create", "jobs.batch"),
        ("scheduler", "delete", "jobs.batch"),
        ("scheduler", "watch", "pods"),
        ("scheduler", "patch", "pods"),  # an adopted try's pods move to the adopter's watch
        ("scheduler", "patch", "jobs.batch"),
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

    # A DAG whose tasks run while a scheduler pod that holds a running try is killed, twice.
    # Three layers of four, each waiting on the one before. A killed replica's tries are
    # adopted only once it is seen dead (--scheduler-dead-after 30 s, then a zombie check
    # within 10 s); twelve 8 s tasks side by side could all have ended by then, the live
    # replicas' too, leaving no try running on a live replica to kill the second time:
    # the likeliest cause of this wait's intermittent timeout (2026-12-06, 2026-12-07),
    # not confirmed by a dump of one. With layers, the next one starts only once the
    # killed replica's tries were adopted, on the live replicas.
    dag = f"chart-{rel.name}"
    layers = [[f"t{layer * 4 + i}" for i in range(4)] for layer in range(3)]
    tasks = [
        {"name": name, "args": ["sleep 8; echo ok"], **({"dependsOn": layers[n - 1]} if n else {})}
        for n, layer in enumerate(layers)
        for name in layer
    ]
    rel.apply(dag_manifest(dag, tasks))
    victims_tries: set[str] = set()
    for kill in range(2):
        try:
            held = wait_for(
                "a scheduler pod running a try", rel.running_tries_by_host, 240, every=1
            )
        except AssertionError as exc:
            raise AssertionError(
                f"before kill {kill + 1} of 2: {exc}\n{rel.scheduling_state()}\n{rel.dump()}"
            ) from None
        victim = sorted(held)[0]
        victims_tries |= held[victim]
        rel.k("delete", "pod", victim, "--grace-period=0", "--force")
        time.sleep(10)

    run = rel.wait_run(dag, timeout=420)
    assert run["status"]["state"] == "success", f"{rel.dump()}\n{run['status']}"
    rel.assert_each_try_started_once(dag, run, tasks=len(tasks))
    # The killed replicas' running tries were adopted and finished: not run again.
    assert set(rel.task_states(victims_tries).values()) == {("success", 1)}, rel.dump()

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
    # claim and the password it opens with, and the task API keys.
    kept = rel.k("get", "secrets", "-l", instance, "-o", "name").split()
    assert sorted(kept) == [
        f"secret/{rel.fullname}-postgres",
        f"secret/{rel.fullname}-task-api",
    ], kept
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
