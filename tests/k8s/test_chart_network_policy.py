"""The chart's NetworkPolicies (`networkPolicy.enabled=true`), enforced on a real cluster.

On the local cluster kube-router's network-policy controller enforces them
(hack/README.md, "NetworkPolicy"). One release (one scheduler, one operator, the
bundled Postgres) and two probe pods in its namespace, which is also its task
namespace: one labelled `sluice.io/ti` as every task pod is, one not. Each probe
opens TCP connections (2 s timeout) from inside its pod:

- the task pod reaches the schedulers' task API (the Service and the pod), and
  neither the scheduler's metrics port nor Postgres;
- the other pod reaches the metrics port, and neither the task API nor Postgres.

The probes pass the restricted Pod Security Standard the namespace enforces, and
run `localhost/sluice:dev`'s Python (nothing can be pulled).
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.executors.kubernetes import names

from .chart import Release, installed
from .cluster import CLUSTER_DIR, Cluster
from .replicas import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

VALUES = [
    "--set", "networkPolicy.enabled=true",
    "--set", "scheduler.replicas=1",
    "--set", "operator.replicas=1",
]  # fmt: skip
CONNECT_TIMEOUT = 2.0

# Arguments: a connect timeout in seconds, then "name=host:port" targets. Prints
# {"name": "connected" | "refused" | "timeout" | "<error>"}.
PROBE = textwrap.dedent("""\
    import json, socket, sys
    timeout, out = float(sys.argv[1]), {}
    for arg in sys.argv[2:]:
        name, target = arg.split("=", 1)
        host, port = target.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            out[name] = "connected"
        except ConnectionRefusedError:
            out[name] = "refused"
        except (socket.timeout, TimeoutError):
            out[name] = "timeout"
        except OSError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    """)


def _probe_pod(name: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "netpol-probe", **labels}},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", "import time; time.sleep(3600)"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
        },
    }


def _no_policy_engine() -> str | None:
    """Why the local cluster enforces no NetworkPolicy now, if it does not: its
    kube-router is not running (`SLUICE_NETWORK_POLICY=0 make cluster-up` leaves it
    out, for node-bound benchmarks). None on another cluster: its network plugin is
    the one to enforce them."""
    if not (CLUSTER_DIR / "env").is_file():
        return None
    try:
        os.kill(int((CLUSTER_DIR / "pids" / "kube-router.pid").read_text().split()[0]), 0)
    except (OSError, ValueError):
        return (
            "the local cluster runs without kube-router, so nothing enforces NetworkPolicies:"
            " start it again with it (make cluster-down && make cluster-up, without"
            " SLUICE_NETWORK_POLICY=0)"
        )
    return None


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster) -> Iterator[Release]:
    missing = _no_policy_engine()
    if missing is not None:
        pytest.fail(missing)
    with installed(k8s_cluster) as release:
        release.install(*VALUES)
        yield release


def _connect(rel: Release, pod: str, targets: dict[str, str]) -> dict[str, str]:
    args = [f"{name}={target}" for name, target in targets.items()]
    out = rel.k(
        "exec", pod, "-c", "probe", "--", "python3", "-c", PROBE, str(CONNECT_TIMEOUT), *args
    )
    result: dict[str, str] = json.loads(out)
    return result


def test_task_pods_reach_only_the_task_api_and_other_pods_only_the_metrics_port(
    rel: Release, k8s_cluster: Cluster
) -> None:
    task_probe, other_probe = "netpol-task-probe", "netpol-other-probe"
    # The label every task pod has (the Job executor's); a value no try has.
    k8s_cluster.apply(
        json.dumps(_probe_pod(task_probe, k8s_cluster.image, {names.TI_LABEL: "probe"})),
        rel.namespace,
    )
    k8s_cluster.apply(json.dumps(_probe_pod(other_probe, k8s_cluster.image, {})), rel.namespace)
    rel.k(
        "wait", "--for=condition=Ready", f"pod/{task_probe}", f"pod/{other_probe}", "--timeout=120s"
    )

    (scheduler,) = rel.pods("scheduler")
    (postgres,) = rel.pods("postgres")
    task_api = rel.json("service", f"{rel.fullname}-task-api")["spec"]
    postgres_svc = rel.json("service", f"{rel.fullname}-postgres")["spec"]
    metrics_port = rel.json("service", f"{rel.fullname}-metrics")["spec"]["ports"][0]["port"]
    task_api_port = task_api["ports"][0]["port"]
    targets = {
        "task-api-service": f"{task_api['clusterIP']}:{task_api_port}",
        "task-api-pod": f"{scheduler['status']['podIP']}:{task_api_port}",
        "metrics-pod": f"{scheduler['status']['podIP']}:{metrics_port}",
        "postgres-service": f"{postgres_svc['clusterIP']}:5432",
        "postgres-pod": f"{postgres['status']['podIP']}:5432",
    }

    # The policy engine learns of a new pod's address from the API server: wait until
    # what each probe may reach answers, then check everything at once.
    def reached(pod: str, allowed: tuple[str, ...]) -> dict[str, str] | None:
        seen = _connect(rel, pod, targets)
        return seen if all(seen[name] == "connected" for name in allowed) else None

    task_allowed = ("task-api-service", "task-api-pod")
    other_allowed = ("metrics-pod",)
    try:
        from_task = wait_for(
            "the task probe to reach the task API",
            lambda: reached(task_probe, task_allowed),
            timeout=30,
            every=1,
        )
        from_other = wait_for(
            "the other probe to reach the metrics port",
            lambda: reached(other_probe, other_allowed),
            timeout=30,
            every=1,
        )
    except AssertionError as exc:
        seen = {p: _connect(rel, p, targets) for p in (task_probe, other_probe)}
        objects = rel.k("get", "networkpolicies,pods", "-o", "wide")
        raise AssertionError(f"{exc}: {seen}\n{objects}") from None

    # A task pod: the task API and nothing else of Sluice's.
    must_not = {name: from_task[name] for name in targets if name not in task_allowed}
    assert all(v in ("refused", "timeout") for v in must_not.values()), (
        f"a task pod connected where the chart's NetworkPolicies forbid it: {from_task}"
    )
    # Any other pod: the metrics port, not the task API, not Postgres.
    must_not = {name: from_other[name] for name in targets if name not in other_allowed}
    assert all(v in ("refused", "timeout") for v in must_not.values()), (
        f"a pod that is not a task pod connected where the policies forbid it: {from_other}"
    )
