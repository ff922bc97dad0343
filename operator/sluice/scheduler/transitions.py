"""Shared state-change machinery: lock order, counter propagation, run progress.

Every transaction that changes task state locks the affected run rows first,
in ascending id order, and only then touches task rows (invariant 6: one lock
order everywhere, so replicas never deadlock on each other). When a task
instance enters or leaves a terminal state, `propagate` updates its downstream
instances' counters in the same transaction: one UPDATE per upstream, guarded
by the last state recorded for that upstream, so a repeated or out-of-order
report is counted once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from sluice.db.models import DagRun
from sluice.spec.states import TERMINAL_TASK_STATES, TaskState


def lock_runs(session: Session, run_ids: Iterable[int]) -> list[int]:
    """Lock run rows in id order (waiting); returns the ids that exist."""
    ids = sorted(set(run_ids))
    if not ids:
        return []
    return list(
        session.execute(
            select(DagRun.id).where(DagRun.id.in_(ids)).order_by(DagRun.id).with_for_update()
        )
        .scalars()
        .all()
    )


_LOCK_RUNS_OF = text(
    """
    SELECT id FROM dag_run
    WHERE id IN (SELECT dag_run_id FROM task_instance WHERE id = ANY(:ids))
    ORDER BY id
    FOR UPDATE
    """
)


def lock_runs_of(session: Session, ti_ids: Sequence[int]) -> list[int]:
    """Lock the runs of these task instances, in id order (waiting); returns the run ids."""
    if not ti_ids:
        return []
    return list(session.execute(_LOCK_RUNS_OF, {"ids": list(ti_ids)}).scalars())


@dataclass(frozen=True, slots=True)
class Settled:
    """A task instance that entered (or, with `state=None`, left) a terminal state."""

    dag_run_id: int
    task_id: str
    downstream_task_ids: Sequence[str]
    state: TaskState | None


_PROPAGATE = text(
    """
    UPDATE task_instance SET
        upstream_states = CASE WHEN CAST(:state AS text) IS NULL
            THEN upstream_states - CAST(:upstream AS text)
            ELSE upstream_states
                 || jsonb_build_object(CAST(:upstream AS text), CAST(:state AS text))
        END,
        n_success = n_success
            + (CAST(:state AS text) IS NOT DISTINCT FROM 'success')::int
            - (upstream_states->>CAST(:upstream AS text) IS NOT DISTINCT FROM 'success')::int,
        n_failed = n_failed
            + (CAST(:state AS text) IS NOT DISTINCT FROM 'failed')::int
            - (upstream_states->>CAST(:upstream AS text) IS NOT DISTINCT FROM 'failed')::int,
        n_skipped = n_skipped
            + (CAST(:state AS text) IS NOT DISTINCT FROM 'skipped')::int
            - (upstream_states->>CAST(:upstream AS text) IS NOT DISTINCT FROM 'skipped')::int,
        n_upstream_failed = n_upstream_failed
            + (CAST(:state AS text) IS NOT DISTINCT FROM 'upstream_failed')::int
            - (upstream_states->>CAST(:upstream AS text)
               IS NOT DISTINCT FROM 'upstream_failed')::int,
        needs_eval = true
    WHERE dag_run_id = :run_id
      AND task_id = ANY(CAST(:downstream AS text[]))
      AND (upstream_states->>CAST(:upstream AS text)) IS DISTINCT FROM CAST(:state AS text)
    """
)


_PROGRESS = text(
    """
    UPDATE dag_run SET tasks_done = tasks_done + v.delta
    FROM unnest(CAST(:runs AS bigint[]), CAST(:deltas AS int[])) AS v(id, delta)
    WHERE dag_run.id = v.id
    """
)


def run_progress(settled: Sequence[Settled]) -> dict[int, int]:
    """How far each run's `tasks_done` moves: +1 per instance entering a terminal state,
    -1 per instance leaving one (runs that do not move are left out)."""
    done_delta: Counter[int] = Counter()
    for s in settled:
        done_delta[s.dag_run_id] += 1 if s.state in TERMINAL_TASK_STATES else -1
    return {rid: delta for rid, delta in done_delta.items() if delta}


def propagate(
    session: Session, settled: Sequence[Settled], *, progress: bool = True
) -> dict[int, int]:
    """Move downstream counters and (unless the caller does it) run progress.

    The caller holds the run locks. Returns the progress moves (`run_progress`).
    """
    edges = [
        {
            "run_id": s.dag_run_id,
            "upstream": s.task_id,
            "state": s.state.value if s.state else None,
            "downstream": list(s.downstream_task_ids),
        }
        for s in settled
        if s.downstream_task_ids
    ]
    if edges:
        session.execute(_PROPAGATE, edges)
    moved = run_progress(settled)
    if moved and progress:
        session.execute(_PROGRESS, {"runs": list(moved), "deltas": list(moved.values())})
    return moved
