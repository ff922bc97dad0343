"""Clearing and marking the task instances of one run, as Airflow's "Clear" and "Mark" do.

Clear (Airflow 2.10+ `clear_task_instances`): each chosen instance goes back to
`none`, keeps its try number (the next try counts on from it), and gets its
retries again (`max_tries = try_number + retries`); a queued try ends in
`task_try` as `failed` with the reason (its dispatch then finds it gone). A
running try is Airflow's RESTARTING: it stays `running`, holding its pool slot,
with `stopping_since` set; its heartbeats are refused (its pod stops itself)
and its replica's fence kills it; once it has ended, however, its instance goes
back to `none` (`results`), so the next try never overlaps it. A run that had
ended goes back to `queued`, so it starts again where `maxActiveRuns` leaves
room; a queued or running run carries on. The choice: the named tasks (every
task without names), with everything downstream and/or upstream of them when
asked, all states or, with `only_failed`, `failed` and `upstream_failed` only.

Mark (Airflow's `set_task_instance_state`): each chosen instance not in the
state already takes it, with its open try; then the failed and
upstream_failed tasks downstream of the named tasks (not the named tasks
themselves) are cleared, so a run blocked by a failure resumes. The run's own
state is left to the scheduler, as in Airflow: a running run ends at its next
examination when every task has; an ended run stays as it ended unless the
clear above reopened it. A running try marked takes the state at once, as in
Airflow, while its process runs on until its replica's fence stops it; it is
`stopping` meanwhile (as are tries a run's mark or timeout ended: `endings`), and
a clear that comes before the stop puts the instance back to `none` without a
next try until it has stopped (`examine` holds it; `results` or, its replica
dead, `housekeeping.release_stopped` lets it go): tries never overlap.

Both are one transaction over the run: its row is locked first, then its
instances (the lock order every replica keeps), the downstream counters move
for every instance that left or entered a terminal state, and the run's
`tasks_done` follows, so a replica's next tick sees a consistent run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.models import Dag, DagRun, TaskInstance, TaskTry
from sluice.scheduler.transitions import Settled, lock_runs, propagate
from sluice.spec import graph
from sluice.spec.compiled import CompiledDag
from sluice.spec.states import (
    OCCUPYING_TASK_STATES,
    TERMINAL_RUN_STATES,
    TERMINAL_TASK_STATES,
    RunState,
    TaskState,
)

FAILED_STATES = frozenset({TaskState.FAILED, TaskState.UPSTREAM_FAILED})
MARKABLE = (TaskState.SUCCESS, TaskState.FAILED)


# An instance back to `none`, to be decided again, nothing of its last try left on it
# but its number (its `task_try` row keeps the rest). `results` uses it too, for a try a
# clear asked to stop once it has ended.
_DECIDE_AGAIN = """
    state = 'none', needs_eval = true, next_retry_at = NULL, queued_at = NULL,
    start_date = NULL, end_date = NULL, queued_by_job_id = NULL, exit_code = NULL,
    reason = NULL, evidence = NULL
"""
_PROCESS = ("stopping_since", "last_heartbeat_at", "running_by_job_id", "external_id")
RESET_COLUMNS = _DECIDE_AGAIN + "".join(f", {column} = NULL" for column in _PROCESS)
# A clear keeps what names a process still stopping (a try ended under it by a mark, a
# run's mark or timeout): its replica's fence finds it by them, or the stale sweep
# releases it once that replica is dead and its heartbeat old (`housekeeping`).
_RESET = text(
    f"UPDATE task_instance SET {_DECIDE_AGAIN}"
    + "".join(
        f", {column} = CASE WHEN stopping_since IS NULL THEN NULL ELSE {column} END"
        for column in _PROCESS
    )
    + " WHERE id = ANY(:ids)"
)


class ActionError(ValueError):
    """A clear or mark that cannot be done (unknown run or task, bad state), with the fix."""


@dataclass(frozen=True, slots=True)
class Change:
    """One instance a clear or mark changed (or, in a dry run, would change)."""

    task_id: str
    was: str
    try_number: int


@dataclass
class Outcome:
    """What a clear or mark did to one run (or, in a dry run, would do)."""

    run_id: str
    run_pk: int  # dag_run.id
    run_state_before: str
    run_state: str
    cleared: list[Change] = field(default_factory=list)
    marked: list[Change] = field(default_factory=list)
    marked_as: str | None = None


def find_run(session: Session, dag_id: str, run_id: str) -> DagRun:
    """The run, or an ActionError that says how to list the DAGs or the DAG's runs."""
    if session.get(Dag, dag_id) is None:
        raise ActionError(f"no DAG named {dag_id!r}; list them with `sluice dags list`")
    run = session.execute(
        select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
    ).scalar_one_or_none()
    if run is None:
        raise ActionError(
            f"DAG {dag_id!r} has no run {run_id!r}; list its runs with `sluice dags runs {dag_id}`"
        )
    return run


