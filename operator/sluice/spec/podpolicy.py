"""What a task's `podTemplate` may not say: the restricted Pod Security Standard, and no token.

A DAG gets its namespace and nothing more (ARCHITECTURE.md, invariant 10). The
pod Sluice builds is already restricted (executors/kubernetes/manifest.py); a
template merged over it must not undo that. Each rule here is stated twice in
one place, so the two can never say different things:

- as CEL, which `handlers/crds.py` puts on the CRD, so the API server refuses the
  DAG at `kubectl apply` with the rule's message at the field's path;
- as a Python predicate, which the spec models run, so `sluice dags validate`,
  the operator and a stored version loaded again refuse it with the same words.

The rules follow the "restricted" profile of Kubernetes' Pod Security Standards
(kubernetes.io/docs/concepts/security/pod-security-standards, v1.34): no host
namespaces, ports or paths, nothing privileged, no capability but
NET_BIND_SERVICE, never root, no Unconfined seccomp or AppArmor, SELinux and
sysctls only as that profile allows, and only the volume types it lists. On top
of it: never a ServiceAccount token (`automountServiceAccountToken`, or a
projected `serviceAccountToken`), since task pods have no API rights to use.
`protected_references` refuses Sluice's own Secrets and ServiceAccounts, whose
names only the installation knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sluice.spec import podschema

# Where a rule applies, as the pod template's schema nests: the pod spec, its
# securityContext, each container and init container, each container's
# securityContext, each volume.
Where = Literal["pod", "podSecurityContext", "container", "securityContext", "volume"]
Node = Mapping[str, Any]

RESTRICTED = "the restricted Pod Security Standard"
ALLOWED_CAPABILITY = "NET_BIND_SERVICE"
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ping_group_range",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.tcp_wmem",
)
# Helm keeps each release's values (passwords among them) in Secrets named so.
HELM_RELEASE_SECRET_PREFIX = "sh.helm.release.v1."
PROTECTED_SECRET = (
    "Sluice's own Secrets and Helm's release records cannot be used by a task; "
    "use a Secret of your own"
)
PROTECTED_SERVICE_ACCOUNT = (
    "Sluice's own ServiceAccounts cannot run a task; leave serviceAccountName out (the "
    "namespace's task ServiceAccount) or name one of your own"
)
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# The volume sources the restricted profile allows; a volume with none of them is an emptyDir.
ALLOWED_VOLUMES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
# Every other source Kubernetes' Volume has (from the generated schema, so a volume type a
# newer schema brings is refused until a rule allows it).
FORBIDDEN_VOLUMES = tuple(
    sorted(
        set(
            podschema.schema()["properties"]["spec"]["properties"]["volumes"]["items"]["properties"]
        )
        - {"name", *ALLOWED_VOLUMES}
    )
)


@dataclass(frozen=True)
class Rule:
    """One thing a template may not say, at `field` of each node of kind `where`."""

    where: Where
    field: str  # the offending field, relative to the node (the CEL rule's fieldPath)
    cel: str  # true when the node is allowed (`self` is the node)
    message: str  # what is wrong and the fix
    violates: Callable[[Node], bool]


def _get(node: Node, *path: str) -> Any:
    value: Any = node
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _true(*path: str) -> Callable[[Node], bool]:
    return lambda node: _get(node, *path) is True


def _false(*path: str) -> Callable[[Node], bool]:
    return lambda node: _get(node, *path) is False


def _present(key: str) -> Callable[[Node], bool]:
    return lambda node: key in node


def _equals(value: object, *path: str) -> Callable[[Node], bool]:
    return lambda node: _get(node, *path) == value


def _bad_capabilities(node: Node) -> bool:
    added = _get(node, "capabilities", "add") or []
    return any(cap != ALLOWED_CAPABILITY for cap in added)


def _bad_sysctls(node: Node) -> bool:
    return any(
        isinstance(item, Mapping) and item.get("name") not in SAFE_SYSCTLS
        for item in node.get("sysctls") or []
    )


def _bad_selinux(node: Node) -> bool:
    options = node.get("seLinuxOptions")
    if not isinstance(options, Mapping):
        return False
    return (
        options.get("type", "") not in SELINUX_TYPES
        or bool(options.get("user"))
        or bool(options.get("role"))
    )


def _host_port(node: Node) -> bool:
    return any(
        isinstance(port, Mapping) and port.get("hostPort") not in (None, 0)
        for port in node.get("ports") or []
    )


def _projected_token(node: Node) -> bool:
    sources = _get(node, "projected", "sources") or []
    return any(
        isinstance(source, Mapping) and "serviceAccountToken" in source for source in sources
    )


def _quoted(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _host_namespace(field: str, what: str) -> Rule:
    return Rule(
        "pod",
        field,
        f"!has(self.{field}) || !self.{field}",
        f"a task's pod cannot share the node's {what} ({RESTRICTED}); remove `{field}`",
        _true(field),
    )


def _security_rules(where: Where) -> list[Rule]:
    """The rules a pod's and a container's securityContext share."""
    return [
        Rule(
            where,
            "runAsNonRoot",
            "!has(self.runAsNonRoot) || self.runAsNonRoot",
            f"a task cannot run as root ({RESTRICTED}); remove `runAsNonRoot: false`",
            _false("runAsNonRoot"),
        ),
        Rule(
            where,
            "runAsUser",
            "!has(self.runAsUser) || self.runAsUser != 0",
            f"a task cannot run as user 0, root ({RESTRICTED}); use a non-zero uid",
            _equals(0, "runAsUser"),
        ),
        Rule(
            where,
            "seccompProfile.type",
            "!has(self.seccompProfile) || self.seccompProfile.type != 'Unconfined'",
            f"seccomp cannot be Unconfined ({RESTRICTED}); use RuntimeDefault or Localhost",
            _equals("Unconfined", "seccompProfile", "type"),
        ),
        Rule(
            where,
            "appArmorProfile.type",
            "!has(self.appArmorProfile) || self.appArmorProfile.type != 'Unconfined'",
            f"AppArmor cannot be Unconfined ({RESTRICTED}); use RuntimeDefault or Localhost",
            _equals("Unconfined", "appArmorProfile", "type"),
        ),
        Rule(
            where,
            "seLinuxOptions",
            "!has(self.seLinuxOptions) || ("
            "(!has(self.seLinuxOptions.type) || "
            f"self.seLinuxOptions.type in {_quoted(SELINUX_TYPES)})"
            " && (!has(self.seLinuxOptions.user) || self.seLinuxOptions.user == '')"
            " && (!has(self.seLinuxOptions.role) || self.seLinuxOptions.role == ''))",
            f"SELinux options are limited ({RESTRICTED}): no user or role, and a type of "
            + ", ".join(t for t in SELINUX_TYPES if t),
            _bad_selinux,
        ),
        Rule(
            where,
            "windowsOptions.hostProcess",
            "!has(self.windowsOptions) || !has(self.windowsOptions.hostProcess) "
            "|| !self.windowsOptions.hostProcess",
            f"a task cannot be a Windows host process ({RESTRICTED}); remove `hostProcess`",
            _true("windowsOptions", "hostProcess"),
        ),
    ]


RULES: tuple[Rule, ...] = (
    _host_namespace("hostNetwork", "network"),
    _host_namespace("hostPID", "process namespace"),
    _host_namespace("hostIPC", "IPC namespace"),
    Rule(
        "pod",
        "automountServiceAccountToken",
        "!has(self.automountServiceAccountToken) || !self.automountServiceAccountToken",
        "a task's pod gets no ServiceAccount token (it has no API rights to use); "
        "remove `automountServiceAccountToken`",
        _true("automountServiceAccountToken"),
    ),
    *_security_rules("podSecurityContext"),
    Rule(
        "podSecurityContext",
        "sysctls",
        f"!has(self.sysctls) || self.sysctls.all(s, s.name in {_quoted(SAFE_SYSCTLS)})",
        f"only the safe sysctls are allowed ({RESTRICTED}): " + ", ".join(SAFE_SYSCTLS),
        _bad_sysctls,
    ),
    Rule(
        "container",
        "ports",
        "!has(self.ports) || self.ports.all(p, !has(p.hostPort) || p.hostPort == 0)",
        f"a task's container cannot take a port of the node ({RESTRICTED}); remove `hostPort`",
        _host_port,
    ),
    *_security_rules("securityContext"),
    Rule(
        "securityContext",
        "privileged",
        "!has(self.privileged) || !self.privileged",
        f"a task's container cannot be privileged ({RESTRICTED}); remove `privileged`",
        _true("privileged"),
    ),
    Rule(
        "securityContext",
        "allowPrivilegeEscalation",
        "!has(self.allowPrivilegeEscalation) || !self.allowPrivilegeEscalation",
        f"a task's container cannot escalate privileges ({RESTRICTED}); "
        "set `allowPrivilegeEscalation: false` or leave it out",
        _true("allowPrivilegeEscalation"),
    ),
    Rule(
        "securityContext",
        "capabilities.add",
        "!has(self.capabilities) || !has(self.capabilities.add) || "
        f"self.capabilities.add.all(c, c == '{ALLOWED_CAPABILITY}')",
        f"a task's container may add only the {ALLOWED_CAPABILITY} capability ({RESTRICTED})",
        _bad_capabilities,
    ),
    Rule(
        "securityContext",
        "procMount",
        "!has(self.procMount) || self.procMount == 'Default'",
        f"a task's container gets the default /proc mount ({RESTRICTED}); remove `procMount`",
        lambda node: node.get("procMount") not in (None, "Default"),
    ),
    *(
        Rule(
            "volume",
            source,
            f"!has(self.{source})",
            f"a task's pod cannot use {source} volumes ({RESTRICTED}); use one of "
            + ", ".join(ALLOWED_VOLUMES),
            _present(source),
        )
        for source in FORBIDDEN_VOLUMES
    ),
    Rule(
        "volume",
        "projected.sources",
        "!has(self.projected) || !has(self.projected.sources) || "
        "self.projected.sources.all(s, !has(s.serviceAccountToken))",
        "a task's pod gets no ServiceAccount token (it has no API rights to use); "
        "remove the `serviceAccountToken` source",
        _projected_token,
    ),
)


def nodes(template: Node) -> Iterator[tuple[Where, str, Node]]:
    """Every node a rule can apply to, with its path in the template (`spec.containers[0]`)."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return
    yield "pod", "spec", spec
    security = spec.get("securityContext")
    if isinstance(security, Mapping):
        yield "podSecurityContext", "spec.securityContext", security
    for key in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(key) or []):
            if not isinstance(container, Mapping):
                continue
            path = f"spec.{key}[{index}]"
            yield "container", path, container
            context = container.get("securityContext")
            if isinstance(context, Mapping):
                yield "securityContext", f"{path}.securityContext", context
    for index, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, Mapping):
            yield "volume", f"spec.volumes[{index}]", volume


