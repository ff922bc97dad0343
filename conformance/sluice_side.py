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

No database is needed for those: they are the pure functions the scheduler calls
inside its transactions. A case of an executed area (`Case.executes`) is observed
otherwise: its DAG runs to the end under `sluice standalone` (`executions.sluice_runs`,
all such cases at once, on a fresh database), and `runs` is how each run and task
ended (and, where the case asks, the order its tasks ran in); `observe_all` runs
them once per process.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from conformance import definitions, executions
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
    "runs": (
        "sluice standalone DIR --until-idle --output json (local executor, fresh database): "
        "runs[].state, runs[].tasks[].state and try_number"
    ),
    "order": (
        "the same JSON: runs[].tasks[].start and end (the last try's), as waves and the "
        "most runs and tasks at once (conformance.executions.order_of)"
    ),
    "triggers": (
        "db.dags.sync_dag, then scheduler.triggers.trigger_run(logical_date=DATE) before "
        "the standalone starts: created, or refused with its TriggerError"
    ),
    "action": (
        "sluice tasks clear DAG --run RUN [--task T] [-d] [-u] [--only-failed] --yes, or "
        "sluice tasks mark DAG STATE --run RUN --task T [-d] [-u] --yes, per run acted on, "
        "between two sluice standalone on the same database (the first until idle, or "
        "stopped after action-after seconds)"
    ),
}

# Executed cases' observations by (name, digest): `make conformance`'s report and each
# test ask for the same runs, which take seconds to make.
_EXECUTED: dict[tuple[str, str, str], dict[str, Any]] = {}


def observe_all(selected: Sequence[Case]) -> dict[str, dict[str, Any]]:
    """Every case's observations by name; the executed ones from one standalone run."""
    missing = [case for case in selected if case.executes and _key(case) not in _EXECUTED]
    for name, observed in executions.sluice_runs(missing).items():
        case = next(case for case in missing if case.name == name)
        _EXECUTED[_key(case)] = {"definition": definitions.of_manifest(case.manifest), **observed}
    return {
        case.name: _EXECUTED[_key(case)] if case.executes else observe(case) for case in selected
    }


def _key(case: Case) -> tuple[str, str, str]:
    # The file too: a case's converted manifest (`converted`) runs apart from the case's own.
    return case.name, case.digest, str(case.path)


def observe(case: Case) -> dict[str, Any]:
    """A schedule case's observations (in-process, at its `now`)."""
    if case.now is None:
        raise ValueError(f"{case.name} executes its tasks: use observe_all")
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
