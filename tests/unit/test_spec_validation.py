"""Every way a manifest is rejected: the field path and the fix in the message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sluice.spec.models import DagManifest
from sluice.spec.validation import SpecError, SpecIssue, load_dag_documents, parse_dag_manifest

Doc = dict[str, Any]


def valid() -> Doc:
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "DAG",
        "metadata": {"name": "demo"},
        "spec": {
            "schedule": "@daily",
            "startDate": "2026-12-01T00:00:00Z",
            "defaults": {"image": "busybox:1.36"},
            "tasks": [
                {"name": "a"},
                {"name": "b", "dependsOn": ["a"]},
                {"name": "c", "dependsOn": ["b"]},
            ],
        },
    }


def spec(**values: Any) -> Callable[[Doc], None]:
    return lambda doc: doc["spec"].update(values)


def task(index: int, **values: Any) -> Callable[[Doc], None]:
    return lambda doc: doc["spec"]["tasks"][index].update(values)


def top(**values: Any) -> Callable[[Doc], None]:
    return lambda doc: doc.update(values)


def drop(*path: str) -> Callable[[Doc], None]:
    def apply(doc: Doc) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return apply


def names(dag: str, task_index: int, task_name: str) -> Callable[[Doc], None]:
    def apply(doc: Doc) -> None:
        doc["metadata"]["name"] = dag
        doc["spec"]["tasks"][task_index]["name"] = task_name

    return apply


def issues_of(doc: object) -> list[SpecIssue]:
    with pytest.raises(SpecError) as caught:
        parse_dag_manifest(doc)
    return caught.value.issues


def test_the_base_document_is_valid() -> None:
    assert isinstance(parse_dag_manifest(valid()), DagManifest)


REJECTIONS: list[tuple[str, Callable[[Doc], None], str, str]] = [
    # graph
    (
        "cycle",
        task(0, dependsOn=["c"]),
        "spec.tasks[0].dependsOn[0]",
        "dependency cycle detected: a -> b -> c -> a",
    ),
    (
        "two-task cycle",
        task(1, dependsOn=["c"]),
        "spec.tasks[1].dependsOn[0]",
        "dependency cycle detected: b -> c -> b",
    ),
    (
        "unknown upstream",
        task(1, dependsOn=["z"]),
        "spec.tasks[1].dependsOn[0]",
        "dependency 'z' not defined; tasks are: a, b, c",
    ),
    (
        "self dependency",
        task(0, dependsOn=["a"]),
        "spec.tasks[0].dependsOn[0]",
        "task 'a' depends on itself; remove it",
    ),
    (
        "dependency twice",
        task(2, dependsOn=["b", "b"]),
        "spec.tasks[2].dependsOn[1]",
        "dependency 'b' is listed twice",
    ),
    (
        "duplicate task",
        task(2, name="a"),
        "spec.tasks[2].name",
        "name 'a' is not unique (also tasks[0])",
    ),
    ("dependsOn not a list", task(1, dependsOn="a"), "spec.tasks[1].dependsOn", "must be a list"),
    # names
    (
        "task name not a label",
        task(0, name="Load_Data"),
        "spec.tasks[0].name",
        "use lowercase letters, digits and '-'",
    ),
    ("task name suggestion", task(0, name="Load_Data"), "spec.tasks[0].name", "'load-data'"),
    (
        "task name too long",
        task(0, name="x" * 64),
        "spec.tasks[0].name",
        "is 64 characters; the limit is 63",
    ),
    ("task name empty", task(0, name=""), "spec.tasks[0].name", "must not be empty"),
    (
        "dag name not a label",
        lambda d: d["metadata"].update(name="My.Dag"),
        "metadata.name",
        "is not a valid name",
    ),
    (
        "dag plus task over budget",
        names("d" * 30, 2, "t" * 21),
        "spec.tasks[2].name",
        "is 51 characters; together they must fit in 50",
    ),
    (
        "dag name leaves no room",
        lambda d: d["metadata"].update(name="d" * 50),
        "metadata.name",
        "shorten the DAG name",
    ),
    ("pool name", task(0, pool="ETL_pool"), "spec.tasks[0].pool", "is not a valid name"),
    ("metadata missing", drop("metadata"), "metadata", "required field is missing; add `metadata`"),
    # schedule and time
    (
        "bad cron",
        spec(schedule="0 25 * * *"),
        "spec.schedule",
        "invalid cron expression '0 25 * * *'; use a 5-field cron expression",
    ),
    (
        "cron with seconds",
        spec(schedule="0 0 * * * 0"),
        "spec.schedule",
        "has 6 fields, expected 5",
    ),
    (
        "unknown preset",
        spec(schedule="@every"),
        "spec.schedule",
        "one of @once, @hourly, @daily, @weekly, @monthly, @yearly",
    ),
    ("schedule not text", spec(schedule=5), "spec.schedule", "must be a string"),
    (
        "cron that never fires",
        spec(schedule="0 0 30 2 *"),
        "spec.schedule",
        "cron expression '0 0 30 2 *' never fires: no month in it has that day",
    ),
    (
        "cron whose months all lack the day",
        spec(schedule="0 0 31 4,6,9,11 *"),
        "spec.schedule",
        "never fires",
    ),
    (
        "unknown timezone",
        spec(timezone="Mars/Olympus"),
        "spec.timezone",
        "unknown time zone 'Mars/Olympus'; use an IANA name",
    ),
    (
        "start after end",
        spec(endDate="2026-11-01T00:00:00Z"),
        "spec.endDate",
        "is before startDate",
    ),
    ("schedule without start", drop("spec", "startDate"), "spec.startDate", "add `startDate`"),
    (
        "start not a date",
        spec(startDate="soon"),
        "spec.startDate",
        "must be a date or date-time like 2026-12-01",
    ),
    # trigger rules and enums
    (
        "unknown trigger rule",
        task(1, triggerRule="all_sucess"),
        "spec.tasks[1].triggerRule",
        "unknown value 'all_sucess'; use one of 'all_success'",
    ),
    (
        "trigger rule list",
        task(1, triggerRule="x"),
        "spec.tasks[1].triggerRule",
        "'none_failed_min_one_success', 'none_skipped' or 'always'",
    ),
    (
        "unknown weight rule",
        task(0, weightRule="sideways"),
        "spec.tasks[0].weightRule",
        "'downstream', 'upstream' or 'absolute'",
    ),
    # durations and numbers
    (
        "unparsable duration",
        task(0, retryDelay="5 minutes"),
        "spec.tasks[0].retryDelay",
        "invalid duration '5 minutes'; use a duration like '30s'",
    ),
    (
        "negative duration",
        task(0, executionTimeout="-5m"),
        "spec.tasks[0].executionTimeout",
        "must not be negative",
    ),
    (
        "zero timeout",
        task(0, executionTimeout=0),
        "spec.tasks[0].executionTimeout",
        "must be longer than 0s",
    ),
    ("month duration", spec(dagrunTimeout="P1M"), "spec.dagrunTimeout", "use days instead"),
    (
        "negative retries",
        task(0, retries=-1),
        "spec.tasks[0].retries",
        "must be at least 0, got -1",
    ),
    ("fractional retries", task(0, retries=1.5), "spec.tasks[0].retries", "must be a whole number"),
    ("zero pool slots", task(0, poolSlots=0), "spec.tasks[0].poolSlots", "must be at least 1"),
    ("zero max active runs", spec(maxActiveRuns=0), "spec.maxActiveRuns", "must be at least 1"),
    ("zero max active tasks", spec(maxActiveTasks=0), "spec.maxActiveTasks", "must be at least 1"),
    (
        "exit code range",
        task(0, skipOnExitCode=256),
        "spec.tasks[0].skipOnExitCode[0]",
        "must be at most 255",
    ),
    ("catchup not bool", spec(catchup="sometimes"), "spec.catchup", "must be true or false"),
    # tasks and images
    ("no tasks", spec(tasks=[]), "spec.tasks", "a DAG needs at least one task"),
    (
        "tasks missing",
        drop("spec", "tasks"),
        "spec.tasks",
        "required field is missing; add `tasks`",
    ),
    (
        "task not a mapping",
        lambda d: d["spec"]["tasks"].append("d"),
        "spec.tasks[3]",
        "must be a mapping",
    ),
    (
        "task without name",
        lambda d: d["spec"]["tasks"].append({"image": "x"}),
        "spec.tasks[3].name",
        "add `name`",
    ),
    (
        "no image",
        drop("spec", "defaults"),
        "spec.tasks[1].image",
        "task 'b' has no image; set `image` on the task or in `spec.defaults`",
    ),
    ("empty image", task(0, image=" "), "spec.tasks[0].image", "must not be empty"),
    (
        "env value not text",
        task(0, env=[{"name": "N", "value": 3}]),
        "spec.tasks[0].env[0].value",
        "must be a string, got 3; quote it in YAML",
    ),
    (
        "env name with equals",
        task(0, env=[{"name": "A=B"}]),
        "spec.tasks[0].env[0].name",
        "put the value in `value`",
    ),
    (
        "resource kind",
        task(0, resources={"request": {"cpu": "1"}}),
        "spec.tasks[0].resources.request",
        "use 'requests' or 'limits'",
    ),
    ("args not text", task(0, args=["--count", 5]), "spec.tasks[0].args[1]", "quote it in YAML"),
    # envelope
    (
        "wrong apiVersion",
        top(apiVersion="sluice.io/v1"),
        "apiVersion",
        "must be 'sluice.io/v1alpha1', got 'sluice.io/v1'",
    ),
    ("wrong kind", top(kind="DagRun"), "kind", "must be 'DAG', got 'DagRun'"),
    ("spec not a mapping", top(spec=["a"]), "spec", "must be a mapping"),
    # unknown fields
    (
        "unknown task field",
        task(0, retrys=2),
        "spec.tasks[0].retrys",
        "unknown field 'retrys'; did you mean 'retries'",
    ),
    (
        "snake case typo",
        task(0, trigger_rul="all_done"),
        "spec.tasks[0].trigger_rul",
        "did you mean 'triggerRule'",
    ),
    ("unknown spec field", spec(shedule="@daily"), "spec.shedule", "did you mean 'schedule'"),
    ("unknown top field", top(specification={}), "specification", "unknown field 'specification'"),
    (
        "unknown env field",
        task(0, env=[{"name": "A", "vaule": "1"}]),
        "spec.tasks[0].env[0].vaule",
        "did you mean 'value'",
    ),
    # defaults
    (
        "unknown default",
        spec(defaults={"image": "x", "imagePullPolicy": "Always"}),
        "spec.defaults.imagePullPolicy",
        "unknown task field 'imagePullPolicy'",
    ),
    ("default typo", spec(defaults={"imgae": "x"}), "spec.defaults.imgae", "did you mean 'image'"),
    (
        "name default",
        spec(defaults={"image": "x", "name": "n"}),
        "spec.defaults.name",
        "`name` cannot have a default; set it on each task",
    ),
    (
        "dependsOn default",
        spec(defaults={"image": "x", "dependsOn": ["a"]}),
        "spec.defaults.dependsOn",
        "cannot have a default",
    ),
    (
        "bad default is blamed once",
        spec(defaults={"image": "x", "retries": -2}),
        "spec.defaults.retries",
        "must be at least 0, got -2",
    ),
    (
        "bad default duration",
        spec(defaults={"image": "x", "retryDelay": "soon"}),
        "spec.defaults.retryDelay",
        "invalid duration 'soon'",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [pytest.param(m, p, f, id=name) for name, m, p, f in REJECTIONS],
)
def test_rejection(mutate: Callable[[Doc], None], path: str, fragment: str) -> None:
    doc = valid()
    mutate(doc)
    issues = issues_of(doc)
    at_path = [issue.message for issue in issues if issue.path == path]
    assert at_path, f"no issue at {path}; got {issues}"
    assert any(fragment in message for message in at_path), at_path


def test_a_default_error_is_reported_once_not_per_task() -> None:
    doc = valid()
    doc["spec"]["defaults"]["retries"] = -1
    assert issues_of(doc) == [SpecIssue("spec.defaults.retries", "must be at least 0, got -1")]


def test_a_task_that_sets_the_field_itself_is_blamed_itself() -> None:
    doc = valid()
    doc["spec"]["defaults"]["retries"] = -1
    doc["spec"]["tasks"][0]["retries"] = -3
    paths = [issue.path for issue in issues_of(doc)]
    assert paths == ["spec.defaults.retries", "spec.tasks[0].retries"]


def test_all_issues_are_reported_together_in_path_order() -> None:
    doc = valid()
    doc["kind"] = "Dag"
    doc["spec"]["timezone"] = "Nowhere/Land"
    doc["spec"]["tasks"][0]["retries"] = -1
    doc["spec"]["tasks"][2]["dependsOn"] = ["zz"]  # a graph issue while other fields fail
    doc["spec"]["tasks"].append({"name": "d"})
    doc["spec"]["tasks"].extend({"name": f"t{i}", "image": ""} for i in range(8))
    issues = issues_of(doc)
    assert [issue.path for issue in issues] == [
        "kind",
        "spec.tasks[0].retries",
        "spec.tasks[2].dependsOn[0]",
        *(f"spec.tasks[{i}].image" for i in range(4, 12)),
        "spec.timezone",
    ]


def test_spec_error_carries_the_dag_name_and_a_readable_summary() -> None:
    doc = valid()
    doc["spec"]["tasks"][1]["dependsOn"] = ["z"]
    with pytest.raises(SpecError) as caught:
        parse_dag_manifest(doc)
    error = caught.value
    assert error.dag_name == "demo"
    assert str(error).splitlines() == [
        "DAG 'demo' is invalid (1 issue)",
        "  spec.tasks[1].dependsOn[0]: dependency 'z' not defined; tasks are: a, b, c",
    ]


@pytest.mark.parametrize("doc", [None, "text", 3, ["a"]])
def test_a_document_that_is_not_a_mapping(doc: object) -> None:
    (issue,) = issues_of(doc)
    assert issue.path == "<document>"
    assert "expected a DAG object (a mapping with apiVersion, kind, metadata and spec)" in (
        issue.message
    )


# --- multi-document YAML ---------------------------------------------------------

GOOD = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: NAME}
spec:
  defaults: {image: busybox:1.36}
  tasks: [{name: a}]
"""


