"""Runs inside Airflow's own venv: loads each generated DAG and lets Airflow decide its runs.

`python airflow_observer.py JOB.json OUT.json`, with Airflow importable; it
imports nothing from Sluice (Sluice is not installed there). For each case it
records, through Airflow's own code (each observation names the API):

- definition: the DAG as `airflow.models.dagbag.DagBag` loaded it from the file;
- scheduled: the runs the scheduler creates by `now`. `DagModel.calculate_dagrun_date_fields`
  (which calls `DAG.next_dagrun_info`, the timetable's `next_dagrun_info` under the
  DAG's start date, end date and catchup) sets the DAG's next run, first from the
  case's `last_run` interval or none (as `DAG.bulk_write_to_db` does when it parses
  the DAG, from its latest automated run), then after each
  created run (as `SchedulerJobRunner._create_dag_runs` does); a run is created while
  `next_dagrun_create_after <= now`, with `DAG.get_next_data_interval`'s interval;
- next: the DAG's next run after that (`DagModel.next_dagrun*` fields);
- manual: `timetable.infer_manual_data_interval(run_after=...)` for each trigger
  instant, which is what `airflow.api.common.trigger_dag` gives a manual run.

A case whose tasks run (no `now`) gets its definition only: `airflow_runs` runs it.

Airflow reads the clock (`utcnow`) only to skip to the latest interval when catchup
is off; it is set to the case's `now` by replacing `utcnow` in the modules that call
it. Run limits (max active runs) are not applied: no run executes here.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

RUNS_AT_MOST = 5000
API = {
    "definition": "DagBag(dag_folder=FILE).dags[DAG_ID] (airflow.models.dagbag in 2.x)",
    "scheduled": (
        "DagModel.calculate_dagrun_date_fields(dag, last_run or None), then while "
        "next_dagrun_create_after <= now: DAG.get_next_data_interval(model) and "
        "DagModel.calculate_dagrun_date_fields(dag, interval) (as "
        "SchedulerJobRunner._create_dag_runs)"
    ),
    "next": "DagModel.next_dagrun, next_dagrun_data_interval, next_dagrun_create_after",
    "manual": "dag.timetable.infer_manual_data_interval(run_after=instant)",
}
API_3 = {
    "definition": "DagBag(dag_folder=FILE).dags[DAG_ID] (airflow.dag_processing.dagbag)",
    "scheduled": (
        "serdag = DagSerialization.from_dict(DagSerialization.to_dict(dag)); "
        "DagModel.calculate_dagrun_date_fields(dag=serdag, reference_run=last_run or None), "
        "then while "
        "next_dagrun_create_after <= now: serdag.timetable.next_run_info_from_dag_model("
        "dag_model=model), a DagRun of it, and DagModel.calculate_dagrun_date_fields("
        "dag=serdag, reference_run=run) (as SchedulerJobRunner._create_dag_runs)"
    ),
    "next": API["next"],
    "manual": "serdag.timetable.infer_manual_data_interval(run_after=instant)",
}


def instant(value: datetime.datetime | None) -> str | None:
    if value is None:
        return None
    utc = value.astimezone(datetime.UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{utc.microsecond:06d}Z" if utc.microsecond else "Z")


def seconds(value: datetime.timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def set_clock(now: datetime.datetime) -> None:
    """Airflow's `utcnow`, where the timetables call it, answers `now`."""
    import pendulum
    from airflow.timetables import interval, trigger

    frozen = pendulum.instance(now)
    for module in (interval, trigger):
        if hasattr(module, "utcnow"):
            module.utcnow = lambda: frozen


