"""What a valid manifest turns into: defaults, time zones, coercions, hashing, examples."""

from __future__ import annotations

import copy
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from pydantic import ValidationError

from sluice.spec.models import (
    DagManifest,
    DagSpec,
    TaskSpec,
    TriggerRule,
    WeightRule,
    spec_hash,
)
from sluice.spec.validation import load_dag_documents, parse_dag_manifest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def manifest(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schedule": "@daily",
        "startDate": "2026-12-01T00:00:00Z",
        "defaults": {"image": "busybox:1.36"},
        "tasks": [{"name": "a"}, {"name": "b", "dependsOn": ["a"]}],
    }
    body.update(spec)
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {"name": "demo"},
        "spec": body,
    }


def test_task_defaults_match_airflow_and_the_brief() -> None:
    task = TaskSpec(name="a")
    assert task.trigger_rule is TriggerRule.ALL_SUCCESS
    assert task.weight_rule is WeightRule.DOWNSTREAM
    assert task.retries == 0
    assert task.retry_delay == timedelta(minutes=5)
    assert task.pool == "default"
    assert task.pool_slots == 1
    assert task.priority_weight == 1
    assert task.skip_on_exit_code == [99]
    assert task.image is None


def test_dag_defaults() -> None:
    spec = parse_dag_manifest(manifest()).spec
    assert spec.catchup is False
    assert spec.max_active_runs == 16
    assert spec.max_active_tasks == 16
    assert spec.paused is False
    assert spec.timezone == "UTC"
    assert spec.timezone_info == ZoneInfo("UTC")


def test_defaults_merge_under_each_task_and_the_task_wins() -> None:
    doc = manifest(
        defaults={"image": "busybox:1.36", "retries": 3, "retryDelay": "1m", "pool": "etl"},
        tasks=[
            {"name": "a"},
            {"name": "b", "retries": 0, "image": "python:3.12", "dependsOn": ["a"]},
            # populate_by_name: a snake_case key on the task still overrides the default
            {"name": "c", "retry_delay": "10s"},
        ],
    )
    spec = parse_dag_manifest(doc).spec
    a, b, c = spec.tasks
    assert (a.image, a.retries, a.retry_delay, a.pool) == (
        "busybox:1.36",
        3,
        timedelta(minutes=1),
        "etl",
    )
    assert (b.image, b.retries) == ("python:3.12", 0)
    assert c.retry_delay == timedelta(seconds=10)
    assert c.retries == 3


def test_snake_case_defaults_are_accepted() -> None:
    spec = parse_dag_manifest(
        manifest(defaults={"image": "busybox:1.36", "execution_timeout": "30s"})
    ).spec
    assert all(task.execution_timeout == timedelta(seconds=30) for task in spec.tasks)


def test_input_document_is_not_mutated() -> None:
    doc = manifest(defaults={"image": "busybox:1.36", "retries": 2})
    doc["status"] = {"conditions": []}
    before = copy.deepcopy(doc)
    parse_dag_manifest(doc)
    assert doc == before


@pytest.mark.parametrize(
    ("value", "zone", "expected_utc"),
    [
        # naive values are wall-clock time in the DAG's zone
        ("2026-12-01T00:00:00", "Europe/Paris", datetime(2026, 11, 30, 23, 0, tzinfo=UTC)),
        (date(2026, 7, 1), "Europe/Paris", datetime(2026, 6, 30, 22, 0, tzinfo=UTC)),
        (
            datetime(2026, 12, 1, 9, 30),
            "America/New_York",
            datetime(2026, 12, 1, 14, 30, tzinfo=UTC),
        ),
        # aware values keep their instant and are shown in the DAG's zone
        ("2026-12-01T00:00:00Z", "Asia/Tokyo", datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
        ("2026-12-01T00:00:00+02:00", "UTC", datetime(2026, 11, 30, 22, 0, tzinfo=UTC)),
    ],
)
def test_dates_are_stored_aware_in_the_dag_timezone(
    value: object, zone: str, expected_utc: datetime
) -> None:
    spec = parse_dag_manifest(manifest(timezone=zone, startDate=value, endDate=value)).spec
    for stored in (spec.start_date, spec.end_date):
        assert stored is not None
        assert stored.tzinfo == ZoneInfo(zone)
        assert stored == expected_utc


@pytest.mark.parametrize(
    ("value", "codes"),
    [(3, [3]), ([1, 2], [1, 2]), (None, []), ([], []), (0, [0])],
)
def test_skip_on_exit_code_forms(value: object, codes: list[int]) -> None:
    doc = manifest(tasks=[{"name": "a", "skipOnExitCode": value}])
    assert parse_dag_manifest(doc).spec.tasks[0].skip_on_exit_code == codes


def test_resource_quantities_written_as_numbers_become_strings() -> None:
    doc = manifest(
        tasks=[
            {
                "name": "a",
                "resources": {"requests": {"cpu": 1, "memory": "64Mi"}, "limits": {"cpu": 0.5}},
            }
        ]
    )
    resources = parse_dag_manifest(doc).spec.tasks[0].resources
    assert resources == {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "0.5"}}


