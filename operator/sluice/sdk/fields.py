"""A task's settings as Python keywords, and the manifest values they become.

`TaskFields` is the one typed list of what a task (or a DAG's or group's
defaults) may set; every key is a `TaskSpec` field in snake_case, and a test
holds the two together. Only the keys an author gives reach the manifest, so a
rendered task reads like a hand-written one: `retries=2` becomes `retries: 2`
and nothing else. Values become what YAML would have said: durations as
`30s`, enums as their strings, a Pool object as its name, `env` as a list of
name/value pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from typing import Any, Literal, TypeAlias, TypedDict

from pydantic.alias_generators import to_camel

from sluice.sdk.pools import Pool
from sluice.spec.durations import format_duration
from sluice.spec.errors import did_you_mean
from sluice.spec.models import NOT_DEFAULTABLE, TaskSpec, TriggerRule, WeightRule

# A duration as a timedelta, a number of seconds, or text like '30s', '1h30m' or 'PT5M'.
DurationLike = timedelta | int | float | str
TriggerRuleName = Literal[
    "all_success",
    "all_failed",
    "all_done",
    "all_skipped",
    "one_success",
    "one_failed",
    "one_done",
    "none_failed",
    "none_failed_min_one_success",
    "none_skipped",
    "always",
]
WeightRuleName = Literal["downstream", "upstream", "absolute"]
Quantity = str | int | float
# What a DAG's params may hold: what JSON says (the manifest stores them as JSON).
JsonValue: TypeAlias = (
    str | int | float | bool | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
)


class TaskFields(TypedDict, total=False):
    """What a task may set (all optional); the same keys make a DAG's or a group's defaults.

    The manifest's `name` and `dependsOn` are not here: a task's name is the
    first argument of `dag.task`, and its upstream tasks come from `>>` and `<<`.
    """

    image: str
    command: Sequence[str]
    args: Sequence[str]
    env: Mapping[str, str]
    resources: Mapping[Literal["requests", "limits"], Mapping[str, Quantity]]
    trigger_rule: TriggerRule | TriggerRuleName
    retries: int
    retry_delay: DurationLike
    retry_exponential_backoff: bool
    max_retry_delay: DurationLike | None
    execution_timeout: DurationLike | None
    pool: Pool | str
    pool_slots: int
    priority_weight: int
    weight_rule: WeightRule | WeightRuleName
    depends_on_past: bool
    wait_for_downstream: bool
    skip_on_exit_code: int | Sequence[int] | None
    pod_template: Mapping[str, Any]


SETTABLE = tuple(name for name in TaskSpec.model_fields if name not in NOT_DEFAULTABLE)


def unknown_fields(fields: Mapping[str, object]) -> list[tuple[str, str]]:
    """(key, hint) for every key that is not a task setting (a typo, or the manifest's
    camelCase spelling)."""
    return [
        (key, f"unknown task field {key!r}; {did_you_mean(key, SETTABLE)}")
        for key in fields
        if key not in SETTABLE
    ]


def task_body(fields: Mapping[str, object]) -> dict[str, Any]:
    """The manifest keys and values for task settings (keys already checked as known)."""
    body: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "env" and isinstance(value, Mapping):
            body["env"] = [{"name": name, "value": text} for name, text in value.items()]
        else:
            body[to_camel(key)] = manifest_value(value)
    return body


def manifest_value(value: object) -> Any:
    """A Python value as the manifest (YAML or JSON) writes it."""
    if isinstance(value, Pool):
        return value.name
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, datetime):
        return manifest_datetime(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): manifest_value(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [manifest_value(item) for item in value]
    return value


def manifest_datetime(value: datetime) -> str:
    """RFC 3339 as people write it (`2026-12-01T00:00:00Z`); a naive value stays naive, which
    the DAG reads in its own time zone."""
    if value.tzinfo is not None and value.utcoffset() == timedelta(0):
        value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat() + "Z"
    return value.isoformat()


def json_value(value: object) -> Any:
    """A param's value as the manifest writes it: mappings as dicts, sequences as lists.

    Nothing else is converted (a datetime stays one), so the manifest's own
    validation names a value JSON cannot hold, as it would in YAML."""
    if isinstance(value, Mapping):
        return {key: json_value(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [json_value(item) for item in value]
    return value
