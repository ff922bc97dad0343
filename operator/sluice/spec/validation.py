"""Turning YAML text or a raw object into a DagManifest, or into every reason it is not one.

Pydantic finds the problems; this module makes them readable for people who
write YAML: paths in the manifest's own spelling (`spec.tasks[2].retryDelay`),
messages that say what to write instead, errors that come from `spec.defaults`
reported once at the default rather than once per task, and graph problems
reported even when other fields are broken, so one pass shows everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from sluice.spec import graph, models
from sluice.spec.errors import ISSUES_ERROR_TYPE, SpecError, SpecIssue, did_you_mean
from sluice.spec.models import DagManifest

__all__ = [
    "SpecError",
    "SpecIssue",
    "load_dag_documents",
    "load_documents",
    "parse_dag_manifest",
    "translate_errors",
]

Loc = tuple[int | str, ...]
Parsed = TypeVar("Parsed")

_DATETIME_FORMS = "a date or date-time like 2026-12-01 or 2026-12-01T00:00:00Z"
_FIXED_MESSAGES = {
    "string_type": "must be a string, got {input}; quote it in YAML",
    "int_type": "must be a whole number, got {input}",
    "int_parsing": "must be a whole number, got {input}",
    "int_from_float": "must be a whole number, got {input}",
    "bool_type": "must be true or false, got {input}",
    "bool_parsing": "must be true or false, got {input}",
    "list_type": "must be a list (e.g. [a, b]), got {input}",
    "dict_type": "must be a mapping (key: value), got {input}",
    "model_type": "must be a mapping (key: value), got {input}",
    "model_attributes_type": "must be a mapping (key: value), got {input}",
    "datetime_type": f"must be {_DATETIME_FORMS}, got {{input}}",
    "datetime_parsing": f"must be {_DATETIME_FORMS}, got {{input}}",
    "datetime_from_date_parsing": f"must be {_DATETIME_FORMS}, got {{input}}",
    "greater_than_equal": "must be at least {ge}, got {input}",
    "less_than_equal": "must be at most {le}, got {input}",
    "enum": "unknown value {input}; use one of {expected}",
}


def parse_dag_manifest(doc: object) -> DagManifest:
    """Validate one parsed document; raise SpecError listing every issue found."""
    if not isinstance(doc, Mapping):
        raise SpecError(
            [
                SpecIssue(
                    "<document>",
                    "expected a DAG object (a mapping with apiVersion, kind, metadata and "
                    f"spec), got {_describe(doc)}",
                )
            ]
        )
    raw = _plain(doc)
    try:
        return DagManifest.model_validate(raw)
    except ValidationError as exc:
        issues = translate_errors(exc.errors(), raw) + _raw_structure_issues(raw)
        raise SpecError(_sorted_unique(issues), _raw_dag_name(raw)) from exc


def load_dag_documents(text: str) -> list[DagManifest | SpecError]:
    """Every non-empty document in a multi-document YAML text, parsed or explained.

    A YAML syntax error ends the stream (the parser cannot resynchronise); it is
    reported with path `<document N>` after the documents before it.
    """
    return load_documents(text, parse_dag_manifest)


def load_documents(text: str, parse: Callable[[object], Parsed]) -> list[Parsed | SpecError]:
    """`load_dag_documents` with another parser for each document (one that also takes
    other kinds, as `sluice dags validate` does with Pools); `parse` raises SpecError."""
    results: list[Parsed | SpecError] = []
    number = 0  # of the last document read; an error is in the one after it
    try:
        for number, doc in enumerate(yaml.load_all(text, Loader=_StrictLoader), start=1):
            if doc is None:
                continue
            try:
                results.append(parse(doc))
            except SpecError as error:
                results.append(_numbered(error, number))
    except yaml.YAMLError as exc:
        results.append(SpecError([SpecIssue(f"<document {number + 1}>", _yaml_message(exc))]))
    except ValueError as exc:
        # PyYAML builds dates itself and lets datetime's ValueError out (e.g. 2026-02-30).
        message = f"invalid value: {exc}"
        results.append(SpecError([SpecIssue(f"<document {number + 1}>", message)]))
    return results


def translate_errors(
    errors: Iterable[ErrorDetails],
    raw: object = None,
    *,
    model: type[BaseModel] = DagManifest,
) -> list[SpecIssue]:
    """Pydantic errors for a DagManifest as SpecIssues; `raw` lets defaults be blamed.

    `model` is the model that was validated (a stored spec is a DagSpec), for the
    hints about unknown fields.
    """
    issues: list[SpecIssue] = []
    for error in errors:
        loc: Loc = tuple(part for part in error["loc"] if part != "[key]")
        if error["type"] == ISSUES_ERROR_TYPE:
            prefix = _join(loc)
            for path, message in error.get("ctx", {}).get("issues", []):
                where = f"{prefix}.{path}" if prefix and path else prefix or path
                issues.append(SpecIssue(where, message))
            continue
        loc = _blame_defaults(loc, raw)
        issues.append(SpecIssue(_join(loc), _message(error, loc, model)))
    return issues


def _message(error: ErrorDetails, loc: Loc, root: type[BaseModel]) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    field = str(loc[-1]) if loc else "document"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind == "missing":
        return f"required field is missing; add `{field}`"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1], root)
        valid = [f.alias or name for name, f in model.model_fields.items()] if model else []
        hint = f"; {did_you_mean(field, valid)}" if valid else ""
        return f"unknown field {field!r}{hint}"
    if kind == "too_short" and loc[-2:] == ("spec", "tasks"):
        return "a DAG needs at least one task; add one under `spec.tasks`"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "literal_error":
        if error["loc"][-1:] == ("[key]",):
            return f"key {field!r} is not allowed; use {ctx.get('expected')}"
        return f"must be {ctx.get('expected')}, got {_describe(error['input'])}"
    template = _FIXED_MESSAGES.get(kind)
    if template is None:
        return str(error["msg"])
    return template.format(input=_describe(error["input"]), **ctx)


def _blame_defaults(loc: Loc, raw: object) -> Loc:
    """Move an error at `spec.tasks[i].x` to `spec.defaults.x` when the task took x from there."""
    if len(loc) < 4 or loc[:2] != ("spec", "tasks") or not isinstance(loc[2], int):
        return loc
    field = models.task_field_name(str(loc[3]))
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    if field is None or field in models.NOT_DEFAULTABLE or not isinstance(spec, Mapping):
        return loc
    tasks, defaults = spec.get("tasks"), spec.get("defaults")
    if not isinstance(tasks, list) or not isinstance(defaults, Mapping) or loc[2] >= len(tasks):
        return loc
    task = tasks[loc[2]]
    if isinstance(task, Mapping) and any(models.task_field_name(k) == field for k in task):
        return loc
    for key in defaults:
        if models.task_field_name(key) == field:
            return ("spec", "defaults", key, *loc[4:])
    return loc


def _raw_structure_issues(raw: Mapping[str, Any]) -> list[SpecIssue]:
    """The model's cross-field checks, run on raw data because a field error stopped the model.

    Messages come from the same functions the model uses, so when both report
    the same problem the duplicate is dropped.
    """
    spec = raw.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(tasks, list):
        return []
    defaults = spec.get("defaults")
    pairs: list[tuple[str | None, list[str | None]]] = []
    issues: list[SpecIssue] = []
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            pairs.append((None, []))
            continue
        merged = models.merge_defaults(defaults, task) if isinstance(defaults, dict) else task
        name = merged.get("name")
        name = name if isinstance(name, str) else None
        depends_on = merged.get("dependsOn", merged.get("depends_on"))
        entries = depends_on if isinstance(depends_on, list) else []
        pairs.append((name, [entry if isinstance(entry, str) else None for entry in entries]))
        if merged.get("image") is None:
            issues.append(models.missing_image(index, name))
    issues.extend(graph.dependency_issues(pairs))
    found = [SpecIssue(f"spec.{issue.path}", issue.message) for issue in issues]
    dag_name = _raw_dag_name(raw)
    if dag_name is not None:
        found.extend(models.job_name_issues(dag_name, [name for name, _ in pairs]))
    return found


def _model_at(loc: Loc, root: type[BaseModel]) -> type[BaseModel] | None:
    """The model class that validates the object at `loc` in a `root`."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        fields.update(model.model_fields)
        field = fields.get(part)
        model = _model_in(field.annotation) if field else None
    return model


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and get_origin(annotation) is None:
        return annotation if issubclass(annotation, BaseModel) else None
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _join(loc: Loc) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _sorted_unique(issues: Sequence[SpecIssue]) -> list[SpecIssue]:
    # Natural order of paths (tasks[2] before tasks[10]) so output reads top to bottom.
    def key(issue: SpecIssue) -> list[tuple[int, int | str]]:
        parts = issue.path.replace("[", ".[").split(".")
        return [(0, int(p[1:-1])) if p[1:-1].isdigit() else (1, p) for p in parts]

    return sorted(dict.fromkeys(issues), key=key)


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(doc: Mapping[Any, Any]) -> dict[Any, Any]:
    """A deep copy made of dicts and lists: kopf hands over mapping views, and the
    caller's object must never be changed by validation."""

    def copy(value: object) -> object:
        if isinstance(value, Mapping):
            return {key: copy(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [copy(item) for item in value]
        return value

    return {key: copy(value) for key, value in doc.items()}


def _raw_dag_name(raw: Mapping[str, Any]) -> str | None:
    metadata = raw.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


def _numbered(error: SpecError, number: int) -> SpecError:
    issues = [
        SpecIssue(f"<document {number}>", issue.message) if issue.path == "<document>" else issue
        for issue in error.issues
    ]
    return type(error)(issues, error.dag_name)  # a subclass (a Pool's error) stays one


def _yaml_message(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return f"invalid YAML: {exc}"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping instead of keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys merged in with `<<` may be overridden; that is the point
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key fails in the base class with its own message
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"key {key!r} appears twice; keep one",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)
