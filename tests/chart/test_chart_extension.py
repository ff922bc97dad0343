"""The chart's extension points (ADR 0043, issue 35), each rendered: security contexts
merged over the restricted defaults, priorityClassName, extra volumes, mounts, init
containers and sidecars (the same on every Sluice Deployment), extraObjects, the
checksum that rolls pods when their Secrets change, the hooks switch, the CRD switches.
charts/sluice/ci/extension-values.yaml sets them all; test_chart lints it and checks
that its pods stay restricted."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.chart import test_chart
from tests.chart.test_chart import (
    CHART,
    ROOT,
    Doc,
    container,
    containers,
    flag,
    of_kind,
    one,
    render,
    restricted_problems,
    run_helm,
)

pytestmark = pytest.mark.chart

EXTENSION = CHART / "ci" / "extension-values.yaml"
DEPLOYMENTS = {"sluice-scheduler": "scheduler", "sluice-operator": "operator", "sluice-ui": "ui"}


@pytest.fixture(scope="session", name="helm")
def helm_binary() -> str:
    """test_chart's `helm` fixture: skips without helm, fails so with SLUICE_REQUIRE_HELM=1."""
    found: str = test_chart.helm.__wrapped__()  # type: ignore[attr-defined]
    return found


def pod(docs: list[Doc], name: str) -> Doc:
    spec: Doc = one(docs, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def test_by_default_every_deployment_has_the_restricted_contexts_and_nothing_extra(
    helm: str,
) -> None:
    docs = render(helm)
    for name, component in DEPLOYMENTS.items():
        spec = pod(docs, name)
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "fsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, name
        main = container(docs, "Deployment", name, component)
        assert main["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }, name
        assert "priorityClassName" not in spec, name
        assert [c["name"] for c in spec["containers"]] == [component]
        assert [v["name"] for v in spec["volumes"]] == (
            ["task-api-keys", "tmp"] if component == "scheduler" else ["tmp"]
        )
        assert [c["name"] for c in spec.get("initContainers", [])] == (
            [] if component == "ui" else ["db-upgrade"]
        )


def test_extension_points_reach_every_deployment(helm: str) -> None:
    docs = render(helm, EXTENSION)
    for name in DEPLOYMENTS:
        assert pod(docs, name)["priorityClassName"] == "sluice-critical", name
    scheduler = pod(docs, "sluice-scheduler")
    # Merged key by key: the restricted keys stay, the new ones join, a list replaces.
    assert scheduler["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 2000,
        "supplementalGroups": [3000],
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    main = container(docs, "Deployment", "sluice-scheduler", "scheduler")
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert main["volumeMounts"][-1] == {
        "name": "ca",
        "mountPath": "/etc/ssl/custom",
        "readOnly": True,
    }
    assert [c["name"] for c in scheduler["initContainers"]] == ["db-upgrade", "wait-for-proxy"]
    assert [c["name"] for c in scheduler["containers"]] == ["scheduler", "proxy"]
    # Templated: the release's name in a sidecar's args and a volume's ConfigMap.
    assert scheduler["containers"][1]["args"] == ["--upstream=sluice"]
    assert scheduler["volumes"][-1] == {"name": "ca", "configMap": {"name": "sluice-ca"}}
    # The chart's own volumes and mounts stay.
    assert {"task-api-keys", "tmp"} <= {v["name"] for v in scheduler["volumes"]}
    operator = pod(docs, "sluice-operator")
    assert operator["securityContext"]["fsGroup"] == 2000
    assert operator["securityContext"]["runAsNonRoot"] is True
    assert [c["name"] for c in operator["containers"]] == ["operator", "proxy"]
    ui = pod(docs, "sluice-ui")
    assert [c["name"] for c in ui["initContainers"]] == ["prepare"]
    assert ui["volumes"][-1] == {"name": "extra", "emptyDir": {}}
    ui_main = container(docs, "Deployment", "sluice-ui", "ui")
    assert ui_main["volumeMounts"][-1] == {"name": "extra", "mountPath": "/extra"}
    # Everything extra here is restricted too, so the pods still pass.
    for name in DEPLOYMENTS:
        assert restricted_problems(pod(docs, name)) == [], name


def test_a_loosened_context_is_the_users_and_the_checker_sees_it(helm: str) -> None:
    docs = render(helm, None, "operator.securityContext.readOnlyRootFilesystem=false")
    operator = pod(docs, "sluice-operator")
    assert restricted_problems(operator) == ["operator: readOnlyRootFilesystem is not true"]
    # The other Deployments keep theirs.
    assert restricted_problems(pod(docs, "sluice-scheduler")) == []


def test_extra_objects_are_templated_maps_or_strings(helm: str) -> None:
    docs = render(helm, EXTENSION)
    maps = {d["metadata"]["name"]: d for d in of_kind(docs, "ConfigMap")}
    assert maps["sluice-ca"]["metadata"]["namespace"] == "sluice"
    assert maps["sluice-ca"]["data"] == {"ca.crt": "not-a-real-certificate"}
    assert maps["sluice-from-a-string"]["data"] == {"release": "sluice"}
    assert of_kind(render(helm), "ConfigMap") == []


def checksums(docs: list[Doc]) -> dict[str, str]:
    return {
        name: one(docs, "Deployment", name)["spec"]["template"]["metadata"]["annotations"][
            "checksum/secrets"
        ]
        for name in DEPLOYMENTS
    }


def test_every_deployment_rolls_when_its_secrets_change(helm: str) -> None:
    own = (
        "taskApi.existingSecret=keys",
        "postgres.existingSecret=pg",
    )
    base = checksums(render(helm, None, *own))
    assert len(set(base.values())) == 1  # one hash of the same Secrets
    assert base == checksums(render(helm, None, *own))  # nothing random with own Secrets
    for change in (
        "secretsRevision=2",
        "postgres.existingSecretKey=pw",
        "logs.existingSecret=s3-credentials",
    ):
        changed = checksums(render(helm, None, *own, change))
        assert all(changed[n] != base[n] for n in DEPLOYMENTS), change
    external = checksums(
        render(helm, None, "database.existingSecret=db", "taskApi.existingSecret=k")
    )
    assert external != base


def test_the_generated_password_is_in_the_hash(helm: str) -> None:
    """Drawn once per rendering and shared (as the task API keys are): under `helm
    template` each rendering draws another, and the hash follows it; helm install and
    upgrade read the live Secret back, so there it stays."""
    first, second = render(helm), render(helm, None, "nameOverride=sluice")
    passwords = [one(d, "Secret", "sluice-postgres")["data"]["password"] for d in (first, second)]
    assert passwords[0] != passwords[1]
    assert len(set(checksums(first).values())) == 1
    assert checksums(first) != checksums(second)
    # Everything else equal: with a password of one's own the hash is the same each time.
    own = ("postgres.existingSecret=pg",)
    assert checksums(render(helm, None, *own)) == checksums(
        render(helm, None, *own, "nameOverride=sluice")
    )


def test_hooks_switch_leaves_the_migrations_job_out(helm: str) -> None:
    hooked = one(render(helm), "Job", "sluice-migrations")
    assert hooked["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    docs = render(helm, EXTENSION)
    assert of_kind(docs, "Job") == []
    # The pods still migrate.
    for name in ("sluice-scheduler", "sluice-operator"):
        assert pod(docs, name)["initContainers"][0]["name"] == "db-upgrade"


def test_the_crds_are_templates_kept_by_default(helm: str) -> None:
    docs = render(helm)
    crds = {d["metadata"]["name"]: d for d in of_kind(docs, "CustomResourceDefinition")}
    sources = [
        doc
        for path in sorted((ROOT / "crds").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "CustomResourceDefinition"
    ]
    assert set(crds) == {d["metadata"]["name"] for d in sources}
    assert "kopfpeerings.kopf.dev" in crds
    for source in sources:
        rendered = json.loads(json.dumps(crds[source["metadata"]["name"]]))
        meta = rendered.pop("metadata")
        assert meta["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert meta["labels"]["app.kubernetes.io/component"] == "crds"
        assert meta["name"] == source["metadata"]["name"]
        # The schema exactly as crds/ has it.
        assert rendered == {k: v for k, v in source.items() if k != "metadata"}
    unkept = of_kind(render(helm, EXTENSION), "CustomResourceDefinition")
    assert len(unkept) == len(crds)
    assert all("annotations" not in d["metadata"] for d in unkept)
    assert of_kind(render(helm, None, "crds.install=false"), "CustomResourceDefinition") == []


def test_the_operator_log_flags(helm: str) -> None:
    args = container(render(helm), "Deployment", "sluice-operator", "operator")["args"]
    assert flag(args, "--log-level") == "info"
    assert "--log-json" in args
    args = container(render(helm, EXTENSION), "Deployment", "sluice-operator", "operator")["args"]
    assert flag(args, "--log-level") == "debug"
    assert "--no-log-json" in args


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ("scheduler.priorityClassName=Not_A_Class", "/scheduler/priorityClassName"),
        ("ui.extraVolumes[0].configMap.name=x", "/ui/extraVolumes/0"),
        ("operator.extraContainers[0].image=x", "/operator/extraContainers/0"),
        ("scheduler.extraVolumeMounts[0].name=x", "/scheduler/extraVolumeMounts/0"),
        ("crds.install=maybe", "/crds/install"),
        ("hooks.enabled=1", "/hooks/enabled"),
        ("extraObjects[0].data.a=b", "/extraObjects/0"),
    ],
)
def test_the_schema_refuses_malformed_extensions(helm: str, sets: str, message: str) -> None:
    done = run_helm(helm, "template", "sluice", str(CHART), "--set", sets)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_every_extra_container_is_a_container_of_the_pod(helm: str) -> None:
    for name, spec in ((n, pod(render(helm, EXTENSION), n)) for n in DEPLOYMENTS):
        names = [c["name"] for c in containers(spec)]
        assert len(names) == len(set(names)), name