def choose_tasks(
    compiled: CompiledDag,
    task_ids: Sequence[str] | None,
    *,
    upstream: bool = False,
    downstream: bool = False,
) -> list[str]:
    """The named tasks (all without names) with their relatives, in topological order."""
    if not task_ids:
        return list(compiled.order)
    unknown = sorted(set(task_ids) - set(compiled.tasks))
    if unknown:
        raise ActionError(
            f"--task {unknown[0]!r}: DAG {compiled.dag_id!r} has no such task"
            f" (its tasks: {', '.join(compiled.order)})"
        )
    chosen = set(task_ids)
    for name in task_ids:
        if downstream:
            chosen |= graph.descendants(compiled.spec, name)
        if upstream:
            chosen |= graph.ancestors(compiled.spec, name)
    return [name for name in compiled.order if name in chosen]


def clear(
    session: Session,
    specs: SpecCache,
    run: DagRun,
    task_ids: Sequence[str] | None = None,
    *,
    upstream: bool = False,
    downstream: bool = False,
    only_failed: bool = False,
    reason: str,
    now: datetime,
    dry_run: bool = False,
) -> Outcome:
    """Clear these tasks of the run (see the module); the caller commits, or, for a dry
    run, rolls back (nothing is written, but the run and instances were locked)."""
    compiled = specs.get(session, run.dag_version_id)
    chosen = choose_tasks(compiled, task_ids, upstream=upstream, downstream=downstream)
    lock_runs(session, [run.id])
    session.refresh(run)
    outcome = Outcome(run.run_id, run.id, run.state, run.state)
    states = FAILED_STATES if only_failed else None
    outcome.cleared = _clear_locked(
        session, compiled, run, chosen, states, reason=reason, now=now, dry_run=dry_run
    )
    if outcome.cleared and not dry_run:
        outcome.run_state = reopen(session, run)
    return outcome


def mark(
    session: Session,
    specs: SpecCache,
    run: DagRun,
    task_ids: Sequence[str],
    target: TaskState,
    *,
    upstream: bool = False,
    downstream: bool = False,
    reason: str,
    now: datetime,
    dry_run: bool = False,
) -> Outcome:
    """Mark these tasks of the run `target` (see the module); the caller commits."""
    if target not in MARKABLE:
        raise ActionError(f"a task can be marked success or failed, not {target!r}")
    if not task_ids:
        raise ActionError("--task: name at least one task to mark")
    compiled = specs.get(session, run.dag_version_id)
    chosen = choose_tasks(compiled, task_ids, upstream=upstream, downstream=downstream)
    lock_runs(session, [run.id])
    session.refresh(run)
    outcome = Outcome(run.run_id, run.id, run.state, run.state, marked_as=target)
    rows = [ti for ti in _instances(session, run.id, chosen) if ti.state != target]
    outcome.marked = [Change(ti.task_id, ti.state, ti.try_number) for ti in rows]
    if dry_run:
        return outcome
    entered = 0
    open_tries: list[int] = []
    for ti in rows:
        entered += ti.state not in TERMINAL_TASK_STATES
        if ti.state in OCCUPYING_TASK_STATES:
            open_tries.append(ti.id)
        if ti.state == TaskState.RUNNING:
            # Its process runs on until its replica's fence stops it: no next try before.
            ti.stopping_since = ti.stopping_since or now
        ti.state = target
        ti.start_date = ti.start_date or now
        ti.end_date = now
        ti.next_retry_at = None
        ti.needs_eval = False
        ti.reason = reason
    session.flush()
    _end_open_tries(session, open_tries, target, reason, now)
    propagate(
        session,
        [Settled(run.id, ti.task_id, ti.downstream_task_ids, target) for ti in rows],
        progress=False,
    )
    _add_done(session, run.id, entered)
    # Then Airflow's follow-up: the failed tasks downstream of the named ones run again.
    below = choose_tasks(compiled, task_ids, downstream=True)
    resumed = [name for name in below if name not in set(task_ids)]
    outcome.cleared = _clear_locked(
        session,
        compiled,
        run,
        resumed,
        FAILED_STATES,
        reason=f"{reason}: its failed downstream tasks run again",
        now=now,
        dry_run=False,
    )
    if outcome.cleared:
        outcome.run_state = reopen(session, run)
    return outcome


