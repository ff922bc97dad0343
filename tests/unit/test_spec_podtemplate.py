"""A task's podTemplate: Kubernetes' schema and the restricted policy, in the models and the CRD."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sluice.handlers import crds
from sluice.spec import podpolicy, podschema
from sluice.spec.validation import SpecError, parse_dag_manifest

ROOT = Path(__file__).resolve().parents[2]


def _manifest(template: dict[str, Any], *, defaults: bool = False) -> dict[str, Any]:
    task: dict[str, Any] = {"name": "work", "image": "busybox"}
    spec: dict[str, Any] = {"tasks": [task]}
    if defaults:
        spec["defaults"] = {"podTemplate": template}
    else:
        task["podTemplate"] = template
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {"name": "t"},
        "spec": spec,
    }


def _issues(template: dict[str, Any], *, defaults: bool = False) -> list[str]:
    try:
        parse_dag_manifest(_manifest(template, defaults=defaults))
    except SpecError as error:
        return [str(issue) for issue in error.issues]
    return []


def _container(**security: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "securityContext": security}]}}


# Every escape the review tried, and the rest of the restricted profile: template -> the field
# the refusal names (under spec.tasks[0].podTemplate).
ESCAPES: dict[str, tuple[dict[str, Any], str]] = {
    "host network": ({"spec": {"hostNetwork": True}}, "spec.hostNetwork"),
    "host pid": ({"spec": {"hostPID": True}}, "spec.hostPID"),
    "host ipc": ({"spec": {"hostIPC": True}}, "spec.hostIPC"),
    "token": (
        {"spec": {"automountServiceAccountToken": True}},
        "spec.automountServiceAccountToken",
    ),
    "privileged": (_container(privileged=True), "spec.containers[0].securityContext.privileged"),
    "escalation": (
        _container(allowPrivilegeEscalation=True),
        "spec.containers[0].securityContext.allowPrivilegeEscalation",
    ),
    "capability": (
        _container(capabilities={"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}),
        "spec.containers[0].securityContext.capabilities.add",
    ),
    "root user": (_container(runAsUser=0), "spec.containers[0].securityContext.runAsUser"),
    "root allowed": (
        {"spec": {"securityContext": {"runAsNonRoot": False}}},
        "spec.securityContext.runAsNonRoot",
    ),
    "pod root user": (
        {"spec": {"securityContext": {"runAsUser": 0}}},
        "spec.securityContext.runAsUser",
    ),
    "seccomp": (
        {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
        "spec.securityContext.seccompProfile.type",
    ),
    "apparmor": (
        _container(appArmorProfile={"type": "Unconfined"}),
        "spec.containers[0].securityContext.appArmorProfile.type",
    ),
    "selinux": (
        _container(seLinuxOptions={"type": "spc_t"}),
        "spec.containers[0].securityContext.seLinuxOptions",
    ),
    "proc mount": (
        _container(procMount="Unmasked"),
        "spec.containers[0].securityContext.procMount",
    ),
    "host process": (
        _container(windowsOptions={"hostProcess": True}),
        "spec.containers[0].securityContext.windowsOptions.hostProcess",
    ),
    "sysctl": (
        {"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}},
        "spec.securityContext.sysctls",
    ),
    "host port": (
        {
            "spec": {
                "containers": [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 80}]}]
            }
        },
        "spec.containers[0].ports",
    ),
    "host path": (
        {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
        "spec.volumes[0].hostPath",
    ),
    "nfs": (
        {"spec": {"volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}]}},
        "spec.volumes[0].nfs",
    ),
    "projected token": (
        {
            "spec": {
                "volumes": [
                    {
                        "name": "t",
                        "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]},
                    }
                ]
            }
        },
        "spec.volumes[0].projected.sources",
    ),
    "privileged init container": (
        {"spec": {"initContainers": [{"name": "setup", "securityContext": {"privileged": True}}]}},
        "spec.initContainers[0].securityContext.privileged",
    ),
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_an_escape_is_refused_naming_its_field(case: str) -> None:
    template, field = ESCAPES[case]
    issues = _issues(template)
    assert len(issues) == 1, issues
    assert issues[0].startswith(f"spec.tasks[0].podTemplate.{field}: "), issues
    rule = next(r for r in podpolicy.RULES if field.endswith(r.field))
    assert issues[0].endswith(rule.message)


def test_an_escape_in_the_defaults_is_refused_too() -> None:
    issues = _issues({"spec": {"hostNetwork": True}}, defaults=True)
    assert len(issues) == 1, issues
    assert "podTemplate.spec.hostNetwork: " in issues[0]


def test_every_rule_has_an_escape_that_trips_it() -> None:
    tripped = {
        (where, rule.field)
        for template, _ in ESCAPES.values()
        for where, _, node in podpolicy.nodes(template)
        for rule in podpolicy.RULES
        if rule.where == where and rule.violates(node)
    }
    untested = {(r.where, r.field) for r in podpolicy.RULES} - tripped
    volume_sources = {("volume", source) for source in podpolicy.FORBIDDEN_VOLUMES}
    shared = {("podSecurityContext", f) for f in ("appArmorProfile.type", "seLinuxOptions")}
    shared |= {("podSecurityContext", "windowsOptions.hostProcess")}
    shared |= {("securityContext", f) for f in ("runAsNonRoot", "seccompProfile.type")}
    # The other volume sources are one rule each, alike; the security rules a pod's and a
    # container's securityContext share are checked at one of the two places above.
    assert untested <= volume_sources | shared, untested - volume_sources - shared


def test_what_a_team_needs_is_allowed() -> None:
    template = {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {
            "nodeSelector": {"pool": "batch"},
            "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
            "serviceAccountName": "team-a-reader",
            "securityContext": {
                "runAsUser": 1000,
                "fsGroup": 1000,
                "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
            },
            "containers": [
                {
                    "name": "main",
                    "env": [
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "a", "key": "t"}}}
                    ],
                    "resources": {"limits": {"cpu": 1, "memory": "64Mi"}},
                    "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "proxy", "image": "envoy", "ports": [{"containerPort": 9000}]},
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "creds", "secret": {"secretName": "team-a-creds"}},
                {"name": "scratch"},
            ],
        },
    }
    assert _issues(template) == []


def test_a_typo_is_refused_with_a_suggestion() -> None:
    issues = _issues({"spec": {"contianers": [{"name": "main"}]}})
    assert issues == [
        "spec.tasks[0].podTemplate.spec.contianers: unknown field 'contianers'; "
        "did you mean 'containers' or 'initContainers'?"
    ]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ({"spec": {"hostNetwork": "yes"}}, "spec.hostNetwork: must be true or false, got 'yes'"),
        ({"spec": {"containers": [{"image": "x"}]}}, "spec.containers[0].name: required field"),
        ({"spec": {"volumes": {"name": "x"}}}, "spec.volumes: must be a list"),
        ({"metadata": {"name": "x"}}, "metadata.name: unknown field 'name'"),
        ({"pod": {}}, "pod: unknown field 'pod'"),
        (
            {"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": [1]}}}]}},
            "spec.containers[0].resources.limits.cpu: must be a number or a string",
        ),
    ],
)
def test_the_schema_is_kubernetes_own(template: dict[str, Any], expected: str) -> None:
    issues = _issues(template)
    assert any(issue.startswith(f"spec.tasks[0].podTemplate.{expected}") for issue in issues), (
        issues
    )


def test_the_crd_carries_the_schema_and_every_rule_where_it_applies() -> None:
    schema = crds.task_properties()["podTemplate"]
    spec = schema["properties"]["spec"]
    container = spec["properties"]["containers"]["items"]
    init = spec["properties"]["initContainers"]["items"]
    where = {
        "pod": [spec],
        "podSecurityContext": [spec["properties"]["securityContext"]],
        "container": [container, init],
        "securityContext": [c["properties"]["securityContext"] for c in (container, init)],
        "volume": [spec["properties"]["volumes"]["items"]],
    }
    for rule in podpolicy.RULES:
        for node in where[rule.where]:
            assert {
                "rule": rule.cel,
                "message": rule.message,
                "fieldPath": f".{rule.field}",
            } in node["x-kubernetes-validations"], (rule.where, rule.field)
    assert "x-kubernetes-preserve-unknown-fields" not in json.dumps(schema)
    assert (
        crds.definitions()["dags.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
            "properties"
        ]["spec"]["properties"]["defaults"]["properties"]["podTemplate"]
        == schema
    )


def test_references_to_sluices_own_secrets_and_service_accounts() -> None:
    spec = {
        "serviceAccountName": "sluice-scheduler",
        "volumes": [
            {"name": "db", "secret": {"secretName": "sluice-postgres"}},
            {"name": "p", "projected": {"sources": [{"secret": {"name": "sluice-task-api"}}]}},
            {"name": "ok", "secret": {"secretName": "mine"}},
        ],
        "containers": [
            {
                "name": "main",
                "env": [{"name": "U", "valueFrom": {"secretKeyRef": {"name": "sluice-postgres"}}}],
                "envFrom": [{"secretRef": {"name": "sluice-task-api"}}],
            }
        ],
    }
    found = podpolicy.protected_references(
        {"spec": spec},
        secrets=frozenset({"sluice-postgres", "sluice-task-api"}),
        service_accounts=frozenset({"sluice-scheduler"}),
    )
    assert [path for path, _ in found] == [
        "spec.serviceAccountName",
        "spec.volumes[0].secret.secretName",
        "spec.volumes[1].projected.sources[0].secret.name",
        "spec.containers[0].env[0].valueFrom.secretKeyRef.name",
        "spec.containers[0].envFrom[0].secretRef.name",
    ]


@pytest.mark.skipif(shutil.which("go") is None, reason="needs Go to fetch Kubernetes' OpenAPI")
def test_the_committed_schema_is_the_generators_output(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    subprocess.run(
        [sys.executable, str(ROOT / "hack/pod-template-schema.py"), "--out", str(out)],
        check=True,
        timeout=600,
    )
    assert json.loads(out.read_text()) == podschema.document()
