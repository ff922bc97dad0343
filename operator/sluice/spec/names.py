"""Kubernetes name rules that DAG, task and pool names must follow, and who owns a DAG name.

DAG and task names end up inside Kubernetes object names and label values, so
they are checked here, when the spec is applied, rather than failing later
when the executor creates a Job. A DAG name is also the DAG's id across
namespaces (see `sluice.handlers.objects`): `ownership_problem` says who may
write it.
"""

from __future__ import annotations

import re

from sluice.spec.errors import SpecIssue

MAX_LABEL_LENGTH = 63
MAX_SUBDOMAIN_LENGTH = 253

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def dns_label_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 label (the rule for Job and Service names), or None."""
    if not name:
        return "must not be empty"
    if len(name) > MAX_LABEL_LENGTH:
        return f"{name!r} is {len(name)} characters; the limit is {MAX_LABEL_LENGTH}"
    if not _LABEL.fullmatch(name):
        return (
            f"{name!r} is not a valid name: use lowercase letters, digits and '-', "
            f"starting and ending with a letter or digit (e.g. {suggest_label(name)!r})"
        )
    return None


def dns_subdomain_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (the rule for most object names), or None."""
    if not name:
        return "must not be empty"
    if len(name) > MAX_SUBDOMAIN_LENGTH:
        return f"{name!r} is {len(name)} characters; the limit is {MAX_SUBDOMAIN_LENGTH}"
    if not _SUBDOMAIN.fullmatch(name):
        return (
            f"{name!r} is not a valid name: use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def suggest_label(name: str) -> str:
    """A close valid label, offered so the fix is obvious (`Load_Data` -> `load-data`)."""
    lowered = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    return re.sub(r"-{2,}", "-", lowered).strip("-")[:MAX_LABEL_LENGTH].strip("-") or "my-name"


def ownership_problem(
    dag_id: str,
    namespace: str | None,
    *,
    owner_namespace: str | None,
    owner_active: bool,
) -> SpecIssue | None:
    """Why a manifest from `namespace` (None: from a file, by the CLI) may not write the DAG
    `dag_id`, owned by `owner_namespace`, or None.

    A namespace owns the name while its DAG is active; a DAG the CLI wrote (owner None)
    or one whose object was deleted may be taken by anyone.
    """
    if owner_namespace is None or owner_namespace == namespace or not owner_active:
        return None
    return SpecIssue(
        "metadata.name",
        f"DAG name {dag_id!r} is already used by namespace {owner_namespace!r}; DAG names "
        "are unique across the cluster (they are the DAG id in the database): rename this DAG",
    )
