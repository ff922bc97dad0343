"""The chart's ServiceMonitor (`metrics.serviceMonitor.enabled=true`) on a real API server.

prometheus-operator's own ServiceMonitor CRD (the release `hack/lib.sh` pins,
copied out of its Go module by `hack/build-k8s.sh servicemonitor-crd`) is
installed, then the chart with its ServiceMonitor and two scheduler replicas:

- the API server takes the ServiceMonitor the chart renders under strict field
  validation and stores it unchanged (a misspelled or misplaced field is
  refused or pruned; the test first checks that one is refused);
- every target it selects, found as Prometheus's service discovery for a
  ServiceMonitor finds them (the EndpointSlices of the Services in its
  `namespaceSelector` whose labels match its `selector`, the endpoint port
  named by `endpoints[].port`, the endpoints that are ready), is a scheduler
  pod, one per replica, and serves `endpoints[].path` in Prometheus's text
  format with Sluice's loop metrics in it.

No Prometheus or prometheus-operator runs here (neither can be pulled; the
local cluster builds neither): what this shows is that the object is valid for
the operator's CRD and that what it points at answers a scrape.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .chart import Release, installed
from .cluster import CACHE, HACK, Cluster
from .replicas import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

VALUES = [
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.serviceMonitor.labels.release=prometheus",
    "--set", "scheduler.replicas=2",
    "--set", "operator.replicas=1",
]  # fmt: skip
CRD_NAME = "servicemonitors.monitoring.coreos.com"


def _crd_file() -> Path:
    version = re.search(
        r'PROMETHEUS_OPERATOR_VERSION="\$\{PROMETHEUS_OPERATOR_VERSION:-(v[0-9.]+)\}"',
        (HACK / "lib.sh").read_text(),
    )
    assert version is not None, "PROMETHEUS_OPERATOR_VERSION not found in hack/lib.sh"
    path = (
        CACHE / "crds" / f"prometheus-operator-{version.group(1)}"
        / "monitoring.coreos.com_servicemonitors.yaml"
    )  # fmt: skip
    if not path.is_file():
        pytest.fail(
            f"{path} is missing: hack/build-k8s.sh servicemonitor-crd copies it out of"
            " prometheus-operator's Go module (make cluster-build does)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster) -> Iterator[Release]:
    crd = _crd_file()
    had_crd = k8s_cluster.kubectl("get", "crd", CRD_NAME, check=False).returncode == 0
    # Server-side: the CRD is larger than client-side apply's last-applied annotation.
    k8s_cluster.kubectl("apply", "--server-side", "-f", str(crd))
    k8s_cluster.wait_established(f"crd/{CRD_NAME}")
    try:
        with installed(k8s_cluster) as release:
            release.install(*VALUES)
            yield release
    finally:
        if not had_crd:
            k8s_cluster.kubectl("delete", "crd", CRD_NAME, "--wait=false", check=False)


def _rendered_monitor(rel: Release) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(rel.run_helm("get", "manifest", rel.name)) if d]
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    return dict(monitor)


def _server_dry_run(rel: Release, doc: dict[str, Any]) -> Any:
    return rel.cluster.kubectl(
        "-n", rel.namespace, "apply", "--dry-run=server", "--validate=strict", "-f", "-",
        input=json.dumps(doc), check=False,
    )  # fmt: skip


def _targets(rel: Release, monitor: dict[str, Any]) -> dict[str, str]:
    """Pod name -> scrape URL of every target `monitor` selects, found the way
    Prometheus's discovery for a ServiceMonitor finds them."""
    spec = monitor["spec"]
    (endpoint,) = spec["endpoints"]
    wanted = spec["selector"]["matchLabels"]
    targets: dict[str, str] = {}
    for namespace in spec["namespaceSelector"]["matchNames"]:
        services = rel.cluster.get_json("-n", namespace, "services")["items"]
        for svc in services:
            labels = svc["metadata"].get("labels") or {}
            if not wanted.items() <= labels.items():
                continue
            slices = rel.cluster.get_json(
                "-n", namespace, "endpointslices",
                "-l", f"kubernetes.io/service-name={svc['metadata']['name']}",
            )["items"]  # fmt: skip
            for sl in slices:
                named = [p for p in sl.get("ports") or [] if p.get("name") == endpoint["port"]]
                for ep in sl.get("endpoints") or []:
                    if not (ep.get("conditions") or {}).get("ready"):
                        continue
                    pod = (ep.get("targetRef") or {}).get("name", "?")
                    for port in named:
                        for address in ep["addresses"]:
                            targets[pod] = f"http://{address}:{port['port']}{endpoint['path']}"
    return targets


def _scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200, (url, resp.status)
        body = resp.read().decode()
    return {family.name: family for family in text_string_to_metric_families(body)}


def test_the_service_monitor_is_valid_for_the_operators_crd_and_its_targets_answer(
    rel: Release,
) -> None:
    rendered = _rendered_monitor(rel)

    # Strict validation is on: a field the CRD does not have is refused.
    bad = json.loads(json.dumps(rendered))
    bad["spec"]["endpoints"][0]["scrapeTimout"] = "10s"
    refused = _server_dry_run(rel, bad)
    assert refused.returncode != 0, refused
    assert "scrapeTimout" in refused.stderr, refused.stderr
    # ... and the chart's own is taken as it is, and stored as rendered.
    taken = _server_dry_run(rel, rendered)
    assert taken.returncode == 0, taken.stderr
    assert "unknown field" not in taken.stderr, taken.stderr
    stored = rel.json("servicemonitor", rendered["metadata"]["name"])
    assert stored["spec"] == rendered["spec"]
    assert stored["metadata"]["labels"]["release"] == "prometheus"

    # Its targets: one per scheduler replica, each serving Sluice's metrics.
    schedulers = {p["metadata"]["name"] for p in rel.pods("scheduler")}
    assert len(schedulers) == 2, rel.dump()

    def every_replica() -> dict[str, str] | None:
        found = _targets(rel, stored)
        return found if set(found) == schedulers else None

    targets = wait_for("a ready target for every scheduler replica", every_replica, 120, every=2)
    for pod, url in sorted(targets.items()):
        families = _scrape(url)
        sluice = {name for name in families if name.startswith("sluice_")}
        assert "sluice_loop_tick_duration_seconds" in sluice, (pod, url, sorted(families))
        ticks = [
            s.value
            for s in families["sluice_loop_tick_duration_seconds"].samples
            if s.name.endswith("_count")
        ]
        assert len(ticks) == 1, (pod, ticks)
        assert ticks[0] > 0, (pod, ticks)  # this replica's loop has ticked
        assert "sluice_critical_section_duration_seconds" in sluice, (pod, sorted(sluice))
