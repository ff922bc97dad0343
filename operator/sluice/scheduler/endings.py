"""Runs that end before their tasks do, and the tries they cut short.

Airflow's rule for a run past its `dagrun_timeout`: the run fails and its
unfinished tasks are skipped. Sluice applies the same rule wherever a run must
end early (a timeout, a deleted DAG, a DAG version whose spec cannot be
loaded), with the reason on every task instance it skips. A try that was still
open (queued or running) ends in `task_try` the same way, so the history says
how every try ended; a running try's process is then stopped by fencing (its
replica's next heartbeat finds the try no longer running and kills it), and is
`stopping` until then, so a clear cannot start its next try beside it.

The caller holds the runs' locks (lock order: run rows, then task rows) and
commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy.orm import Session

from sluice.db.dags import StoredSpecError
from sluice.db.prepared import Prepared
from sluice.logs import first_line
from sluice.spec.states import TERMINAL_TASK_STATES, TaskState
from sluice.spec.validation import translate_errors

_UNFINISHED = [state.value for state in TaskState if state not in TERMINAL_TASK_STATES]
# A running try ended here is still a process until its replica's fence stops it: no
# next try (a clear's) starts before (`clearing`).
STOPPING = (
    "stopping_since = CASE WHEN t.state = 'running'"
    " THEN COALESCE(t.stopping_since, :now) ELSE t.stopping_since END"
)

# Each run fails; its unfinished instances are skipped with the run's reason and counted
# as done.
_END_RUNS = Prepared(
    f"""
    WITH v AS (
        SELECT * FROM unnest(CAST(:runs AS bigint[]), CAST(:reasons AS text[])) AS v(run, reason)
    ), skipped AS (
        UPDATE task_instance t SET state = 'skipped', end_date = :now, reason = v.reason,
            needs_eval = false, {STOPPING}
        FROM v
        WHERE t.dag_run_id = v.run AND t.state = ANY(:unfinished)
        RETURNING t.dag_run_id
    )
    UPDATE dag_run r SET state = 'failed', end_date = :now,
        tasks_done = r.tasks_done + (SELECT count(*) FROM skipped s WHERE s.dag_run_id = r.id)
    FROM v
    WHERE r.id = v.run AND r.state IN ('queued', 'running')
    """
)

# The open try of each instance just skipped ends as its instance did. A statement of its
# own: its snapshot is taken after the one above locked the instances, so it sees every
# try row written before (one the critical section was inserting meanwhile included).
_END_TRIES = Prepared(
    """
    UPDATE task_try tt SET state = t.state, end_date = :now, reason = t.reason
    FROM task_instance t
    WHERE t.dag_run_id = ANY(:runs) AND t.state = 'skipped' AND t.end_date = :now
      AND tt.task_instance_id = t.id AND tt.try_number = t.try_number
      AND tt.end_date IS NULL
    """
)


def end_runs(session: Session, reasons: Mapping[int, str], now: datetime) -> None:
    """Fail these runs (run id -> reason) and skip their unfinished tasks, with the reason."""
    if not reasons:
        return
    runs = list(reasons)
    _END_RUNS(
        session,
        {
            "runs": runs,
            "reasons": [reasons[run] for run in runs],
            "now": now,
            "unfinished": _UNFINISHED,
        },
    )
    _END_TRIES(session, {"runs": runs, "now": now})


def unloadable(version_id: int, exc: Exception) -> str:
    """The reason a run whose DAG version cannot be loaded ends: the spec's first problem
    with its field path (as `sluice dags validate` would print it)."""
    if isinstance(exc, ValidationError):
        issues = translate_errors(exc.errors())
        more = len(issues) - 1
        problem = f"spec.{issues[0]}" + (f", and {more} more" if more > 0 else "")
    elif isinstance(exc, StoredSpecError):
        # It names the DAG, the version and the spec's problem already.
        return f"{first_line(exc)}; this run cannot go on: trigger a new run once it is"
    else:
        problem = first_line(exc)
    return (
        f"the run's DAG version cannot be loaded (dag_version {version_id}: {problem}); "
        "the run cannot go on: apply a valid manifest and trigger a new run"
    )


def deleted_dag(dag_id: str) -> str:
    """The reason the runs of a deleted DAG end."""
    return (
        f"DAG {dag_id!r} was deleted (dag.is_active is false), so its runs end:"
        " apply the DAG again and trigger a new run"
    )


# Airflow's "mark run as": success makes every unfinished task a success; failed fails the
# running ones and skips the rest. The run ends in that state with every task counted done.
_MARK_RUN = Prepared(
    f"""
    WITH marked AS (
        UPDATE task_instance t SET
            state = CASE WHEN :target = 'success' THEN 'success'
                         WHEN t.state = 'running' THEN 'failed'
                         ELSE 'skipped' END,
            end_date = :now, reason = :reason, needs_eval = false, {STOPPING}
        WHERE t.dag_run_id = :run AND t.state = ANY(:unfinished)
        RETURNING t.id
    )
    UPDATE dag_run r SET state = :target, end_date = :now,
        tasks_done = r.tasks_done + (SELECT count(*) FROM marked)
    WHERE r.id = :run AND r.state IN ('queued', 'running')
    """
)

_MARK_TRIES = Prepared(
    """
    UPDATE task_try tt SET state = t.state, end_date = :now, reason = t.reason
    FROM task_instance t
    WHERE t.dag_run_id = :run AND t.end_date = :now AND t.reason = :reason
      AND tt.task_instance_id = t.id AND tt.try_number = t.try_number
      AND tt.end_date IS NULL
    """
)


def mark_run(session: Session, run_id: int, target: str, reason: str, now: datetime) -> None:
    """Mark an unfinished run `success` or `failed` as Airflow's "mark run as" does; the
    caller has locked the run row. Tries still running are stopped by the replicas that
    run them (their fence: the try is no longer the running one)."""
    if target not in ("success", "failed"):
        raise ValueError(f"a run can be marked success or failed, not {target!r}")
    values = {"run": run_id, "target": target, "reason": reason, "now": now}
    _MARK_RUN(session, {**values, "unfinished": _UNFINISHED})
    _MARK_TRIES(session, {"run": run_id, "now": now, "reason": reason})