def definition(dag: Any) -> dict[str, Any]:
    # Airflow 2 keeps the argument as schedule_interval, Airflow 3 as schedule.
    schedule = getattr(dag, "schedule_interval", getattr(dag, "schedule", None))
    if not isinstance(schedule, str | type(None)):
        schedule = dag.timetable.summary
    return {
        "dag_id": dag.dag_id,
        "schedule": schedule,
        "timezone": dag.timezone.name,
        "start_date": instant(dag.start_date),
        "end_date": instant(dag.end_date),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "max_active_tasks": dag.max_active_tasks,
        "dagrun_timeout": seconds(dag.dagrun_timeout),
        # Only when the DAG has params (as the Sluice side), so older records still compare.
        **({"params": dag.params.dump()} if dag.params else {}),
        "tasks": {task.task_id: _task(task) for task in dag.tasks},
    }


def _task(task: Any) -> dict[str, Any]:
    skip = task.skip_on_exit_code
    skip = sorted(skip) if isinstance(skip, list | tuple | set) else [skip]
    return {
        "command": task.bash_command,
        "upstream": sorted(task.upstream_task_ids),
        "trigger_rule": str(task.trigger_rule.value),
        "retries": task.retries,
        "retry_delay": seconds(task.retry_delay),
        "retry_exponential_backoff": bool(task.retry_exponential_backoff),
        "max_retry_delay": seconds(task.max_retry_delay),
        "execution_timeout": seconds(task.execution_timeout),
        "pool": task.pool,
        "pool_slots": task.pool_slots,
        "priority_weight": task.priority_weight,
        "weight_rule": _weight_rule(task.weight_rule),
        "depends_on_past": task.depends_on_past,
        "wait_for_downstream": task.wait_for_downstream,
        "skip_on_exit_code": skip,
    }


def _weight_rule(rule: Any) -> str:
    """The rule's name: Airflow 2.9+ holds a strategy object, whose class names it."""
    try:
        from airflow.task.priority_strategy import airflow_priority_weight_strategies_classes
    except ImportError:
        return str(getattr(rule, "value", rule))
    return str(airflow_priority_weight_strategies_classes.get(type(rule), rule))


def _run(logical_date: Any, interval: Any, run_after: Any) -> dict[str, Any]:
    return {
        "logical_date": instant(logical_date),
        "data_interval_start": instant(interval.start) if interval else None,
        "data_interval_end": instant(interval.end) if interval else None,
        "run_after": instant(run_after),
    }


def schedule(dag: Any, now: datetime.datetime, last_run: list[str]) -> dict[str, Any]:
    import pendulum
    from airflow.models.dag import DagModel
    from airflow.timetables.base import DataInterval

    model = DagModel(dag_id=dag.dag_id)
    last = DataInterval(*(pendulum.parse(when) for when in last_run)) if last_run else None
    model.calculate_dagrun_date_fields(dag, last)
    scheduled: list[dict[str, Any]] = []
    while _due(model, now, scheduled):
        interval = dag.get_next_data_interval(model)
        scheduled.append(_run(model.next_dagrun, interval, model.next_dagrun_create_after))
        model.calculate_dagrun_date_fields(dag, interval)
    return {"scheduled": scheduled, "next": _next(model)}


def schedule_3(serdag: Any, now: datetime.datetime, last_run: list[str]) -> dict[str, Any]:
    """Airflow 3: the scheduler holds a SerializedDAG and passes the run it just created."""
    import pendulum
    from airflow.models.dag import DagModel
    from airflow.timetables.base import DataInterval

    model = DagModel(dag_id=serdag.dag_id)
    last = None
    if last_run:
        start, end = (pendulum.parse(when) for when in last_run)
        last = _dag_run(serdag.dag_id, "last", start, DataInterval(start, end), end)
    model.calculate_dagrun_date_fields(dag=serdag, reference_run=last)
    scheduled: list[dict[str, Any]] = []
    while _due(model, now, scheduled):
        info = serdag.timetable.next_run_info_from_dag_model(dag_model=model)
        scheduled.append(_run(info.logical_date, info.data_interval, info.run_after))
        created = _dag_run(
            serdag.dag_id,
            str(len(scheduled)),
            info.logical_date,
            info.data_interval,
            info.run_after,
        )
        model.calculate_dagrun_date_fields(dag=serdag, reference_run=created)
    return {"scheduled": scheduled, "next": _next(model)}


