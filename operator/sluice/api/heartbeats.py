"""Task pods' heartbeats into the database: one statement for a whole batch.

Thousands of pods heartbeat every few seconds, so the task API never writes
one at a time: a batch of (task instance, try) pairs is one guarded UPDATE,
which moves `last_heartbeat_at` only where that try is still the running one
(the same compare-and-set on try number and state as every other write, so a
fenced, older or finished try is a no-op). It skips rows another transaction
holds, so heartbeats never wait on the scheduler. The pairs it did not move get
one read, which tells a task instance that does not exist (404) from one that
is not running at that try (409, with what it is now) and from one whose row
was busy (retry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.db.models import TaskInstance
from sluice.db.prepared import Prepared
from sluice.spec.states import TaskState

TryKey = tuple[int, int]

# SKIP LOCKED: a heartbeat never waits for a row the scheduler is changing (a report,
# a fence), so it can neither slow nor deadlock the loop; a skipped try is told to retry.
_HEARTBEAT = Prepared(
    """
    UPDATE task_instance t
       SET last_heartbeat_at = :now
      FROM (SELECT ti.id
              FROM task_instance ti
              JOIN unnest(CAST(:ids AS bigint[]), CAST(:tries AS int[])) AS v(id, try_number)
                ON ti.id = v.id AND ti.try_number = v.try_number
             WHERE ti.state = 'running' AND ti.stopping_since IS NULL
               FOR UPDATE OF ti SKIP LOCKED) AS free
     WHERE t.id = free.id AND t.state = 'running'
    RETURNING t.id, t.try_number
    """
)


@dataclass(frozen=True)
class Verdict:
    """What became of one heartbeat: written, or why not."""

    # `unsettled`: not written, yet running at that try when read (its row was locked by
    # a transaction still in flight), or queued again at that try (housekeeping's
    # `restart_tries`); the pod is told to retry, never to stop.
    outcome: Literal["accepted", "not_found", "not_running", "unsettled"]
    # For `not_running`: the task instance's state and try now.
    state: str | None = None
    try_number: int | None = None


ACCEPTED = Verdict("accepted")
NOT_FOUND = Verdict("not_found")
UNSETTLED = Verdict("unsettled")


def record_heartbeats(
    session: Session, keys: Sequence[TryKey], now: datetime
) -> dict[TryKey, Verdict]:
    """Move `last_heartbeat_at` to `now` for each running try in `keys`; a verdict per key.

    One UPDATE for the batch, plus one read only if some keys were not written.
    The caller commits.
    """
    unique = list(dict.fromkeys(keys))
    if not unique:
        return {}
    written = {
        (row[0], row[1])
        for row in _HEARTBEAT(
            session,
            {"now": now, "ids": [k[0] for k in unique], "tries": [k[1] for k in unique]},
        )
    }
    verdicts = {key: ACCEPTED for key in unique if key in written}
    missed = [key for key in unique if key not in written]
    if not missed:
        return verdicts
    current = {
        # A running try a clear asked to stop (`scheduler.clearing`) is told so: its pod
        # stops, and the instance goes back to `none` once its end is known.
        row.id: (
            "restarting"
            if row.stopping_since is not None and row.state == TaskState.RUNNING
            else row.state,
            row.try_number,
        )
        for row in session.execute(
            select(
                TaskInstance.id,
                TaskInstance.state,
                TaskInstance.try_number,
                TaskInstance.stopping_since,
            ).where(TaskInstance.id.in_(sorted({key[0] for key in missed})))
        )
    }
    for key in missed:
        if key[0] not in current:
            verdicts[key] = NOT_FOUND
            continue
        state, try_number = current[key[0]]
        if try_number == key[1] and state in (TaskState.RUNNING, TaskState.QUEUED):
            # Running: its row was busy. Queued at this very try: queued again because its
            # replica was taken for dead before it started it, and this pod is that
            # replica's late start; the next claim takes this same Job over. Retry, not stop.
            verdicts[key] = UNSETTLED
        else:
            verdicts[key] = Verdict("not_running", state, try_number)
    return verdicts
