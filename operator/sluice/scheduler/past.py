"""`dependsOnPast` and `waitForDownstream`: a task waits for its own previous run.

Airflow's semantics: the same task in the previous run (by logical date) must
have succeeded or been skipped; with `waitForDownstream`, so must that
instance's direct downstream tasks. A task with no previous instance (the
first run, or a task added since) may run.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.db.models import TaskInstance
from sluice.spec.states import TaskState

_OK = (TaskState.SUCCESS, TaskState.SKIPPED)


def previous_allows(session: Session, ti_id: int) -> bool:
    me = session.execute(
        select(
            TaskInstance.dag_id,
            TaskInstance.task_id,
            TaskInstance.logical_date,
            TaskInstance.wait_for_downstream,
        ).where(TaskInstance.id == ti_id)
    ).one()
    previous = session.execute(
        select(TaskInstance.state, TaskInstance.dag_run_id, TaskInstance.downstream_task_ids)
        .where(
            TaskInstance.dag_id == me.dag_id,
            TaskInstance.task_id == me.task_id,
            TaskInstance.logical_date < me.logical_date,
        )
        .order_by(TaskInstance.logical_date.desc())
        .limit(1)
    ).first()
    if previous is None:
        return True
    if previous.state not in _OK:
        return False
    if not me.wait_for_downstream or not previous.downstream_task_ids:
        return True
    blocking = session.execute(
        select(TaskInstance.id)
        .where(
            TaskInstance.dag_run_id == previous.dag_run_id,
            TaskInstance.task_id.in_(previous.downstream_task_ids),
            TaskInstance.state.not_in(_OK),
        )
        .limit(1)
    ).first()
    return blocking is None