def test_documents_are_parsed_in_order_and_empty_ones_skipped() -> None:
    text = (
        "---\n"
        + GOOD.replace("NAME", "one")
        + "---\n---\n# only a comment\n---\n"
        + GOOD.replace("NAME", "two")
    )
    results = load_dag_documents(text)
    assert [r.metadata.name for r in results if isinstance(r, DagManifest)] == ["one", "two"]
    assert len(results) == 2


def test_an_invalid_document_does_not_hide_the_others() -> None:
    text = GOOD.replace("NAME", "one") + "---\n" + GOOD.replace("NAME", "Two") + "---\n- 1\n"
    first, second, third = load_dag_documents(text)
    assert isinstance(first, DagManifest)
    assert isinstance(second, SpecError)
    assert second.dag_name == "Two"
    assert second.issues[0].path == "metadata.name"
    assert isinstance(third, SpecError)
    assert third.dag_name is None
    assert third.issues[0].path == "<document 3>"


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        (
            GOOD.replace("NAME", "a") + "---\nspec: [unclosed\n",
            "<document 2>",
            "invalid YAML at line 9",
        ),
        ("key: value\n  bad indent: x\n", "<document 1>", "invalid YAML at line 2"),
        (
            GOOD.replace("NAME", "a").replace("metadata:", "kind: DAG\nmetadata:"),
            "<document 1>",
            "key 'kind' appears twice; keep one",
        ),
        (
            GOOD.replace("NAME", "a") + "  startDate: 2026-02-30\n",
            "<document 1>",
            "invalid value: day is out of range for month",
        ),
    ],
)
def test_yaml_problems(text: str, path: str, fragment: str) -> None:
    results = load_dag_documents(text)
    error = results[-1]
    assert isinstance(error, SpecError)
    (issue,) = error.issues
    assert issue.path == path
    assert fragment in issue.message


def test_yaml_merge_keys_may_be_overridden() -> None:
    text = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: merged}
spec:
  tasks:
    - &base {name: a, image: busybox:1.36, retries: 1}
    - <<: *base
      name: b
      retries: 2
"""
    (result,) = load_dag_documents(text)
    assert isinstance(result, DagManifest)
    assert [t.retries for t in result.spec.tasks] == [1, 2]


def test_empty_text_has_no_documents() -> None:
    assert load_dag_documents("") == []
    assert load_dag_documents("---\n# nothing\n") == []
