"""The Helm chart (charts/sluice), checked offline: `helm lint --strict`, `helm template`.

Every rendering is parsed and checked as a cluster's admission would not be
asked to: the restricted Pod Security Standard on every pod, RBAC without
Secrets or wildcards, the migration hook's annotations, the scheduler's flags.
No cluster is contacted (KUBECONFIG points nowhere). helm comes from $HELM,
$SLUICE_BIN/helm (~/.cache/sluice/bin/helm, where `make helm` builds it) or
PATH; without it the tests that need it skip, saying so, unless
SLUICE_REQUIRE_HELM=1 (set by .ci/run and `make chart-test`), where they fail.
The checks of the chart's files (CRD copies, documented values) need no helm.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice.api.tokens import load_keys
from sluice.db.engine import normalize_url
from sluice.spec import podpolicy

pytestmark = pytest.mark.chart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sluice"
RELEASE = "sluice"
NAMESPACE = "sluice"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
EXTERNAL = CHART / "ci" / "external-values.yaml"
LOCAL = CHART / "ci" / "local-values.yaml"
ALL_NAMESPACES = CHART / "ci" / "all-namespaces-values.yaml"
VALUE_SETS = [None, *CI_VALUES]
VALUE_IDS = ["default", *(p.stem for p in CI_VALUES)]

Doc = dict[str, Any]


def find_helm() -> str | None:
    """$HELM, else hack/lib.sh's $SLUICE_BIN/helm, else helm on PATH."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice"
    built = Path(
        os.environ.get("SLUICE_BIN") or Path(os.environ.get("SLUICE_CACHE") or cache) / "bin"
    )
    if (built / "helm").is_file() and os.access(built / "helm", os.X_OK):
        return str(built / "helm")
    return shutil.which("helm")


HELM = find_helm()


@pytest.fixture(scope="session")
def helm() -> str:
    if HELM is None:
        reason = (
            "helm not found ($HELM, $SLUICE_BIN/helm, ~/.cache/sluice/bin/helm, PATH); "
            "`make helm` builds it from source"
        )
        if os.environ.get("SLUICE_REQUIRE_HELM") == "1":
            pytest.fail(f"{reason}, and SLUICE_REQUIRE_HELM=1 requires it")
        pytest.skip(reason)
    return HELM


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=os.devnull, HELM_CACHE_HOME="/tmp/sluice-helm-cache")
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@functools.cache
def _render(helm: str, values: Path | None, sets: tuple[str, ...]) -> tuple[Doc, ...]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        args += ["--values", str(values)]
    for item in sets:
        args += ["--set", item]
    done = run_helm(helm, *args)
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(helm: str, values: Path | None = None, *sets: str) -> list[Doc]:
    return list(_render(helm, values, sets))


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def pod_specs(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        match doc["kind"]:
            case "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job":
                yield where, doc["spec"]["template"]["spec"]
            case "CronJob":
                yield where, doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            case "Pod":
                yield where, doc["spec"]


def containers(pod: Doc) -> list[Doc]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def container(docs: list[Doc], kind: str, name: str, container_name: str) -> Doc:
    pod = one(docs, kind, name)["spec"]["template"]["spec"]
    return next(c for c in containers(pod) if c["name"] == container_name)


def flag(args: list[str], name: str) -> str:
    """The value after `name` in a container's args (exactly once)."""
    assert args.count(name) == 1, f"{name} appears {args.count(name)} times in {args}"
    return args[args.index(name) + 1]


# ---- the restricted Pod Security Standard, as a function --------------------------

RESTRICTED_VOLUMES = set(podpolicy.ALLOWED_VOLUMES)


def restricted_problems(pod: Doc) -> list[str]:
    """What keeps a pod spec from the restricted Pod Security Standard (plus a read-only
    root filesystem, which Sluice asks of its own pods); [] when nothing does."""
    problems = [f"{key} is set" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']} is {sorted(kinds)}")
    pod_context = pod.get("securityContext") or {}
    if not containers(pod):
        problems.append("no containers")
    for c in containers(pod):
        context = c.get("securityContext") or {}
        name = c["name"]

        def either(key: str, context: Doc = context) -> Any:
            return context[key] if key in context else pod_context.get(key)

        if either("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        uid = either("runAsUser")
        if type(uid) is not int or uid == 0:
            problems.append(f"{name}: runAsUser {uid!r} is not a non-zero number")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {capabilities['add']}")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get(
            "type"
        )
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is {seccomp!r}")
        if context.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: readOnlyRootFilesystem is not true")
        problems.extend(
            f"{name}: hostPort {port['hostPort']}"
            for port in c.get("ports", [])
            if "hostPort" in port
        )
    return problems


def test_the_checker_finds_what_restricted_forbids() -> None:
    bad = {
        "hostNetwork": True,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "c",
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                "ports": [{"containerPort": 80, "hostPort": 80}],
            }
        ],
    }
    problems = "\n".join(restricted_problems(bad))
    for expected in (
        "hostNetwork",
        "volume root",
        "runAsNonRoot",
        "runAsUser None",
        "allowPrivilegeEscalation",
        "privileged",
        "drop ALL",
        "SYS_ADMIN",
        "seccompProfile",
        "readOnlyRootFilesystem",
        "hostPort 80",
    ):
        assert expected in problems


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_every_pod_is_restricted(helm: str, values: Path | None) -> None:
    pods = list(pod_specs(render(helm, values)))
    assert len(pods) >= 3
    for where, pod in pods:
        assert restricted_problems(pod) == [], where
        # A read-only root filesystem: /tmp is an emptyDir in every container.
        for c in containers(pod):
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{where} {c['name']}"
            tmp = next(v for v in pod["volumes"] if v["name"] == mounts["/tmp"])
            assert "emptyDir" in tmp


