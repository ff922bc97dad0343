"""What a DAG says, in one shape both sides are read into: the check that both mean the same.

The Sluice side reads a manifest's parsed spec (defaults applied); the Airflow
side (`airflow_observer.definition`) reads the DAG object Airflow's own DagBag
loaded from the generated file (Airflow's defaults applied). A difference here
means the generated DAG does not say what the manifest says, so the behaviour
observed on the two sides is not comparable; it is reported like any other.
Durations are seconds; instants are UTC (`cases.instant`); Sluice's `default`
pool is Airflow's `default_pool`.
"""

from __future__ import annotations

import shlex
from datetime import timedelta
from typing import Any

from conformance.cases import instant
from sluice.spec.models import DagManifest, TaskSpec

SHELLS = (["sh", "-c"], ["bash", "-c"])
AIRFLOW_DEFAULT_POOL = "default_pool"


def shell_text(task: TaskSpec) -> str:
    """The shell text a task runs: a BashOperator's `bash_command` means the same."""
    if task.command in SHELLS and len(task.args) == 1:
        return task.args[0]
    return shlex.join([*task.command, *task.args])


def pool_name(sluice_pool: str) -> str:
    return AIRFLOW_DEFAULT_POOL if sluice_pool == "default" else sluice_pool


def seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def of_manifest(manifest: DagManifest) -> dict[str, Any]:
    spec = manifest.spec
    params = {"params": spec.params} if spec.params else {}  # added later: only when given
    return {
        "dag_id": manifest.metadata.name,
        "schedule": spec.schedule,
        "timezone": spec.timezone,
        "start_date": instant(spec.start_date),
        "end_date": instant(spec.end_date),
        "catchup": spec.catchup,
        "max_active_runs": spec.max_active_runs,
        "max_active_tasks": spec.max_active_tasks,
        "dagrun_timeout": seconds(spec.dagrun_timeout),
        **params,
        "tasks": {task.name: _task(task) for task in spec.tasks},
    }


def _task(task: TaskSpec) -> dict[str, Any]:
    return {
        "command": shell_text(task),
        "upstream": sorted(task.depends_on),
        "trigger_rule": task.trigger_rule.value,
        "retries": task.retries,
        "retry_delay": seconds(task.retry_delay),
        "retry_exponential_backoff": task.retry_exponential_backoff,
        "max_retry_delay": seconds(task.max_retry_delay),
        "execution_timeout": seconds(task.execution_timeout),
        "pool": pool_name(task.pool),
        "pool_slots": task.pool_slots,
        "priority_weight": task.priority_weight,
        "weight_rule": task.weight_rule.value,
        # waitForDownstream implies dependsOnPast, as in Airflow (spec.compiled's "past").
        "depends_on_past": task.depends_on_past or task.wait_for_downstream,
        "wait_for_downstream": task.wait_for_downstream,
        "skip_on_exit_code": sorted(task.skip_on_exit_code),
    }
