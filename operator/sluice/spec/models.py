"""The DAG manifest as users write it, and the typed model every component reads.

A DAG object's spec is parsed here once, by the kopf handler or the CLI, and
stored as a DAG version; the scheduler and executors then trust it. So
everything that can be checked without I/O is checked here: types, names,
schedules, time zones, durations and the task graph. Attributes are
snake_case; the YAML is camelCase like any Kubernetes object.

Name budget: an executor names the Job for one try `{dag}-{task}-{hash8}-{try}`
and a Job name is a DNS-1123 label (at most 63 characters). We require
`len(dag) + len(task) <= MAX_JOB_NAME_STEM` (50), which leaves 13 characters
for the three dashes, an 8-character hash and a try number of up to 2 digits.
Names are never truncated: a truncated name could collide with another task's.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from sluice.spec import graph, podpolicy, podschema, schedules
from sluice.spec import params as run_params
from sluice.spec.errors import SpecIssue, did_you_mean, issues_error
from sluice.spec.fieldtypes import (
    DnsLabel,
    DnsSubdomain,
    Duration,
    ExitCodes,
    NonEmptyStr,
    PositiveDuration,
    Resources,
)

API_VERSION = "sluice.io/v1alpha1"
KIND = "DAG"
MAX_JOB_NAME_STEM = 50


class TriggerRule(StrEnum):
    """When a task may start, given the states of its direct upstream tasks (Airflow's rules)."""

    ALL_SUCCESS = "all_success"
    ALL_FAILED = "all_failed"
    ALL_DONE = "all_done"
    ALL_SKIPPED = "all_skipped"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    ONE_DONE = "one_done"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALWAYS = "always"


class WeightRule(StrEnum):
    """How a task's effective priority is derived; see graph.priority_weights."""

    DOWNSTREAM = "downstream"
    UPSTREAM = "upstream"
    ABSOLUTE = "absolute"


class EnvVar(BaseModel):
    """One environment variable for the task's container, as in a Kubernetes pod spec."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel
    )

    name: NonEmptyStr
    value: str = ""

    @field_validator("name")
    @classmethod
    def _no_equals(cls, value: str) -> str:
        if "=" in value:
            raise ValueError(f"{value!r} contains '='; put the value in `value`")
        return value


class TaskSpec(BaseModel):
    """One task: a container command plus the Airflow-style knobs for retries and scheduling."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel
    )

    name: DnsLabel
    image: NonEmptyStr | None = None
    command: list[str] = []
    args: list[str] = []
    env: list[EnvVar] = []
    resources: Resources = {}
    depends_on: list[str] = []
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    retries: int = Field(default=0, ge=0)
    retry_delay: Duration = timedelta(minutes=5)
    retry_exponential_backoff: bool = False
    max_retry_delay: PositiveDuration | None = None
    execution_timeout: PositiveDuration | None = None
    # Pools are Kubernetes objects, so a pool name follows the object-name rule.
    pool: DnsSubdomain = "default"
    pool_slots: int = Field(default=1, ge=1)
    priority_weight: int = 1
    weight_rule: WeightRule = WeightRule.DOWNSTREAM
    depends_on_past: bool = False
    wait_for_downstream: bool = False
    skip_on_exit_code: ExitCodes = [99]
    pod_template: dict[str, Any] | None = None

    @field_validator("pod_template")
    @classmethod
    def _pod_template_allowed(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A PodTemplateSpec (Kubernetes' schema) that keeps the pod restricted (podpolicy)."""
        if value is None:
            return None
        found = podschema.problems(value) + podpolicy.problems(value)
        if found:
            raise issues_error(SpecIssue(path, message) for path, message in found)
        return value


# YAML spelling (camelCase, or snake_case which populate_by_name also accepts) -> attribute.
_TASK_FIELDS = {
    spelling: field_name
    for field_name, field in TaskSpec.model_fields.items()
    for spelling in (field_name, field.alias or field_name)
}
NOT_DEFAULTABLE = ("name", "depends_on")


def task_field_name(spelling: str) -> str | None:
    """The TaskSpec attribute a YAML key sets (`retryDelay` -> `retry_delay`), or None."""
    return _TASK_FIELDS.get(spelling)


def _default_key(key: str) -> str:
    field_name = _TASK_FIELDS.get(key)
    if field_name in NOT_DEFAULTABLE:
        raise ValueError(f"`{key}` cannot have a default; set it on each task")
    if field_name is None:
        valid = [to_camel(name) for name in TaskSpec.model_fields if name not in NOT_DEFAULTABLE]
        raise ValueError(f"unknown task field {key!r}; {did_you_mean(key, valid)}")
    return key


def merge_defaults(defaults: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, Any]:
    """The task's own keys over the DAG's defaults; the task wins whichever spelling it uses."""
    present = {_TASK_FIELDS.get(key, key) for key in task}
    merged = dict(task)
    for key, value in defaults.items():
        field_name = _TASK_FIELDS.get(key)
        if field_name is None or field_name in NOT_DEFAULTABLE or field_name in present:
            continue  # bad keys are reported by the `defaults` field's own validation
        merged[to_camel(field_name)] = value
        present.add(field_name)
    return merged


@dataclass(frozen=True)
class _TaskIndex:
    """Lookups a DagSpec answers often: tasks by name, direct downstream tasks."""

    tasks: list[TaskSpec]
    by_name: dict[str, TaskSpec]
    downstream: dict[str, tuple[str, ...]]

    @classmethod
    def build(cls, tasks: list[TaskSpec]) -> "_TaskIndex":
        children: dict[str, list[str]] = {}
        for task in tasks:
            for parent in task.depends_on:
                children.setdefault(parent, []).append(task.name)
        return cls(
            tasks,
            {task.name: task for task in tasks},
            {parent: tuple(names) for parent, names in children.items()},
        )


class DagSpec(BaseModel):
    """A DAG's schedule, limits and tasks: the part of the manifest that is versioned.

    Stored as a DAG version (`spec_hash` tells versions apart) in the shape of
    `upgrades.SPEC_SCHEMA_VERSION`; a change to this model that changes that shape
    needs a new schema version and an upgrade step (see `upgrades`).
    """

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel
    )

    schedule: str | None = None
    timezone: str = "UTC"
    start_date: datetime | None = None
    end_date: datetime | None = None
    catchup: bool = False
    max_active_runs: int = Field(default=16, ge=1)
    max_active_tasks: int = Field(default=16, ge=1)
    dagrun_timeout: PositiveDuration | None = None
    defaults: dict[Annotated[str, AfterValidator(_default_key)], Any] = {}
    # Airflow's DAG params: name -> default (any JSON value); a run's conf overrides them.
    params: dict[str, Any] = {}
    tasks: list[TaskSpec] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _apply_defaults(cls, data: Any) -> Any:
        # Merged before the tasks are parsed, so a default is checked like any task field.
        if not isinstance(data, Mapping):
            return data
        defaults = data.get("defaults")
        tasks = data.get("tasks")
        if not isinstance(defaults, Mapping) or not defaults or not isinstance(tasks, list):
            return data
        merged = [merge_defaults(defaults, t) if isinstance(t, Mapping) else t for t in tasks]
        return {**data, "tasks": merged}

    @field_validator("schedule")
    @classmethod
    def _valid_schedule(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = schedules.schedule_problem(value)
        if problem:
            raise ValueError(problem)
        return value.strip()

    @field_validator("params")
    @classmethod
    def _valid_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        found = run_params.problems(value)
        if found:
            raise issues_error(SpecIssue(path, message) for path, message in found)
        return value

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, value: str) -> str:
        problem = schedules.timezone_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("start_date", "end_date")
    @classmethod
    def _in_dag_timezone(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        zone_name = info.data.get("timezone")
        if value is None or zone_name is None:
            return value  # a bad time zone is already reported on its own field
        zone = ZoneInfo(zone_name)
        return value.replace(tzinfo=zone) if value.tzinfo is None else value.astimezone(zone)

    @model_validator(mode="after")
    def _consistent(self) -> "DagSpec":
        issues = graph.dependency_issues([(t.name, t.depends_on) for t in self.tasks])
        issues.extend(
            missing_image(index, task.name)
            for index, task in enumerate(self.tasks)
            if task.image is None
        )
        if self.schedule is not None and self.start_date is None:
            issues.append(
                SpecIssue(
                    "startDate",
                    f"schedule {self.schedule!r} needs a start date; add `startDate` "
                    "(e.g. 2026-12-01T00:00:00Z), or set `schedule: null` for manual runs only",
                )
            )
        if self.start_date and self.end_date and self.start_date > self.end_date:
            issues.append(
                SpecIssue(
                    "endDate",
                    f"endDate {self.end_date.isoformat()} is before startDate "
                    f"{self.start_date.isoformat()}; move endDate later or remove it",
                )
            )
        if issues:
            raise issues_error(issues)
        return self

    @property
    def timezone_info(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def task(self, name: str) -> TaskSpec:
        try:
            return self._index().by_name[name]
        except KeyError:
            raise KeyError(f"no task {name!r} in this DAG") from None

    def upstream(self, name: str) -> tuple[str, ...]:
        """The tasks `name` lists in dependsOn (direct only)."""
        return tuple(self.task(name).depends_on)

    def downstream(self, name: str) -> tuple[str, ...]:
        """The tasks that list `name` in dependsOn (direct only), in declaration order."""
        self.task(name)
        return self._index().downstream.get(name, ())

    def _index(self) -> _TaskIndex:
        # Kept in __dict__ beside the fields, as functools.cached_property would (pydantic
        # leaves such keys out of ==, repr and dumps), but checked against the `tasks` list
        # because model_copy(update=...) copies __dict__ and must not answer from old tasks.
        index = self.__dict__.get("_task_index")
        if not isinstance(index, _TaskIndex) or index.tasks is not self.tasks:
            index = _TaskIndex.build(self.tasks)
            self.__dict__["_task_index"] = index
        return index


class ManifestSpec(DagSpec):
    """A DAG object's `spec`: the versioned DagSpec, and whether the DAG is paused.

    `paused` is not part of a version (it is left out of dumps, so out of the
    stored spec and its hash): it is the DAG's state. It applies when the DAG is
    created, and again whenever its value in the manifest changes; otherwise a
    pause or unpause made at runtime (`sluice dags pause`) stands (ADR 0011).
    """

    paused: bool = Field(default=False, exclude=True)


class ObjectMeta(BaseModel):
    """The Kubernetes metadata we read; the API server's own fields pass through untouched."""

    model_config = ConfigDict(
        extra="allow", populate_by_name=True, frozen=True, alias_generator=to_camel
    )

    name: DnsLabel
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class DagManifest(BaseModel):
    """A whole DAG object as applied with kubectl or read from a file."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel
    )

    api_version: Literal["sluice.io/v1alpha1"]
    kind: Literal["DAG"]
    metadata: ObjectMeta
    spec: ManifestSpec

    @model_validator(mode="before")
    @classmethod
    def _ignore_status(cls, data: Any) -> Any:
        # Objects read back from the cluster carry a status we wrote; it is not spec.
        if isinstance(data, dict) and "status" in data:
            return {key: value for key, value in data.items() if key != "status"}
        return data

    @model_validator(mode="after")
    def _names_fit_job_names(self) -> "DagManifest":
        issues = job_name_issues(self.metadata.name, [task.name for task in self.spec.tasks])
        if issues:
            raise issues_error(issues)
        return self


def missing_image(index: int, task_name: str | None) -> SpecIssue:
    """The issue for a task left without an image once defaults are applied (relative to spec)."""
    return SpecIssue(
        f"tasks[{index}].image",
        f"task {task_name or '?'!r} has no image; set `image` on the task or in `spec.defaults`",
    )


def job_name_issues(dag_name: str, task_names: Sequence[str | None]) -> list[SpecIssue]:
    """Names too long to make Job names (see MAX_JOB_NAME_STEM), with manifest paths."""
    if len(dag_name) + 1 > MAX_JOB_NAME_STEM:
        return [
            SpecIssue(
                "metadata.name",
                f"DAG name {dag_name!r} is {len(dag_name)} characters; DAG and task names "
                f"together must fit in {MAX_JOB_NAME_STEM} (they make up Job names): "
                "shorten the DAG name",
            )
        ]
    return [
        SpecIssue(
            f"spec.tasks[{index}].name",
            f"DAG name {dag_name!r} plus task name {task!r} is "
            f"{len(dag_name) + len(task)} characters; together they must fit in "
            f"{MAX_JOB_NAME_STEM} (they make up Job names): shorten the task or DAG name",
        )
        for index, task in enumerate(task_names)
        if task is not None and len(dag_name) + len(task) > MAX_JOB_NAME_STEM
    ]


def spec_hash(spec: DagSpec) -> str:
    """A fingerprint of the versioned spec (not `paused`); a different hash means a new
    DAG version."""
    canonical = json.dumps(
        spec.model_dump(mode="json", by_alias=True),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