# ---- lint and schema ---------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_helm_lint_strict(helm: str, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        args += ["--values", str(values)]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ("scheduler.replicas=three", "/scheduler/replicas': got string, want integer"),
        ("bogus=1", "additional properties 'bogus' not allowed"),
        ("scheduler.replica=3", "additional properties 'replica' not allowed"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("tasks.namespace=Not_A_Namespace", "/tasks/namespace"),
        ("postgres.user=sluice;drop", "/postgres/user"),
        ("postgres.existingSecret=Not_A_Secret", "/postgres/existingSecret"),
        ("taskApi.keysRevision=true", "/taskApi/keysRevision"),
        ("logs.retentionDays=-1", "/logs/retentionDays"),
    ],
)
def test_the_schema_refuses(helm: str, sets: str, message: str) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--set", sets)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


# ---- the schedulers ------------------------------------------------------------------


def test_three_active_schedulers_by_default(helm: str) -> None:
    docs = render(helm)
    deployment = one(docs, "Deployment", "sluice-scheduler")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["serviceAccountName"] == "sluice-scheduler"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "sluice",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "scheduler",
    }
    preferred = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert preferred[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]
    )
    spread = pod["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    budget = one(docs, "PodDisruptionBudget", "sluice-scheduler")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}


def test_scheduler_flags_and_probes(helm: str) -> None:
    docs = render(helm)
    scheduler = container(docs, "Deployment", "sluice-scheduler", "scheduler")
    args = scheduler["args"]
    image = "ghcr.io/sluice-project/sluice:0.1.0"
    assert scheduler["image"] == image
    assert args[0] == "scheduler"
    assert flag(args, "--executor") == "kubernetes"
    assert flag(args, "--namespace") == NAMESPACE
    assert flag(args, "--sluice-image") == image
    assert flag(args, "--task-service-account") == "sluice-task"
    assert "--task-image-pull-policy" not in args  # Kubernetes' default unless set
    assert flag(args, "--task-api-listen") == "0.0.0.0:8080"
    assert flag(args, "--task-api-url") == "http://sluice-task-api.sluice.svc:8080"
    assert flag(args, "--task-api-keys-file") == "/etc/sluice/task-api/keys"
    assert flag(args, "--metrics-port") == "9090"
    assert flag(args, "--metrics-host") == "0.0.0.0"
    assert flag(args, "--health-stale-after") == "60"
    assert flag(args, "--pod-start-timeout") == "300"
    assert flag(args, "--job-ttl") == "3600"
    assert "--log-store" not in args  # no archive unless logs.store is set
    assert "--log-retention-days" not in args  # every archived log kept unless set
    assert "envFrom" not in scheduler
    assert "--log-json" in args
    ports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
    assert ports == {"task-api": 8080, "metrics": 9090}
    assert scheduler["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert scheduler["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert scheduler["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    env = {e["name"]: e for e in scheduler["env"]}
    assert env["SLUICE_DATABASE_URL"]["value"] == BUNDLED_URL
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "sluice-postgres",
        "key": "password",
    }
    # The task API Service: what --task-api-url names, selecting the scheduler pods.
    service = one(docs, "Service", "sluice-task-api")
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["ports"] == [
        {"name": "task-api", "port": 8080, "targetPort": "task-api", "protocol": "TCP"}
    ]
    pod_labels = one(docs, "Deployment", "sluice-scheduler")["spec"]["template"]["metadata"]
    assert service["spec"]["selector"].items() <= pod_labels["labels"].items()
    # Every running replica, ready or not: a restarted kubelet marks its pods not
    # ready until their next probe, and heartbeats must not stop meanwhile.
    assert service["spec"]["publishNotReadyAddresses"] is True
    metrics = one(docs, "Service", "sluice-metrics")
    assert metrics["spec"]["ports"][0]["targetPort"] == "metrics"
    assert metrics["spec"]["selector"] == service["spec"]["selector"]


def test_the_task_api_keys_are_generated_in_the_format_the_scheduler_loads(
    helm: str, tmp_path: Path
) -> None:
    docs = render(helm)
    secret = one(docs, "Secret", "sluice-task-api")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    keys_file = tmp_path / "keys"
    keys_file.write_bytes(base64.b64decode(secret["data"]["keys"]))
    keys = load_keys(keys_file)
    assert len(keys) == 1
    assert len(keys[0]) >= 32
    volume = next(
        v
        for v in one(docs, "Deployment", "sluice-scheduler")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "task-api-keys"
    )
    assert volume["secret"]["secretName"] == "sluice-task-api"
    assert volume["secret"]["items"] == [{"key": "keys", "path": "keys"}]
    # Reused across upgrades: the template reads the live Secret back.
    assert 'lookup "v1" "Secret"' in (CHART / "templates" / "_helpers.tpl").read_text()


def keys_checksum(docs: list[Doc], deployment: str = "sluice-scheduler") -> str:
    annotations = one(docs, "Deployment", deployment)["spec"]["template"]["metadata"]
    return str(annotations["annotations"]["checksum/task-api-keys"])


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_new_task_api_keys_roll_the_schedulers(helm: str) -> None:
    """A replica reads its keys at start, so the pod template carries a hash of them:
    of the generated Secret's keys (the very key rendered beside it), or of
    existingSecret's name, key and taskApi.keysRevision, which the chart does not read."""
    docs = render(helm, None, "scheduler.podAnnotations.team=data")
    keys = one(docs, "Secret", "sluice-task-api")["data"]["keys"]
    assert keys_checksum(docs) == sha256(f"keys:{keys}\nrevision:")
    pod = one(docs, "Deployment", "sluice-scheduler")["spec"]["template"]["metadata"]
    assert pod["annotations"]["team"] == "data"
    revised = render(helm, None, "taskApi.keysRevision=2")
    keys = one(revised, "Secret", "sluice-task-api")["data"]["keys"]
    assert keys_checksum(revised) == sha256(f"keys:{keys}\nrevision:2")

    own = render(helm, EXTERNAL)
    assert keys_checksum(own) == sha256("secret:sluice-task-api-keys/keys.txt\nrevision:")
    rotated = render(helm, EXTERNAL, "taskApi.keysRevision=2026-12-05")
    assert keys_checksum(rotated) == sha256(
        "secret:sluice-task-api-keys/keys.txt\nrevision:2026-12-05"
    )
    assert keys_checksum(rotated) != keys_checksum(own)


def test_own_secrets_render_the_same_every_time(helm: str) -> None:
    """What Argo CD and `helm template` see: with the keys and the password in Secrets
    of one's own, nothing random is rendered, so a sync changes nothing; without
    them, every rendering draws new ones (hence postgres.existingSecret)."""
    own = (
        "taskApi.existingSecret=sluice-task-api-keys",
        "postgres.existingSecret=sluice-postgres-password",
    )
    first = run_helm(helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, *_sets(own))
    second = run_helm(helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, *_sets(own))
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert not of_kind([d for d in yaml.safe_load_all(first.stdout) if d], "Secret")
    generated = [run_helm(helm, "template", RELEASE, str(CHART)).stdout for _ in range(2)]
    assert generated[0] != generated[1]


def _sets(items: tuple[str, ...]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


# ---- the operator ------------------------------------------------------------------


def test_the_operator_peers_in_a_deployment_of_its_own(helm: str) -> None:
    docs = render(helm)
    deployment = one(docs, "Deployment", "sluice-operator")
    assert deployment["spec"]["replicas"] == 2
    operator = container(docs, "Deployment", "sluice-operator", "operator")
    args = operator["args"]
    assert args[0] == "operator"
    assert flag(args, "--namespace") == NAMESPACE
    assert flag(args, "--peering") == "sluice"
    assert flag(args, "--peering-lifetime") == "60"
    assert flag(args, "--health-port") == "8081"
    assert "--standalone" not in args
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in operator["ports"]} == {"health": 8081}
    assert one(docs, "PodDisruptionBudget", "sluice-operator")["spec"]["maxUnavailable"] == 1


def test_the_ui_signs_users_in_with_kubernetes_and_only_reads(helm: str) -> None:
    """The UI's Deployment (ADR 0040): `sluice ui --auth kubernetes` on all addresses of
    its pod, probed on /healthz, as its own account (bound to the reviews only), behind a
    ClusterIP Service; an Ingress only when asked, which needs a host."""
    docs = render(helm)
    ui = container(docs, "Deployment", "sluice-ui", "ui")
    assert ui["args"][:3] == ["ui", "--auth", "kubernetes"]
    assert (flag(ui["args"], "--host"), flag(ui["args"], "--port")) == ("0.0.0.0", "8080")
    for probe in ("readinessProbe", "livenessProbe"):
        assert ui[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    pod = one(docs, "Deployment", "sluice-ui")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "sluice-ui"
    binding = one(docs, "ClusterRoleBinding", "sluice-ui")
    assert binding["roleRef"]["name"] == "sluice-ui"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sluice-ui", "namespace": NAMESPACE}
    ]
    service = one(docs, "Service", "sluice-ui")["spec"]
    assert (service["type"], service["ports"][0]["port"]) == ("ClusterIP", 80)
    assert of_kind(docs, "Ingress") == []
    with_ingress = render(helm, ALL_NAMESPACES)
    ingress = one(with_ingress, "Ingress", "wf-ui")["spec"]
    assert ingress["rules"][0]["host"] == "sluice.example.com"
    assert ingress["tls"] == [{"hosts": ["sluice.example.com"], "secretName": "sluice-ui-tls"}]
    assert (
        one(with_ingress, "Deployment", "wf-ui")["spec"]["template"]["spec"]["serviceAccountName"]
        == "sluice-ui"
    )
    # The log store, when there is one, is read the schedulers' way.
    stored = render(helm, None, "logs.store=s3://logs/sluice", "logs.existingSecret=creds")
    ui = container(stored, "Deployment", "sluice-ui", "ui")
    assert {"name": "SLUICE_LOG_STORE", "value": "s3://logs/sluice"} in ui["env"]
    assert ui["envFrom"] == [{"secretRef": {"name": "creds"}}]
    off = render(helm, None, "ui.enabled=false")
    assert not [d for d in off if d["metadata"]["name"] == "sluice-ui"]
    refused = run_helm(helm, "template", RELEASE, str(CHART), "--set", "ui.ingress.enabled=true")
    assert refused.returncode != 0
    assert "at '/ui/ingress/host': minLength" in refused.stderr, refused.stderr


# ---- the database --------------------------------------------------------------------


def test_the_bundled_postgres(helm: str) -> None:
    docs = render(helm)
    statefulset = one(docs, "StatefulSet", "sluice-postgres")
    assert statefulset["spec"]["replicas"] == 1
    pod = statefulset["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 999
    assert pod["securityContext"]["fsGroup"] == 999
    assert pod["automountServiceAccountToken"] is False
    postgres = pod["containers"][0]
    assert postgres["image"] == "docker.io/library/postgres:16"
    env = {e["name"]: e for e in postgres["env"]}
    assert env["POSTGRES_USER"]["value"] == "sluice"
    assert env["POSTGRES_DB"]["value"] == "sluice"
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "sluice-postgres",
        "key": "password",
    }
    data_mount = next(m for m in postgres["volumeMounts"] if m["name"] == "data")["mountPath"]
    pgdata = env["PGDATA"]["value"]
    assert pgdata.startswith(data_mount + "/")
    assert pgdata != data_mount
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert postgres[probe]["exec"]["command"][0] == "pg_isready"
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert "storageClassName" not in claim["spec"]
    with_class = render(helm, None, "postgres.persistence.storageClass=fast")
    (claim,) = one(with_class, "StatefulSet", "sluice-postgres")["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast"

    secret = one(docs, "Secret", "sluice-postgres")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    password = base64.b64decode(secret["data"]["password"]).decode()
    url = base64.b64decode(secret["data"]["url"]).decode()
    assert len(password) >= 32
    assert url == f"postgresql://sluice:{password}@sluice-postgres.sluice.svc:5432/sluice"
    assert normalize_url(url).startswith("postgresql+psycopg2://")
    assert_bundled_database_env(docs, "sluice-postgres", "password")
    service = one(docs, "Service", "sluice-postgres")
    assert service["spec"]["ports"][0]["port"] == 5432


BUNDLED_URL = "postgresql://sluice@sluice-postgres.sluice.svc:5432/sluice"


def assert_bundled_database_env(docs: list[Doc], secret: str, key: str) -> None:
    """Every Sluice container that reaches the bundled Postgres gets a URL without a
    password and the password as PGPASSWORD (libpq reads it) from `secret`/`key`."""
    ref = {"name": secret, "key": key}
    checked = 0
    for where, pod in pod_specs(docs):
        for c in containers(pod):
            env = {e["name"]: e for e in c.get("env", [])}
            if "POSTGRES_PASSWORD" in env:
                assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == ref, where
                continue
            assert env["SLUICE_DATABASE_URL"] == {
                "name": "SLUICE_DATABASE_URL",
                "value": BUNDLED_URL,
            }
            assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == ref, where
            checked += 1
    assert checked == 6  # the migrations hook, each Deployment's init and main container, the UI
    assert normalize_url(BUNDLED_URL).startswith("postgresql+psycopg2://sluice@")


def test_the_bundled_postgres_password_from_a_secret_of_ones_own(helm: str) -> None:
    docs = render(
        helm,
        None,
        "postgres.existingSecret=sluice-postgres-password",
        "postgres.existingSecretKey=pw",
    )
    assert "sluice-postgres" not in {s["metadata"]["name"] for s in of_kind(docs, "Secret")}
    assert one(docs, "StatefulSet", "sluice-postgres")
    assert_bundled_database_env(docs, "sluice-postgres-password", "pw")


def test_an_own_postgres_password_and_an_external_database_exclude_each_other(
    helm: str,
) -> None:
    done = run_helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "database.existingSecret=sluice-db",
        "--set",
        "postgres.existingSecret=sluice-postgres-password",
    )
    assert done.returncode != 0
    assert "postgres.existingSecret is the bundled Postgres's password" in done.stderr
    assert "set one of them, not both" in done.stderr


def test_an_external_database_replaces_the_bundled_one(helm: str) -> None:
    docs = render(helm, EXTERNAL)
    assert of_kind(docs, "StatefulSet") == []
    names = {d["metadata"]["name"] for d in docs}
    assert "sluice-postgres" not in names
    for _, pod in pod_specs(docs):
        for c in containers(pod):
            ref = {e["name"]: e for e in c.get("env", [])}["SLUICE_DATABASE_URL"]
            assert ref["valueFrom"]["secretKeyRef"] == {"name": "sluice-db", "key": "database-url"}


# ---- migrations --------------------------------------------------------------------


def test_migrations_run_as_a_hook_and_in_every_pod(helm: str) -> None:
    for values, hook in ((None, "pre-upgrade"), (EXTERNAL, "pre-install,pre-upgrade")):
        docs = render(helm, values)
        job = one(docs, "Job", "sluice-migrations")
        annotations = job["metadata"]["annotations"]
        # The bundled database does not exist before the install: no pre-install hook.
        assert annotations["helm.sh/hook"] == hook
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert job["spec"]["backoffLimit"] == 2
        assert job["spec"]["activeDeadlineSeconds"] == 900
        pod = job["spec"]["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in pod  # hooks run before the chart's accounts exist
        (migrate,) = pod["containers"]
        assert_retried_upgrade(migrate)
        # And every scheduler and operator pod migrates first (safe concurrently).
        for name in ("sluice-scheduler", "sluice-operator"):
            init = one(docs, "Deployment", name)["spec"]["template"]["spec"]["initContainers"]
            assert [c["name"] for c in init] == ["db-upgrade"]
            assert_retried_upgrade(init[0])


def assert_retried_upgrade(c: Doc) -> None:
    assert c["command"] == ["/bin/sh", "-c"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SLUICE_DB_UPGRADE_ATTEMPTS"] == "60"
    assert env["SLUICE_DB_UPGRADE_DELAY"] == "5"
    assert "SLUICE_DATABASE_URL" in env
    assert "until sluice db upgrade; do" in c["args"][0]


def run_upgrade_script(script: str, bin_dir: Path, fails: int, attempts: int) -> Any:
    """The script under /bin/sh with a `sluice` that fails `fails` times, then succeeds."""
    count = bin_dir / "count"
    count.write_text("0")
    fake = bin_dir / "sluice"
    fake.write_text(
        f"#!/bin/sh\nn=$(($(cat {count}) + 1)); echo $n > {count}\n"
        f'[ "$1 $2" = "db upgrade" ] && [ "$n" -gt {fails} ]\n'
    )
    fake.chmod(0o755)
    return subprocess.run(
        ["/bin/sh", "-c", script],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SLUICE_DB_UPGRADE_ATTEMPTS": str(attempts),
            "SLUICE_DB_UPGRADE_DELAY": "0",
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_upgrade_script_retries_then_gives_up(helm: str, tmp_path: Path) -> None:
    """A database still starting: `sluice db upgrade` is tried again; one that never
    answers: the container fails after the last attempt, saying why."""
    job = one(render(helm), "Job", "sluice-migrations")
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    done = run_upgrade_script(script, tmp_path, fails=2, attempts=3)
    assert done.returncode == 0, done.stderr
    assert "attempt 2 of 3" in done.stderr
    assert (tmp_path / "count").read_text().strip() == "3"
    done = run_upgrade_script(script, tmp_path, fails=5, attempts=3)
    assert done.returncode == 1
    assert "failed 3 times; giving up" in done.stderr


# ---- images ------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_one_sluice_image_everywhere(helm: str, values: Path | None) -> None:
    docs = render(helm, values)
    scheduler = container(docs, "Deployment", f"{fullname(values)}-scheduler", "scheduler")
    image = flag(scheduler["args"], "--sluice-image")
    for where, pod in pod_specs(docs):
        for c in containers(pod):
            # The chart's own containers (ci/extension-values.yaml adds sidecars of others').
            if c["name"] in ("scheduler", "operator", "ui", "db-upgrade"):
                assert c["image"] == image, where
                assert c["imagePullPolicy"] == scheduler["imagePullPolicy"], where


def test_local_values_use_the_locally_built_image(helm: str) -> None:
    docs = render(helm, LOCAL)
    scheduler = container(docs, "Deployment", "sluice-scheduler", "scheduler")
    assert scheduler["image"] == "localhost/sluice:dev"
    assert scheduler["imagePullPolicy"] == "IfNotPresent"
    assert flag(scheduler["args"], "--sluice-image") == "localhost/sluice:dev"
    assert flag(scheduler["args"], "--task-image-pull-policy") == "IfNotPresent"


def fullname(values: Path | None) -> str:
    return "wf" if values == ALL_NAMESPACES else "sluice"


# ---- RBAC ----------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_rbac_grants_no_secrets_and_no_wildcards(helm: str, values: Path | None) -> None:
    docs = render(helm, values)
    roles = of_kind(docs, "Role") + of_kind(docs, "ClusterRole")
    assert roles
    for role in roles:
        where = f"{role['kind']}/{role['metadata']['name']}"
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{where}: {field} {rule}"
            assert not {"secrets", "configmaps"} & set(rule["resources"]), where
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), where
            assert "nonResourceURLs" not in rule, where
    # Every binding binds a rendered role to a ServiceAccount in the release namespace.
    rendered = {(r["kind"], r["metadata"]["name"], r["metadata"].get("namespace")) for r in roles}
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], ref["name"], namespace) in rendered, binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert subject["namespace"] == NAMESPACE


def rules_of(docs: list[Doc], kind: str, name: str, namespace: str | None = None) -> set[str]:
    """A role's rules as 'group/resource verb' strings ('[name]' for resourceNames)."""
    found = [
        r
        for r in of_kind(docs, kind)
        if r["metadata"]["name"] == name and r["metadata"].get("namespace") == namespace
    ]
    assert len(found) == 1, f"{kind}/{name} in {namespace}: {len(found)}"
    return {
        f"{group}/{resource} {verb}"
        + (f" {rule['resourceNames']}" if "resourceNames" in rule else "")
        for rule in found[0]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


SCHEDULER_TASKS = {
    *(f"batch/jobs {v}" for v in ("create", "get", "list", "watch", "patch", "delete")),
    "/pods list",
    "/pods watch",
    "/pods patch",
    "/pods/log get",  # the log archive, and `sluice logs` of a running try
    "/events list",
    "/events watch",
}
SCHEDULER_OBJECTS = {
    "sluice.io/dagruns create",
    "sluice.io/dagruns get",
    "sluice.io/dagruns list",
    "sluice.io/dagruns delete",  # the history limit (ADR 0034)
    "sluice.io/dags get",
    "sluice.io/backfills get",
    "sluice.io/dagruns/status patch",
    "sluice.io/dags/status patch",
    "sluice.io/backfills/status patch",
    "/events create",
}
SCHEDULER_POOLS = {"sluice.io/pools get", "sluice.io/pools/status patch"}


def operator_objects(peerings: str) -> set[str]:
    return {
        *(
            f"sluice.io/{k} {v}"
            for k in ("dags", "dagruns", "backfills", "taskactions")
            for v in ("list", "watch", "patch")
        ),
        *(f"sluice.io/{k}/status patch" for k in ("dags", "dagruns", "backfills", "taskactions")),
        "/events create",
        f"kopf.dev/{peerings} list",
        f"kopf.dev/{peerings} watch",
        f"kopf.dev/{peerings} create",
        f"kopf.dev/{peerings} patch ['sluice']",
    }


OPERATOR_CLUSTER = {
    "sluice.io/pools list",
    "sluice.io/pools watch",
    "sluice.io/pools patch",
    "sluice.io/pools/status patch",
    "apiextensions.k8s.io/customresourcedefinitions list",
    "apiextensions.k8s.io/customresourcedefinitions watch",
}


UI_REVIEWS = {
    "authentication.k8s.io/tokenreviews create",
    "authorization.k8s.io/subjectaccessreviews create",
}


def test_rbac_is_what_the_code_calls(helm: str) -> None:
    docs = render(helm)
    assert rules_of(docs, "Role", "sluice-scheduler-tasks", NAMESPACE) == SCHEDULER_TASKS
    assert rules_of(docs, "Role", "sluice-scheduler-objects", NAMESPACE) == SCHEDULER_OBJECTS
    assert rules_of(docs, "ClusterRole", "sluice-scheduler-pools") == SCHEDULER_POOLS
    assert rules_of(docs, "Role", "sluice-operator-objects", NAMESPACE) == operator_objects(
        "kopfpeerings"
    )
    assert rules_of(docs, "ClusterRole", "sluice-operator-cluster") == OPERATOR_CLUSTER | {
        "/namespaces list",
        "/namespaces watch",
    }
    # The UI asks the API server who a token is and what its user may do, nothing else.
    assert rules_of(docs, "ClusterRole", "sluice-ui") == UI_REVIEWS
    # For the accounts, only Pools, what kopf observes and the UI's reviews are
    # cluster-wide; the rest are the roles for people, bound to no one.
    assert {r["metadata"]["name"] for r in of_kind(docs, "ClusterRole")} == {
        "sluice-scheduler-pools",
        "sluice-operator-cluster",
        "sluice-ui",
        "sluice-view",
        "sluice-edit",
    }


def test_rbac_in_served_and_task_namespaces(helm: str) -> None:
    docs = render(helm, EXTERNAL)
    assert rules_of(docs, "Role", "sluice-scheduler-tasks", "sluice-tasks") == SCHEDULER_TASKS
    for namespace in ("sluice", "team-a"):
        assert rules_of(docs, "Role", "sluice-scheduler-objects", namespace) == SCHEDULER_OBJECTS
        objects = rules_of(docs, "Role", "sluice-operator-objects", namespace)
        assert objects == operator_objects("kopfpeerings")
    operator = container(docs, "Deployment", "sluice-operator", "operator")["args"]
    assert [operator[i + 1] for i, a in enumerate(operator) if a == "--namespace"] == [
        "sluice",
        "team-a",
    ]
    # The release namespace not served: kopf still posts Pool Events there.
    elsewhere = render(helm, None, "watch.namespaces={team-a}")
    assert rules_of(elsewhere, "Role", "sluice-operator-events", NAMESPACE) == {"/events create"}
    # ... and nothing else: Jobs run in their DAG's namespace, a served one (ADR 0032).
    assert [r["metadata"]["namespace"] for r in of_kind(elsewhere, "Role")].count(NAMESPACE) == 1
    assert rules_of(elsewhere, "Role", "sluice-scheduler-tasks", "team-a") == SCHEDULER_TASKS


def test_rbac_for_every_namespace(helm: str) -> None:
    docs = render(helm, ALL_NAMESPACES)
    assert rules_of(docs, "ClusterRole", "wf-scheduler-objects") == SCHEDULER_OBJECTS
    assert rules_of(docs, "ClusterRole", "wf-operator-objects") == operator_objects(
        "clusterkopfpeerings"
    )
    assert rules_of(docs, "ClusterRole", "wf-operator-cluster") == OPERATOR_CLUSTER
    assert rules_of(docs, "Role", "wf-scheduler-tasks", "sluice-tasks") == SCHEDULER_TASKS
    args = container(docs, "Deployment", "wf-operator", "operator")["args"]
    assert "--all-namespaces" in args
    assert "--namespace" not in args
    # ServiceAccounts made elsewhere: none rendered, the given names used and bound.
    assert of_kind(docs, "ServiceAccount") == []
    scheduler = one(docs, "Deployment", "wf-scheduler")["spec"]["template"]["spec"]
    assert scheduler["serviceAccountName"] == "sluice-scheduler"
    assert flag(scheduler["containers"][0]["args"], "--task-service-account") == "sluice-task"
    binding = one(docs, "ClusterRoleBinding", "wf-scheduler-objects")
    assert binding["subjects"][0]["name"] == "sluice-scheduler"


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
PEOPLE_VIEW = {
    f"sluice.io/{kind} {verb}"
    for kind in ("dags", "dagruns", "backfills", "taskactions", "pools")
    for verb in ("get", "list", "watch")
}
EDIT_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
PEOPLE_EDIT = {
    f"sluice.io/{kind} {verb}"
    for kind in ("dags", "dagruns", "backfills", "taskactions")
    for verb in EDIT_VERBS
}


def test_roles_for_people_are_aggregated_into_view_edit_and_admin(helm: str) -> None:
    """Whoever holds view, edit or admin in a namespace gets Sluice's kinds there: view
    reads them, edit and admin also change DAGs, DagRuns and Backfills and create
    TaskActions (clear or mark their own namespace's tasks); Pools, which cap
    everyone, stay read-only, and no status is writable."""
    docs = render(helm)
    view = one(docs, "ClusterRole", "sluice-view")
    edit = one(docs, "ClusterRole", "sluice-edit")
    aggregated = {
        name: {k.removeprefix(AGGREGATE) for k, v in role["metadata"]["labels"].items()
               if k.startswith(AGGREGATE) and v == "true"}
        for name, role in (("view", view), ("edit", edit))
    }  # fmt: skip
    assert aggregated == {"view": {"view", "edit", "admin"}, "edit": {"edit", "admin"}}
    assert rules_of(docs, "ClusterRole", "sluice-view") == PEOPLE_VIEW
    assert rules_of(docs, "ClusterRole", "sluice-edit") == PEOPLE_EDIT
    # Bound to no one by the chart: the built-in roles carry them.
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        assert binding["roleRef"]["name"] not in ("sluice-view", "sluice-edit")
    # Named for the release; made whatever rbac.create says; off with the value.
    renamed = render(helm, ALL_NAMESPACES, "rbac.create=false")
    assert rules_of(renamed, "ClusterRole", "wf-edit") == PEOPLE_EDIT
    assert rules_of(renamed, "ClusterRole", "wf-view") == PEOPLE_VIEW
    off = render(helm, None, "rbac.aggregateClusterRoles=false")
    names = {r["metadata"]["name"] for r in of_kind(off, "ClusterRole")}
    assert names == {"sluice-scheduler-pools", "sluice-operator-cluster", "sluice-ui"}


def test_task_pods_get_an_account_without_rights_or_token(helm: str) -> None:
    for values, namespace in ((None, NAMESPACE), (EXTERNAL, "sluice-tasks")):
        docs = render(helm, values)
        account = one(docs, "ServiceAccount", "sluice-task")
        assert account["metadata"]["namespace"] == namespace
        assert account["automountServiceAccountToken"] is False
        for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
            assert all(s["name"] != "sluice-task" for s in binding["subjects"])
        scheduler = container(docs, "Deployment", "sluice-scheduler", "scheduler")
        assert flag(scheduler["args"], "--namespace") == NAMESPACE
        assert (namespace == NAMESPACE) == ("--job-namespace" not in scheduler["args"])


def test_log_retention_is_a_scheduler_flag_only_when_set_with_a_store(helm: str) -> None:
    store = "logs.store=s3://bucket/prefix?region=eu-west-1"

    def args(*sets: str) -> list[str]:
        docs = render(helm, None, *sets)
        return list(container(docs, "Deployment", "sluice-scheduler", "scheduler")["args"])

    assert flag(args(store, "logs.retentionDays=30"), "--log-retention-days") == "30"
    assert "--log-retention-days" not in args(store)  # 0, the default: keep every log
    assert "--log-retention-days" not in args(store, "logs.retentionDays=0")
    # Without a store nothing is archived, so nothing to delete (the scheduler refuses it).
    assert "--log-retention-days" not in args("logs.retentionDays=30")


# ---- the non-default values file -----------------------------------------------------


def test_non_default_values(helm: str) -> None:
    docs = render(helm, EXTERNAL)
    assert one(docs, "Deployment", "sluice-scheduler")["spec"]["replicas"] == 2
    assert one(docs, "Deployment", "sluice-operator")["spec"]["replicas"] == 3
    scheduler = container(docs, "Deployment", "sluice-scheduler", "scheduler")
    args = scheduler["args"]
    assert flag(args, "--job-namespace") == "sluice-tasks"
    assert flag(args, "--task-image-pull-policy") == "Always"
    assert flag(args, "--pod-start-timeout") == "600"
    assert flag(args, "--job-ttl") == "86400"
    store = "s3://sluice-logs/prod?endpoint=https://s3.example.com&region=eu-west-1"
    assert flag(args, "--log-store") == store
    assert flag(args, "--log-max-bytes") == "5242880"
    assert flag(args, "--log-retention-days") == "30"
    assert {"name": "SLUICE_LOG_STORE", "value": store} in scheduler["env"]
    assert scheduler["envFrom"] == [{"secretRef": {"name": "sluice-logs"}}]
    operator = container(docs, "Deployment", "sluice-operator", "operator")
    assert "envFrom" not in operator  # the store's credentials: the schedulers only
    assert flag(args, "--zombie-threshold") == "120"
    # The task API keys from a Secret of one's own, under the key it names.
    assert of_kind(docs, "Secret") == []
    pod = one(docs, "Deployment", "sluice-scheduler")["spec"]["template"]["spec"]
    keys = next(v for v in pod["volumes"] if v["name"] == "task-api-keys")["secret"]
    assert keys["secretName"] == "sluice-task-api-keys"
    assert keys["items"] == [{"key": "keys.txt", "path": "keys"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    monitor = one(docs, "ServiceMonitor", "sluice-scheduler")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    metrics = one(docs, "Service", "sluice-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # Pull secrets on every pod, and on the task account (the sidecar is the Sluice image).
    for where, pod_spec in pod_specs(docs):
        assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}], where
    assert one(docs, "ServiceAccount", "sluice-task")["imagePullSecrets"] == [{"name": "regcred"}]
    labelled = [d for d in docs if not d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert all(d["metadata"]["labels"]["team"] == "data" for d in labelled)


def test_network_policies(helm: str) -> None:
    assert of_kind(render(helm), "NetworkPolicy") == []
    docs = render(helm, EXTERNAL)
    scheduler = one(docs, "NetworkPolicy", "sluice-scheduler")["spec"]
    task_api, metrics = scheduler["ingress"]
    assert task_api["ports"] == [{"port": 8080, "protocol": "TCP"}]
    (task_pods,) = task_api["from"]
    assert task_pods["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["sluice-tasks"]}
    ]
    assert task_pods["podSelector"]["matchExpressions"] == [
        {"key": "sluice.io/ti", "operator": "Exists"}
    ]
    assert metrics["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert metrics["from"][0]["podSelector"]["matchExpressions"] == [
        {"key": "sluice.io/ti", "operator": "DoesNotExist"}
    ]
    assert one(docs, "NetworkPolicy", "sluice-operator")["spec"]["ingress"] == []
    # The UI: its port, from any pod but a task pod (every request signs in).
    (ui,) = one(docs, "NetworkPolicy", "sluice-ui")["spec"]["ingress"]
    assert ui["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert ui["from"] == [
        {
            "namespaceSelector": {},
            "podSelector": {
                "matchExpressions": [{"key": "sluice.io/ti", "operator": "DoesNotExist"}]
            },
        }
    ]
    # No Postgres policy without the bundled Postgres; with it, only Sluice's own pods.
    assert "sluice-postgres" not in {d["metadata"]["name"] for d in of_kind(docs, "NetworkPolicy")}
    bundled = render(helm, None, "networkPolicy.enabled=true")
    (rule,) = one(bundled, "NetworkPolicy", "sluice-postgres")["spec"]["ingress"]
    assert rule["ports"] == [{"port": 5432, "protocol": "TCP"}]
    expressions = {e["key"]: e for e in rule["from"][0]["podSelector"]["matchExpressions"]}
    assert expressions["app.kubernetes.io/component"]["values"] == [
        "scheduler",
        "operator",
        "migrations",
        "ui",
    ]
    assert expressions["sluice.io/ti"]["operator"] == "DoesNotExist"
    # Those components' pods carry the labels the rule selects.
    for _, pod_template in (
        (d["metadata"]["name"], d["spec"]["template"])
        for d in bundled
        if d["kind"] in ("Deployment", "Job")
    ):
        labels = pod_template["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] in (
            "scheduler",
            "operator",
            "migrations",
            "ui",
        )
        assert labels["app.kubernetes.io/instance"] == RELEASE
    custom = one(render(helm, ALL_NAMESPACES), "NetworkPolicy", "wf-scheduler")["spec"]
    assert custom["ingress"][1]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


# ---- names and labels ----------------------------------------------------------------


def test_common_labels_and_name_overrides(helm: str) -> None:
    docs = render(helm)
    for doc in docs:
        if doc["kind"].startswith("ValidatingAdmissionPolicy"):
            continue  # crds/'s file, byte for byte
        labels = doc["metadata"]["labels"]
        assert labels["helm.sh/chart"] == "sluice-0.1.0", doc["metadata"]["name"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/name"] == "sluice"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/component"]
    renamed = render(helm, None, "nameOverride=flow")
    assert one(renamed, "Deployment", "sluice-flow-scheduler")
    overridden = render(helm, None, "fullnameOverride=wf")
    scheduler = container(overridden, "Deployment", "wf-scheduler", "scheduler")
    assert flag(scheduler["args"], "--task-api-url") == "http://wf-task-api.sluice.svc:8080"


def test_the_default_pool_policy_is_optional(helm: str) -> None:
    kinds = {d["kind"] for d in render(helm)}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    names = {d["metadata"]["name"] for d in render(helm, ALL_NAMESPACES)}
    assert "sluice.io-default-pool" not in names


def _reference_lists(docs: list[Doc], name: str) -> dict[str, str]:
    policy = one(docs, "ValidatingAdmissionPolicy", name)
    binding = one(docs, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_the_dag_reference_policy_has_this_releases_names(helm: str) -> None:
    from sluice.handlers import crds

    docs = render(helm)
    variables = _reference_lists(docs, "sluice.io-dag-references-sluice-sluice")
    assert variables["secrets"] == "['sluice-task-api', 'sluice-postgres']"
    assert variables["accounts"] == "['sluice-scheduler', 'sluice-operator']"
    # The rest is the generated policy's, as crds/ has it.
    generated = crds.dag_reference_protection()[0]
    policy = one(docs, "ValidatingAdmissionPolicy", "sluice.io-dag-references-sluice-sluice")
    assert policy["spec"]["validations"] == generated["spec"]["validations"]
    assert policy["spec"]["matchConstraints"] == generated["spec"]["matchConstraints"]
    # The operator refuses the same names where the policy is not installed.
    operator = container(docs, "Deployment", "sluice-operator", "operator")
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert env["SLUICE_PROTECTED_SECRETS"] == "sluice-task-api sluice-postgres"
    assert env["SLUICE_PROTECTED_SERVICE_ACCOUNTS"] == "sluice-scheduler sluice-operator"

    own = render(helm, None, "postgres.existingSecret=pg-pass", "taskApi.existingSecret=keys")
    variables = _reference_lists(own, "sluice.io-dag-references-sluice-sluice")
    assert variables["secrets"] == "['keys', 'pg-pass', 'sluice-postgres']"
    external = render(helm, None, "database.existingSecret=db-url")
    variables = _reference_lists(external, "sluice.io-dag-references-sluice-sluice")
    assert variables["secrets"] == "['sluice-task-api', 'db-url']"
    other = render(helm, ALL_NAMESPACES)
    variables = _reference_lists(other, "sluice.io-dag-references-sluice-wf")
    assert variables["accounts"] == "['sluice-scheduler', 'sluice-operator']"
    off = render(helm, None, "dagReferenceProtection.enabled=false")
    assert "SLUICE_PROTECTED_SECRETS" not in json.dumps(off)
    assert "sluice.io-dag-references-sluice-sluice" not in json.dumps(off)


def test_notes_say_what_to_run_next(helm: str) -> None:
    done = run_helm(
        helm, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"
    )
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    for expected in (
        "kubectl -n sluice apply -f examples/",
        "kubectl -n sluice get dagruns -w",
        "kubectl -n sluice port-forward deployment/sluice-scheduler 9090:9090",
        "/metrics",
    ):
        assert expected in notes


# ---- the chart's files (no helm needed) ----------------------------------------------


def test_chart_crds_are_copies_of_crds() -> None:
    """charts/sluice/files/crds/ holds every CRD file of crds/ byte for byte (rendered by
    templates/crds.yaml), files/ the rest; `make chart-crds` copies them. The chart has no
    crds/ directory: helm would install it besides the templates (ADR 0043)."""
    sources = sorted((ROOT / "crds").glob("*.yaml"))
    assert sources
    expected: dict[Path, bytes] = {}
    for source in sources:
        kinds = {doc["kind"] for doc in yaml.safe_load_all(source.read_text()) if doc}
        where = "files/crds" if kinds == {"CustomResourceDefinition"} else "files"
        expected[CHART / where / source.name] = source.read_bytes()
    copies = sorted(p for p in (CHART / "files").rglob("*") if p.is_file())
    assert sorted(expected) == copies, "run `make chart-crds`"
    for path, content in expected.items():
        assert path.read_bytes() == content, f"{path} differs from crds/: run `make chart-crds`"
    assert (CHART / "files" / "crds" / "kopf-peering.yaml").is_file()
    assert not (CHART / "crds").exists()


def _values_key_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, key) of every mapping key in values.yaml outside list items."""
    list_indent: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if list_indent is not None and indent > list_indent:
            continue
        list_indent = None
        if stripped.startswith("- "):
            list_indent = indent
            continue
        match = re.match(r"([A-Za-z_][\w.-]*):(\s|$)", stripped)
        if match:
            yield number, match.group(1)


def test_every_value_has_a_comment() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    for number, key in _values_key_lines("\n".join(lines)):
        previous = next(line.strip() for line in reversed(lines[: number - 1]) if line.strip())
        if not previous.startswith("#"):
            undocumented.append(f"line {number}: {key}")
    assert undocumented == []


def _leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key != "resources":
            yield from _leaves(value, path + ".")
        else:
            yield path


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def test_schema_values_and_readme_agree() -> None:
    """Every value is in the schema and in the README's table; every property of a closed
    object in the schema is in values.yaml (`global` aside: helm's, for subcharts)."""
    import json

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        node = _resolve(schema, node)
        if node.get("additionalProperties") is False and "properties" in node:
            assert isinstance(value, dict), path
            known = set(node["properties"]) - ({"global"} if not path else set())
            assert known == set(value), f"{path or 'top level'}: schema and values.yaml differ"
            for key, child in node["properties"].items():
                if key in value:
                    walk(child, value[key], f"{path}{key}.")

    walk(schema, values, "")
    readme = (CHART / "README.md").read_text()
    missing = [leaf for leaf in _leaves(values) if f"`{leaf}`" not in readme]
    assert missing == [], "values missing from charts/sluice/README.md"


def test_the_dagrun_history_limit_is_a_scheduler_flag_and_0_takes_the_right_to_delete(
    helm: str,
) -> None:
    """Each DAG keeps its newest ended runs' DagRun objects (ADR 0034): the value is the
    schedulers' flag, and with 0 (keep every object) they may not delete DagRuns."""
    args = container(render(helm), "Deployment", "sluice-scheduler", "scheduler")["args"]
    assert args[args.index("--dagrun-history-limit") + 1] == "100"
    kept = render(helm, None, "scheduler.dagrunHistoryLimit=0")
    args = container(kept, "Deployment", "sluice-scheduler", "scheduler")["args"]
    assert args[args.index("--dagrun-history-limit") + 1] == "0"
    assert rules_of(kept, "Role", "sluice-scheduler-objects", NAMESPACE) == SCHEDULER_OBJECTS - {
        "sluice.io/dagruns delete"
    }
