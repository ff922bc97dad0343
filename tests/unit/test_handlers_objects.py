"""Object bodies into manifests, trigger requests and pool specs; the namespace rules."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice.handlers import objects
from sluice.spec import names
from sluice.spec.errors import SpecError
from sluice.spec.states import Reprocess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {
            "name": "hello",
            "namespace": "team-a",
            "uid": "0b7c4c2e-0000-0000-0000-000000000000",
            "generation": 2,
            "resourceVersion": "123",
            "managedFields": [{"manager": "kubectl"}],
            "finalizers": ["sluice.io/finalizer"],
            "annotations": {"sluice.io/last-handled-configuration": "{}"},
        },
        "spec": spec or {"tasks": [{"name": "a", "image": "busybox"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_as_cluster_objects(path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    body["metadata"].update(namespace="ns", uid="u", generation=1, resourceVersion="9")
    body["status"] = {"dagId": "x"}
    manifest = objects.manifest_from_body(body)
    assert manifest.metadata.namespace == "ns"
    assert manifest.metadata.name == body["metadata"]["name"]


def test_server_metadata_and_status_are_not_spec_and_body_is_untouched() -> None:
    body = _body()
    before = copy.deepcopy(body)
    manifest = objects.manifest_from_body(body)
    assert manifest.metadata.namespace == "team-a"
    assert body == before
    assert objects.spec_error_of(body) is None


def test_invalid_body_lists_issues_with_paths() -> None:
    body = _body(tasks=[{"name": "a", "image": "x", "retryDelay": "soon", "dependsOn": ["b"]}])
    error = objects.spec_error_of(body)
    assert isinstance(error, SpecError)
    paths = {issue.path for issue in error.issues}
    assert "spec.tasks[0].retryDelay" in paths
    assert any(path.startswith("spec.tasks[0].dependsOn") for path in paths)
    with pytest.raises(SpecError):
        objects.manifest_from_body(body)


def test_long_dag_name_is_refused_for_the_job_name_budget() -> None:
    body = _body()
    body["metadata"]["name"] = "d" * 49  # plus task "a": exactly 50, fits
    assert objects.spec_error_of(body) is None
    body["spec"]["tasks"][0]["name"] = "ab"
    error = objects.spec_error_of(body)
    assert error is not None
    assert [issue.path for issue in error.issues] == ["spec.tasks[0].name"]


@pytest.mark.parametrize(
    ("owner", "active", "namespace", "conflict"),
    [
        (None, True, "a", False),  # new, or registered by the CLI
        ("a", True, "a", False),  # the owner re-applies
        ("a", True, "b", True),  # another namespace, owner active
        ("a", False, "b", False),  # owner deleted its DAG: the name is free
        ("a", True, None, True),  # a file synced by the CLI cannot take a namespace's DAG
        (None, True, None, False),  # the CLI re-syncs its own
    ],
)
def test_ownership(owner: str | None, active: bool, namespace: str | None, conflict: bool) -> None:
    problem = names.ownership_problem(
        "hello", namespace, owner_namespace=owner, owner_active=active
    )
    assert (problem is not None) == conflict
    if problem is not None:
        assert problem.path == "metadata.name"
        assert repr(owner) in problem.message


def test_trigger_request() -> None:
    body = {
        "metadata": {"name": "r1", "namespace": "ns", "uid": "abcdef1234"},
        "spec": {
            "dagName": "hello",
            "conf": {"a": [1, {"b": 2}]},
            "logicalDate": "2026-12-01T00:00:00Z",
        },
    }
    request = objects.trigger_request(body)
    assert request.issues == []
    assert request.dag_id == "hello"
    assert request.namespace == "ns"
    assert request.run_id == "manual__r1__abcdef12"
    assert request.conf == {"a": [1, {"b": 2}]}
    assert request.logical_date == datetime(2026, 12, 1, tzinfo=UTC)
    assert objects.trigger_request(body).run_id == request.run_id  # stable across retries


def test_trigger_request_problems() -> None:
    body = {"metadata": {"name": "r"}, "spec": {"conf": 3, "logicalDate": "tomorrow"}}
    paths = [issue.path for issue in objects.trigger_request(body).issues]
    assert paths == ["spec.dagName", "spec.conf", "spec.logicalDate"]
    naive = {
        "metadata": {"name": "r"},
        "spec": {"dagName": "d", "logicalDate": "2026-12-01T00:00:00"},
    }
    assert [i.path for i in objects.trigger_request(naive).issues] == ["spec.logicalDate"]


def _backfill_body(**extra: Any) -> dict[str, Any]:
    spec = {"dagName": "hello", "startDate": "2026-11-01T00:00:00Z"}
    return {
        "metadata": {"name": "fill", "namespace": "ns", "uid": "abcdef1234"},
        "spec": {**spec, "endDate": "2026-11-03T00:00:00Z", **extra},
    }


@pytest.mark.parametrize(
    ("extra", "reprocess"),
    [
        ({}, Reprocess.NONE),
        ({"rerunFailed": False}, Reprocess.NONE),
        ({"rerunFailed": True}, Reprocess.FAILED),
        ({"reprocess": "failed"}, Reprocess.FAILED),
        ({"reprocess": "completed"}, Reprocess.COMPLETED),
        ({"reprocess": "failed", "rerunFailed": True}, Reprocess.FAILED),
    ],
)
def test_backfill_request_reprocess(extra: dict[str, Any], reprocess: Reprocess) -> None:
    request = objects.backfill_request(_backfill_body(**extra))
    assert request.issues == []
    assert request.reprocess == reprocess


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"reprocess": "everything"}, "spec.reprocess"),
        ({"reprocess": "completed", "rerunFailed": True}, "spec.rerunFailed"),
        ({"reprocess": "none", "rerunFailed": True}, "spec.rerunFailed"),
    ],
)
def test_backfill_request_reprocess_problems(extra: dict[str, Any], path: str) -> None:
    assert [issue.path for issue in objects.backfill_request(_backfill_body(**extra)).issues] == [
        path
    ]


def test_pool_spec() -> None:
    body = {"metadata": {"name": "gpu"}, "spec": {"slots": 4}}
    assert objects.pool_spec(body) == objects.PoolSpec("gpu", 4, "")
    bad = objects.pool_spec({"metadata": {"name": "gpu"}, "spec": {"slots": -1}})
    assert isinstance(bad, objects.SpecIssue)
    assert bad.path == "spec.slots"


def test_a_dagrun_object_is_its_namespace_name_and_uid_and_what_it_claims() -> None:
    body = {
        "metadata": {
            "name": "etl-scheduled-x-abc",
            "namespace": "team-a",
            "uid": "u-1",
            "labels": {"sluice.io/origin": "scheduler"},
            "annotations": {"sluice.io/run-id": "scheduled__2026-12-01T00:00:00+00:00"},
        },
        "spec": {"dagName": "etl"},
    }
    assert objects.dagrun_object(body) == objects.DagRunObject(
        namespace="team-a",
        name="etl-scheduled-x-abc",
        uid="u-1",
        dag_name="etl",
        labelled_scheduler=True,
        run_id_annotation="scheduled__2026-12-01T00:00:00+00:00",
    )
    bare = objects.dagrun_object({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {}})
    assert bare == objects.DagRunObject(namespace="", name="x", uid="", dag_name=None)


def test_a_trigger_request_carries_its_objects_name_and_uid() -> None:
    body = {
        "metadata": {"name": "mine", "namespace": "team-a", "uid": "0123456789abcdef"},
        "spec": {"dagName": "etl"},
    }
    request = objects.trigger_request(body)
    assert (request.object_name, request.object_uid) == ("mine", "0123456789abcdef")
    assert request.run_id == "manual__mine__01234567"


def test_the_operator_refuses_a_template_naming_sluices_own_secrets_and_accounts() -> None:
    protected = objects.ProtectedNames.from_env(
        {
            objects.PROTECTED_SECRETS_ENV: "sluice-postgres sluice-task-api",
            objects.PROTECTED_SERVICE_ACCOUNTS_ENV: "sluice-scheduler",
        }
    )
    template = {
        "spec": {
            "serviceAccountName": "sluice-scheduler",
            "volumes": [{"name": "db", "secret": {"secretName": "sluice-postgres"}}],
        }
    }
    body = _body(
        defaults={"podTemplate": template},
        tasks=[{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}],
    )
    with pytest.raises(SpecError) as caught:
        objects.manifest_from_body(body, protected)
    assert [issue.path for issue in caught.value.issues] == [
        f"spec.tasks[{i}].podTemplate.spec.{field}"
        for i in (0, 1)
        for field in ("serviceAccountName", "volumes[0].secret.secretName")
    ]
    assert "Sluice's own ServiceAccounts cannot run a task" in str(caught.value)
    # Without the names (no chart, the policy off) the same DAG is a team's own business.
    assert objects.manifest_from_body(body).metadata.name == "hello"


def _action_body(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "rerun", "namespace": "team-a", "uid": "u-9"},
        "spec": {"dagName": "etl", "runId": "manual__x", **spec},
    }


def test_task_action_request_reads_every_field() -> None:
    request = objects.task_action_request(
        _action_body(action="clear", tasks=["extract"], downstream=True, onlyFailed=True)
    )
    assert request.issues == []
    assert (request.dag_id, request.namespace, request.name, request.uid) == (
        "etl",
        "team-a",
        "rerun",
        "u-9",
    )
    assert (request.run_id, request.action, request.tasks) == ("manual__x", "clear", ["extract"])
    assert (request.downstream, request.upstream, request.only_failed) == (True, False, True)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"action": "rerun"}, "spec.action"),
        ({"action": "markSuccess"}, "spec.tasks"),
        ({"action": "markFailed", "tasks": ["a"], "onlyFailed": True}, "spec.onlyFailed"),
        ({"action": "clear", "tasks": "a"}, "spec.tasks"),
        ({"action": "clear", "runId": ""}, "spec.runId"),
    ],
)
def test_task_action_request_problems_name_the_field(spec: dict[str, Any], path: str) -> None:
    issues = objects.task_action_request(_action_body(**spec)).issues
    assert [issue.path for issue in issues] == [path]
