"""sluice.sdk authoring errors: each names the author's line, the DAG, the task and the field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.sdk import DAG, AuthoringError, Pool, Problem

HERE = __file__


def only_problem(excinfo: pytest.ExceptionInfo[AuthoringError]) -> Problem:
    (problem,) = excinfo.value.problems
    return problem


def line_of(text: str) -> int:
    with open(HERE) as source:
        return next(number for number, line in enumerate(source, 1) if text in line)


def make() -> DAG:
    return DAG("errs", defaults={"image": "busybox"})


def test_unknown_trigger_rule() -> None:
    dag = make()
    bad: Any = "al_success"
    with pytest.raises(AuthoringError) as excinfo:
        dag.task("t", trigger_rule=bad)  # the line named
    problem = only_problem(excinfo)
    assert (problem.dag, problem.task, problem.field) == ("errs", "t", "trigger_rule")
    assert "unknown value 'al_success'; use one of 'all_success'" in problem.message
    assert problem.location is not None
    assert (problem.location.file, problem.location.line) == (HERE, line_of("# the line named"))
    assert str(excinfo.value).startswith(
        f"{HERE}:{problem.location.line}: DAG 'errs', task 't', field trigger_rule: unknown value"
    )


def test_duplicate_task_id_names_both_lines() -> None:
    dag = make()
    dag.task("t")  # first t
    with pytest.raises(AuthoringError) as excinfo:
        dag.task("t")
    problem = only_problem(excinfo)
    assert (problem.dag, problem.task, problem.field) == ("errs", "t", "name")
    assert f"made at {HERE}:{line_of('# first t')}" in problem.message
    assert "rename one" in problem.message


def test_cycle_is_reported_when_the_manifest_is_made() -> None:
    dag = make()
    a, b, c = dag.task("a"), dag.task("b"), dag.task("c")
    a >> b >> c >> a
    with pytest.raises(AuthoringError) as excinfo:
        dag.manifest()
    problem = only_problem(excinfo)
    assert (problem.dag, problem.task, problem.field) == ("errs", "a", "dependencies (>> and <<)")
    assert problem.message.startswith("dependency cycle detected: a -> b -> c -> a")


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"retires": 2}, "retires", "unknown task field 'retires'; did you mean 'retries'?"),
        ({"triggerRule": "all_done"}, "triggerRule", "did you mean 'trigger_rule'?"),
        ({"retries": -1}, "retries", "must be at least 0, got -1"),
        ({"retry_delay": "5 minutes"}, "retry_delay", "invalid duration '5 minutes'"),
        ({"pool": "Bad_Pool"}, "pool", "'Bad_Pool' is not a valid name"),
        ({"env": {"A=B": "x"}}, "env[0].name", "contains '='"),
        ({"skip_on_exit_code": [300]}, "skip_on_exit_code[0]", "at most 255"),
        (
            {"pod_template": {"spec": {"hostNetwork": True}}},
            "pod_template.spec.hostNetwork",
            "cannot share the node's network",
        ),
    ],
)
def test_a_bad_task_field_is_named_in_python_spelling(
    fields: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(AuthoringError) as excinfo:
        make().task("t", **fields)
    problem = only_problem(excinfo)
    assert (problem.dag, problem.task, problem.field) == ("errs", "t", field)
    assert message in problem.message


def test_bad_task_name_and_missing_image() -> None:
    with pytest.raises(AuthoringError) as excinfo:
        make().task("Load_Data")
    assert only_problem(excinfo).field == "name"
    assert "(e.g. 'load-data')" in only_problem(excinfo).message
    with pytest.raises(AuthoringError) as excinfo:
        DAG("no-image").task("t")
    assert only_problem(excinfo).field == "image"
    assert "has no image" in only_problem(excinfo).message


def test_names_too_long_for_job_names() -> None:
    with pytest.raises(AuthoringError) as excinfo:
        DAG("d" * 30, defaults={"image": "busybox"}).task("t" * 21)
    assert only_problem(excinfo).field == "name"
    assert "together they must fit in 50" in only_problem(excinfo).message


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ({"schedule": "@daily"}, "start_date", "needs a start date"),
        ({"schedule": "@dayly", "start_date": datetime(2026, 1, 1)}, "schedule", "unknown"),
        ({"timezone": "Mars/Base"}, "timezone", "Mars/Base"),
        ({"max_active_runs": 0}, "max_active_runs", "must be at least 1"),
        ({"defaults": {"retries": -1}}, "defaults.retries", "must be at least 0"),
        ({"defaults": {"retrys": 1}}, "defaults.retrys", "did you mean 'retries'?"),
        (
            {"start_date": datetime(2027, 1, 1, tzinfo=UTC), "end_date": datetime(2026, 1, 1)},
            "end_date",
            "is before startDate",
        ),
    ],
)
def test_a_bad_dag_setting_is_named_when_the_dag_is_made(
    settings: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(AuthoringError) as excinfo:
        DAG("bad", **settings)
    problem = only_problem(excinfo)
    assert (problem.dag, problem.task, problem.field) == ("bad", None, field)
    assert message in problem.message


def test_bad_dag_name() -> None:
    with pytest.raises(AuthoringError) as excinfo:
        DAG("My DAG")
    assert (only_problem(excinfo).dag, only_problem(excinfo).field) == ("My DAG", "name")


def test_dependencies_across_dags_and_into_ones_own_group() -> None:
    one, two = make(), DAG("other", defaults={"image": "busybox"})
    a, b = one.task("a"), two.task("b")
    with pytest.raises(AuthoringError, match="belongs to DAG 'other'; a dependency joins tasks"):
        a >> b
    group = one.group("g")
    inner = group.task("x")
    with pytest.raises(AuthoringError, match=r"is inside <TaskGroup 'g'.*is a cycle"):
        group >> inner


def test_operands_that_are_not_tasks() -> None:
    dag = make()
    a = dag.task("a")
    not_a_task: Any = "b"
    with pytest.raises(AuthoringError, match="take tasks, task groups or lists of them"):
        a >> not_a_task


def test_an_empty_group_with_edges() -> None:
    dag = make()
    a = dag.task("a")
    a >> dag.group("empty")  # the empty group
    with pytest.raises(AuthoringError) as excinfo:
        dag.manifest()
    problem = only_problem(excinfo)
    assert "group 'empty' has no tasks" in problem.message
    assert problem.location is not None
    assert problem.location.line == line_of("# the empty group")


def test_duplicate_group() -> None:
    dag = make()
    dag.group("g")
    with pytest.raises(AuthoringError, match="group 'g' already exists"):
        dag.group("g")


def test_bad_pools() -> None:
    with pytest.raises(AuthoringError) as excinfo:
        Pool("Bad_", slots=-1)
    assert [(p.pool, p.field) for p in excinfo.value.problems] == [
        ("Bad_", "name"),
        ("Bad_", "slots"),
    ]
    assert "must be a whole number >= 0, got -1" in str(excinfo.value)


def test_every_problem_of_a_manifest_at_once() -> None:
    dag = make()
    a, b = dag.task("a"), dag.task("b")
    c, d = dag.task("c"), dag.task("d")
    a >> b >> a
    c >> d >> c
    with pytest.raises(AuthoringError) as excinfo:
        dag.manifest()
    assert [p.task for p in excinfo.value.problems] == ["a", "c"]


def test_bad_defaults_of_a_dag_or_group_are_blamed_on_the_defaults() -> None:
    with pytest.raises(AuthoringError) as excinfo:
        DAG("d", defaults={"image": " "})
    assert (only_problem(excinfo).field, only_problem(excinfo).message) == (
        "defaults.image",
        "must not be empty",
    )
    with pytest.raises(AuthoringError) as excinfo:
        make().group("g", **{"retrys": 1})  # type: ignore[typeddict-unknown-key]
    problem = only_problem(excinfo)
    assert (problem.field, problem.task) == ("retrys", None)
    assert problem.message == "group 'g': unknown task field 'retrys'; did you mean 'retries'?"
