"""A DAG's params: what the manifest may say, the run's merge, and a task's variables."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.executors.base import TaskLaunch
from sluice.spec import params
from sluice.spec.models import DagSpec, spec_hash
from sluice.spec.validation import SpecError, load_dag_documents, parse_dag_manifest


def manifest(spec_params: object) -> dict[str, Any]:
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {"name": "demo"},
        "spec": {"params": spec_params, "tasks": [{"name": "a", "image": "busybox:1.36"}]},
    }


def issues(spec_params: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_dag_manifest(manifest(spec_params))
    return [str(issue) for issue in caught.value.issues]


# -- the manifest ------------------------------------------------------------------------


def test_params_default_to_empty_and_keep_any_json_value() -> None:
    assert parse_dag_manifest(manifest({})).spec.params == {}
    values = {
        "mode": "full",
        "limit": 1000,
        "ratio": 0.5,
        "dry_run": False,
        "nothing": None,
        "tables": ["a", "b"],
        "target": {"schema": "prod", "retries": [1, 2]},
        "with space": "kept: not a variable name, still a param",
        "ünïcode": 1,
    }
    spec = parse_dag_manifest(manifest(values)).spec
    assert spec.params == values
    dumped = spec.model_dump(mode="json", by_alias=True)
    assert dumped["params"] == values
    assert DagSpec.model_validate(dumped).params == values  # as stored and read back


def test_params_are_part_of_the_version() -> None:
    base = spec_hash(parse_dag_manifest(manifest({"mode": "full"})).spec)
    assert spec_hash(parse_dag_manifest(manifest({"mode": "delta"})).spec) != base
    assert spec_hash(parse_dag_manifest(manifest({"mode": "full"})).spec) == base


@pytest.mark.parametrize(
    ("spec_params", "expected"),
    [
        ([1], "spec.params: must be a mapping (key: value), got a list"),
        (
            {"mode": 1, "MODE": 2},
            "spec.params.MODE: params 'mode' and 'MODE' would both be $SLUICE_PARAM_MODE in a "
            "task's environment; rename one",
        ),
        ({"": 1}, "spec.params: a param needs a name; remove the empty key"),
        (
            {"x": {"y": [float("nan")]}},
            "spec.params.x.y[0]: nan is not a JSON number; use a finite number or a string",
        ),
        (
            {"x": {1: "a"}},
            "spec.params.x: key 1 is not a string; quote it (JSON keys are strings)",
        ),
        ({1: "a"}, "spec.params[1]: must be a string, got 1; quote it in YAML"),
        (
            {f"p{i}": i for i in range(params.MAX_PARAMS + 1)},
            f"spec.params: has {params.MAX_PARAMS + 1} params; at most {params.MAX_PARAMS}: "
            "pass the rest in one object",
        ),
        (
            {"s": {1, 2}},
            "spec.params.s: a set is not a JSON value; use a string, a number, true/false, "
            "null, a list or a mapping",
        ),
    ],
)
def test_what_params_may_not_say_names_the_field_and_the_fix(
    spec_params: object, expected: str
) -> None:
    assert issues(spec_params) == [expected]


def test_a_yaml_date_is_not_taken_for_a_string() -> None:
    text = """
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: demo}
spec:
  params: {day: 2026-12-01, at: 2026-12-01T06:00:00Z, quoted: '2026-12-01', n: .inf}
  tasks: [{name: a, image: busybox:1.36}]
