"""The chart's tenancy (ADR 0032): each DAG's Jobs run in its own namespace, so every
namespace Jobs may run in gets the schedulers' Job rights, a task ServiceAccount with no
rights and no token, and a way through the NetworkPolicy to the task API; `tasks.namespace`
pins every Job to one namespace (`--job-namespace`)."""

from __future__ import annotations

import pytest

from tests.chart import test_chart
from tests.chart.test_chart import (
    NAMESPACE,
    SCHEDULER_TASKS,
    Doc,
    container,
    flag,
    of_kind,
    one,
    render,
    rules_of,
)

pytestmark = pytest.mark.chart


@pytest.fixture(scope="session", name="helm")
def helm_binary() -> str:
    """test_chart's `helm` fixture: skips without helm, fails so with SLUICE_REQUIRE_HELM=1."""
    found: str = test_chart.helm.__wrapped__()  # type: ignore[attr-defined]
    return found


def task_accounts(docs: list[Doc]) -> dict[str, Doc]:
    """The task ServiceAccounts, by namespace."""
    return {
        d["metadata"]["namespace"]: d
        for d in of_kind(docs, "ServiceAccount")
        if d["metadata"]["name"] == "sluice-task"
    }


def role_namespaces(docs: list[Doc], kind: str, name: str) -> set[str]:
    return {
        d["metadata"]["namespace"] for d in of_kind(docs, kind) if d["metadata"]["name"] == name
    }


def task_api_sources(docs: list[Doc]) -> Doc:
    (task_api, _) = one(docs, "NetworkPolicy", "sluice-scheduler")["spec"]["ingress"]
    (source,) = task_api["from"]
    assert source["podSelector"] == {
        "matchExpressions": [{"key": "sluice.io/ti", "operator": "Exists"}]
    }
    selector: Doc = source["namespaceSelector"]
    return selector


def scheduler_args(docs: list[Doc]) -> list[str]:
    args: list[str] = container(docs, "Deployment", "sluice-scheduler", "scheduler")["args"]
    return args


def test_by_default_jobs_run_in_the_served_release_namespace(helm: str) -> None:
    docs = render(helm, None, "networkPolicy.enabled=true")
    args = scheduler_args(docs)
    assert flag(args, "--namespace") == NAMESPACE
    assert "--job-namespace" not in args  # each DAG's own namespace
    assert rules_of(docs, "Role", "sluice-scheduler-tasks", NAMESPACE) == SCHEDULER_TASKS
    assert set(task_accounts(docs)) == {NAMESPACE}
    assert task_api_sources(docs) == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NAMESPACE]}
        ]
    }


def test_every_served_namespace_gets_job_rights_a_task_account_and_the_task_api(
    helm: str,
) -> None:
    docs = render(helm, None, "watch.namespaces={team-a,team-b}", "networkPolicy.enabled=true")
    served = {"team-a", "team-b"}
    assert "--job-namespace" not in scheduler_args(docs)
    for namespace in served:
        assert rules_of(docs, "Role", "sluice-scheduler-tasks", namespace) == SCHEDULER_TASKS
    assert role_namespaces(docs, "Role", "sluice-scheduler-tasks") == served
    bindings = [
        b for b in of_kind(docs, "RoleBinding") if b["metadata"]["name"] == "sluice-scheduler-tasks"
    ]
    assert {b["metadata"]["namespace"] for b in bindings} == served
    for binding in bindings:
        assert binding["roleRef"]["name"] == "sluice-scheduler-tasks"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sluice-scheduler", "namespace": NAMESPACE}
        ]
    accounts = task_accounts(docs)
    assert set(accounts) == served
    for account in accounts.values():
        assert account["automountServiceAccountToken"] is False
    # No binding anywhere names the task account: it has no rights at all.
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        assert all(s["name"] != "sluice-task" for s in binding["subjects"])
    assert task_api_sources(docs) == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
        ]
    }


def test_every_namespace_takes_a_cluster_role_and_the_listed_task_accounts(helm: str) -> None:
    docs = render(
        helm,
        None,
        "watch.allNamespaces=true",
        "tasks.serviceAccount.namespaces={team-c}",
        "networkPolicy.enabled=true",
    )
    assert rules_of(docs, "ClusterRole", "sluice-scheduler-tasks") == SCHEDULER_TASKS
    binding = one(docs, "ClusterRoleBinding", "sluice-scheduler-tasks")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "sluice-scheduler-tasks",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sluice-scheduler", "namespace": NAMESPACE}
    ]
    assert role_namespaces(docs, "Role", "sluice-scheduler-tasks") == set()
    assert set(task_accounts(docs)) == {NAMESPACE, "team-c"}
    assert task_api_sources(docs) == {}  # task pods of any namespace


def test_a_pinned_job_namespace_is_the_only_one(helm: str) -> None:
    docs = render(
        helm,
        None,
        "tasks.namespace=jobs",
        "watch.namespaces={team-a}",
        "networkPolicy.enabled=true",
    )
    args = scheduler_args(docs)
    assert flag(args, "--job-namespace") == "jobs"
    assert flag(args, "--namespace") == NAMESPACE
    assert role_namespaces(docs, "Role", "sluice-scheduler-tasks") == {"jobs"}
    assert set(task_accounts(docs)) == {"jobs"}
    assert task_api_sources(docs)["matchExpressions"][0]["values"] == ["jobs"]
    # Pinned, the schedulers' Job rights stay namespaced even when every namespace is served.
    everywhere = render(helm, None, "tasks.namespace=jobs", "watch.allNamespaces=true")
    assert "sluice-scheduler-tasks" not in {
        d["metadata"]["name"] for d in of_kind(everywhere, "ClusterRole")
    }
    assert role_namespaces(everywhere, "Role", "sluice-scheduler-tasks") == {"jobs"}


def test_no_task_accounts_when_they_are_made_elsewhere(helm: str) -> None:
    docs = render(
        helm,
        None,
        "watch.namespaces={team-a,team-b}",
        "tasks.serviceAccount.create=false",
        "tasks.serviceAccount.name=runner",
    )
    assert task_accounts(docs) == {}
    assert flag(scheduler_args(docs), "--task-service-account") == "runner"
