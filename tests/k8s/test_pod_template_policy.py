"""A DAG author's namespace and nothing more, on a real API server (issue 29).

Every escape a podTemplate could try is refused at `kubectl apply`, naming the
field: the restricted pod rules by the DAG CRD's own CEL, Sluice's Secrets and
ServiceAccounts by the ValidatingAdmissionPolicy in crds/ (the chart's default
names; the chart renders one per release with its own names, as
tests/chart/test_chart.py checks).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.spec import podpolicy
from tests.unit.test_spec_podtemplate import ESCAPES

from .cluster import Cluster, apply_crds

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def crds(k8s_cluster: Cluster) -> Cluster:
    apply_crds(k8s_cluster)
    return k8s_cluster


def _dag(template: dict[str, Any], name: str = "escape") -> str:
    return json.dumps(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": name},
            "spec": {"tasks": [{"name": "work", "image": "busybox", "podTemplate": template}]},
        }
    )


def _apply(cluster: Cluster, manifest: str, namespace: str) -> tuple[int, str]:
    proc = cluster.kubectl(
        "-n", namespace, "apply", "--dry-run=server", "-f", "-", input=manifest, check=False
    )
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_each_escape_is_refused_at_apply_naming_the_field(
    crds: Cluster, k8s_namespace: str, case: str
) -> None:
    template, field = ESCAPES[case]
    code, err = _apply(crds, _dag(template), k8s_namespace)
    assert code != 0, f"{case}: accepted"
    assert f"spec.tasks[0].podTemplate.{field}" in err, err
    rule = next(r for r in podpolicy.RULES if field.endswith(r.field))
    assert rule.message in err, err


def test_a_template_a_team_needs_is_accepted_and_a_typo_is_not(
    crds: Cluster, k8s_namespace: str
) -> None:
    ok = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {
            "nodeSelector": {"pool": "batch"},
            "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
            "containers": [{"name": "main", "resources": {"limits": {"cpu": 1}}}],
            "volumes": [{"name": "creds", "secret": {"secretName": "team-a-creds"}}],
        },
    }
    code, err = _apply(crds, _dag(ok), k8s_namespace)
    assert code == 0, err
    code, err = _apply(crds, _dag({"spec": {"contianers": []}}), k8s_namespace)
    assert code != 0
    assert 'unknown field "spec.tasks[0].podTemplate.spec.contianers"' in err, err


REFERENCES = {
    "secret volume": {"volumes": [{"name": "db", "secret": {"secretName": "sluice-postgres"}}]},
    "projected secret": {
        "volumes": [
            {"name": "k", "projected": {"sources": [{"secret": {"name": "sluice-task-api"}}]}}
        ]
    },
    "env from secret": {
        "containers": [
            {
                "name": "main",
                "env": [
                    {
                        "name": "URL",
                        "valueFrom": {"secretKeyRef": {"name": "sluice-postgres", "key": "url"}},
                    }
                ],
            }
        ]
    },
    "envFrom secret": {
        "initContainers": [
            {"name": "peek", "envFrom": [{"secretRef": {"name": "sluice-postgres"}}]}
        ]
    },
    "helm release record": {
        "volumes": [{"name": "h", "secret": {"secretName": "sh.helm.release.v1.sluice.v1"}}]
    },
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_sluices_own_secrets_are_refused_at_apply(
    crds: Cluster, k8s_namespace: str, case: str
) -> None:
    # A second team's namespace: the policy binds cluster-wide.
    other = f"{k8s_namespace}-b"
    crds.kubectl("create", "namespace", other)
    try:
        code, err = _apply(crds, _dag({"spec": REFERENCES[case]}), other)
    finally:
        crds.kubectl("delete", "namespace", other, "--wait=false", check=False)
    assert code != 0, f"{case}: accepted"
    assert podpolicy.PROTECTED_SECRET in err, err
    assert "podTemplate" in err


def test_sluices_own_service_accounts_are_refused_and_a_teams_own_are_not(
    crds: Cluster, k8s_namespace: str
) -> None:
    code, err = _apply(
        crds, _dag({"spec": {"serviceAccountName": "sluice-scheduler"}}), k8s_namespace
    )
    assert code != 0
    assert podpolicy.PROTECTED_SERVICE_ACCOUNT in err, err
    assert "serviceAccountName" in err
    code, err = _apply(crds, _dag({"spec": {"serviceAccountName": "team-a-reader"}}), k8s_namespace)
    assert code == 0, err
    mine = {"volumes": [{"name": "c", "secret": {"secretName": "team-a-creds"}}]}
    code, err = _apply(crds, _dag({"spec": mine}), k8s_namespace)
    assert code == 0, err
