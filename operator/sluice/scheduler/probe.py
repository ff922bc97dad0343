"""One statement that says which of the loop's phases have work (ADR 0006, third amendment).

With a waker, a replica runs a phase when it was told that something may have
given it work (its own reports, a notification) and, for what no one can tell
it of (other replicas' work, the clock), in a look once per tick interval,
shared by the live replicas. That look used to be each phase's own first
statement, one transaction each, finding nothing almost every time: five
transactions per interval on every idle replica. This is the one look for all
five: each answer is the condition the phase's own first statement looks for,
or a wider one (phase 1's: a due DAG at its maxActiveRuns, or a queued run that
cannot start yet, still says yes), so a no means the phase would have found
nothing in this snapshot. A run past its deadline (its dagrunTimeout, set by
phase 1 as it starts the run) or of a deleted DAG is phase 2's work like any
other (ADR 0024); phase 2's quiet round, now once per quiet round interval,
keeps its own look.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from sluice.db.prepared import Prepared
from sluice.scheduler.critical import OCCUPYING_SQL, START_TASK
from sluice.scheduler.results import ALERT

_PROBE = Prepared(
    f"""
    SELECT
      -- phase 1: a schedule fell due (runs.py's due DAGs, less the run cap), or a
      -- queued run waits to start (or to end, its DAG deleted)
      EXISTS (SELECT FROM dag d
              WHERE d.is_active AND NOT d.is_paused AND d.next_run_after <= :now
                AND d.broken_reason IS NULL AND d.current_version_id IS NOT NULL)
      OR EXISTS (SELECT FROM dag_run WHERE state = 'queued') AS runs,
      -- phase 2: examine.py's runs with work
      EXISTS (SELECT FROM task_instance WHERE needs_eval AND state = 'none')
      OR EXISTS (SELECT FROM task_instance
                 WHERE state = 'up_for_retry' AND next_retry_at <= :now)
      OR EXISTS (SELECT FROM dag_run
                 WHERE state = 'running' AND tasks_done >= tasks_total)
      OR EXISTS (SELECT FROM dag_run r JOIN dag d ON d.dag_id = r.dag_id
                 WHERE r.state = 'running' AND r.deadline <= :now AND NOT d.is_paused)
      OR EXISTS (SELECT FROM dag d JOIN dag_run r ON r.dag_id = d.dag_id
                 WHERE NOT d.is_active AND r.state = 'running') AS examine,
      -- phase 3: critical.py's test under its lock: a pool with waiting tasks has room
      CASE WHEN EXISTS (SELECT FROM task_instance WHERE state = 'scheduled') THEN EXISTS (
          SELECT FROM slot_pool p
          WHERE EXISTS (SELECT FROM task_instance t
                        WHERE t.pool = p.name AND t.state = 'scheduled')
            AND (SELECT COALESCE(sum(t.pool_slots), 0) FROM task_instance t
                 WHERE t.pool = p.name AND t.state IN ({OCCUPYING_SQL})) < p.slots)
      ELSE false END AS queue,
      -- phase 4: ready outbox rows, tries to start and alerts to deliver
      EXISTS (SELECT FROM outbox WHERE kind = :start AND not_before <= :now) AS claims,
      EXISTS (SELECT FROM outbox WHERE kind = :alert AND not_before <= :now) AS alerts
    """
)


@dataclass(frozen=True)
class Work:
    """Which phases the look found work for."""

    runs: bool
    examine: bool
    queue: bool
    claims: bool
    alerts: bool


def look(session: Session, now: datetime) -> Work:
    row = _PROBE(session, {"now": now, "start": START_TASK, "alert": ALERT}).one()
    return Work(
        runs=bool(row.runs),
        examine=bool(row.examine),
        queue=bool(row.queue),
        claims=bool(row.claims),
        alerts=bool(row.alerts),
    )