def test_cluster_fields_in_metadata_and_status_are_tolerated() -> None:
    doc = manifest()
    doc["metadata"].update(
        uid="1234", resourceVersion="99", generation=3, managedFields=[{"manager": "kubectl"}]
    )
    doc["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    parsed = parse_dag_manifest(doc)
    assert parsed.metadata.name == "demo"
    assert "status" not in parsed.model_dump(by_alias=True)


def test_durations_serialize_back_as_short_strings() -> None:
    doc = manifest(
        dagrunTimeout="PT1H30M",
        tasks=[{"name": "a", "retryDelay": 90, "executionTimeout": "1h"}],
    )
    dumped = parse_dag_manifest(doc).spec.model_dump(mode="json", by_alias=True)
    assert dumped["dagrunTimeout"] == "1h30m"
    assert dumped["tasks"][0]["retryDelay"] == "1m30s"
    assert dumped["tasks"][0]["executionTimeout"] == "1h"
    assert dumped["tasks"][0]["maxRetryDelay"] is None


def test_models_are_frozen() -> None:
    spec = parse_dag_manifest(manifest()).spec
    with pytest.raises(ValidationError):
        spec.paused = True  # type: ignore[misc]


def test_spec_hash_is_stable_and_survives_a_round_trip() -> None:
    first = parse_dag_manifest(manifest()).spec
    reordered = manifest()
    reordered["spec"] = dict(reversed(list(reordered["spec"].items())))
    second = parse_dag_manifest(reordered).spec
    stored = DagSpec.model_validate(first.model_dump(mode="json", by_alias=True))
    assert len(spec_hash(first)) == 64
    assert spec_hash(first) == spec_hash(second) == spec_hash(stored)
    assert stored.model_dump() == first.model_dump()


@pytest.mark.parametrize(
    "change",
    [{"schedule": "@hourly"}, {"catchup": True}, {"defaults": {"image": "busybox:1.37"}}],
)
def test_spec_hash_changes_with_the_spec(change: dict[str, Any]) -> None:
    base = spec_hash(parse_dag_manifest(manifest()).spec)
    assert spec_hash(parse_dag_manifest(manifest(**change)).spec) != base


def test_paused_is_not_part_of_a_version() -> None:
    paused = parse_dag_manifest(manifest(paused=True)).spec
    assert paused.paused is True
    assert spec_hash(paused) == spec_hash(parse_dag_manifest(manifest()).spec)
    assert "paused" not in paused.model_dump(mode="json", by_alias=True)


def test_manual_only_dag_needs_no_start_date() -> None:
    doc = manifest(schedule=None)
    del doc["spec"]["startDate"]
    assert parse_dag_manifest(doc).spec.schedule is None


def test_schedule_whitespace_is_normalised() -> None:
    assert parse_dag_manifest(manifest(schedule=" 0 3 * * * ")).spec.schedule == "0 3 * * *"


@pytest.mark.parametrize(
    "schedule",
    [
        "0 0 29 2 *",  # every leap year's 29 February: rare, but it fires
        "0 0 30 2 1",  # day-of-month OR day-of-week, as in cron: every Monday in February
        "0 0 L 2 *",  # the last day of February
        "0 0 31 2,3 *",  # 31 March
    ],
)
def test_a_rare_cron_that_fires_is_accepted(schedule: str) -> None:
    assert parse_dag_manifest(manifest(schedule=schedule)).spec.schedule == schedule


def test_job_name_budget_boundary_is_accepted() -> None:
    doc = manifest(tasks=[{"name": "t" * 25}])
    doc["metadata"]["name"] = "d" * 25
    assert isinstance(parse_dag_manifest(doc), DagManifest)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    results = load_dag_documents(path.read_text())
    assert results
    assert all(isinstance(result, DagManifest) for result in results), results


def test_there_are_examples() -> None:
    names = {path.name for path in EXAMPLES.glob("*.yaml")}
    assert {"hello.yaml", "etl-retries.yaml", "branching.yaml"} <= names


def test_yaml_dates_from_the_file_parse() -> None:
    text = yaml.safe_dump(manifest(startDate=date(2026, 12, 1)))
    (result,) = load_dag_documents(text)
    assert isinstance(result, DagManifest)
    assert result.spec.start_date == datetime(2026, 12, 1, tzinfo=UTC)


def test_lookups_follow_a_copy_with_new_tasks() -> None:
    spec = parse_dag_manifest(manifest()).spec
    assert spec.downstream("a") == ("b",)
    copied = spec.model_copy(update={"tasks": spec.tasks[:1]})
    assert copied.downstream("a") == ()
    with pytest.raises(KeyError):
        copied.task("b")
    assert spec.downstream("a") == ("b",)
    # the lookup cache is not part of the value
    assert spec == type(spec).model_validate(spec.model_dump())
