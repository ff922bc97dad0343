"""`dependsOnPast` and `waitForDownstream`: a task waits for its own previous run.

Airflow's semantics: the same task in the previous run (by logical date) must
have succeeded or been skipped; with `waitForDownstream`, so must that
instance's direct downstream tasks. A task with no previous instance (the
first run, or a task added since) may run.

A task held back waits with `needs_eval` cleared, so its run is not "busy" every
tick. What it waits on settling wakes it: `wake_next_runs`, in a transaction of
its own after the one that settled it, locking the waiting runs first (the lock
order). The counter reconciliation's pass (one starts every minute, a step per
tick) flags every waiting instance too, for anything that settled another way
(a run timeout, a hand edit).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.prepared import Prepared
from sluice.scheduler.transitions import lock_runs
from sluice.spec.states import TaskState

# What the next run's instance waits for.
OK = (TaskState.SUCCESS, TaskState.SKIPPED)
_OK = ", ".join(f"'{state.value}'" for state in OK)  # as SQL literals


def has_waiters(specs: SpecCache, session: Session, version_id: int) -> bool:
    """Whether this DAG version has tasks that wait on their past, so what settles in
    one of its runs may wake the next run. A spec that cannot be read says yes: a
    wake for nothing is harmless."""
    try:
        return specs.get(session, version_id).has_past_dependencies
    except Exception:
        return True


# Of these instances, the ones whose past lets them run, in one statement: the same task's
# instance in the previous run by logical date (none: allowed) has succeeded or been
# skipped, and, with waitForDownstream, so have that instance's direct downstream tasks.
_ALLOWED = Prepared(
    f"""
    SELECT me.id
    FROM task_instance me
    LEFT JOIN LATERAL (
        SELECT p.state, p.dag_run_id, p.downstream_task_ids
        FROM task_instance p
        WHERE p.dag_id = me.dag_id AND p.task_id = me.task_id
          AND p.logical_date < me.logical_date
        ORDER BY p.logical_date DESC
        LIMIT 1
    ) prev ON true
    WHERE me.id = ANY(:ids)
      AND (prev.state IS NULL
           OR (prev.state IN ({_OK})
               AND (NOT me.wait_for_downstream
                    OR NOT EXISTS (
                        SELECT FROM task_instance c
                        WHERE c.dag_run_id = prev.dag_run_id
                          AND c.task_id = ANY(prev.downstream_task_ids)
                          AND c.state NOT IN ({_OK})))))
    """
)


def allowed_by_past(session: Session, ti_ids: Sequence[int]) -> set[int]:
    """The instances among `ti_ids` (dependsOnPast ones) whose previous run lets them run."""
    if not ti_ids:
        return set()
    return set(_ALLOWED(session, {"ids": list(ti_ids)}).scalars())


# The waiting instances of the next run (by logical date) of each of these runs.
_NEXT_WAITING = text(
    """
    SELECT nx.id, nx.dag_run_id
    FROM dag_run r
    CROSS JOIN LATERAL (
        SELECT n.id FROM dag_run n
        WHERE n.dag_id = r.dag_id AND n.logical_date > r.logical_date
        ORDER BY n.logical_date
        LIMIT 1
    ) next_run
    JOIN task_instance nx ON nx.dag_run_id = next_run.id
    WHERE r.id = ANY(:runs) AND nx.depends_on_past AND nx.state = 'none' AND NOT nx.needs_eval
    """
)

_FLAG = text(
    "UPDATE task_instance SET needs_eval = true"
    " WHERE id = ANY(:ids) AND state = 'none' AND NOT needs_eval"
)


def wake_next_runs(session: Session, run_ids: Sequence[int]) -> int:
    """Flag the waiting dependsOnPast instances of the run after each of these (where
    something settled as success or skipped); those runs are locked first. Returns how
    many were flagged; the caller commits."""
    waiting = session.execute(_NEXT_WAITING, {"runs": sorted(set(run_ids))}).all()
    if not waiting:
        return 0
    lock_runs(session, [row.dag_run_id for row in waiting])
    flagged = session.execute(_FLAG, {"ids": [row.id for row in waiting]})
    return int(flagged.rowcount)  # type: ignore[attr-defined]
