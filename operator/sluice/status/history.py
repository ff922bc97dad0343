"""A DAG's DagRun objects keep a bounded history; the database keeps every run.

A `* * * * *` DAG makes 525,000 runs a year, and each got a DagRun object
(with the operator's finalizer) that stayed for ever. As CronJob's
`successfulJobsHistoryLimit` and Argo's workflow GC do, the publisher keeps
the objects of each DAG's newest `--dagrun-history-limit` ended runs, newest
by end time, and deletes the older ones' (ADR 0034). Only objects of ended
runs count and are deleted; an active run's object is never touched, nor is
any run: `sluice dags runs` lists them all.

The deletion goes through the status outbox like any publication: when a
publication records an end (or a cycle deleted some of a DAG's objects, and
more may be due), `enqueue` marks the DAG's oldest objects beyond the limit
`gone` (so nothing publishes to them or creates them again) and writes a
`prune` row for each, in one statement, at most `per_dag` per DAG. A
publisher takes those rows as it takes any (leased, SKIP LOCKED), deletes
each object with its recorded uid as a precondition (an object created again
under the same name is another object and stays), and deletes the row.
Two replicas that enqueue together mark each publication once: the rows are
locked SKIP LOCKED and marked only while not `gone`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from sluice.spec.states import ACTIVE_RUN_STATES
from sluice.status import store

PRUNE = "prune"  # the status_outbox kind of a DagRun object to delete (dag_run_id: its run)

_LIVE = "NOT p.gone AND p.uid IS NOT NULL AND p.ended_at IS NOT NULL"  # the partial index

_ENQUEUE = text(
    f"""
    WITH cutoff AS (  -- each DAG's newest object beyond the limit: it and all older go
        SELECT d.dag_id, c.ended_at, c.dag_run_id
          FROM unnest(CAST(:dag_ids AS text[])) AS d(dag_id)
         CROSS JOIN LATERAL (
               SELECT p.ended_at, p.dag_run_id FROM run_publication p
                WHERE p.dag_id = d.dag_id AND {_LIVE}
                ORDER BY p.ended_at DESC, p.dag_run_id DESC
               OFFSET :keep LIMIT 1
               ) c
    ), chosen AS (  -- oldest first, at most :per_dag per DAG
        SELECT x.dag_run_id FROM cutoff c
         CROSS JOIN LATERAL (
               SELECT p.dag_run_id FROM run_publication p
                WHERE p.dag_id = c.dag_id AND {_LIVE}
                  AND (p.ended_at, p.dag_run_id) <= (c.ended_at, c.dag_run_id)
                ORDER BY p.ended_at, p.dag_run_id
                LIMIT :per_dag
               ) x
    ), locked AS (  -- still ended, still there, not another replica's right now
        SELECT p.dag_run_id FROM run_publication p
          JOIN dag_run r ON r.id = p.dag_run_id
         WHERE p.dag_run_id IN (SELECT dag_run_id FROM chosen) AND NOT p.gone
           AND r.state <> ALL(CAST(:active AS text[]))
           FOR UPDATE OF p SKIP LOCKED
    ), marked AS (
        UPDATE run_publication p SET gone = true FROM locked l
         WHERE p.dag_run_id = l.dag_run_id
        RETURNING p.dag_run_id
    )
    INSERT INTO status_outbox (kind, dag_run_id) SELECT '{PRUNE}', dag_run_id FROM marked
    """
)

_DAGS_WITH_HISTORY = text(f"SELECT DISTINCT p.dag_id FROM run_publication p WHERE {_LIVE}")

_KEEP = text(
    "UPDATE run_publication SET gone = false WHERE dag_run_id = ANY(CAST(:ids AS bigint[]))"
)


def enqueue(session: Session, dag_ids: Sequence[str], *, keep: int, per_dag: int) -> int:
    """Mark the objects of each DAG's ended runs beyond its newest `keep` (by end time)
    `gone` and enqueue their deletion, oldest first, at most `per_dag` per DAG. Returns
    how many were enqueued."""
    if keep < 1 or not dag_ids:
        return 0
    result = session.execute(
        _ENQUEUE,
        {
            "dag_ids": sorted(set(dag_ids)),
            "keep": keep,
            "per_dag": per_dag,
            "active": sorted(str(s) for s in ACTIVE_RUN_STATES),
        },
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def dags_with_history(session: Session) -> list[str]:
    """Every DAG with an object of an ended run: what a start-up looks at (a limit that
    was lowered, or set for the first time)."""
    return sorted(str(row[0]) for row in session.execute(_DAGS_WITH_HISTORY) if row[0])


def keep(session: Session, run_ids: Sequence[int]) -> None:
    """The runs' objects were marked for deletion, but the runs are active again (a
    backfill took them again): they stay, and their status is published again."""
    if run_ids:
        session.execute(_KEEP, {"ids": list(run_ids)})
        store.enqueue(session, run_ids)


_STATES = text("SELECT id, state FROM dag_run WHERE id = ANY(CAST(:ids AS bigint[]))")


def run_states(session: Session, run_ids: Sequence[int]) -> dict[int, str]:
    """The runs' states now (a deletion is made only of an object whose run has ended)."""
    if not run_ids:
        return {}
    return {int(i): str(s) for i, s in session.execute(_STATES, {"ids": list(run_ids)})}
