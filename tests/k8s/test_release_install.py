"""`helm install oci://...` from a registry, with the image pulled from it, on a cluster.

A registry (hack/registry.sh: CNCF distribution, plain HTTP) in this session's
network namespace on the address the node reaches (`Cluster.host_address()`: the
local cluster's node address, kind's gateway), the node's containerd told that it
speaks plain HTTP (a hosts.toml in the `config_path` hack/cluster-up.sh and
hack/kind-cluster.sh give it), `make release` to it (its image build a no-op: e2e/run.sh
has just built this tree's), then `helm install oci://.../charts/sluice
--version V` as a user runs it: from an empty directory, helm's own homes in it,
only `--set`s on the command line. The CRDs are the session's (cluster-scoped, the
chart's copies are the same files: tests/chart), so `crds.install=false`, as every
chart test installs; the bundled Postgres is the image the node already has
(localhost/sluice-postgres:15; nothing leaves the cluster's namespace).

Skipped, saying why, where the node's containerd cannot be pointed at such a
registry: kind's published mode, a cluster neither started here nor by
hack/kind-cluster.sh, or one started by scripts older than this test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hosting import free_port
from tests.registry import Registry, Released, UserHelm, find_binary, make_release

from .chart import Release, helm_binary, installed
from .cluster import CLUSTER_DIR, ROOT, Cluster
from .fleet import dag_manifest

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PREFIX = "sluice-e2e"
POSTGRES_IMAGE = os.environ.get("POSTGRES_IMAGE", "localhost/sluice-postgres:15")
KIND_CERTS_D = "/etc/containerd/certs.d"


@dataclass(frozen=True)
class NodeRegistries:
    """How to write and remove a registry's hosts.toml where the node's containerd reads it."""

    write: Callable[[str, str], None]  # (host:port, hosts.toml)
    remove: Callable[[str], None]
    forget_image: Callable[[str], None]  # drop every name of a manifest digest (best effort)


def _refs_of(images_ls: str, digest: str) -> list[str]:
    """The names (tag, repo digest, image id) `ctr images ls` lists for a manifest digest."""
    rows = [line.split() for line in images_ls.splitlines()[1:]]
    return [row[0] for row in rows if len(row) > 2 and row[2] == digest]


def _hosts_toml(address: str) -> str:
    return (
        "# Written by tests/k8s/test_release_install.py: its registry speaks plain HTTP.\n"
        f'server = "http://{address}"\n\n'
        f'[host."http://{address}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )


def _local_node() -> NodeRegistries:
    config = CLUSTER_DIR / "containerd" / "config.toml"
    text = config.read_text() if config.is_file() else ""
    found = re.search(r'^\s*config_path = "([^"]+)"', text, re.MULTILINE)
    if found is None:
        pytest.skip(
            f"the local cluster's containerd ({config}) has no registry config_path: it was"
            " started by a hack/cluster-up.sh older than this test; restart it"
            " (make cluster-down; make cluster-up) to run it"
        )
    certs = Path(found[1])
    env = dict(
        line.split("=", 1)
        for line in (CLUSTER_DIR / "env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )

    def write(address: str, toml: str) -> None:
        (certs / address).mkdir(parents=True, exist_ok=True)
        (certs / address / "hosts.toml").write_text(toml)

    def remove(address: str) -> None:
        shutil.rmtree(certs / address, ignore_errors=True)

    def forget_image(digest: str) -> None:
        ctr = ["ctr", "--address", env["CONTAINERD_SOCK"], "-n", "k8s.io", "images"]
        listed = subprocess.run(
            [*ctr, "ls"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        refs = _refs_of(listed, digest)
        if refs:
            subprocess.run([*ctr, "rm", *refs], capture_output=True, timeout=60, check=False)

    return NodeRegistries(write, remove, forget_image)


def _kind_node(cluster: Cluster) -> NodeRegistries:
    # kind's node is a container of the Docker engine DOCKER_HOST names (e2e/kind.sh exec).
    node = cluster.get_json("nodes")["items"][0]["metadata"]["name"]

    def docker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", "-i", node, *args], input=stdin, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip

    try:
        configured = docker(
            "grep", "-q", f'config_path = "{KIND_CERTS_D}"', "/etc/containerd/config.toml"
        )
    except OSError as exc:
        pytest.skip(f"kind's node cannot be reached with docker exec ({exc})")
    if configured.returncode != 0:
        pytest.skip(
            f"kind's node {node} has no containerd config_path {KIND_CERTS_D}: the cluster was"
            " created by a hack/kind-cluster.sh older than this test; recreate it"
            " (make cluster-down CLUSTER=kind; make cluster-up CLUSTER=kind)"
        )

    def write(address: str, toml: str) -> None:
        path = f"{KIND_CERTS_D}/{address}"
        done = docker("sh", "-c", f'mkdir -p "{path}" && cat >"{path}/hosts.toml"', stdin=toml)
        assert done.returncode == 0, done.stderr

    def remove(address: str) -> None:
        docker("rm", "-rf", f"{KIND_CERTS_D}/{address}")

    def forget_image(digest: str) -> None:
        refs = _refs_of(docker("ctr", "-n", "k8s.io", "images", "ls").stdout, digest)
        if refs:
            docker("ctr", "-n", "k8s.io", "images", "rm", *refs)

    return NodeRegistries(write, remove, forget_image)


def node_registries(cluster: Cluster) -> NodeRegistries:
    """Where this cluster's node takes a registry's settings from, or a skip saying why not."""
    if os.geteuid() != 0:
        pytest.skip("make release builds and pushes the image with buildah as root")
    if cluster.is_local:
        return _local_node()
    mode = os.environ.get("KIND_MODE")
    if mode == "published":
        pytest.skip(
            "kind's published mode is not wired for this test: its registry would listen on"
            " Docker's kind network from the host, and make release builds with buildah as"
            " root (hack/build-images.sh), as the tests do not run there: run it on the local"
            " cluster (make e2e) or on kind built here (make e2e CLUSTER=kind KIND_MODE=built)"
        )
    if mode != "built":
        pytest.skip(
            "neither the local cluster nor kind built here (KIND_MODE=built): this test writes"
            " the node's containerd configuration, which only those let it do"
        )
    return _kind_node(cluster)


@pytest.fixture
def registry(k8s_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Registry, NodeRegistries]]:
    node = node_registries(k8s_cluster)
    if find_binary("registry") is None:
        pytest.fail(
            "the registry is not built: make registry (e2e/run.sh builds it)", pytrace=False
        )
    host = k8s_cluster.host_address()
    reg = Registry(tmp_path / "registry", f"{host}:{free_port(host)}")
    reg.directory.mkdir()
    node.write(reg.address, _hosts_toml(reg.address))
    try:
        reg.up()
        yield reg, node
    finally:
        reg.down()
        node.remove(reg.address)


def test_helm_install_from_the_registry_runs_a_dag_on_the_image_pulled_from_it(
    k8s_cluster: Cluster,
    k8s_namespace: str,
    registry: tuple[Registry, NodeRegistries],
    tmp_path: Path,
) -> None:
    reg, node = registry
    # 1. The release, as `make release` publishes it. Its image build is a no-op here:
    # e2e/run.sh builds this tree's images before pytest (this namespace has no way
    # out to the package indexes a cold build needs).
    released = make_release(f"{reg.address}/{PREFIX}", dist=tmp_path / "dist")
    assert isinstance(released, Released)
    assert released.image == f"{reg.address}/{PREFIX}/sluice:{VERSION}"
    assert VERSION in reg.tags(f"{PREFIX}/sluice")

    try:
        with installed(k8s_cluster, k8s_namespace) as rel:
            _install_and_run(k8s_cluster, rel, reg, released, tmp_path)
    finally:
        # Its names on the node, once the release is gone: the next run's registry has
        # another port, and the local cluster's containerd store outlives the cluster.
        node.forget_image(released.digest)


def _install_and_run(
    cluster: Cluster, rel: Release, reg: Registry, released: Released, tmp_path: Path
) -> None:
    # 2. helm install from the registry, as a user would: nothing of this checkout.
    user = UserHelm(helm_binary(), tmp_path / "user", kubeconfig=cluster.kubeconfig)
    sets = {
        "image.pullPolicy": "Always",  # from the registry, whatever the node has
        "crds.install": "false",  # the session's CRDs (module docstring)
        "defaultPoolProtection.enabled": "false",  # the session's, as Release.install
        "scheduler.replicas": "1",
        "operator.replicas": "1",
        "scheduler.resources.requests.cpu": "50m",
        "scheduler.resources.requests.memory": "128Mi",
        "postgres.image.repository": POSTGRES_IMAGE.rsplit(":", 1)[0],
        "postgres.persistence.size": "1Gi",  # the volume chart.installed made
        "postgres.resources.requests.cpu": "50m",
    }
    args = ["install", rel.name, released.chart, "--version", VERSION, "--plain-http"]
    args += ["-n", rel.namespace, "--wait", "--timeout", "8m"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    args += ["--set-string", f"postgres.image.tag={POSTGRES_IMAGE.rsplit(':', 1)[1]}"]
    user(*args)
    assert rel.installed()
    meta = json.loads(user("get", "metadata", rel.name, "-n", rel.namespace, "-o", "json"))
    assert (meta["chart"], meta["version"], meta["appVersion"]) == ("sluice", VERSION, VERSION)
    assert meta["status"] == "deployed"

    # 3. Every Sluice pod runs the released image, pulled from the registry by its digest.
    for component in ("scheduler", "operator"):
        (pod,) = rel.pods(component)
        statuses = pod["status"].get("containerStatuses", []) + pod["status"].get(
            "initContainerStatuses", []
        )
        assert statuses, rel.dump()
        for container in statuses:
            assert container["image"] == released.image, (component, container)
            assert container["imageID"].endswith(f"@{released.digest}"), (component, container)
    pulled = [
        line
        for line in reg.log().splitlines()
        if f"/v2/{PREFIX}/sluice/manifests/" in line and "containerd" in line
    ]
    assert pulled, "the node's containerd fetched no manifest from the registry"

    # 4. A DAG whose task runs on that image too (and its heartbeat sidecar, the same).
    dag = f"released-{rel.name}"
    manifest = json.loads(dag_manifest(dag, [{"name": "version", "args": ["sluice --version"]}]))
    manifest["spec"]["defaults"]["image"] = released.image
    cluster.apply(json.dumps(manifest), rel.namespace)
    run = rel.wait_run(dag, timeout=300)
    assert run["status"]["state"] == "success", f"{rel.dump()}\n{run['status']}"
    jobs = rel.jobs(dag)
    assert jobs, rel.dump()
    for job in jobs:
        pod_spec = job["spec"]["template"]["spec"]
        used = {c["image"] for c in pod_spec["containers"] + pod_spec.get("initContainers", [])}
        assert used == {released.image}, used
