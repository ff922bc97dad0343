"""The Sluice side: the same observations as `airflow_observer`, made by Sluice's own code.

- definition: the manifest as `sluice.spec` parsed it (`definitions.of_manifest`);
- scheduled: the runs the scheduler creates by `now`. The DAG row's next run is set
  as `db.dags.sync_dag` sets it (`CompiledDag.next_run(last, now)`, `last` being the
  case's `last-run` or None, then `db.dags.set_next_run`); then
  `scheduler.runs.due_runs` (phase 1's run creation, catchup's skip to the latest
  interval included) creates every run due at `now` on a transient DAG row, with no
  run limit; a request for a logical date already taken is dropped, as the unique
  key on `(dag, logical_date, run_type)` drops it;
- next: the DAG row's next run after that;
- manual: `CompiledDag.timetable.manual_run(instant)`, what `scheduler.triggers.trigger_run`
  gives a manual run.

No database is needed: these are the pure functions the scheduler calls inside its
transactions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from conformance import definitions
from conformance.cases import Case, instant
from sluice.db.dags import set_next_run
from sluice.db.models import Dag
from sluice.scheduler.runs import due_runs
from sluice.spec.compiled import CompiledDag
from sluice.spec.timetables import RunInfo

RUNS_AT_MOST = 5000
API = {
    "definition": "sluice.spec.validation.load_dag_documents (conformance.definitions)",
    "scheduled": (
        "db.dags.set_next_run(dag, CompiledDag.next_run(last_run, now)), then "
        "scheduler.runs.due_runs(dag, compiled, now, room)"
    ),
    "next": "Dag.next_logical_date, next_data_interval_*, next_run_after",
    "manual": "CompiledDag.timetable.manual_run(instant)",
}


def observe(case: Case) -> dict[str, Any]:
    compiled = CompiledDag(case.name, 0, case.manifest.spec)
    return {
        "definition": definitions.of_manifest(case.manifest),
        **schedule(compiled, case.now, case.last_run),
        "manual": [_manual(compiled, when) for when in case.manual_runs],
    }


def schedule(
    compiled: CompiledDag, now: datetime, last_run: tuple[datetime, datetime] | None = None
) -> dict[str, Any]:
    # A scheduled run's logical date is its interval's start (db.dags.latest_scheduled_run).
    last = RunInfo(last_run[0], *last_run, last_run[1]) if last_run else None
    dag = Dag(dag_id=compiled.dag_id)
    set_next_run(dag, compiled.next_run(last, now))
    requests = due_runs(dag, compiled, now, RUNS_AT_MOST + 1)
    if len(requests) > RUNS_AT_MOST:
        raise RuntimeError(f"{compiled.dag_id}: more than {RUNS_AT_MOST} runs; shorten the case")
    following = None
    if dag.next_logical_date is not None:
        following = {
            "logical_date": instant(dag.next_logical_date),
            "data_interval_start": instant(dag.next_data_interval_start),
            "data_interval_end": instant(dag.next_data_interval_end),
            "run_after": instant(dag.next_run_after),
        }
    created: dict[datetime, RunInfo] = {}
    for request in requests:
        created.setdefault(request.info.logical_date, request.info)
    return {"scheduled": [_run(info) for info in created.values()], "next": following}


def _run(info: RunInfo) -> dict[str, Any]:
    return {
        "logical_date": instant(info.logical_date),
        "data_interval_start": instant(info.data_interval_start),
        "data_interval_end": instant(info.data_interval_end),
        "run_after": instant(info.run_after),
    }


def _manual(compiled: CompiledDag, when: datetime) -> dict[str, Any]:
    return {"triggered_at": instant(when), **_run(compiled.timetable.manual_run(when))}