def _dag_run(dag_id: str, number: str, logical_date: Any, interval: Any, run_after: Any) -> Any:
    """A scheduled DagRun, in memory only (no session)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.types import DagRunType

    return DagRun(
        dag_id=dag_id,
        run_id=f"scheduled__{number}",
        logical_date=logical_date,
        data_interval=interval,
        run_after=run_after,
        run_type=DagRunType.SCHEDULED,
    )


def _due(model: Any, now: datetime.datetime, scheduled: list[dict[str, Any]]) -> bool:
    """Whether the scheduler creates the DAG's next run now.

    Not when its logical date already has a run: the scheduler skips creating it and
    computes the next run from it again, so if that leads back to a run it has, the
    DAG makes no more runs (`_create_dag_runs`' existing_dagruns); the observation
    stops there, with that run as `next`.
    """
    after = model.next_dagrun_create_after
    if after is None or after > now:
        return False
    if instant(model.next_dagrun) in {run["logical_date"] for run in scheduled}:
        return False
    if len(scheduled) >= RUNS_AT_MOST:
        raise RuntimeError(f"{model.dag_id}: more than {RUNS_AT_MOST} runs; shorten the case")
    return True


def _next(model: Any) -> dict[str, Any] | None:
    if model.next_dagrun is None and model.next_dagrun_create_after is None:
        return None
    return _run(model.next_dagrun, model.next_dagrun_data_interval, model.next_dagrun_create_after)


def manual(dag: Any, instants: list[str]) -> list[dict[str, Any]]:
    import pendulum

    runs = []
    for text in instants:
        when = pendulum.parse(text)
        interval = dag.timetable.infer_manual_data_interval(run_after=when)
        runs.append({"triggered_at": instant(when), **_run(when, interval, when)})
    return runs


def observe(case: dict[str, Any]) -> dict[str, Any]:
    import airflow

    executed = case["now"] is None  # a case whose tasks run: `airflow_runs` observes that
    now = datetime.datetime.fromisoformat(case["now"]) if not executed else None
    if now is not None:
        set_clock(now)
    if airflow.__version__.startswith("2."):
        from airflow.models.dagbag import DagBag

        bag = DagBag(dag_folder=case["dag_file"], include_examples=False, safe_mode=False)
    else:
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=case["dag_file"], safe_mode=False)
    if bag.import_errors:
        raise RuntimeError(f"{case['name']}: Airflow could not load its DAG: {bag.import_errors}")
    dag = bag.dags.get(case["name"])  # not get_dag(): that asks the database about the DAG
    if dag is None:
        raise RuntimeError(f"{case['name']}: no DAG {case['name']!r} in {case['dag_file']}")
    if now is None:
        return {"definition": definition(dag)}
    if airflow.__version__.startswith("2."):
        return {
            "definition": definition(dag),
            **schedule(dag, now, case["last_run"]),
            "manual": manual(dag, case["manual_runs"]),
        }
    # Airflow 3 schedules from the serialized DAG (its timetables hold the scheduling code).
    from airflow.serialization.serialized_objects import DagSerialization

    serdag = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    return {
        "definition": definition(dag),
        **schedule_3(serdag, now, case["last_run"]),
        "manual": manual(serdag, case["manual_runs"]),
    }


def main(job_path: str, out_path: str) -> None:
    import airflow

    job = json.loads(Path(job_path).read_text())
    observations = {case["name"]: observe(case) for case in job["cases"]}
    result = {
        "airflow_version": airflow.__version__,
        "python": sys.version.split()[0],
        "api": API if airflow.__version__.startswith("2.") else API_3,
        "cases": observations,
    }
    Path(out_path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
