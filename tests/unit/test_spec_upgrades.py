"""The upgrade chain for stored specs: every schema version reaches today's, in order."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sluice.spec import upgrades
from sluice.spec.models import DagSpec

# A spec as the schema-1 model dumped it (it had `paused`).
SCHEMA_1 = {
    "schedule": None,
    "timezone": "UTC",
    "startDate": None,
    "endDate": None,
    "catchup": False,
    "maxActiveRuns": 16,
    "maxActiveTasks": 16,
    "paused": True,
    "dagrunTimeout": None,
    "defaults": {},
    "tasks": [{"name": "a", "image": "busybox:1.36"}],
}


def test_the_chain_has_a_step_from_every_older_version() -> None:
    assert set(upgrades.STEPS) == set(range(1, upgrades.SPEC_SCHEMA_VERSION))


def test_schema_1_loses_paused_and_validates_today() -> None:
    stored = copy.deepcopy(SCHEMA_1)
    upgraded = upgrades.upgrade_spec(stored, 1)
    assert "paused" not in upgraded
    assert DagSpec.model_validate(upgraded).tasks[0].name == "a"
    assert stored == SCHEMA_1  # the stored value is not changed


def test_schema_2_gains_empty_params_and_validates_today() -> None:
    stored = {k: v for k, v in SCHEMA_1.items() if k != "paused"}
    upgraded = upgrades.upgrade_spec(stored, 2)
    assert upgraded == {**stored, "params": {}}
    assert DagSpec.model_validate(upgraded).params == {}
    assert "params" not in stored  # the stored value is not changed
    assert upgrades.upgrade_spec(SCHEMA_1, 1)["params"] == {}  # the whole chain


def test_today_s_version_passes_through_as_a_copy() -> None:
    current = {**{k: v for k, v in SCHEMA_1.items() if k != "paused"}, "params": {"a": 1}}
    upgraded = upgrades.upgrade_spec(current, upgrades.SPEC_SCHEMA_VERSION)
    assert upgraded == current
    assert upgraded is not current


def test_steps_run_in_order_from_the_stored_version() -> None:
    def step(name: str) -> upgrades.Step:
        return lambda spec: {**spec, "trail": [*spec.get("trail", []), name]}

    steps = {1: step("1->2"), 2: step("2->3"), 3: step("3->4")}
    assert upgrades.upgrade_spec({}, 2, steps=steps, current=4)["trail"] == ["2->3", "3->4"]
    assert upgrades.upgrade_spec({}, 1, steps=steps, current=4)["trail"] == [
        "1->2",
        "2->3",
        "3->4",
    ]


def test_a_version_from_a_newer_release_names_the_version_and_the_fix() -> None:
    newer = upgrades.SPEC_SCHEMA_VERSION + 1
    with pytest.raises(upgrades.SpecSchemaError) as caught:
        upgrades.upgrade_spec(SCHEMA_1, newer)
    message = str(caught.value)
    assert f"dag_version.spec_schema_version is {newer}" in message
    assert f"(1 to {upgrades.SPEC_SCHEMA_VERSION})" in message
    assert "stored by a newer Sluice" in message
    assert "apply the DAG's manifest again" in message


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (0, "dag_version.spec_schema_version is 0; schema versions start at 1"),
        (-3, "dag_version.spec_schema_version is -3; schema versions start at 1"),
        ("2", "dag_version.spec_schema_version is '2', not a whole number"),
        (True, "dag_version.spec_schema_version is True, not a whole number"),
    ],
)
def test_a_version_that_is_no_version_is_named(version: Any, expected: str) -> None:
    with pytest.raises(upgrades.SpecSchemaError) as caught:
        upgrades.upgrade_spec(SCHEMA_1, version)
    assert str(caught.value).startswith(expected)


@pytest.mark.parametrize(("stored", "described"), [([1], "a list"), (None, "null"), (3, "a int")])
def test_a_stored_spec_that_is_not_an_object(stored: object, described: str) -> None:
    with pytest.raises(upgrades.SpecSchemaError) as caught:
        upgrades.upgrade_spec(stored, 1)
    assert str(caught.value).startswith(f"dag_version.spec is {described}, not a JSON object")


def test_a_gap_in_the_chain_is_reported_as_a_bug() -> None:
    with pytest.raises(upgrades.SpecSchemaError, match=r"no upgrade from .* version 2 to 3"):
        upgrades.upgrade_spec({}, 1, steps={1: dict}, current=3)
