"""The local cluster lives in a network namespace of its own (issue 15, ADR 0005).

While it runs: the machine's own network namespace has no address or route in
the cluster's node or service ranges and none of its iptables rules; the
cluster's namespace has no default route and no link out; and this test
session talks to the cluster from inside that namespace.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest

from . import netns
from .cluster import CLUSTER_DIR, HACK, LOCAL_KUBECONFIG, Cluster

pytestmark = pytest.mark.k8s


def _cluster_env() -> dict[str, str]:
    env_file = CLUSTER_DIR / "env"
    values = {}
    for line in env_file.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


@pytest.fixture
def local_cluster(k8s_cluster: Cluster) -> dict[str, str]:
    if Path(k8s_cluster.kubeconfig) != LOCAL_KUBECONFIG or not netns.exists():
        pytest.skip("not the local cluster (hack/cluster-up.sh): no network namespace to check")
    return _cluster_env()


def _ip(namespace: Path, *args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        ["nsenter", f"--net={namespace}", "--", "ip", "-j", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out) if out.strip() else []


def test_the_tests_talk_to_the_cluster_from_inside_its_namespace(
    local_cluster: dict[str, str], k8s_cluster: Cluster
) -> None:
    assert netns.inside(), "this test session is not in the cluster's network namespace"
    # ...and so is every process it starts.
    child = subprocess.run(
        ["stat", "-L", "-c", "%i", "/proc/self/ns/net", str(netns.NETNS_PATH)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert child[0] == child[1], child
    assert k8s_cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_the_machine_namespace_has_no_cluster_address_route_or_rule(
    local_cluster: dict[str, str],
) -> None:
    ranges = [
        ipaddress.ip_network(local_cluster["NODE_CIDR"]),
        ipaddress.ip_network(local_cluster["SERVICE_CIDR"]),
    ]
    root = netns.host_netns_path()
    for link in _ip(root, "addr", "show"):
        assert link["ifname"] != local_cluster["BRIDGE"], link
        for info in link.get("addr_info", []):  # type: ignore[attr-defined]
            address = ipaddress.ip_address(info["local"])
            assert not any(address in net for net in ranges), (link["ifname"], str(address))
    for route in _ip(root, "-4", "route", "show", "table", "all"):
        dst = str(route.get("dst", ""))
        if dst == "default":
            continue
        net = ipaddress.ip_network(dst, strict=False)
        assert not any(net.overlaps(r) for r in ranges), route
    rules = subprocess.run(
        ["nsenter", f"--net={root}", "--", "iptables-save"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "sluice-local-cluster" not in rules
    assert "KUBE-" not in rules, "kube-proxy's or the kubelet's chains in the root namespace"


def test_the_cluster_namespace_has_no_default_route_and_no_way_out(
    local_cluster: dict[str, str],
) -> None:
    ns = netns.NETNS_PATH
    bridge = local_cluster["BRIDGE"]
    for family in ("-4", "-6"):
        routes = _ip(ns, family, "route", "show", "table", "all")
        assert not [r for r in routes if r.get("dst") == "default"], routes
    for link in _ip(ns, "link", "show"):
        name = link["ifname"]
        assert name in ("lo", bridge) or link.get("master") == bridge, link
    unreachable = subprocess.run(
        ["nsenter", f"--net={ns}", "--", "ip", "-4", "route", "get", "1.1.1.1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unreachable.returncode != 0, unreachable.stdout
    # The same rules as cluster-up's own check, with pods running now.
    check = subprocess.run(
        ["bash", str(HACK / "netns-check.sh")], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr


def test_the_bridge_keeps_its_mac_address_when_pods_come_and_go(
    local_cluster: dict[str, str],
) -> None:
    """A bridge without a MAC of its own takes its lowest port's, so a pod's veth
    coming or going changed it, and every other pod's ARP entry for the node IP
    went stale: their connections to the task API hung until it expired."""
    bridge = local_cluster["BRIDGE"]
    ns = netns.NETNS_PATH
    before = _ip(ns, "link", "show", "dev", bridge)[0]["address"]
    assert before == local_cluster["BRIDGE_MAC"], before
    # A port whose MAC is lower than any other (what a pod's veth may have).
    a, b = "sluice-mac-a", "sluice-mac-b"
    sh = ["nsenter", f"--net={ns}", "--", "ip", "link"]
    subprocess.run([*sh, "add", a, "address", "00:00:00:00:00:01", "type", "veth",
                    "peer", "name", b], check=True)  # fmt: skip
    try:
        subprocess.run([*sh, "set", a, "master", bridge, "up"], check=True)
        assert _ip(ns, "link", "show", "dev", bridge)[0]["address"] == before
    finally:
        subprocess.run([*sh, "del", a], check=True)
    assert _ip(ns, "link", "show", "dev", bridge)[0]["address"] == before
