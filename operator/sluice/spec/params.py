"""A DAG's params: what the manifest may say, and what a task's environment makes of them.

Airflow hands templates `params`: the DAG's params, overridden key by key by the
run's conf, and the conf's other keys added (`process_params` with
`[core] dag_run_conf_overrides_params`, True by default, in 2.10 and 3.x alike).
Sluice has no template engine, so a task reads them from its environment:
`SLUICE_PARAMS`, the merged params as JSON (as `SLUICE_CONF` is the conf), and
`SLUICE_PARAM_<NAME>` for each param whose name can end a variable's name,
holding what `{{ params.name }}` renders on Airflow (Jinja's `str()` of the
value). A list or object has no such variable: Airflow would render its Python
repr, which Sluice cannot always reproduce (the database keeps an object's keys
in its own order), so it is read from `SLUICE_PARAMS`. The values are resolved
when a try is claimed, from the run's DAG version and conf, so nothing is stored
per run.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import date, time
from typing import Any

ALL_PARAMS = "SLUICE_PARAMS"
PARAM_PREFIX = "SLUICE_PARAM_"
MAX_PARAMS = 256
_SUFFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name(name: str) -> str | None:
    """`SLUICE_PARAM_<NAME>` for a param named like an identifier (ASCII), else None."""
    if not _SUFFIX.fullmatch(name):
        return None
    return PARAM_PREFIX + name.upper()


def effective(defaults: Mapping[str, Any], conf: Mapping[str, Any]) -> dict[str, Any]:
    """The params a run's tasks see: the DAG's defaults, then every key of the conf over them."""
    return {**defaults, **conf}


def rendered(value: object) -> str | None:
    """What Airflow's `{{ params.name }}` renders for a scalar (Jinja's `str()`: `True`,
    `None`, `1.5`); None for a list or an object."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return str(value)
    return None


def environment(defaults: Mapping[str, Any], conf: Mapping[str, Any]) -> dict[str, str]:
    """SLUICE_PARAMS and the SLUICE_PARAM_* variables for a run with this conf.

    Names that share a variable (`mode` and `MODE`) cannot both be the DAG's (the
    spec refuses them), but a conf key can meet a param so: the DAG's params claim
    their variables first, then the conf's other keys, each in name order, and a
    variable is set by its first claimant only (not at all if that one is a list or
    an object). Both values are in SLUICE_PARAMS whatever happens.
    """
    values = effective(defaults, conf)
    env = {ALL_PARAMS: json.dumps(values, sort_keys=True)}
    claimed: set[str] = set()
    for name in [*sorted(defaults), *sorted(key for key in conf if key not in defaults)]:
        variable = env_name(name)
        if variable is None or variable in claimed:
            continue
        claimed.add(variable)
        text = rendered(values[name])
        if text is not None:
            env[variable] = text
    return env


def problems(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path under `params`, message) for each thing a manifest's params may not say."""
    found: list[tuple[str, str]] = []
    if len(params) > MAX_PARAMS:
        found.append(
            ("", f"has {len(params)} params; at most {MAX_PARAMS}: pass the rest in one object")
        )
    owners: dict[str, str] = {}
    for name, value in params.items():
        if not name:
            found.append(("", "a param needs a name; remove the empty key"))
            continue
        found.extend(_json_problems(value, name))
        variable = env_name(name)
        if variable is None:
            continue
        if variable in owners:
            found.append(
                (
                    name,
                    f"params {owners[variable]!r} and {name!r} would both be ${variable} "
                    "in a task's environment; rename one",
                )
            )
        else:
            owners[variable] = name
    return found


def _json_problems(value: object, path: str) -> list[tuple[str, str]]:
    """Where a value is not JSON (a YAML date or time, .nan, a key that is not a string)."""
    if value is None or isinstance(value, str | bool | int):
        return []
    if isinstance(value, float):
        if math.isfinite(value):
            return []
        return [(path, f"{value!r} is not a JSON number; use a finite number or a string")]
    if isinstance(value, list):
        return [
            problem
            for index, item in enumerate(value)
            for problem in _json_problems(item, f"{path}[{index}]")
        ]
    if isinstance(value, Mapping):
        found: list[tuple[str, str]] = []
        for key, item in value.items():
            if not isinstance(key, str):
                found.append(
                    (path, f"key {key!r} is not a string; quote it (JSON keys are strings)")
                )
                continue
            found.extend(_json_problems(item, f"{path}.{key}"))
        return found
    return [(path, _not_json(value))]


def _not_json(value: object) -> str:
    if isinstance(value, date | time):
        text = value.isoformat()
        return (
            f"{text} is a {type(value).__name__}, not a JSON value: write it as a string "
            f"('{text}'; in YAML, quoted)"
        )
    return (
        f"a {type(value).__name__} is not a JSON value; use a string, a number, true/false, "
        "null, a list or a mapping"
    )
