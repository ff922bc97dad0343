"""Runs inside Airflow's own venv: marks a task of some runs as the REST API's PATCH does.

`python airflow_mark.py JOB`, JOB being JSON: `{"dag_id", "task_id", "state",
"upstream", "downstream", "run_ids"}`, with the AIRFLOW_* environment of the
case's processes (its database). It imports nothing from Sluice. Per run, the
DAG as the API server reads it (from serialized_dag, not from the file), then
`set_task_instance_state(task_id=..., run_id=..., state=..., upstream=...,
downstream=..., commit=True)`, the call behind `PATCH
/dags/{dag}/dagRuns/{run}/taskInstances/{task}` in both versions (2.10.5's
`updateTaskInstancesState` too, with its upstream/downstream): it sets the
task (and its relatives when asked), then clears the failed and
upstream_failed tasks downstream of it. One session per run, committed as the
request's is. Prints what each call set.

Airflow 2.10.5: `DagBag(read_dags_from_db=True).get_dag(dag_id)`, the webserver's
DAG bag (a SerializedDAG, a subclass of DAG). Airflow 3.3.2: the SerializedDAG
`DBDagBag().get_latest_version_of_dag(dag_id)` gives, as the PATCH takes it
(`_patch_ti_validate_request`).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _dag(dag_id: str, session: Any, major: int) -> Any:
    if major < 3:
        from airflow.models.dagbag import DagBag

        return DagBag(read_dags_from_db=True, load_op_links=False).get_dag(dag_id, session=session)
    from airflow.models.dagbag import DBDagBag

    return DBDagBag().get_latest_version_of_dag(dag_id, session=session)


def main(job: dict[str, Any]) -> None:
    import airflow
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    major = int(airflow.__version__.split(".", 1)[0])
    for run_id in job["run_ids"]:
        with create_session() as session:
            dag = _dag(job["dag_id"], session, major)
            changed = dag.set_task_instance_state(
                task_id=job["task_id"],
                run_id=run_id,
                state=TaskInstanceState(job["state"]),
                upstream=job["upstream"],
                downstream=job["downstream"],
                commit=True,
                session=session,
            )
            print(run_id, sorted((ti.task_id, str(ti.state)) for ti in changed), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
