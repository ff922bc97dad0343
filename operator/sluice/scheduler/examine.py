"""Phase 2 of the loop: examine running runs and decide what their tasks do next.

Runs are taken `FOR UPDATE SKIP LOCKED`, least recently examined first, so
each run is processed by one replica at a time. Only task instances whose
upstream counters moved since they were last looked at (`needs_eval`) are
read: a run with thousands of blocked tasks costs nothing until one of their
upstreams ends. Settling a task as skipped or upstream_failed moves its own
downstream counters, so that is repeated until the runs are quiet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from sluice.db import plans
from sluice.db.dags import SpecCache
from sluice.db.prepared import Prepared
from sluice.scheduler import endings, past
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
    # Runs where an instance settled as skipped: the next run's dependsOnPast tasks
    # may wait on it (the loop wakes them after the commit, `past.wake_next_runs`).
    settled_ok_runs: set[int] = field(default_factory=set)


def examine_running_runs(
    session: Session, specs: SpecCache, now: datetime, limit: int, *, quiet: bool = True
) -> ExamineStats:
    """Examine up to `limit` runs; with `quiet`, runs without work fill the rest of the batch."""
    stats = ExamineStats()
    plans.through_indexes(session)
    taken = _TAKE(session, {"now": now, "limit": limit, "quiet": quiet}).all()
    if not taken:
        return stats

    def examine(batch: Sequence[Row[Any]]) -> list[ExamineStats]:
        part = ExamineStats(runs=len(batch))
        _examine(session, specs, list(batch), now, part)
        return [part]

    parts, bad = batch_or_each(
        session, taken, examine, what="examining a run", describe=lambda run: run.id
    )
    for part in parts:
        stats.runs += part.runs
        stats.scheduled += part.scheduled
        stats.settled += part.settled
        stats.retried += part.retried
        stats.finished_runs.update(part.finished_runs)
        stats.settled_ok_runs.update(part.settled_ok_runs)
    stats.failed_runs = [run.id for run in bad]
    return stats


def _examine(
    session: Session, specs: SpecCache, runs: list[Row[Any]], now: datetime, stats: ExamineStats
) -> None:
    ending = _runs_to_end(session, specs, runs, now)
    if ending:
        endings.end_runs(session, ending, now)
        stats.finished_runs.update(dict.fromkeys(ending, RunState.FAILED))
    live = [run for run in runs if run.id not in ending]
    run_ids = [run.id for run in live]
    done: Counter[int] = Counter()  # tasks_done moved in this transaction, per run
    due = [run.id for run in live if run.due_retry]
    if due:
        stats.retried = _RETRY(session, {"runs": due, "now": now}).rowcount
    for _ in range(_MAX_SETTLE_ROUNDS):
        if not _evaluate_ready(session, run_ids, now, stats, done):
            break
    _finish_completed_runs(session, live, done, now, stats)
    if stats.settled_ok_runs:  # only runs whose DAG has tasks waiting on their past
        stats.settled_ok_runs &= {
            run.id for run in live if past.has_waiters(specs, session, run.dag_version_id)
        }


# Take runs to examine, with whether each has a retry due; runs with work come first.
# Work is changed counters, a due retry, all tasks done, a deadline passed (a
# dagrunTimeout, or a version that cannot be loaded: phase 1 sets it) or a deleted
# DAG, found through partial indexes, so a tick costs the same however many runs sit
# idle. With :quiet, runs without work fill the rest of the batch (the round-robin the
# loop asks for once per quiet round interval: the net for runs without a deadline);
# a deleted DAG's runs are taken even while it is paused, to end them. One statement locks the runs
# (SKIP LOCKED, least recently examined first) and sends them to the back of the
# queue, a run that then fails to be examined included.
_TAKE = Prepared(
    """
    WITH work AS (
        SELECT dag_run_id AS id FROM task_instance WHERE needs_eval AND state = 'none'
        UNION
        SELECT dag_run_id FROM task_instance
        WHERE state = 'up_for_retry' AND next_retry_at <= :now
        UNION
        SELECT id FROM dag_run WHERE state = 'running' AND tasks_done >= tasks_total
        UNION
        SELECT id FROM dag_run WHERE state = 'running' AND deadline <= :now
        UNION
        SELECT r.id FROM dag d JOIN dag_run r ON r.dag_id = d.dag_id
        WHERE NOT d.is_active AND r.state = 'running'
    ), picked AS (
        SELECT r.id, d.is_active FROM dag_run r JOIN dag d ON d.dag_id = r.dag_id
        WHERE r.state = 'running' AND (NOT d.is_paused OR NOT d.is_active)
          AND (:quiet OR r.id IN (SELECT id FROM work))
        ORDER BY r.id IN (SELECT id FROM work) DESC,
                 r.last_scheduling_decision ASC NULLS FIRST, r.id
        LIMIT :limit
        FOR UPDATE OF r SKIP LOCKED
    )
    UPDATE dag_run r SET last_scheduling_decision = :now
    FROM picked WHERE r.id = picked.id
    RETURNING r.id, r.dag_id, r.dag_version_id, r.start_date, r.tasks_total, r.tasks_done,
        picked.is_active,
        EXISTS (SELECT FROM task_instance t
                WHERE t.dag_run_id = r.id AND t.state = 'up_for_retry'
                  AND t.next_retry_at <= :now) AS due_retry
    """
)

_RETRY = Prepared(
    """
    UPDATE task_instance SET state = 'scheduled', next_retry_at = NULL
    WHERE dag_run_id = ANY(:runs) AND state = 'up_for_retry' AND next_retry_at <= :now
    """
)


def follow_up(session: Session, moved: Sequence[Row[Any]], now: datetime) -> ExamineStats:
    """Trigger rules for the rows a report's `propagate` just moved, in that report's
    transaction (the caller holds their runs' locks).

    The tasks a report makes ready are decided at once, not when their run's turn
    in phase 2 comes (at most `runs_examined_per_tick` runs a tick); what that
    settles is followed down the graph. Timeouts and run completion stay with
    phase 2.
    """
    stats = ExamineStats()
    done: Counter[int] = Counter()
    run_ids = sorted({row.dag_run_id for row in moved})
    first = [row for row in moved if row.state == TaskState.NONE]
    if _evaluate_ready(session, run_ids, now, stats, done, first):
        for _ in range(_MAX_SETTLE_ROUNDS):
            if not _evaluate_ready(session, run_ids, now, stats, done):
                break
    return stats


def decide_first_tasks(session: Session, run_ids: list[int], now: datetime) -> ExamineStats:
    """Trigger rules for the runs phase 1 just started, in its transaction (it holds
    their locks: their DAG rows, then the runs its promotion updated).

    A new run's first tasks (its roots) are decided at once, so the critical
    section of the same tick can queue them, instead of waiting for the run's
    turn in phase 2 (at most `runs_examined_per_tick` runs a tick: a minute's
    burst of a thousand runs would take fifty ticks). The decisions are phase
    2's own (`_evaluate_ready`: dependsOnPast included); run completion and
    timeouts stay with phase 2.
    """
    stats = ExamineStats()
    done: Counter[int] = Counter()
    for _ in range(_MAX_SETTLE_ROUNDS):
        if not _evaluate_ready(session, run_ids, now, stats, done):
            break
    return stats


# Each round settles at least one level of the graph; deeper chains finish next tick.
_MAX_SETTLE_ROUNDS = 32


def _runs_to_end(
    session: Session, specs: SpecCache, runs: list[Row[Any]], now: datetime
) -> dict[int, str]:
    """The runs that must end now, with the reason: past their dagrunTimeout (as in
    Airflow, the run fails and its unfinished tasks are skipped), of a deleted DAG
    (what phase 1 has not ended already), or with a DAG version that cannot be loaded
    (nothing in them can be decided; versions never change, so waiting would not help,
    and every run must end)."""
    ending: dict[int, str] = {}
    for run in runs:
        if not run.is_active:
            ending[run.id] = endings.deleted_dag(run.dag_id)
            continue
        try:
            timeout = specs.get(session, run.dag_version_id).spec.dagrun_timeout
        except DBAPIError:
            raise  # the database, not the spec: the loop's error policy applies
        except Exception as exc:
            ending[run.id] = endings.unloadable(run.dag_version_id, exc)
            continue
        if timeout is not None and run.start_date is not None and now >= run.start_date + timeout:
            ending[run.id] = "dagrun timeout"
    return ending


# Task instances whose upstream counters moved since they were last looked at.
_READY = Prepared(
    """
    SELECT id, dag_run_id, task_id, trigger_rule, upstream_task_ids, downstream_task_ids,
           n_success, n_failed, n_skipped, n_upstream_failed, depends_on_past,
           stopping_since IS NOT NULL AS stopping
    FROM task_instance
    WHERE dag_run_id = ANY(:runs) AND needs_eval AND state = 'none'
    """
)

# The verdicts of one round, in one statement: a state (NULL: still waiting), and an
# end date for the states that settle the instance.
_DECIDE = Prepared(
    """
    UPDATE task_instance ti SET
        needs_eval = false,
        state = COALESCE(v.state, ti.state),
        end_date = CASE WHEN v.ends THEN :now ELSE ti.end_date END
    FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[]), CAST(:ends AS boolean[]))
         AS v(id, state, ends)
    WHERE ti.id = v.id AND ti.state = 'none'
    """
)


def _evaluate_ready(
    session: Session,
    run_ids: list[int],
    now: datetime,
    stats: ExamineStats,
    done: Counter[int],
    rows: Sequence[Row[Any]] | None = None,
) -> bool:
    """One round of trigger-rule decisions; True if some task settled (more may follow).

    Decides `rows` when given (rows just read with `_READY`'s columns), else the
    runs' instances whose counters moved.
    """
    if rows is None:
        rows = _READY(session, {"runs": run_ids}).all()
    if not rows:
        return False
    verdicts = {
        row.id: evaluate(
            TriggerRule(row.trigger_rule),
            UpstreamCounts(
                total=len(row.upstream_task_ids),
                success=row.n_success,
                failed=row.n_failed,
                skipped=row.n_skipped,
                upstream_failed=row.n_upstream_failed,
            ),
        )
        for row in rows
    }
    # Every ready task that depends on its past, checked in one statement.
    allowed = past.allowed_by_past(
        session, [row.id for row in rows if row.depends_on_past and verdicts[row.id] is Verdict.RUN]
    )
    decided: dict[int, TaskState | None] = {}  # None: waits, only needs_eval cleared
    settled: list[Settled] = []
    for row in rows:
        verdict = verdicts[row.id]
        if verdict is Verdict.RUN:
            if row.stopping:
                # Its last try (ended under its process, then cleared) may still run:
                # the next waits for its stop, which flags it again (`results`).
                decided[row.id] = None
                continue
            if row.depends_on_past and row.id not in allowed:
                # Waits with `needs_eval` cleared (its run is not busy meanwhile): the
                # previous run's instance settling wakes it (`past.wake_next_runs`).
                decided[row.id] = None
                continue
            decided[row.id] = TaskState.SCHEDULED
        elif verdict is Verdict.WAIT:
            decided[row.id] = None
        else:
            state = verdict.settles_as
            assert state is not None
            decided[row.id] = state
            settled.append(Settled(row.dag_run_id, row.task_id, row.downstream_task_ids, state))
    if decided:
        _DECIDE(
            session,
            {
                "ids": list(decided),
                "states": [None if state is None else state.value for state in decided.values()],
                "ends": [state in TERMINAL_TASK_STATES for state in decided.values()],
                "now": now,
            },
        )
    stats.scheduled += sum(1 for state in decided.values() if state is TaskState.SCHEDULED)
    stats.settled += len(settled)
    stats.settled_ok_runs.update(s.dag_run_id for s in settled if s.state in past.OK)
    done.update(propagate(session, settled).moved)
    return bool(settled)


def _finish_completed_runs(
    session: Session, runs: list[Row[Any]], done: Counter[int], now: datetime, stats: ExamineStats
) -> None:
    """A run whose tasks are all terminal fails if a leaf failed, else succeeds (Airflow).

    `tasks_done` was read with the run's lock, and only lock holders move it, so
    the row as taken plus this transaction's own moves is its value now.
    """
    complete = [run.id for run in runs if run.tasks_done + done[run.id] >= run.tasks_total]
    if not complete:
        return
    failed = set(_FAILED_LEAVES(session, {"runs": complete}).scalars())
    states = [RunState.FAILED if run_id in failed else RunState.SUCCESS for run_id in complete]
    _FINISH(session, {"runs": complete, "states": [state.value for state in states], "now": now})
    stats.finished_runs.update(zip(complete, states, strict=True))


_FAILED_LEAVES = Prepared(
    """
    SELECT DISTINCT dag_run_id FROM task_instance
    WHERE dag_run_id = ANY(:runs) AND downstream_task_ids = '{}'
      AND state IN ('failed', 'upstream_failed')
    """
)

_FINISH = Prepared(
    """
    UPDATE dag_run SET state = v.state, end_date = :now
    FROM unnest(CAST(:runs AS bigint[]), CAST(:states AS text[])) AS v(id, state)
    WHERE dag_run.id = v.id
    """
)
