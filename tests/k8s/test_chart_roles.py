"""The chart's roles for people (`rbac.aggregateClusterRoles`), asked of a real API server.

The chart's `<fullname>-view` and `<fullname>-edit` ClusterRoles are aggregated
into Kubernetes' built-in `view`, `edit` and `admin`, so a user bound to one of
those in a namespace gets Sluice's kinds there and nowhere else. One release;
two namespaces of the test's own, team-a and team-b; a user bound to `edit` and
another to `view` in team-a (RoleBindings, as a namespace's admin grants them).
`kubectl auth can-i --as` asks the API server's authorizer both ways, and again
after an upgrade with `rbac.aggregateClusterRoles=false`, which must take the
rights away: they come from the chart's roles and from nothing else.
Aggregation is the controller manager's work, so each answer is waited for.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from .chart import Release, installed
from .cluster import Cluster
from .replicas import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(900)]

SMALL = ["--set", "scheduler.replicas=1", "--set", "operator.replicas=1"]
SLUICE_KINDS = (
    "dags.sluice.io",
    "dagruns.sluice.io",
    "backfills.sluice.io",
    "taskactions.sluice.io",
)


@pytest.fixture
def release(k8s_cluster: Cluster, k8s_namespace: str) -> Iterator[Release]:
    with installed(k8s_cluster, k8s_namespace) as rel:
        yield rel


@pytest.fixture
def teams(k8s_cluster: Cluster) -> Iterator[tuple[str, str]]:
    """Two namespaces (not served by the release: rights do not depend on it)."""
    suffix = uuid.uuid4().hex[:6]
    names = (f"team-a-{suffix}", f"team-b-{suffix}")
    for name in names:
        k8s_cluster.kubectl("create", "namespace", name)
    try:
        yield names
    finally:
        for name in names:
            k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def bind(cluster: Cluster, namespace: str, user: str, cluster_role: str) -> None:
    """A RoleBinding of `user` to a built-in ClusterRole in `namespace`."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{user}-{cluster_role}", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    cluster.apply(json.dumps(binding))


def can(cluster: Cluster, user: str, *args: str) -> bool:
    """`kubectl auth can-i ARGS --as USER`: the API server's answer ("yes", or "no"
    and perhaps " - <the authorizer's reason>"); anything else is a broken question."""
    done = cluster.kubectl("auth", "can-i", *args, "--as", user, check=False)
    answer = done.stdout.strip()
    assert answer == "yes" or answer.startswith("no"), (
        f"kubectl auth can-i {' '.join(args)} --as {user}: {done.stdout}{done.stderr}"
    )
    return answer == "yes"


def settle(cluster: Cluster, user: str, args: tuple[str, ...], expected: bool) -> None:
    """Wait until the aggregation controller has made `can-i ARGS` answer `expected`."""
    wait_for(
        f"`kubectl auth can-i {' '.join(args)} --as {user}` to say {'yes' if expected else 'no'}",
        lambda: can(cluster, user, *args) is expected,
        timeout=90,
        every=1,
    )


def test_namespace_users_get_sluice_kinds_through_view_and_edit(
    k8s_cluster: Cluster, release: Release, teams: tuple[str, str]
) -> None:
    rel, cluster = release, k8s_cluster
    team_a, team_b = teams
    editor, viewer = f"editor-{team_a}", f"viewer-{team_a}"
    bind(cluster, team_a, editor, "edit")
    bind(cluster, team_a, viewer, "view")
    rel.install(*SMALL)

    # The chart's roles exist, labelled for aggregation, and reach the built-in ones.
    view = cluster.get_json("clusterrole", f"{rel.fullname}-view")
    edit = cluster.get_json("clusterrole", f"{rel.fullname}-edit")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    settle(cluster, editor, ("create", "dags.sluice.io", "-n", team_a), True)
    settle(cluster, viewer, ("get", "dagruns.sluice.io", "-n", team_a), True)

    # edit in team-a: apply DAGs, create and delete runs and backfills, there only.
    for kind in SLUICE_KINDS:
        for verb in ("get", "list", "watch", "create", "patch", "update", "delete"):
            assert can(cluster, editor, verb, kind, "-n", team_a), (verb, kind)
        for verb in ("get", "create", "delete"):
            assert not can(cluster, editor, verb, kind, "-n", team_b), (verb, kind, team_b)
        # Status is the operator's and the schedulers' to write.
        assert not can(cluster, editor, "patch", kind, "--subresource=status", "-n", team_a)
    # Pools are cluster-scoped and cap everyone: never edited through edit.
    for verb in ("create", "patch", "update", "delete"):
        assert not can(cluster, editor, verb, "pools.sluice.io", "-A"), verb
        assert not can(cluster, editor, verb, "pools.sluice.io", "-n", team_a), verb
    # Nothing of the release's: not its Secrets (the task API keys, the database's
    # password), not its Jobs or pods.
    for verb in ("get", "list"):
        assert not can(cluster, editor, verb, "secrets", "-n", rel.namespace), verb
        assert not can(cluster, editor, verb, "secrets", "-A"), verb
    secret = f"secrets/{rel.fullname}-task-api"
    assert not can(cluster, editor, "get", secret, "-n", rel.namespace)
    assert not can(cluster, editor, "get", "pods", "-n", rel.namespace)
    assert not can(cluster, editor, "create", "dags.sluice.io", "-n", rel.namespace)

    # view in team-a: read runs there, change nothing.
    for kind in SLUICE_KINDS:
        for verb in ("get", "list", "watch"):
            assert can(cluster, viewer, verb, kind, "-n", team_a), (verb, kind)
        for verb in ("create", "patch", "update", "delete"):
            assert not can(cluster, viewer, verb, kind, "-n", team_a), (verb, kind)
        assert not can(cluster, viewer, "get", kind, "-n", team_b), (kind, team_b)
    assert not can(cluster, viewer, "create", "pools.sluice.io", "-A")
    assert not can(cluster, viewer, "get", "secrets", "-n", rel.namespace)

    # Without the chart's roles the same bindings grant none of it.
    rel.install(*SMALL, "--set", "rbac.aggregateClusterRoles=false", command="upgrade")
    gone = cluster.kubectl("get", "clusterrole", f"{rel.fullname}-edit", check=False)
    assert gone.returncode != 0, gone.stdout
    # Another release's roles (one left behind, one installed meanwhile) would grant the
    # same: then this half cannot tell, and says so.
    others = cluster.kubectl(
        "get", "clusterroles", "-o", "name",
        "-l", "app.kubernetes.io/part-of=sluice,rbac.authorization.k8s.io/aggregate-to-edit=true",
    ).stdout.split()  # fmt: skip
    assert others == [], f"other Sluice releases' roles are aggregated into edit: {others}"
    settle(cluster, editor, ("create", "dags.sluice.io", "-n", team_a), False)
    settle(cluster, viewer, ("get", "dagruns.sluice.io", "-n", team_a), False)
    for kind in SLUICE_KINDS:
        assert not can(cluster, editor, "create", kind, "-n", team_a), kind
        assert not can(cluster, editor, "delete", kind, "-n", team_a), kind
