"""Airflow's params as Sluice's: the DAG's `spec.params`, and what `{{ params.x }}` becomes.

A DAG's params (`params=`, with `default_args["params"]` over them, as Airflow
merges them) become `spec.params` where their value is JSON; a `Param`'s
default is taken, and what else it says (its type, enum, description) is not
carried over, with a note: Sluice checks no run's conf against a schema. In a
task, `{{ params.x }}` becomes `$SLUICE_PARAM_X`, which a run's conf overrides
as on Airflow, where that variable holds the task's value: a DAG param the
task does not set to something else itself, whose default is a scalar and
whose name is an identifier. Otherwise the value is written in, as it is
rendered by Airflow for a run without conf, with a note saying why a run's
conf cannot change it there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, time
from typing import Any

from sluice.convert.values import ParamValue, Unknown
from sluice.spec import params as run_params

Finding = tuple[str, str]  # ("gap" or "note", message): the DAG converter places it


@dataclass
class DagParams:
    """The DAG's params: `spec` for the manifest, `values` as templates read them (Airflow's
    Python values, a Param's default; None: not read statically)."""

    spec: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] | None = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class TemplateParams:
    """What `{{ params.x }}` can become in one task's template.

    `variables`: name -> the SLUICE_PARAM_* variable that holds the task's value at run
    time; `values`: the values known statically (None: none are), written in for the
    other names, `why_static` saying why.
    """

    values: Mapping[str, Any] | None
    variables: Mapping[str, str] = field(default_factory=dict)
    why_static: Mapping[str, str] = field(default_factory=dict)
    # Why $SLUICE_PARAMS is not the task's `params` (None: it is).
    why_not_all: str | None = None

    def without_variables(self, why: str) -> TemplateParams:
        """The same params where no variable can be read (a pod's env, an image name)."""
        names = self.values or {}
        reasons = {name: self.why_static.get(name, why) for name in names}
        return TemplateParams(self.values, {}, reasons, why)


def dag_params(given: Any, from_default_args: Any) -> DagParams:
    """`params=` and `default_args["params"]` (None: not given) as the DAG's params."""
    result = DagParams()
    sources = [("params", given), ("default_args['params']", from_default_args)]
    merged: dict[str, Any] = {}
    for argument, source in sources:
        if source is None:
            continue
        if isinstance(source, Unknown) or not isinstance(source, Mapping):
            why = source.why if isinstance(source, Unknown) else f"{type(source).__name__}"
            result.findings.append(("gap", f"{argument} is not a dict read statically: {why}"))
            result.values = None
            continue
        merged.update(source)
    for name, raw in merged.items():
        value, keywords = (raw.default, raw.keywords) if isinstance(raw, ParamValue) else (raw, ())
        if result.values is not None:
            result.values[name] = value
        if not isinstance(name, str):
            result.findings.append(("gap", f"param {name!r}: its name is not a string"))
            continue
        if keywords:
            verb = "is" if len(keywords) == 1 else "are"
            result.findings.append(
                (
                    "note",
                    f"params[{name!r}]: the Param's {', '.join(keywords)} {verb} not carried "
                    f"over: Sluice keeps its default ({value!r}) and checks no run's conf "
                    "against a schema",
                )
            )
        try:
            result.spec[name] = to_json(value)
        except ValueError as error:
            result.findings.append(("gap", f"params[{name!r}]: {error}"))
    return result


def for_task(dag: DagParams, task_params: Any) -> TemplateParams:
    """What the templates of a task with these params of its own (None: none) can use."""
    if dag.values is None:
        return TemplateParams(None, why_not_all="the DAG's params are not read statically")
    own: dict[str, Any] = {}
    if task_params is not None:
        if isinstance(task_params, Unknown) or not isinstance(task_params, Mapping):
            return TemplateParams(None, why_not_all="the task's params are not read statically")
        own = {
            name: raw.default if isinstance(raw, ParamValue) else raw
            for name, raw in task_params.items()
        }
    values = {**dag.values, **own}
    variables: dict[str, str] = {}
    why_static: dict[str, str] = {}
    for name in values:
        if not isinstance(name, str):
            continue
        variable = run_params.env_name(name)
        if name in own and (name not in dag.values or own[name] != dag.values[name]):
            why_static[name] = "the task's own params set it; Sluice's params are the DAG's"
        elif name not in dag.spec:
            why_static[name] = "it is not one of the DAG's params"
        elif run_params.rendered(dag.spec[name]) is None:
            why_static[name] = "a list or mapping is only in $SLUICE_PARAMS"
        elif variable is None:
            why_static[name] = "its name makes no variable name; it is only in $SLUICE_PARAMS"
        else:
            variables[name] = variable
    differ = any(name in own and own[name] != dag.values.get(name) for name in own)
    why_not_all = "the task's own params are not in it" if differ else None
    return TemplateParams(values, variables, why_static, why_not_all)


def to_json(value: Any) -> Any:
    """`value` as JSON holds it (a tuple as a list), or ValueError saying why it cannot be."""
    if isinstance(value, Unknown):
        raise ValueError(f"not read statically: {value.why}")
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return value
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise ValueError("a dict whose keys are not all strings is not a JSON object")
        return {key: to_json(item) for key, item in value.items()}
    example = f" ({value.isoformat()!r})" if isinstance(value, date | time) else ""
    raise ValueError(
        f"a {type(value).__name__} is not a JSON value: Sluice's params are JSON; "
        f"write it as a string{example}"
    )
