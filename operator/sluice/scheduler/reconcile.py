"""The safety net under event-driven readiness: recompute counters from scratch.

Periodically, every running run's task instances get their upstream counters
and the run its `tasks_done` recomputed from the actual upstream states. A pass
walks the running runs in id order, a few at a time (`reconcile_runs`, one
short transaction per step, at most `task_budget` task instances, runs locked
SKIP LOCKED before their task rows as everywhere), so no step holds many run
locks for long and every running run is reached, however many there are. A pass
covers the runs that existed when it began (ids up to the newest then): runs
created meanwhile wait for the next pass, so a pass ends even while runs keep
arriving faster than it walks. Each
row it had to fix is counted in the `counter_fixes` metric; that number should
stay at zero, and a non-zero value points at a bug in propagation.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from sluice.db.models import DagRun, SchedulerMetric
from sluice.spec.states import RunState

COUNTER_FIXES = "counter_fixes"

_FIX_COUNTERS = text(
    """
    WITH truth AS (
        SELECT d.id,
               COALESCE(
                   jsonb_object_agg(u.task_id, u.state) FILTER (
                       WHERE u.state IN ('success', 'failed', 'skipped', 'upstream_failed')),
                   '{}'::jsonb) AS states,
               count(*) FILTER (WHERE u.state = 'success') AS s,
               count(*) FILTER (WHERE u.state = 'failed') AS f,
               count(*) FILTER (WHERE u.state = 'skipped') AS k,
               count(*) FILTER (WHERE u.state = 'upstream_failed') AS uf
        FROM task_instance d
        JOIN task_instance u
          ON u.dag_run_id = d.dag_run_id AND u.task_id = ANY(d.upstream_task_ids)
        WHERE d.dag_run_id = ANY(CAST(:run_ids AS bigint[]))
        GROUP BY d.id
    )
    UPDATE task_instance t
       SET upstream_states = truth.states,
           n_success = truth.s, n_failed = truth.f,
           n_skipped = truth.k, n_upstream_failed = truth.uf,
           needs_eval = true
      FROM truth
     WHERE t.id = truth.id
       AND (t.n_success, t.n_failed, t.n_skipped, t.n_upstream_failed)
           IS DISTINCT FROM (truth.s, truth.f, truth.k, truth.uf)
    RETURNING t.id
    """
)

_RECHECK_PAST = text(
    """
    UPDATE task_instance SET needs_eval = true
    WHERE dag_run_id = ANY(CAST(:run_ids AS bigint[]))
      AND depends_on_past AND state = 'none' AND NOT needs_eval
    """
)

_FIX_PROGRESS = text(
    """
    WITH truth AS (
        SELECT dag_run_id AS id,
               count(*) FILTER (WHERE state IN ('success', 'failed', 'skipped', 'upstream_failed'))
                 AS done
        FROM task_instance
        WHERE dag_run_id = ANY(CAST(:run_ids AS bigint[]))
        GROUP BY dag_run_id
    )
    UPDATE dag_run r SET tasks_done = truth.done
      FROM truth
     WHERE r.id = truth.id AND r.tasks_done <> truth.done
    RETURNING r.id
    """
)


# Running runs read per step, to choose the ones that fit the budget.
_RUNS_READ = 200


@dataclass(frozen=True)
class Reconciled:
    fixed: int  # rows whose counters were wrong
    through: int | None  # the last run id this step reached; None: the pass is complete
    until: int  # the newest run id when the pass began: the pass ends there


def reconcile_runs(
    session: Session, after: int, task_budget: int, until: int | None = None
) -> Reconciled:
    """One step of a pass: the running runs with ids after `after` and up to `until`,
    in id order, up to `task_budget` task instances (at least one run); returns where
    the pass got to. `until` None: this step begins the pass and takes the newest run
    id now as its end."""
    if until is None:
        until = session.execute(select(func.max(DagRun.id))).scalar_one_or_none() or 0
    sizes = session.execute(
        select(DagRun.id, DagRun.tasks_total)
        .where(DagRun.state == RunState.RUNNING, DagRun.id > after, DagRun.id <= until)
        .order_by(DagRun.id)
        .limit(_RUNS_READ)
    ).all()
    if not sizes:
        return Reconciled(0, None, until)
    chosen: list[int] = []
    total = 0
    for run_id, tasks in sizes:
        if chosen and total + tasks > task_budget:
            break
        chosen.append(run_id)
        total += tasks
    run_ids = list(
        session.execute(
            select(DagRun.id)
            .where(DagRun.id.in_(chosen), DagRun.state == RunState.RUNNING)
            .order_by(DagRun.id)
            .with_for_update(skip_locked=True)  # a run busy elsewhere waits for the next pass
        ).scalars()
    )
    fixed = _reconcile(session, run_ids)
    return Reconciled(fixed, chosen[-1], until)


def reconcile_counters(session: Session) -> int:
    """A whole pass in this transaction (tests, tools); returns the rows fixed."""
    fixed, after, until = 0, 0, None
    while True:
        step = reconcile_runs(session, after, task_budget=10_000, until=until)
        fixed += step.fixed
        if step.through is None:
            return fixed
        after, until = step.through, step.until


def _reconcile(session: Session, run_ids: list[int]) -> int:
    if not run_ids:
        return 0
    fixed = len(session.execute(_FIX_COUNTERS, {"run_ids": run_ids}).all())
    fixed += len(session.execute(_FIX_PROGRESS, {"run_ids": run_ids}).all())
    # Not a fix: dependsOnPast waiters are looked at again, whatever settled their past.
    session.execute(_RECHECK_PAST, {"run_ids": run_ids})
    if fixed:
        add_metric(session, COUNTER_FIXES, fixed)
    return fixed


def add_metric(session: Session, name: str, amount: int) -> None:
    stmt = insert(SchedulerMetric).values(name=name, value=amount)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[SchedulerMetric.name],
            set_={"value": SchedulerMetric.value + stmt.excluded.value},
        )
    )


def read_metric(session: Session, name: str) -> int:
    value = session.execute(
        select(SchedulerMetric.value).where(SchedulerMetric.name == name)
    ).scalar_one_or_none()
    return int(value or 0)
