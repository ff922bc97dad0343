"""A DAG in Python: its settings, its tasks, and the manifest it renders to.

The manifest is the contract: `manifest()` builds the same object a person
would write in YAML and passes it through `validation.parse_dag_manifest`, the
function `sluice dags validate` and the operator use, so the SDK has no rules
of its own to drift from the CRD. Mistakes are reported as early as they can
be, at the author's line: a DAG's settings when it is made, a task's fields
when it is added, and what needs the whole DAG (cycles, missing images) when
the manifest is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Unpack

from pydantic import ValidationError

from sluice.sdk import collecting
from sluice.sdk.edges import Edge, upstream_names
from sluice.sdk.errors import (
    AuthoringError,
    Location,
    Problem,
    caller_location,
    python_field,
    task_path,
)
from sluice.sdk.fields import (
    DurationLike,
    JsonValue,
    TaskFields,
    json_value,
    manifest_value,
    task_body,
    unknown_fields,
)
from sluice.sdk.nodes import Node, Task, TaskGroup
from sluice.spec import models
from sluice.spec.errors import SpecError, SpecIssue
from sluice.spec.models import API_VERSION, KIND, TaskSpec
from sluice.spec.validation import parse_dag_manifest, translate_errors

# Stands in for the tasks while a DAG's own settings are checked, before it has any.
_PLACEHOLDER_TASK = {"name": "t", "image": "placeholder"}


class DAG:
    """`DAG("etl", schedule="@daily", start_date=datetime(2026, 12, 1, tzinfo=UTC))`.

    Every setting is optional and left out of the manifest unless given, so the
    CRD's defaults apply as they do to a hand-written manifest.
    """

    def __init__(
        self,
        name: str,
        *,
        schedule: str | None = None,
        timezone: str | None = None,
        start_date: datetime | date | None = None,
        end_date: datetime | date | None = None,
        catchup: bool | None = None,
        max_active_runs: int | None = None,
        max_active_tasks: int | None = None,
        dagrun_timeout: DurationLike | None = None,
        defaults: TaskFields | None = None,
        params: Mapping[str, JsonValue] | None = None,
        paused: bool | None = None,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.defined_at: Location | None = caller_location()
        self.defaults: TaskFields = defaults or {}
        self.params: dict[str, Any] = json_value(params) if params is not None else {}
        given = {
            "schedule": schedule,
            "timezone": timezone,
            "startDate": start_date,
            "endDate": end_date,
            "catchup": catchup,
            "maxActiveRuns": max_active_runs,
            "maxActiveTasks": max_active_tasks,
            "dagrunTimeout": dagrun_timeout,
            "paused": paused,
        }
        self._settings = {key: manifest_value(v) for key, v in given.items() if v is not None}
        metadata = {"namespace": namespace, "labels": labels, "annotations": annotations}
        self._metadata = {key: manifest_value(v) for key, v in metadata.items() if v is not None}
        self._tasks: list[Task] = []
        self._groups: list[TaskGroup] = []
        self._edges: list[Edge] = []
        self._check_settings()
        collecting.dag_created(self)

    @property
    def tasks(self) -> list[Task]:
        """The tasks, in the order they were added (the manifest's order)."""
        return list(self._tasks)

    def task(self, name: str, **fields: Unpack[TaskFields]) -> Task:
        """Add a task; its own fields win over the DAG's defaults."""
        return self.add_task(name, fields, None)

    def group(self, name: str, **defaults: Unpack[TaskFields]) -> TaskGroup:
        """Add a task group: its tasks are named `{name}-{task}` and take `defaults`."""
        return self.add_group(name, defaults, None)

    def manifest(self) -> dict[str, Any]:
        """The DAG object as `kubectl apply` takes it, checked by the manifest's own models."""
        self._check_groups()
        upstream = upstream_names(self._tasks, self._edges)
        tasks = [self._task_manifest(task, upstream[task.name]) for task in self._tasks]
        spec = dict(self._settings)
        if self.defaults:
            spec["defaults"] = task_body(self.defaults)
        if self.params:
            spec["params"] = self.params
        raw = self._object({**spec, "tasks": tasks})
        try:
            parse_dag_manifest(raw)
        except SpecError as error:
            raise AuthoringError(self._problems(error.issues)) from None
        return raw

    # Used by tasks and groups (not part of the authoring surface).

    def add_task(self, name: str, fields: TaskFields, group: TaskGroup | None) -> Task:
        location = caller_location()
        self._check_task(name, fields, location)
        task = Task(self, name, fields, group, location)
        self._tasks.append(task)
        return task

    def add_group(self, name: str, defaults: TaskFields, parent: TaskGroup | None) -> TaskGroup:
        location = caller_location()
        problems = [
            Problem(f"group {name!r}: {hint}", dag=self.name, field=key, location=location)
            for key, hint in unknown_fields(defaults)
        ]
        if any(group.name == name for group in self._groups):
            problems.append(
                Problem(
                    f"group {name!r} already exists in this DAG; rename one",
                    self.name,
                    location=location,
                )
            )
        if problems:
            raise AuthoringError(problems)
        group = TaskGroup(self, name, defaults, parent, location)
        self._groups.append(group)
        return group

    def add_edge(self, before: Node, after: Node) -> None:
        """Record that `after` runs after `before` (both of this DAG)."""
        for node in (before, after):
            if node.dag is not self:
                raise AuthoringError(
                    [
                        Problem(
                            f"{node!r} belongs to DAG {node.dag.name!r}; a dependency joins "
                            "tasks of one DAG",
                            self.name,
                            location=caller_location(),
                        )
                    ]
                )
        for outer, inner in ((before, after), (after, before)):
            if isinstance(outer, TaskGroup) and outer.contains(inner):
                raise AuthoringError(
                    [
                        Problem(
                            f"{inner!r} is inside {outer!r}; a dependency between a group and "
                            "its own task or group is a cycle: connect the tasks inside instead",
                            self.name,
                            location=caller_location(),
                        )
                    ]
                )
        self._edges.append((before, after))

    # Checks.

    def _check_settings(self) -> None:
        """The DAG's own settings and defaults, checked as a manifest with a stand-in task."""
        # The stand-in takes its image from the defaults when they have one, so it is checked.
        placeholder = {"name": "t"} if "image" in self.defaults else _PLACEHOLDER_TASK
        raw = self._object({**self._settings, "tasks": [placeholder]})
        if self.defaults:
            unknown = unknown_fields(self.defaults)
            if unknown:
                raise AuthoringError(
                    Problem(hint, self.name, field=f"defaults.{key}", location=self.defined_at)
                    for key, hint in unknown
                )
            raw["spec"]["defaults"] = task_body(self.defaults)
        if self.params:
            raw["spec"]["params"] = self.params
        try:
            parse_dag_manifest(raw)
        except SpecError as error:
            issues = [issue for issue in error.issues if task_path(issue.path) is None]
            if issues:
                raise AuthoringError(self._problems(issues)) from None

    def _check_task(self, name: str, fields: TaskFields, location: Location | None) -> None:
        def problem(message: str, field: str | None) -> Problem:
            return Problem(message, self.name, name, field=field, location=location)

        problems = [problem(hint, key) for key, hint in unknown_fields(fields)]
        if problems:
            raise AuthoringError(problems)
        for other in self._tasks:
            if other.name == name:
                where = f" (made at {other.defined_at})" if other.defined_at else ""
                message = f"task name {name!r} is already used in this DAG{where}; rename one"
                raise AuthoringError([problem(message, "name")])
        raw = models.merge_defaults(task_body(self.defaults), {"name": name, **task_body(fields)})
        try:
            TaskSpec.model_validate(raw)
        except ValidationError as exc:
            issues = translate_errors(exc.errors(), model=TaskSpec)
            raise AuthoringError(problem(i.message, python_field(i.path)) for i in issues) from None
        late = models.job_name_issues(self.name, [name])
        if raw.get("image") is None:
            late.append(models.missing_image(0, name))
        if late:
            raise AuthoringError(problem(i.message, i.path.rpartition(".")[2]) for i in late)

    def _check_groups(self) -> None:
        empty = [
            g for g in self._groups if not g.tasks() and any(g in edge for edge in self._edges)
        ]
        if empty:
            raise AuthoringError(
                Problem(
                    f"group {g.name!r} has no tasks, so its dependencies join nothing; "
                    "add tasks to it or remove its `>>`/`<<`",
                    self.name,
                    location=g.defined_at,
                )
                for g in empty
            )

    def _problems(self, issues: list[SpecIssue]) -> list[Problem]:
        """SpecIssues from the manifest's models, as the author's DAG, task and field."""
        problems: list[Problem] = []
        for issue in issues:
            found = task_path(issue.path)
            if found is not None and found[0] < len(self._tasks):
                task = self._tasks[found[0]]
                field = _task_field(found[1])
                problems.append(
                    Problem(
                        issue.message, self.name, task.name, field=field, location=task.defined_at
                    )
                )
                continue
            field = issue.path.removeprefix("spec.").removeprefix("metadata.")
            head, dot, rest = field.partition(".")
            field = python_field(head) + dot + (python_field(rest) if head == "defaults" else rest)
            problems.append(
                Problem(issue.message, self.name, field=field, location=self.defined_at)
            )
        return problems

    def _task_manifest(self, task: Task, upstream: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"name": task.name}
        if upstream:
            body["dependsOn"] = upstream
        body.update(task_body(task.fields))
        return body

    def _object(self, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name, **self._metadata},
            "spec": spec,
        }

    def __repr__(self) -> str:
        return f"<DAG {self.name!r}>"


def _task_field(path: str | None) -> str | None:
    """A field under a task in the author's words: dependsOn is what `>>` and `<<` wrote."""
    if path is None:
        return None
    if path.startswith("dependsOn"):
        return "dependencies (>> and <<)"
    return python_field(path)
