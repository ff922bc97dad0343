"""The CRDs on a real API server: examples pass, bad objects fail with useful messages.

The CRDs are applied (idempotently) to the cluster; they are cluster-wide, so
other tests and sessions share them.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from .cluster import EXAMPLES, Cluster, apply_crds

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def crds(k8s_cluster: Cluster) -> Cluster:
    apply_crds(k8s_cluster)
    return k8s_cluster


def _rejected(cluster: Cluster, manifest: str, namespace: str | None = None) -> str:
    ns = ["-n", namespace] if namespace else []
    proc = cluster.kubectl(*ns, "apply", "-f", "-", input=textwrap.dedent(manifest), check=False)
    assert proc.returncode != 0, f"accepted but should not be:\n{manifest}\n{proc.stdout}"
    return proc.stderr


def test_examples_pass_the_schema_and_show_columns(crds: Cluster, k8s_namespace: str) -> None:
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert examples
    for path in examples:
        crds.kubectl("-n", k8s_namespace, "apply", "--dry-run=server", "-f", str(path))
    crds.kubectl("-n", k8s_namespace, "apply", "-f", str(EXAMPLES))
    stored = crds.get_json("dag", "hello", "-n", k8s_namespace)
    # Nothing was pruned: what was applied is what is stored.
    assert stored["spec"]["defaults"]["executionTimeout"] == "5m"
    assert stored["spec"]["tasks"][2]["env"] == [{"name": "GREETING", "value": "hello"}]
    out = crds.kubectl("-n", k8s_namespace, "get", "dags").stdout
    assert out.split("\n")[0].split() == [
        "NAME", "SCHEDULE", "PAUSED", "ACTIVE", "LAST", "RUN", "NEXT", "RUN", "READY", "AGE",
    ]  # fmt: skip
    assert "@hourly" in out
    category = crds.kubectl("-n", k8s_namespace, "get", "sluice").stdout
    assert "dag.sluice.io/hello" in category


def test_bad_dag_is_rejected_with_field_paths(crds: Cluster, k8s_namespace: str) -> None:
    err = _rejected(
        crds,
        """\
        apiVersion: sluice.io/v1alpha1
        kind: DAG
        metadata: {name: bad}
        spec:
          startDate: 2026-12-02T00:00:00Z
          endDate: 2026-12-01T00:00:00Z
          tasks:
          - {name: a, image: busybox, dependsOn: [a], poolSlots: 0, triggerRule: sometimes}
          - {name: a, image: busybox}
          - {name: Not_A_Label, image: busybox}
        """,
        k8s_namespace,
    )
    assert "spec.tasks[0].poolSlots" in err
    assert "greater than or equal to 1" in err
    assert "spec.tasks[0].triggerRule" in err
    assert "none_failed_min_one_success" in err  # the enum lists the valid rules
    assert 'spec.tasks[1]: Duplicate value: {"name":"a"}' in err
    assert "spec.tasks[2].name" in err
    crds.kubectl("-n", k8s_namespace, "get", "dags")  # and nothing was stored
    assert crds.kubectl("-n", k8s_namespace, "get", "dag", "bad", check=False).returncode != 0


def test_cel_rules(crds: Cluster, k8s_namespace: str) -> None:
    err = _rejected(
        crds,
        """\
        apiVersion: sluice.io/v1alpha1
        kind: DAG
        metadata: {name: cel}
        spec:
          startDate: 2026-12-02T00:00:00Z
          endDate: 2026-12-01T00:00:00Z
          tasks:
          - {name: a, image: busybox, dependsOn: [a]}
          - {name: a-task-name-so-long-that-dag-plus-task-is-over-50, image: busybox}
        """,
        k8s_namespace,
    )
    assert "spec.endDate" in err
    assert "endDate is before startDate" in err
    assert "spec.tasks[0].dependsOn" in err
    assert "a task cannot depend on itself" in err
    assert "DAG name plus task name must fit in 50" in err
    err = _rejected(
        crds,
        f"""\
        apiVersion: sluice.io/v1alpha1
        kind: DAG
        metadata: {{name: {"d" * 50}}}
        spec: {{tasks: [{{name: a, image: busybox}}]}}
        """,
        k8s_namespace,
    )
    assert "a DAG's name must be a DNS label" in err


def test_dagrun_dag_name_is_immutable_and_columns(crds: Cluster, k8s_namespace: str) -> None:
    crds.apply(
        json.dumps(
            {
                "apiVersion": "sluice.io/v1alpha1",
                "kind": "DagRun",
                "metadata": {"name": "r1"},
                "spec": {"dagName": "hello", "conf": {"deep": {"x": [1, 2]}}},
            }
        ),
        namespace=k8s_namespace,
    )
    stored = crds.get_json("dr", "r1", "-n", k8s_namespace)
    assert stored["spec"]["conf"] == {"deep": {"x": [1, 2]}}  # preserved, not pruned
    patched = crds.kubectl(
        "-n", k8s_namespace, "patch", "dagrun", "r1", "--type=merge",
        "-p", '{"spec": {"dagName": "other"}}', check=False,
    )  # fmt: skip
    assert patched.returncode != 0
    assert "spec.dagName" in patched.stderr
    assert "dagName cannot change" in patched.stderr
    header = crds.kubectl("-n", k8s_namespace, "get", "dagruns").stdout.split("\n")[0]
    assert header.split() == [
        "NAME", "DAG", "TYPE", "LOGICAL", "DATE", "STATE", "TASKS", "DURATION", "REASON", "AGE",
    ]  # fmt: skip
    crds.kubectl("-n", k8s_namespace, "delete", "dagrun", "r1")


def test_pool_and_backfill_rules(crds: Cluster, k8s_namespace: str) -> None:
    err = _rejected(
        crds,
        """\
        apiVersion: sluice.io/v1alpha1
        kind: Pool
        metadata: {name: sluice-test-negative}
        spec: {slots: -1}
        """,
    )
    assert "spec.slots" in err
    assert "greater than or equal to 0" in err
    # A pool of our own, so the table has a header even on a fresh cluster
    # (kubectl prints none when there is nothing to list).
    crds.apply(
        "apiVersion: sluice.io/v1alpha1\nkind: Pool\n"
        "metadata: {name: sluice-test-columns}\nspec: {slots: 2}\n"
    )
    try:
        header = crds.kubectl("get", "pools").stdout.split("\n")[0]
        assert header.split()[:5] == ["NAME", "SLOTS", "RUNNING", "QUEUED", "OPEN"]
    finally:
        crds.kubectl("delete", "pool", "sluice-test-columns", "--wait=false")
    err = _rejected(
        crds,
        """\
        apiVersion: sluice.io/v1alpha1
        kind: Backfill
        metadata: {name: b}
        spec: {dagName: hello, startDate: "2026-12-02T00:00:00Z", endDate: "2026-12-01T00:00:00Z"}
        """,
        k8s_namespace,
    )
    assert "spec.endDate" in err
    assert "endDate is before startDate" in err


def test_default_pool_cannot_be_deleted(crds: Cluster) -> None:
    # The real default pool (it mirrors the database's `default` row); it stays.
    if crds.kubectl("get", "pool", "default", check=False).returncode != 0:
        crds.apply(
            "apiVersion: sluice.io/v1alpha1\nkind: Pool\n"
            "metadata: {name: default}\nspec: {slots: 128}\n"
        )
    deleted = crds.kubectl("delete", "pool", "default", "--dry-run=server", check=False)
    assert deleted.returncode != 0
    assert "the default pool cannot be deleted" in deleted.stderr
