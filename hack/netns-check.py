#!/usr/bin/env python3
"""Check that the local cluster's network namespace is closed, and the machine's untouched.

    python3 hack/netns-check.py NETNS_PATH BRIDGE NODE_CIDR SERVICE_CIDR

Inside the cluster's namespace:
- the only links are loopback, the bridge, and veths enslaved to the bridge
  (the host ends of pod interfaces);
- every route, in every table, is one the cluster itself needs: the node
  subnet on the bridge, the blackholed service range, and the kernel's local
  and broadcast entries for loopback and the bridge; there is no default route;
- addresses outside those ranges are unreachable from it: public ones, the
  private ranges, and every address and gateway of the machine's own namespace.
In the machine's own network namespace (the one this check's nearest ancestor
outside the cluster's namespace is in: the namespace cluster-up was started
from): no address or route in the node or service range, and no iptables rule
of the cluster.

Prints what is wrong and exits 1, or exits 0 silently. Needs root and iproute2.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

PROBES = ["1.1.1.1", "8.8.8.8", "10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1"]


def ip(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net={netns}", "--", "ip", *args],
        capture_output=True,
        text=True,
        check=check,
    )


def ip_json(netns: str, *args: str) -> list[dict[str, object]]:
    out = ip(netns, "-j", *args).stdout.strip()
    return json.loads(out) if out else []


def host_netns(cluster_netns: str) -> str:
    """/proc/PID/ns/net of the nearest ancestor (or self) outside the cluster's namespace."""
    cluster = os.stat(cluster_netns).st_ino
    pid = os.getpid()
    while pid > 1:
        path = f"/proc/{pid}/ns/net"
        try:
            if os.stat(path).st_ino != cluster:
                return path
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    raise SystemExit("no process of this check's ancestry is outside the cluster's namespace")


def main(netns: str, bridge: str, node_cidr: str, service_cidr: str) -> list[str]:
    root_netns = host_netns(netns)
    node_net = ipaddress.ip_network(node_cidr)
    service_net = ipaddress.ip_network(service_cidr)
    ours = (node_net, service_net)
    problems: list[str] = []

    # Links of the cluster's namespace.
    for link in ip_json(netns, "link", "show"):
        name = str(link["ifname"])
        kind = link.get("link_type")
        if name == "lo" or name == bridge:
            continue
        if link.get("master") == bridge:
            continue  # a pod's veth on the bridge
        problems.append(f"cluster namespace: unexpected link {name} ({kind})")

    # Routes of the cluster's namespace, every table.
    for family in ("-4", "-6"):
        for route in ip_json(netns, family, "route", "show", "table", "all"):
            dst = str(route.get("dst", ""))
            dev = route.get("dev")
            rtype = route.get("type", "unicast")
            table = route.get("table", "main")
            if dst == "default":
                problems.append(f"cluster namespace: default route {json.dumps(route)}")
                continue
            if rtype == "blackhole" and dst == service_cidr:
                continue
            if table == "local" and dev in ("lo", bridge):
                continue
            if rtype in ("local", "broadcast", "multicast") and dev in ("lo", bridge):
                continue
            if dev == bridge and dst in (node_cidr,):
                continue
            own_link = dev in ("lo", bridge)
            if family == "-6" and own_link and dst.startswith(("fe80::", "::1", "ff00::")):
                continue  # link-local and loopback on our own links
            veth = dev is not None and str(dev).startswith("veth")
            if family == "-6" and veth and dst.startswith(("fe80::", "ff00::")):
                continue
            problems.append(f"cluster namespace: unexpected route {json.dumps(route)}")

    # Nothing outside is reachable from the cluster's namespace.
    probes = list(PROBES)
    for addr in ip_json(root_netns, "-4", "addr", "show"):
        for info in addr.get("addr_info", []):  # type: ignore[union-attr]
            local = str(info.get("local", ""))  # type: ignore[union-attr]
            if local and not local.startswith("127."):
                probes.append(local)
    for route in ip_json(root_netns, "-4", "route", "show"):
        if route.get("gateway"):
            probes.append(str(route["gateway"]))
    for target in probes:
        got = ip(netns, "-4", "route", "get", target, check=False)
        if got.returncode == 0 and not got.stdout.startswith(("blackhole", "unreachable")):
            problems.append(f"cluster namespace: has a route to {target}: {got.stdout.strip()}")

    # The machine's own namespace is untouched.
    for addr in ip_json(root_netns, "addr", "show"):
        for info in addr.get("addr_info", []):  # type: ignore[union-attr]
            local = ipaddress.ip_address(str(info["local"]))  # type: ignore[index]
            if any(local in net for net in ours):
                problems.append(f"root namespace: address {local} on {addr['ifname']}")
    for route in ip_json(root_netns, "-4", "route", "show", "table", "all"):
        dst = str(route.get("dst", ""))
        if dst == "default":
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if any(net.overlaps(o) for o in ours):
            problems.append(f"root namespace: route {json.dumps(route)}")
    rules = subprocess.run(
        ["nsenter", f"--net={root_netns}", "--", "iptables-save"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in rules.splitlines():
        if "sluice-local-cluster" in line or node_cidr in line or service_cidr in line:
            problems.append(f"root namespace: iptables rule {line}")
    return problems


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    found = main(*sys.argv[1:5])
    for problem in found:
        print(problem, file=sys.stderr)
    sys.exit(1 if found else 0)
