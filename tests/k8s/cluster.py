"""Talking to the test cluster: where it is, and kubectl against it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"
CACHE = Path(os.environ.get("SLUICE_CACHE") or Path.home() / ".cache" / "sluice")
CLUSTER_DIR = Path(os.environ.get("SLUICE_CLUSTER_DIR") or CACHE / "cluster")
LOCAL_KUBECONFIG = CLUSTER_DIR / "admin.kubeconfig"
IMAGE = os.environ.get("SLUICE_IMAGE", "localhost/sluice:dev")
# A cold start builds Kubernetes from source: give the first k8s test (whose
# setup starts the cluster) that long instead of the suite's usual timeout.
START_TIMEOUT = int(os.environ.get("SLUICE_K8S_START_TIMEOUT", "5400"))


def kubectl_binary() -> str | None:
    local = CACHE / "bin" / "kubectl"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("kubectl")


def reachable(kubeconfig: Path | str) -> bool:
    kubectl = kubectl_binary()
    if kubectl is None or not Path(kubeconfig).is_file():
        return False
    try:
        proc = subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                str(kubeconfig),
                "--request-timeout=5s",
                "get",
                "--raw",
                "/readyz",
            ],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


@dataclass
class Cluster:
    """A reachable cluster and how to talk to it."""

    kubeconfig: Path
    kubectl_bin: str
    image: str = IMAGE
    started_here: bool = False
    env: dict[str, str] = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        """The local cluster (hack/cluster-up.sh), whose processes the tests may stop and
        restart, inside whose network namespace this session runs."""
        return Path(self.kubeconfig) == LOCAL_KUBECONFIG

    def host_address(self) -> str:
        """This machine's address as the cluster's pods reach it, where the tests serve
        what pods call (a fleet's task API, a log store): the source address of the
        route to the node. On the local cluster, the node's own address (its bridge is
        this namespace's); on kind, the Docker network's gateway on this side."""
        node = self.get_json("nodes")["items"][0]
        internal = next(
            a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"
        )
        route = subprocess.run(
            ["ip", "-4", "-o", "route", "get", internal],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.split()  # fmt: skip
        return route[route.index("src") + 1]

    def restart_apiserver(self, timeout: float = 120, down_for: float = 0.0) -> None:
        """Stop the API server and start it again (after `down_for` seconds without one):
        the local cluster's process (`restart_apiserver` below), or kind's static pod, whose
        manifest is taken out of the node's manifests directory and put back."""
        if self.is_local:
            restart_apiserver(timeout=timeout, down_for=down_for)
            return
        node = self.get_json("nodes")["items"][0]["metadata"]["name"]
        manifest, aside = "/etc/kubernetes/manifests/kube-apiserver.yaml", "/etc/kubernetes/"

        def node_exec(*cmd: str) -> None:
            # kind's node is a container of the Docker engine DOCKER_HOST names.
            subprocess.run(["docker", "exec", node, *cmd], check=True, timeout=30)

        node_exec("mv", manifest, aside)
        deadline = time.monotonic() + 90
        while reachable(self.kubeconfig):
            assert time.monotonic() < deadline, "kind's API server still answers 90 s after stop"
            time.sleep(0.5)
        time.sleep(down_for)
        node_exec("mv", aside + "kube-apiserver.yaml", manifest)
        deadline = time.monotonic() + timeout
        while not reachable(self.kubeconfig):
            assert time.monotonic() < deadline, "kind's API server not ready after its restart"
            time.sleep(0.5)

    def default_storage_class(self) -> str | None:
        """The StorageClass a claim without one gets (kind's `standard`), if any."""
        for sc in self.get_json("storageclasses")["items"]:
            annotations = sc["metadata"].get("annotations") or {}
            if annotations.get("storageclass.kubernetes.io/is-default-class") == "true":
                return str(sc["metadata"]["name"])
        return None

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """`kubectl wait --for=condition=Established` for these CRDs. kubectl 1.34 fails at
        once instead of waiting while a CRD just created has no status.conditions yet
        (".status.conditions accessor error", seen in `make e2e` on 2026-12-06): ask again."""
        deadline = time.monotonic() + timeout
        while True:
            args = ("wait", "--for=condition=Established", f"--timeout={timeout:.0f}s", *crds)
            proc = self.kubectl(*args, check=False)
            if proc.returncode == 0:
                return
            if "accessor error" not in proc.stderr or time.monotonic() >= deadline:
                raise AssertionError(
                    f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
                )
            time.sleep(0.5)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raise with its output on failure."""
        cmd = [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str, namespace: str | None = None) -> None:
        ns = ["-n", namespace] if namespace else []
        self.kubectl(*ns, "apply", "-f", "-", input=manifest)

    def drop_sluice_finalizers(self, namespace: str) -> None:
        """Take the operator's finalizer off the namespace's Sluice objects, for a namespace
        whose operator is gone (else deleting the namespace waits for it forever), as the
        chart's README says to after an uninstall."""
        names = self.kubectl(
            "-n", namespace, "get", "dags,dagruns,backfills", "-o", "name", check=False
        ).stdout.split()
        for name in names:
            self.kubectl(
                "-n", namespace, "patch", name, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}',
                check=False,
            )  # fmt: skip


def restart_apiserver(
    cluster_dir: Path = CLUSTER_DIR, timeout: float = 120, down_for: float = 0.0
) -> None:
    """Stop the local cluster's kube-apiserver and start it again with the same command line
    (after `down_for` seconds without one).

    Its watch cache starts over at the current revision, so a watch resumed from
    an older one gets `410 Gone`, and every open watch breaks. Runs in the
    caller's network namespace (the cluster's, in the k8s tests); the new pid
    goes in the pid file, so hack/cluster-down.sh stops it.
    """
    import signal

    pidfile = cluster_dir / "pids" / "kube-apiserver.pid"
    pid = int(pidfile.read_text())
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
    time.sleep(down_for)
    with (cluster_dir / "logs" / "kube-apiserver.log").open("ab") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    pidfile.write_text(f"{proc.pid}\n")
    kubectl = kubectl_binary()
    assert kubectl is not None
    deadline = time.monotonic() + timeout
    while not reachable(cluster_dir / "admin.kubeconfig"):
        assert proc.poll() is None, "kube-apiserver exited after its restart"
        assert time.monotonic() < deadline, "kube-apiserver not ready after its restart"
        time.sleep(0.5)


ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"
CRD_NAMES = ["dags", "dagruns", "pools", "backfills", "taskactions"]


def apply_crds(cluster: Cluster) -> None:
    """Apply crds/ (idempotent) and wait until every Sluice kind is served."""
    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.wait_established(*[f"crd/{name}.sluice.io" for name in CRD_NAMES])
