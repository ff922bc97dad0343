"""Fixtures for tests against a real Kubernetes cluster (marker ``k8s``).

Where the cluster comes from, in order:

1. ``$KUBECONFIG``, when it is set and the API server behind it answers
   ``/readyz`` (a kind cluster from ``e2e/kind.sh``, or the local cluster, when
   pytest runs where they answer, as ``e2e/run.sh`` does it: inside their network
   namespaces). It is
   used as is and never torn down.
2. The local cluster's admin kubeconfig
   (``$SLUICE_CLUSTER_DIR/admin.kubeconfig``), when that cluster is running:
   the session enters the cluster's network namespace first (see ``netns``).
3. Otherwise ``hack/cluster-up.sh`` starts the local cluster (building the
   Kubernetes binaries and images first if this machine has never built them),
   the session enters its namespace, and ``hack/cluster-down.sh`` stops it at
   the end of the session: only what this session started is torn down.

``SLUICE_K8S=0`` skips every k8s test instead of starting a cluster, and so
does a machine that cannot run the local cluster (not root, not Linux).
The image the tests run is ``$SLUICE_IMAGE`` (default ``localhost/sluice:dev``),
present on the node already, so pods use ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from . import netns
from .cluster import (
    CLUSTER_DIR,
    HACK,
    LOCAL_KUBECONFIG,
    START_TIMEOUT,
    Cluster,
    apply_crds,
    kubectl_binary,
    reachable,
)
from .fleet import Fleet


def _can_start_local() -> str | None:
    """None if this machine can run hack/cluster-up.sh, else why not."""
    if os.environ.get("SLUICE_K8S", "") in {"0", "false", "no", "off"}:
        return "SLUICE_K8S=0: k8s tests disabled"
    if not sys.platform.startswith("linux"):
        return "the local cluster needs Linux"
    if os.geteuid() != 0:
        return "the local cluster needs root (kubelet, containerd); or set KUBECONFIG"
    return None


def _existing_kubeconfig() -> Path | None:
    env = os.environ.get("KUBECONFIG")
    if env and reachable(env):
        return Path(env)
    if netns.exists() and LOCAL_KUBECONFIG.is_file():
        netns.enter()  # the local cluster answers only inside its namespace
        if reachable(LOCAL_KUBECONFIG):
            return LOCAL_KUBECONFIG
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The session fixture's set-up runs inside the first k8s test: let it last
    # as long as a cold build may take.
    for item in items:
        if item.get_closest_marker("k8s") is not None:
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(START_TIMEOUT))
            break


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[Cluster]:
    """A running cluster (see the module docstring); torn down only if started here."""
    kubectl = kubectl_binary()
    existing = _existing_kubeconfig()
    if existing is not None and kubectl is not None:
        yield Cluster(kubeconfig=existing, kubectl_bin=kubectl)
        return

    why_not = _can_start_local()
    if why_not is not None:
        pytest.skip(why_not)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Each xdist worker has its own session: one of them must not stop the
        # cluster under the others. Start it before pytest instead.
        pytest.fail(
            "no cluster is running: with pytest-xdist, start it first "
            "(make cluster-up, or e2e/run.sh which starts and stops it)",
            pytrace=False,
        )
    env = dict(os.environ)
    env["SLUICE_CLUSTER_DIR"] = str(CLUSTER_DIR)
    proc = subprocess.run(
        ["bash", str(HACK / "cluster-up.sh")],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"hack/cluster-up.sh exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-5000:]}\n--- stderr ---\n{proc.stderr[-10000:]}",
            pytrace=False,
        )
    kubectl = kubectl_binary()
    assert kubectl is not None, "cluster-up.sh finished but no kubectl was built"
    netns.enter()
    try:
        yield Cluster(kubeconfig=LOCAL_KUBECONFIG, kubectl_bin=kubectl, started_here=True)
    finally:
        # cluster-down spares the processes that called it; this one's
        # namespace ends when the session does.
        down = subprocess.run(
            ["bash", str(HACK / "cluster-down.sh")],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if down.returncode != 0:
            sys.stderr.write(f"hack/cluster-down.sh exited {down.returncode}\n{down.stderr}\n")


@pytest.fixture(scope="session")
def kubeconfig(k8s_cluster: Cluster) -> Iterator[Path]:
    """Path of an admin kubeconfig; also exported as $KUBECONFIG for the session."""
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(k8s_cluster.kubeconfig)
    try:
        yield k8s_cluster.kubeconfig
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old


@pytest.fixture
def k8s_namespace(k8s_cluster: Cluster, kubeconfig: Path) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting)."""
    name = f"sluice-test-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    # Pods cannot be created before the namespace's default service account.
    deadline = time.monotonic() + 60
    while (
        k8s_cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode
        != 0
    ):
        assert time.monotonic() < deadline, f"no default service account in {name}"
        time.sleep(0.5)
    try:
        yield name
    finally:
        # The test's operator (if any) has stopped: its finalizers would hold the namespace.
        k8s_cluster.drop_sluice_finalizers(name)
        k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def fleet(
    k8s_cluster: Cluster,
    kubeconfig: Path,
    k8s_namespace: str,
    db_url: str,
    sessions: sessionmaker[Session],
    tmp_path: Path,
) -> Iterator[Fleet]:
    """Host-run scheduler replicas for one test (tests/k8s/fleet.py), stopped after it."""
    apply_crds(k8s_cluster)  # the replicas publish their runs to DagRun objects
    running = Fleet(k8s_cluster, k8s_namespace, db_url, sessions, tmp_path)
    try:
        yield running
    finally:
        running.stop()
