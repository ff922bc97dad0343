"""Readiness of the test cluster: the node, a Job in the Sluice image, its logs."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from .cluster import Cluster

pytestmark = pytest.mark.k8s


def test_nodes_are_ready(k8s_cluster: Cluster) -> None:
    nodes = k8s_cluster.get_json("nodes")["items"]
    assert nodes, "the cluster has no nodes"
    for node in nodes:
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions.get("Ready") == "True", (
            node["metadata"]["name"],
            json.dumps(node["status"]["conditions"], indent=1),
        )


def test_kubeconfig_is_exported(kubeconfig: Path) -> None:
    assert os.environ["KUBECONFIG"] == str(kubeconfig)


def test_job_in_sluice_image_completes_and_logs_are_readable(
    k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    job = "sluice-ready"
    k8s_cluster.apply(
        textwrap.dedent(f"""\
            apiVersion: batch/v1
            kind: Job
            metadata:
              name: {job}
            spec:
              backoffLimit: 0
              activeDeadlineSeconds: 240
              template:
                spec:
                  restartPolicy: Never
                  automountServiceAccountToken: false
                  containers:
                  - name: main
                    image: {k8s_cluster.image}
                    imagePullPolicy: Never
                    command:
                    - sh
                    - -c
                    - echo sluice-ready && python3 -c 'import sluice; print("import-ok")'
            """),
        namespace=k8s_namespace,
    )
    waited = k8s_cluster.kubectl(
        "-n",
        k8s_namespace,
        "wait",
        "--for=condition=Complete",
        f"job/{job}",
        "--timeout=200s",
        check=False,
        timeout=230,
    )
    if waited.returncode != 0:
        described = k8s_cluster.kubectl(
            "-n", k8s_namespace, "describe", "job,pods", check=False
        ).stdout
        pytest.fail(f"job {job} did not complete: {waited.stderr}\n{described}")

    logs = k8s_cluster.kubectl("-n", k8s_namespace, "logs", f"job/{job}").stdout
    assert logs.splitlines() == ["sluice-ready", "import-ok"], logs

    pods = k8s_cluster.get_json("pods", "-n", k8s_namespace, "-l", f"job-name={job}")["items"]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"]
    assert pods[0]["spec"]["containers"][0]["imagePullPolicy"] == "Never"


def test_pod_reaches_the_api_server_by_its_service_name(
    k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    """In-cluster config works: cluster DNS, the kubernetes Service, the token."""
    job = "sluice-in-cluster"
    script = textwrap.dedent("""\
        import json, os, ssl, urllib.request
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
        req = urllib.request.Request(
            "https://kubernetes.default.svc/version",
            headers={"Authorization": "Bearer " + open(sa + "/token").read()},
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print("server", json.load(resp)["gitVersion"])
        """)
    k8s_cluster.apply(
        json.dumps(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": job},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": 240,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": k8s_cluster.image,
                                    "imagePullPolicy": "Never",
                                    "command": ["python3", "-c", script],
                                }
                            ],
                        }
                    },
                },
            }
        ),
        namespace=k8s_namespace,
    )
    waited = k8s_cluster.kubectl(
        "-n",
        k8s_namespace,
        "wait",
        "--for=condition=Complete",
        f"job/{job}",
        "--timeout=200s",
        check=False,
        timeout=230,
    )
    logs = k8s_cluster.kubectl("-n", k8s_namespace, "logs", f"job/{job}", check=False)
    assert waited.returncode == 0, f"{waited.stderr}\nlogs:\n{logs.stdout}{logs.stderr}"
    server = json.loads(k8s_cluster.kubectl("get", "--raw", "/version").stdout)
    assert logs.stdout.strip() == f"server {server['gitVersion']}", logs.stdout


def test_garbage_collector_removes_a_deleted_jobs_pods(
    k8s_cluster: Cluster, k8s_namespace: str
) -> None:
    """kube-controller-manager runs: the Job makes a pod, deleting the Job removes it."""
    job = "sluice-gc"
    k8s_cluster.apply(
        json.dumps(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": job},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "automountServiceAccountToken": False,
                            "terminationGracePeriodSeconds": 1,
                            "containers": [
                                {
                                    "name": "main",
                                    "image": k8s_cluster.image,
                                    "imagePullPolicy": "Never",
                                    "command": ["sleep", "300"],
                                }
                            ],
                        }
                    },
                },
            }
        ),
        namespace=k8s_namespace,
    )
    selector = f"job-name={job}"
    k8s_cluster.kubectl(
        "-n",
        k8s_namespace,
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        selector,
        "--timeout=120s",
        timeout=150,
    )
    k8s_cluster.kubectl(
        "-n", k8s_namespace, "delete", "job", job, "--cascade=background", "--wait=true"
    )
    deadline = time.monotonic() + 90
    while k8s_cluster.get_json("pods", "-n", k8s_namespace, "-l", selector)["items"]:
        assert time.monotonic() < deadline, "the Job's pod was not garbage-collected"
        time.sleep(1)
