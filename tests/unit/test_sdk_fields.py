"""sluice.sdk fields: each Python keyword becomes the manifest field and value YAML would say."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any, get_args

import pytest

from sluice.sdk import DAG, AuthoringError, Pool, TaskFields, TriggerRule, WeightRule
from sluice.sdk.fields import SETTABLE, TriggerRuleName, WeightRuleName, task_body
from sluice.spec.models import EnvVar, TaskSpec
from sluice.spec.validation import parse_dag_manifest

START = datetime(2026, 12, 1, tzinfo=UTC)


def test_task_fields_are_exactly_the_task_specs_settable_fields() -> None:
    # One list of settings: a field added to TaskSpec must be added to TaskFields too.
    assert set(TaskFields.__annotations__) == set(SETTABLE)
    assert set(SETTABLE) == set(TaskSpec.model_fields) - {"name", "depends_on"}


def test_rule_names_are_the_enums_values() -> None:
    assert set(get_args(TriggerRuleName)) == {rule.value for rule in TriggerRule}
    assert set(get_args(WeightRuleName)) == {rule.value for rule in WeightRule}


EVERY_FIELD: TaskFields = {
    "image": "python:3.12",
    "command": ("python", "-c"),
    "args": ["print(1)"],
    "env": {"A": "1", "B": "two"},
    "resources": {"requests": {"cpu": "100m", "memory": 64}, "limits": {"memory": "128Mi"}},
    "trigger_rule": TriggerRule.ONE_FAILED,
    "retries": 3,
    "retry_delay": timedelta(minutes=1, seconds=30),
    "retry_exponential_backoff": True,
    "max_retry_delay": "10m",
    "execution_timeout": 90,
    "pool": Pool("gpu", slots=2),
    "pool_slots": 2,
    "priority_weight": 7,
    "weight_rule": "absolute",
    "depends_on_past": True,
    "wait_for_downstream": True,
    "skip_on_exit_code": [3, 4],
    "pod_template": {"metadata": {"labels": {"team": "data"}}},
}

EXPECTED_BODY: dict[str, Any] = {
    "image": "python:3.12",
    "command": ["python", "-c"],
    "args": ["print(1)"],
    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}],
    "resources": {"requests": {"cpu": "100m", "memory": 64}, "limits": {"memory": "128Mi"}},
    "triggerRule": "one_failed",
    "retries": 3,
    "retryDelay": "1m30s",
    "retryExponentialBackoff": True,
    "maxRetryDelay": "10m",
    "executionTimeout": 90,
    "pool": "gpu",
    "poolSlots": 2,
    "priorityWeight": 7,
    "weightRule": "absolute",
    "dependsOnPast": True,
    "waitForDownstream": True,
    "skipOnExitCode": [3, 4],
    "podTemplate": {"metadata": {"labels": {"team": "data"}}},
}


def test_every_task_field_maps_to_its_manifest_field() -> None:
    assert task_body(EVERY_FIELD) == EXPECTED_BODY
    assert set(EVERY_FIELD) == set(SETTABLE)  # the test covers every field


def test_every_task_field_reaches_the_model() -> None:
    dag = DAG("fields")
    dag.task("t", **EVERY_FIELD)
    (task,) = parse_dag_manifest(dag.manifest()).spec.tasks
    assert task == TaskSpec(
        name="t",
        image="python:3.12",
        command=["python", "-c"],
        args=["print(1)"],
        env=[EnvVar(name="A", value="1"), EnvVar(name="B", value="two")],
        resources={"requests": {"cpu": "100m", "memory": "64"}, "limits": {"memory": "128Mi"}},
        trigger_rule=TriggerRule.ONE_FAILED,
        retries=3,
        retry_delay=timedelta(seconds=90),
        retry_exponential_backoff=True,
        max_retry_delay=timedelta(minutes=10),
        execution_timeout=timedelta(seconds=90),
        pool="gpu",
        pool_slots=2,
        priority_weight=7,
        weight_rule=WeightRule.ABSOLUTE,
        depends_on_past=True,
        wait_for_downstream=True,
        skip_on_exit_code=[3, 4],
        pod_template={"metadata": {"labels": {"team": "data"}}},
    )


def test_only_the_fields_given_are_written() -> None:
    dag = DAG("few")
    dag.task("t", image="busybox", retries=1)
    assert dag.manifest()["spec"] == {"tasks": [{"name": "t", "image": "busybox", "retries": 1}]}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), (5, 5), ([], [])],
)
def test_skip_on_exit_code_as_written(value: Any, expected: Any) -> None:
    dag = DAG("skips")
    dag.task("t", image="busybox", skip_on_exit_code=value)
    (task,) = dag.manifest()["spec"]["tasks"]
    assert task["skipOnExitCode"] == expected


def test_every_dag_setting_maps_to_its_manifest_field() -> None:
    dag = DAG(
        "settings",
        schedule="0 3 * * *",
        timezone="Europe/Amsterdam",
        start_date=date(2026, 12, 1),
        end_date=datetime(2027, 1, 1, 12, tzinfo=timezone(timedelta(hours=1))),
        catchup=True,
        max_active_runs=2,
        max_active_tasks=4,
        dagrun_timeout=timedelta(hours=1),
        defaults={"image": "busybox", "retries": 1},
        params={"mode": "full"},
        paused=True,
        namespace="team-a",
        labels={"team": "a"},
        annotations={"owner": "someone"},
    )
    dag.task("t")
    manifest = dag.manifest()
    assert manifest["metadata"] == {
        "name": "settings",
        "namespace": "team-a",
        "labels": {"team": "a"},
        "annotations": {"owner": "someone"},
    }
    assert manifest["spec"] == {
        "schedule": "0 3 * * *",
        "timezone": "Europe/Amsterdam",
        "startDate": "2026-12-01",
        "endDate": "2027-01-01T12:00:00+01:00",
        "catchup": True,
        "maxActiveRuns": 2,
        "maxActiveTasks": 4,
        "dagrunTimeout": "1h",
        "paused": True,
        "defaults": {"image": "busybox", "retries": 1},
        "params": {"mode": "full"},
        "tasks": [{"name": "t"}],
    }
    spec = parse_dag_manifest(manifest).spec
    assert spec.start_date is not None
    assert spec.start_date.isoformat() == "2026-12-01T00:00:00+01:00"  # read in the DAG's zone
    assert (spec.max_active_tasks, spec.paused, spec.task("t").retries) == (4, True, 1)
    assert spec.params == {"mode": "full"}


def test_params_are_written_as_json_values() -> None:
    dag = DAG(
        "params",
        params={
            "mode": "full",
            "limit": 1000,
            "ratio": 0.5,
            "dry_run": False,
            "none": None,
            "tables": ("orders", "users"),
            "target": {"schema": "prod", "ports": [5432]},
        },
    )
    dag.task("t", image="busybox")
    params = dag.manifest()["spec"]["params"]
    assert params == {
        "mode": "full",
        "limit": 1000,
        "ratio": 0.5,
        "dry_run": False,
        "none": None,
        "tables": ["orders", "users"],  # a tuple is a list, as JSON has it
        "target": {"schema": "prod", "ports": [5432]},
    }
    assert isinstance(params["tables"], list)
    assert DAG("no-params").params == {}


def test_a_param_json_cannot_hold_names_the_dag_and_the_field() -> None:
    with pytest.raises(AuthoringError) as caught:
        DAG("bad-params", params={"at": datetime(2026, 12, 1, tzinfo=UTC), "MODE": 1, "mode": 2})
    assert [(p.dag, p.field, p.message) for p in caught.value.problems] == [
        (
            "bad-params",
            "params.at",
            "2026-12-01T00:00:00+00:00 is a datetime, not a JSON value: write it as a string "
            "('2026-12-01T00:00:00+00:00'; in YAML, quoted)",
        ),
        (
            "bad-params",
            "params.mode",
            "params 'MODE' and 'mode' would both be $SLUICE_PARAM_MODE in a task's environment; "
            "rename one",
        ),
    ]
    assert caught.value.problems[0].location is not None


def test_utc_dates_are_written_with_z_and_naive_ones_as_written() -> None:
    dag = DAG("dates", schedule="@daily", start_date=START, end_date=datetime(2027, 1, 1))
    dag.task("t", image="busybox")
    spec = dag.manifest()["spec"]
    assert (spec["startDate"], spec["endDate"]) == ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00")


def test_a_dag_with_no_settings_writes_only_its_tasks() -> None:
    dag = DAG("bare")
    dag.task("t", image="busybox")
    assert dag.manifest() == {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {"name": "bare"},
        "spec": {"tasks": [{"name": "t", "image": "busybox"}]},
    }