def _instances(session: Session, run_id: int, task_ids: Iterable[str]) -> list[TaskInstance]:
    """The run's instances of these tasks, locked, in id order (the lock order)."""
    return list(
        session.execute(
            select(TaskInstance)
            .where(TaskInstance.dag_run_id == run_id, TaskInstance.task_id.in_(list(task_ids)))
            .order_by(TaskInstance.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).scalars()
    )


def _clear_locked(
    session: Session,
    compiled: CompiledDag,
    run: DagRun,
    task_ids: Sequence[str],
    states: frozenset[TaskState] | None,
    *,
    reason: str,
    now: datetime,
    dry_run: bool,
) -> list[Change]:
    """Reset the run's instances of `task_ids` (in `states`, or all) to `none`; the run
    row is locked. Returns what was (or would be) cleared, in topological order."""
    if not task_ids:
        return []
    rows = [
        ti for ti in _instances(session, run.id, task_ids) if states is None or ti.state in states
    ]
    position = {name: index for index, name in enumerate(compiled.order)}
    rows.sort(key=lambda ti: position.get(ti.task_id, len(position)))
    changes = [Change(ti.task_id, ti.state, ti.try_number) for ti in rows]
    if dry_run or not rows:
        return changes
    left: list[Settled] = []
    open_tries: list[int] = []
    to_reset: list[int] = []
    for ti in rows:
        task = compiled.tasks.get(ti.task_id)
        ti.max_tries = ti.try_number + (task.retries if task is not None else 0)
        if ti.state == TaskState.RUNNING:
            # Airflow's RESTARTING: it holds its slot until its process has stopped.
            ti.stopping_since = ti.stopping_since or now
            continue
        if ti.state in TERMINAL_TASK_STATES:
            left.append(Settled(run.id, ti.task_id, ti.downstream_task_ids, None))
        if ti.state == TaskState.QUEUED:
            open_tries.append(ti.id)
        to_reset.append(ti.id)
    session.flush()
    session.execute(_RESET, {"ids": to_reset})
    _end_open_tries(session, open_tries, TaskState.FAILED, reason, now)
    propagate(session, left)
    return changes


def _end_open_tries(
    session: Session, ti_ids: Sequence[int], state: TaskState, reason: str, now: datetime
) -> None:
    """End the open try (queued or running, no end yet) of each instance."""
    if not ti_ids:
        return
    session.execute(
        update(TaskTry)
        .where(TaskTry.task_instance_id.in_(list(ti_ids)), TaskTry.end_date.is_(None))
        .values(state=state, end_date=now, reason=reason)
    )


def _add_done(session: Session, run_id: int, delta: int) -> None:
    if delta:
        session.execute(
            update(DagRun).where(DagRun.id == run_id).values(tasks_done=DagRun.tasks_done + delta)
        )


def reopen(session: Session, run: DagRun, *, backfill_id: int | None = None) -> str:
    """An ended run goes back to `queued` (Airflow's `dag_run_state=QUEUED`), under
    `backfill_id` if given (a backfill's reprocessing), else as it was; a queued or running
    run carries on. Returns the run's state now."""
    if run.state not in TERMINAL_RUN_STATES:
        return run.state
    values: dict[str, Any] = {
        "state": RunState.QUEUED,
        "start_date": None,
        "end_date": None,
        "deadline": None,
        "last_scheduling_decision": None,
    }
    if backfill_id is not None:
        values["backfill_id"] = backfill_id
    session.execute(update(DagRun).where(DagRun.id == run.id).values(**values))
    return RunState.QUEUED