def problems(template: Node) -> list[tuple[str, str]]:
    """(path, message) for every rule the template breaks; paths relative to the template."""
    found: list[tuple[str, str]] = []
    for where, path, node in nodes(template):
        for rule in RULES:
            if rule.where == where and rule.violates(node):
                found.append((f"{path}.{rule.field}", rule.message))
    return found


def protected_references(
    template: Node, secrets: frozenset[str], service_accounts: frozenset[str]
) -> list[tuple[str, str]]:
    """(path, message) for each reference to one of Sluice's own Secrets or ServiceAccounts."""
    found: list[tuple[str, str]] = []
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return found
    for key in ("serviceAccountName", "serviceAccount"):
        if spec.get(key) in service_accounts:
            found.append(
                (
                    f"spec.{key}",
                    f"{spec[key]!r}: {PROTECTED_SERVICE_ACCOUNT}",
                )
            )
    for path, name in secret_references(spec):
        if name in secrets or name.startswith(HELM_RELEASE_SECRET_PREFIX):
            found.append((f"spec.{path}", f"{name!r}: {PROTECTED_SECRET}"))
    return found


def secret_references(spec: Node) -> Iterator[tuple[str, str]]:
    """(path, Secret name) for every Secret a pod spec names, relative to the spec."""
    for index, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, Mapping):
            continue
        at = f"volumes[{index}]"
        if isinstance(name := _get(volume, "secret", "secretName"), str):
            yield f"{at}.secret.secretName", name
        if isinstance(name := _get(volume, "csi", "nodePublishSecretRef", "name"), str):
            yield f"{at}.csi.nodePublishSecretRef.name", name
        for number, source in enumerate(_get(volume, "projected", "sources") or []):
            if isinstance(name := _get(source, "secret", "name"), str):
                yield f"{at}.projected.sources[{number}].secret.name", name
    for key in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(key) or []):
            if not isinstance(container, Mapping):
                continue
            at = f"{key}[{index}]"
            for number, var in enumerate(container.get("env") or []):
                if isinstance(name := _get(var, "valueFrom", "secretKeyRef", "name"), str):
                    yield f"{at}.env[{number}].valueFrom.secretKeyRef.name", name
            for number, source in enumerate(container.get("envFrom") or []):
                if isinstance(name := _get(source, "secretRef", "name"), str):
                    yield f"{at}.envFrom[{number}].secretRef.name", name
