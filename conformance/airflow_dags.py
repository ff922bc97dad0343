"""The Airflow DAG that means what a Sluice manifest says, generated as Python source.

Each task becomes a BashOperator running the same shell text, with the
`SLUICE_*` variables a Sluice task sees mapped from Airflow's templates, so a
command reads the same run context on both sides (a DAG's params too: its
`params`, and `SLUICE_PARAMS`/`SLUICE_PARAM_*` from Airflow's `params`). A DAG or task field is
written only when the manifest sets it, so where the two defaults differ the
generated DAG keeps Airflow's, and the definition check (`definitions`) shows
it. The DAG's timezone is its start date's zone, as Airflow takes it. What
Airflow has no place for (image, resources, podTemplate) is left out.

The sources are committed under `airflow_dags/` by `make conformance-refresh`;
`make conformance` checks they are still what this module writes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from conformance.cases import Case, instant
from conformance.definitions import pool_name, shell_text
from sluice.spec import params as run_params
from sluice.spec.models import DagSpec, TaskSpec, task_field_name

# The run context a Sluice task reads, as Airflow templates (the same text on both sides:
# `ts` is isoformat, as Sluice writes SLUICE_LOGICAL_DATE).
SLUICE_ENV = {
    "SLUICE_DAG": "{{ dag.dag_id }}",
    "SLUICE_TASK": "{{ task.task_id }}",
    "SLUICE_RUN_ID": "{{ run_id }}",
    "SLUICE_LOGICAL_DATE": "{{ logical_date | ts }}",
    "SLUICE_DATA_INTERVAL_START": "{{ data_interval_start | ts }}",
    "SLUICE_DATA_INTERVAL_END": "{{ data_interval_end | ts }}",
    "SLUICE_TRY_NUMBER": "{{ ti.try_number }}",
    "SLUICE_CONF": "{{ dag_run.conf | tojson }}",
}

HEADER = '''\
"""Generated from {path} by conformance/airflow_dags.py; do not edit.

{about}
"""

import datetime

import airflow
import pendulum

if airflow.__version__.startswith("2."):
    from airflow import DAG
    from airflow.operators.bash import BashOperator
else:
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG

SLUICE_ENV = {env}
'''

# Sluice's DagSpec field -> Airflow's DAG argument, for the fields written when set.
_DAG_FIELDS = {
    "catchup": "catchup",
    "max_active_runs": "max_active_runs",
    "max_active_tasks": "max_active_tasks",
    "dagrun_timeout": "dagrun_timeout",
}

# Sluice's TaskSpec field -> BashOperator's argument.
_TASK_FIELDS = {
    "retries": "retries",
    "retry_delay": "retry_delay",
    "retry_exponential_backoff": "retry_exponential_backoff",
    "max_retry_delay": "max_retry_delay",
    "execution_timeout": "execution_timeout",
    "trigger_rule": "trigger_rule",
    "pool": "pool",
    "pool_slots": "pool_slots",
    "priority_weight": "priority_weight",
    "weight_rule": "weight_rule",
    "depends_on_past": "depends_on_past",
    "wait_for_downstream": "wait_for_downstream",
    "skip_on_exit_code": "skip_on_exit_code",
}


def file_name(case: Case) -> str:
    return case.name.replace("-", "_") + ".py"


def source(case: Case) -> str:
    spec = case.manifest.spec
    defaults = _defaults(spec)
    env = dag_env(spec)
    lines = [
        HEADER.format(path=case.relative_path, about=case.about, env=_dict(env, 0)),
        "with DAG(",
        f"    {case.name!r},",
        *(f"    {name}={value}," for name, value in _dag_arguments(spec)),
    ]
    if defaults:
        lines.append("    default_args={")
        lines.extend(
            f"        {_TASK_FIELDS[field]!r}: {_argument(field, value)},"
            for field, value in defaults.items()
        )
        lines.append("    },")
    lines.extend([") as dag:", "    tasks = {"])
    for task in spec.tasks:
        lines.append(f"        {task.name!r}: BashOperator(")
        lines.extend(
            f"            {name}={value}," for name, value in _task_arguments(task, defaults, env)
        )
        lines.append("        ),")
    lines.append("    }")
    edges = [(up, task.name) for task in spec.tasks for up in task.depends_on]
    lines.extend(f"    tasks[{up!r}] >> tasks[{down!r}]" for up, down in edges)
    return "\n".join(lines) + "\n"


def dag_env(spec: DagSpec) -> dict[str, str]:
    """SLUICE_ENV, and for a DAG with params the SLUICE_PARAMS and SLUICE_PARAM_* a Sluice
    task reads, from Airflow's `params` (the DAG's under the run's conf, as Sluice's)."""
    if not spec.params:
        return SLUICE_ENV
    env = {**SLUICE_ENV, "SLUICE_PARAMS": "{{ params | tojson }}"}
    for name, value in spec.params.items():
        variable = run_params.env_name(name)
        if variable is not None and run_params.rendered(value) is not None:
            env[variable] = "{{ params." + name + " }}"
    return env


def _dag_arguments(spec: DagSpec) -> list[tuple[str, str]]:
    arguments = [("schedule", repr(spec.schedule))]
    if spec.start_date is not None:
        arguments.append(("start_date", _zoned(spec.start_date, spec.timezone)))
    if spec.end_date is not None:
        arguments.append(("end_date", _zoned(spec.end_date, spec.timezone)))
    arguments.extend(
        (argument, _literal(getattr(spec, field)))
        for field, argument in _DAG_FIELDS.items()
        if field in spec.model_fields_set
    )
    if spec.params:
        arguments.append(("params", repr(spec.params)))
    return arguments


def _defaults(spec: DagSpec) -> dict[str, Any]:
    """The manifest's `defaults` Airflow has a place for (TaskSpec field -> parsed value)."""
    if not spec.defaults:
        return {}
    parsed = TaskSpec.model_validate({**spec.defaults, "name": "defaults"})
    given = {task_field_name(key) for key in spec.defaults}
    return {field: getattr(parsed, field) for field in _TASK_FIELDS if field in given}


def _task_arguments(
    task: TaskSpec, defaults: dict[str, Any], dag_env: dict[str, str]
) -> list[tuple[str, str]]:
    env = {**dag_env, **{var.name: var.value for var in task.env}}
    arguments = [
        ("task_id", repr(task.name)),
        ("bash_command", repr(shell_text(task))),
        ("env", "SLUICE_ENV" if env == dag_env else _dict(env, 12)),
        ("append_env", "True"),
    ]
    for field, argument in _TASK_FIELDS.items():
        if field not in task.model_fields_set:
            continue
        value = getattr(task, field)
        if field in defaults and value == defaults[field]:
            continue  # default_args says it
        arguments.append((argument, _argument(field, value)))
    return arguments


def _argument(field: str, value: Any) -> str:
    return repr(pool_name(value)) if field == "pool" else _literal(value)


def _zoned(value: datetime, timezone: str) -> str:
    # The instant exactly (a wall time could be ambiguous), in the DAG's zone.
    return f"pendulum.parse({instant(value)!r}).in_timezone({timezone!r})"


def _literal(value: Any) -> str:
    if isinstance(value, timedelta):
        return f"datetime.timedelta(seconds={value.total_seconds()!r})"
    if hasattr(value, "value"):  # an enum: Airflow takes its string
        return repr(value.value)
    return repr(value)


def _dict(mapping: dict[str, str], indent: int) -> str:
    pad = " " * indent
    items = "".join(f"{pad}    {key!r}: {value!r},\n" for key, value in mapping.items())
    return "{\n" + items + pad + "}"
