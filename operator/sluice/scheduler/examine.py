"""Phase 2 of the loop: examine running runs and decide what their tasks do next.

Runs are taken `FOR UPDATE SKIP LOCKED`, least recently examined first, so
each run is processed by one replica at a time. Only task instances whose
upstream counters moved since they were last looked at (`needs_eval`) are
read: a run with thousands of blocked tasks costs nothing until one of their
upstreams ends. Settling a task as skipped or upstream_failed moves its own
downstream counters, so that is repeated until the runs are quiet.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache
from sluice.db.models import Dag, DagRun, TaskInstance
from sluice.scheduler import past
from sluice.scheduler.isolation import batch_or_each
from sluice.scheduler.transitions import Settled, propagate
from sluice.spec.models import TriggerRule
from sluice.spec.states import TERMINAL_TASK_STATES, RunState, TaskState
from sluice.spec.triggerrules import UpstreamCounts, Verdict, evaluate


@dataclass
class ExamineStats:
    runs: int = 0
    scheduled: int = 0
    settled: int = 0
    retried: int = 0
    finished_runs: dict[int, RunState] = field(default_factory=dict)
    failed_runs: list[int] = field(default_factory=list)


def examine_running_runs(
    session: Session, specs: SpecCache, now: datetime, limit: int, *, quiet: bool = True
) -> ExamineStats:
    """Examine up to `limit` runs; with `quiet`, runs without work fill the rest of the batch."""
    stats = ExamineStats()
    taken = _take_runs(session, now, limit, quiet=quiet)
    if not taken:
        return stats
    runs = [run for run, _ in taken]
    retrying = {run.id for run, due_retry in taken if due_retry}

    def examine(batch: Sequence[DagRun]) -> list[ExamineStats]:
        part = ExamineStats(runs=len(batch))
        _examine(session, specs, list(batch), retrying, now, part)
        return [part]

    parts, bad = batch_or_each(
        session, runs, examine, what="examining a run", describe=lambda run: run.id
    )
    for part in parts:
        stats.runs += part.runs
        stats.scheduled += part.scheduled
        stats.settled += part.settled
        stats.retried += part.retried
        stats.finished_runs.update(part.finished_runs)
    stats.failed_runs = [run.id for run in bad]
    return stats


def _examine(
    session: Session,
    specs: SpecCache,
    runs: list[DagRun],
    retrying: set[int],
    now: datetime,
    stats: ExamineStats,
) -> None:
    live = [run for run in runs if not _time_out(session, specs, run, now, stats)]
    run_ids = [run.id for run in live]
    done: Counter[int] = Counter()  # tasks_done moved in this transaction, per run
    due = [run_id for run_id in run_ids if run_id in retrying]
    stats.retried = _reschedule_retries(session, due, now) if due else 0
    for _ in range(_MAX_SETTLE_ROUNDS):
        if not _evaluate_ready(session, run_ids, now, stats, done):
            break
    _finish_completed_runs(session, live, done, now, stats)


def _take_runs(
    session: Session, now: datetime, limit: int, *, quiet: bool
) -> list[tuple[DagRun, bool]]:
    """Take runs to examine, with whether each has a retry due; runs with work come first.

    Work is changed counters, a due retry, or all tasks done; with `quiet`, runs
    without work fill the rest of the batch (the round-robin that catches
    timeouts, which the loop asks for once per tick interval). Runs with work
    are found through partial indexes, so a tick costs the same however many
    runs sit idle. One statement locks the runs (`FOR UPDATE SKIP LOCKED`, least
    recently examined first) and sends them to the back of the queue, a run
    that then fails to be examined included.
    """
    with_work = (
        select(TaskInstance.dag_run_id)
        .where(TaskInstance.needs_eval, TaskInstance.state == TaskState.NONE)
        .union(
            select(TaskInstance.dag_run_id).where(
                TaskInstance.state == TaskState.UP_FOR_RETRY, TaskInstance.next_retry_at <= now
            ),
            select(DagRun.id).where(
                DagRun.state == RunState.RUNNING, DagRun.tasks_done >= DagRun.tasks_total
            ),
        )
        .scalar_subquery()
    )
    has_work = DagRun.id.in_(with_work)
    pick = (
        select(DagRun.id)
        .join(Dag, Dag.dag_id == DagRun.dag_id)
        .where(DagRun.state == RunState.RUNNING, Dag.is_paused.is_(False))
        .limit(limit)
        .with_for_update(of=DagRun, skip_locked=True)
    )
    order = (DagRun.last_scheduling_decision.asc().nulls_first(), DagRun.id)
    if quiet:
        pick = pick.order_by(has_work.desc(), *order)
    else:
        pick = pick.where(has_work).order_by(*order)
    due_retry = (
        select(TaskInstance.id)
        .where(
            TaskInstance.dag_run_id == DagRun.id,
            TaskInstance.state == TaskState.UP_FOR_RETRY,
            TaskInstance.next_retry_at <= now,
        )
        .exists()
    )
    taken = session.execute(
        update(DagRun)
        .where(DagRun.id.in_(pick.scalar_subquery()))
        .values(last_scheduling_decision=now)
        .returning(DagRun, due_retry)
        .execution_options(synchronize_session=False)
    ).all()
    return sorted(((run, bool(due)) for run, due in taken), key=lambda item: item[0].id)


# Each round settles at least one level of the graph; deeper chains finish next tick.
_MAX_SETTLE_ROUNDS = 32


def _time_out(
    session: Session, specs: SpecCache, run: DagRun, now: datetime, stats: ExamineStats
) -> bool:
    """Fail a run past its dagrunTimeout; its unfinished tasks are skipped (as in Airflow)."""
    timeout = specs.get(session, run.dag_version_id).spec.dagrun_timeout
    if timeout is None or run.start_date is None or now < run.start_date + timeout:
        return False
    unfinished = [s.value for s in TaskState if s not in TERMINAL_TASK_STATES]
    result = session.execute(
        update(TaskInstance)
        .where(TaskInstance.dag_run_id == run.id, TaskInstance.state.in_(unfinished))
        .values(state=TaskState.SKIPPED, end_date=now, reason="dagrun timeout", needs_eval=False)
    )
    run.tasks_done += int(result.rowcount)  # type: ignore[attr-defined]
    run.state = RunState.FAILED
    run.end_date = now
    stats.finished_runs[run.id] = RunState.FAILED
    return True


def _reschedule_retries(session: Session, run_ids: list[int], now: datetime) -> int:
    result = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.dag_run_id.in_(run_ids),
            TaskInstance.state == TaskState.UP_FOR_RETRY,
            TaskInstance.next_retry_at <= now,
        )
        .values(state=TaskState.SCHEDULED, next_retry_at=None)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def _evaluate_ready(
    session: Session, run_ids: list[int], now: datetime, stats: ExamineStats, done: Counter[int]
) -> bool:
    """One round of trigger-rule decisions; True if some task settled (more may follow)."""
    rows = session.execute(
        select(
            TaskInstance.id,
            TaskInstance.dag_run_id,
            TaskInstance.task_id,
            TaskInstance.trigger_rule,
            TaskInstance.upstream_task_ids,
            TaskInstance.downstream_task_ids,
            TaskInstance.n_success,
            TaskInstance.n_failed,
            TaskInstance.n_skipped,
            TaskInstance.n_upstream_failed,
            TaskInstance.depends_on_past,
        ).where(
            TaskInstance.dag_run_id.in_(run_ids),
            TaskInstance.needs_eval,
            TaskInstance.state == TaskState.NONE,
        )
    ).all()
    if not rows:
        return False
    decided: dict[TaskState, list[int]] = defaultdict(list)
    waiting: list[int] = []
    settled: list[Settled] = []
    for row in rows:
        counts = UpstreamCounts(
            total=len(row.upstream_task_ids),
            success=row.n_success,
            failed=row.n_failed,
            skipped=row.n_skipped,
            upstream_failed=row.n_upstream_failed,
        )
        verdict = evaluate(TriggerRule(row.trigger_rule), counts)
        if verdict is Verdict.RUN:
            if row.depends_on_past and not past.previous_allows(session, row.id):
                continue  # stays needs_eval: re-checked until the previous run catches up
            decided[TaskState.SCHEDULED].append(row.id)
        elif verdict is Verdict.WAIT:
            waiting.append(row.id)
        else:
            state = verdict.settles_as
            assert state is not None
            decided[state].append(row.id)
            settled.append(Settled(row.dag_run_id, row.task_id, row.downstream_task_ids, state))
    if waiting:
        session.execute(
            update(TaskInstance).where(TaskInstance.id.in_(waiting)).values(needs_eval=False)
        )
    for state, ids in decided.items():
        values: dict[str, object] = {"state": state, "needs_eval": False}
        if state in TERMINAL_TASK_STATES:
            values["end_date"] = now
        session.execute(
            update(TaskInstance)
            .where(and_(TaskInstance.id.in_(ids), TaskInstance.state == TaskState.NONE))
            .values(**values)
        )
    stats.scheduled += len(decided.get(TaskState.SCHEDULED, []))
    stats.settled += len(settled)
    done.update(propagate(session, settled))
    return bool(settled)


def _finish_completed_runs(
    session: Session, runs: list[DagRun], done: Counter[int], now: datetime, stats: ExamineStats
) -> None:
    """A run whose tasks are all terminal fails if a leaf failed, else succeeds (Airflow).

    `tasks_done` was read with the run's lock, and only lock holders move it, so
    the row as taken plus this transaction's own moves is its value now.
    """
    complete = [run for run in runs if run.tasks_done + done[run.id] >= run.tasks_total]
    if not complete:
        return
    failed = set(
        session.execute(
            select(TaskInstance.dag_run_id)
            .where(
                TaskInstance.dag_run_id.in_([run.id for run in complete]),
                TaskInstance.downstream_task_ids == [],
                TaskInstance.state.in_([TaskState.FAILED, TaskState.UPSTREAM_FAILED]),
            )
            .distinct()
        ).scalars()
    )
    for run in complete:
        run.state = RunState.FAILED if run.id in failed else RunState.SUCCESS
        run.end_date = now
        stats.finished_runs[run.id] = RunState(run.state)