"""
    (result,) = load_dag_documents(text)
    assert isinstance(result, SpecError)
    assert [str(issue) for issue in result.issues] == [
        "spec.params.at: 2026-12-01T06:00:00+00:00 is a datetime, not a JSON value: write it "
        "as a string ('2026-12-01T06:00:00+00:00'; in YAML, quoted)",
        "spec.params.day: 2026-12-01 is a date, not a JSON value: write it as a string "
        "('2026-12-01'; in YAML, quoted)",
        "spec.params.n: inf is not a JSON number; use a finite number or a string",
    ]


# -- the run's params -----------------------------------------------------------------------


def test_the_conf_overrides_params_key_by_key_and_adds_its_other_keys() -> None:
    """As Airflow's process_params with dag_run_conf_overrides_params (True by default):
    ParamsDict.update(conf) replaces a param's value and adds a key it does not have."""
    defaults = {"mode": "full", "limit": 1000, "tables": ["a"]}
    conf = {"limit": 5, "tables": None, "extra": {"k": 1}}
    assert params.effective(defaults, conf) == {
        "mode": "full",
        "limit": 5,
        "tables": None,
        "extra": {"k": 1},
    }
    assert params.effective(defaults, {}) == defaults
    assert params.effective({}, conf) == conf


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("prod", "prod"),
        ("", ""),
        ("two words\nand a line", "two words\nand a line"),
        (1000, "1000"),
        (-3, "-3"),
        (0.5, "0.5"),
        (1e20, "1e+20"),
        (2.0, "2.0"),
        (True, "True"),
        (False, "False"),
        (None, "None"),
        ([1, 2], None),
        ({"a": 1}, None),
    ],
)
def test_a_scalar_renders_as_airflow_s_jinja_renders_it(value: object, text: str | None) -> None:
    """`{{ params.x }}` is Jinja's str() of the value (Airflow renders with autoescape off)."""
    assert params.rendered(value) == text
    if text is not None:
        import jinja2.sandbox

        template = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined)
        assert template.from_string("{{ params.x }}").render(params={"x": value}) == text


@pytest.mark.parametrize(
    ("name", "variable"),
    [
        ("mode", "SLUICE_PARAM_MODE"),
        ("dry_run", "SLUICE_PARAM_DRY_RUN"),
        ("_x1", "SLUICE_PARAM__X1"),
        ("Target", "SLUICE_PARAM_TARGET"),
        ("1st", None),
        ("with space", None),
        ("a-b", None),
        ("a.b", None),
        ("ünïcode", None),
        ("", None),
    ],
)
def test_a_variable_for_each_name_that_can_end_one(name: str, variable: str | None) -> None:
    assert params.env_name(name) == variable


def test_the_environment_of_a_run() -> None:
    defaults = {"mode": "full", "limit": 1000, "tables": ["a"], "dry-run": True, "n": None}
    env = params.environment(defaults, {"limit": 5, "extra": "x"})
    assert env == {
        "SLUICE_PARAMS": json.dumps(
            {"dry-run": True, "extra": "x", "limit": 5, "mode": "full", "n": None, "tables": ["a"]},
            sort_keys=True,
        ),
        "SLUICE_PARAM_MODE": "full",
        "SLUICE_PARAM_LIMIT": "5",
        "SLUICE_PARAM_N": "None",
        "SLUICE_PARAM_EXTRA": "x",
    }
    assert params.environment({}, {}) == {"SLUICE_PARAMS": "{}"}


def test_a_conf_key_never_takes_a_param_s_variable() -> None:
    defaults = {"mode": "full", "tables": ["a"]}
    env = params.environment(defaults, {"MODE": "x", "TABLES": "y", "b": 1, "B": 2})
    assert env["SLUICE_PARAM_MODE"] == "full"
    assert "SLUICE_PARAM_TABLES" not in env  # the param's (a list) claims it first
    assert env["SLUICE_PARAM_B"] == "2"  # of two conf keys, the first in name order ('B' < 'b')
    assert json.loads(env["SLUICE_PARAMS"])["MODE"] == "x"  # every value stays in the JSON


def test_a_launch_carries_them_in_its_context_environment() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    launch = TaskLaunch(
        ti_id=1,
        try_number=1,
        dag_id="d",
        task_id="t",
        run_id="manual__x",
        logical_date=at,
        data_interval_start=at,
        data_interval_end=at,
        conf={"limit": 5},
        image=None,
        command=[],
        args=[],
        env={},
        execution_timeout=None,
        skip_on_exit_code=frozenset(),
        dag_params={"mode": "full", "limit": 1000},
    )
    env = launch.context_env()
    assert env["SLUICE_CONF"] == '{"limit": 5}'
    assert env["SLUICE_PARAMS"] == '{"limit": 5, "mode": "full"}'
    assert (env["SLUICE_PARAM_MODE"], env["SLUICE_PARAM_LIMIT"]) == ("full", "5")
