"""Retention by age: a try's archived log is deleted once the try ended longer ago than
`--log-retention-days`, and its `task_log` row is kept, marked 'expired'.

What Airflow leaves to a log-cleanup job and Argo to its artifact garbage
collection, each replica's log archiver thread does between its archiving: one
batch at a time, once per few minutes, again at once while batches come back
full. A batch is one transaction: lock the oldest archived rows past the
retention (`FOR UPDATE SKIP LOCKED`, so racing replicas take different rows and
never wait), delete their objects in one request, mark the rows expired, commit.
A replica that dies in between leaves its rows archived (its transaction rolls
back); whichever takes them next deletes objects that may be gone already, which
counts as deleted. A store that fails rolls the batch back until the next period.
The row stays (ADR 0036) so `sluice logs` can say when the log was deleted, and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, text

from sluice.archive.keys import key_for
from sluice.archive.store import LogStore
from sluice.metrics import families as metrics

OPTION = "--log-retention-days"
INTERVAL = 300.0  # seconds between passes that found less than a batch
BATCH = 100

_TAKE = text(
    """
    SELECT l.task_instance_id, l.try_number, ti.dag_id, r.run_id, ti.task_id
    FROM task_log l
    JOIN task_try tt
      ON tt.task_instance_id = l.task_instance_id AND tt.try_number = l.try_number
    JOIN task_instance ti ON ti.id = l.task_instance_id
    JOIN dag_run r ON r.id = ti.dag_run_id
    WHERE l.state = 'archived' AND l.archived_at < :cutoff AND tt.end_date < :cutoff
    ORDER BY l.archived_at, l.task_instance_id, l.try_number
    LIMIT :limit
    FOR UPDATE OF l SKIP LOCKED
    """
)
# A try is archived after it ends, so `archived_at < :cutoff` (the partial index
# ix_task_log_to_expire) only narrows what `end_date < :cutoff` decides.
_EXPIRE = text(
    """
    UPDATE task_log l SET state = 'expired', expired_at = :now, reason = :reason
    FROM unnest(CAST(:tis AS bigint[]), CAST(:tries AS integer[])) AS d(ti, try_number)
    WHERE l.task_instance_id = d.ti AND l.try_number = d.try_number
    """
)


def reason(days: int) -> str:
    """What `task_log.reason` says of a log deleted under this retention."""
    return f"{OPTION} {days}"


@dataclass(frozen=True)
class LogRetention:
    """Delete the archives of tries that ended more than `days` days ago (at least 1)."""

    engine: Engine
    store: LogStore
    days: int
    batch: int = BATCH
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError(f"{OPTION} must be at least 1 here (0 keeps every log: no retention)")

    def expire_once(self) -> int:
        """Delete one batch of archives past the retention and mark their rows expired; the
        number expired (a full batch: more may be waiting). StoreError: nothing marked."""
        now = self.clock()
        with self.engine.begin() as conn:
            rows = conn.execute(
                _TAKE, {"cutoff": now - timedelta(days=self.days), "limit": self.batch}
            ).all()
            if not rows:
                return 0
            self.store.delete_many(
                [key_for(r.dag_id, r.run_id, r.task_id, r.try_number) for r in rows]
            )
            conn.execute(
                _EXPIRE,
                {
                    "now": now,
                    "reason": reason(self.days),
                    "tis": [r.task_instance_id for r in rows],
                    "tries": [r.try_number for r in rows],
                },
            )
        metrics.LOGS_EXPIRED.inc(len(rows))
        return len(rows)
