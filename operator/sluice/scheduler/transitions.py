"""Shared state-change machinery: lock order, counter propagation, run progress.

Every transaction that changes task state locks the affected run rows first,
in ascending id order, and only then touches task rows (invariant 6: one lock
order everywhere, so replicas never deadlock on each other). When a task
instance enters or leaves a terminal state, `propagate` updates its downstream
instances' counters in the same transaction: one UPDATE for a whole batch,
each move guarded by the last state the downstream recorded for that upstream,
so a repeated or out-of-order report is counted once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from sluice.db.models import DagRun
from sluice.db.prepared import Prepared
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


_LOCK_RUNS_OF = Prepared(
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
    return list(_LOCK_RUNS_OF(session, {"ids": list(ti_ids)}).scalars())


@dataclass(frozen=True, slots=True)
class Settled:
    """A task instance that entered (or, with `state=None`, left) a terminal state."""

    dag_run_id: int
    task_id: str
    downstream_task_ids: Sequence[str]
    state: TaskState | None


# Every edge of a batch in one statement: for each downstream instance, the upstream
# states it has not recorded yet are merged into `upstream_states` and the counters move
# by the difference, so a repeated or out-of-order report is counted once. Returns the
# moved rows, with what deciding them needs (`examine.follow_up` starts from them).
_PROPAGATE = Prepared(
    """
    WITH e AS (
        SELECT * FROM unnest(
            CAST(:runs AS bigint[]), CAST(:ups AS text[]), CAST(:states AS text[]),
            CAST(:downs AS text[])
        ) AS e(run_id, upstream, state, downstream)
    ), pairs AS (
        SELECT ti.id, e.upstream, e.state, ti.upstream_states->>e.upstream AS old
        FROM e
        CROSS JOIN LATERAL jsonb_array_elements_text(CAST(e.downstream AS jsonb)) AS d(task_id)
        JOIN task_instance ti ON ti.dag_run_id = e.run_id AND ti.task_id = d.task_id
        WHERE (ti.upstream_states->>e.upstream) IS DISTINCT FROM e.state
    ), moves AS (
        SELECT id,
            COALESCE(jsonb_object_agg(upstream, state) FILTER (WHERE state IS NOT NULL),
                     '{}') AS added,
            COALESCE(array_agg(upstream) FILTER (WHERE state IS NULL), '{}') AS removed,
            sum((state IS NOT DISTINCT FROM 'success')::int
                - (old IS NOT DISTINCT FROM 'success')::int) AS success,
            sum((state IS NOT DISTINCT FROM 'failed')::int
                - (old IS NOT DISTINCT FROM 'failed')::int) AS failed,
            sum((state IS NOT DISTINCT FROM 'skipped')::int
                - (old IS NOT DISTINCT FROM 'skipped')::int) AS skipped,
            sum((state IS NOT DISTINCT FROM 'upstream_failed')::int
                - (old IS NOT DISTINCT FROM 'upstream_failed')::int) AS upstream_failed
        FROM pairs GROUP BY id
    )
    UPDATE task_instance ti SET
        upstream_states = (ti.upstream_states - m.removed) || m.added,
        n_success = ti.n_success + m.success,
        n_failed = ti.n_failed + m.failed,
        n_skipped = ti.n_skipped + m.skipped,
        n_upstream_failed = ti.n_upstream_failed + m.upstream_failed,
        needs_eval = true
    FROM moves m
    WHERE ti.id = m.id
    RETURNING ti.id, ti.dag_run_id, ti.task_id, ti.state, ti.trigger_rule, ti.upstream_task_ids,
              ti.downstream_task_ids, ti.n_success, ti.n_failed, ti.n_skipped,
              ti.n_upstream_failed, ti.depends_on_past, ti.stopping_since IS NOT NULL AS stopping
    """
)


_PROGRESS = Prepared(
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


@dataclass(frozen=True, slots=True)
class Propagated:
    """What `propagate` moved: each run's `tasks_done` change, and the downstream rows."""

    moved: dict[int, int]
    downstream: list[Row[Any]]


def propagate(session: Session, settled: Sequence[Settled], *, progress: bool = True) -> Propagated:
    """Move downstream counters and (unless the caller does it) run progress.

    The caller holds the run locks. One statement for every edge of the batch;
    an instance settled twice in one batch counts as its last state.
    """
    edges = {
        (s.dag_run_id, s.task_id): (s.state.value if s.state else None, s.downstream_task_ids)
        for s in settled
        if s.downstream_task_ids
    }
    rows: list[Row[Any]] = []
    if edges:
        rows = list(
            _PROPAGATE(
                session,
                {
                    "runs": [run_id for run_id, _ in edges],
                    "ups": [task_id for _, task_id in edges],
                    "states": [state for state, _ in edges.values()],
                    "downs": [json.dumps(list(down)) for _, down in edges.values()],
                },
            )
        )
    moved = run_progress(settled)
    if moved and progress:
        _PROGRESS(session, {"runs": list(moved), "deltas": list(moved.values())})
    return Propagated(moved, rows)
