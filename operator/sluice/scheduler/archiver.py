"""The log archiver: copies each ended try's output to the log store, once.

A trigger writes a `log_outbox` row in the transaction that ends a started try
(migration 0015), once an archiver has enabled it (`log_sink`). Every
scheduler replica with a log store runs one archiver thread: it leases a few
rows (`FOR UPDATE SKIP LOCKED`, `not_before` moved past the lease), reads each
try's output from its source (its pod's log, or its local file), gzips it as
it streams, cut at the cap, into the store under the try's key, then records
the outcome in `task_log` and deletes the row in one transaction. A replica
that dies mid-copy leaves the row to come back when its lease ends: another
replica copies it again to the same key, so a log is stored once whatever
happens. Storage that is down, or an API server that does not answer, only
delays a row (`last_error`, a growing backoff); a pod already gone makes the
log lost, with the reason. Nothing here runs in the scheduling loop: it never
waits for an archive. Between its passes the thread also deletes the archives
past the retention, when there is one (`retention.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import Engine, text

from sluice.archive.compress import write_archive
from sluice.archive.keys import key_for
from sluice.archive.store import LogStore, StoreError
from sluice.executors.logsources import (
    LogGone,
    LogSource,
    LogUnavailable,
    TryRef,
    try_location,
)
from sluice.metrics import families as metrics
from sluice.scheduler.retention import INTERVAL as RETENTION_INTERVAL
from sluice.scheduler.retention import LogRetention
from sluice.scheduler.ticks import Due

log = structlog.get_logger("sluice.archive")

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
LEASE_SECONDS = 300.0  # longer than copying the largest log allowed takes
BATCH = 4
MAX_BACKOFF = 300.0

_TAKE = text(
    """
    WITH taken AS (
        UPDATE log_outbox SET not_before = :until, attempts = attempts + 1
        WHERE id IN (
            SELECT id FROM log_outbox WHERE not_before <= :now
            ORDER BY not_before, id LIMIT :limit FOR UPDATE SKIP LOCKED
        )
        RETURNING id, task_instance_id, try_number, attempts
    )
    SELECT taken.id, taken.task_instance_id, taken.try_number, taken.attempts,
           ti.dag_id, r.run_id, ti.task_id, tt.external_id AS executor,
           ti.external_id AS latest_external_id, tt.pod, tt.node
    FROM taken
    LEFT JOIN task_try tt
      ON tt.task_instance_id = taken.task_instance_id AND tt.try_number = taken.try_number
    LEFT JOIN task_instance ti ON ti.id = taken.task_instance_id
    LEFT JOIN dag_run r ON r.id = ti.dag_run_id
    """
)
_RECORD = text(
    """
    WITH done AS (DELETE FROM log_outbox WHERE id = :id)
    INSERT INTO task_log (task_instance_id, try_number, state, location, raw_bytes,
                          stored_bytes, truncated, reason, source, node, archived_at)
    SELECT :ti, :try, :state, :location, :raw, :stored, :truncated, :reason, :source, :node,
           :now
    WHERE EXISTS (SELECT 1 FROM task_instance WHERE id = :ti)
    ON CONFLICT (task_instance_id, try_number) DO UPDATE SET
        state = excluded.state, location = excluded.location, raw_bytes = excluded.raw_bytes,
        stored_bytes = excluded.stored_bytes, truncated = excluded.truncated,
        reason = excluded.reason, source = excluded.source, node = excluded.node,
        archived_at = excluded.archived_at
    """
)
_LATER = text("UPDATE log_outbox SET not_before = :not_before, last_error = :error WHERE id = :id")


@dataclass(frozen=True)
class Taken:
    outbox_id: int
    attempts: int
    ref: TryRef | None  # None: its task instance is gone (its DAG was deleted)


@dataclass(frozen=True)
class Outcome:
    state: str  # "archived", "lost", or "later" (asked again after a backoff)
    location: str | None = None
    raw_bytes: int | None = None
    stored_bytes: int | None = None
    truncated: bool = False
    reason: str | None = None
    where: dict[str, str] | None = None


def enable(engine: Engine) -> None:
    """From now on, every started try that ends gets a `log_outbox` row."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO log_sink (id) VALUES (1) ON CONFLICT DO NOTHING"))


class LogArchiver:
    def __init__(
        self,
        engine: Engine,
        store: LogStore,
        source: LogSource,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        lease: float = LEASE_SECONDS,
        batch: int = BATCH,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        retention: LogRetention | None = None,
        retention_interval: float = RETENTION_INTERVAL,
    ) -> None:
        self.engine = engine
        self.store = store
        self.source = source
        self.max_bytes = max_bytes
        self.lease = lease
        self.batch = batch
        self.clock = clock
        self.retention = retention
        # At once, then once per interval, or again at once after a full batch.
        self._retention_due = Due(retention_interval, clock())
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one pass ---------------------------------------------------------------------

    def take(self) -> list[Taken]:
        now = self.clock()
        with self.engine.begin() as conn:
            rows = conn.execute(
                _TAKE,
                {"now": now, "until": now + timedelta(seconds=self.lease), "limit": self.batch},
            ).all()
        return [_taken(row) for row in rows]

    def archive(self, ref: TryRef) -> Outcome:
        """Copy one try's output to the store; never raises for the try's own troubles."""
        try:
            opened = self.source.open(ref)
        except LogGone as gone:
            return Outcome("lost", reason=str(gone))
        except LogUnavailable as exc:
            return Outcome("later", reason=str(exc))
        key = key_for(ref.dag_id, ref.run_id, ref.task_id, ref.try_number)
        try:
            summary = write_archive(self.store, key, opened.chunks, cap=self.max_bytes)
        except StoreError as exc:
            return Outcome("later", reason=f"the log store: {exc}")
        except Exception as exc:  # the source broke off mid-stream (a dropped connection)
            return Outcome("later", reason=f"reading the log: {type(exc).__name__}: {exc}")
        return Outcome(
            "archived",
            location=self.store.url_of(key),
            raw_bytes=summary.raw_bytes,
            stored_bytes=summary.compressed_bytes,
            truncated=summary.truncated,
            where=opened.where,
        )

    def record(self, taken: Taken, outcome: Outcome) -> None:
        now = self.clock()
        with self.engine.begin() as conn:
            if outcome.state == "later":
                delay = min(MAX_BACKOFF, 2.0 ** min(taken.attempts, 9))
                conn.execute(
                    _LATER,
                    {
                        "id": taken.outbox_id,
                        "not_before": now + timedelta(seconds=delay),
                        "error": outcome.reason,
                    },
                )
                return
            assert taken.ref is not None
            where = outcome.where or {}
            conn.execute(
                _RECORD,
                {
                    "id": taken.outbox_id,
                    "ti": taken.ref.ti_id,
                    "try": taken.ref.try_number,
                    "state": outcome.state,
                    "location": outcome.location,
                    "raw": outcome.raw_bytes,
                    "stored": outcome.stored_bytes,
                    "truncated": outcome.truncated,
                    "reason": outcome.reason,
                    "source": where.get("pod") or where.get("file"),
                    "node": where.get("node"),
                    "now": now,
                },
            )
        metrics.LOGS_ARCHIVED.labels(outcome.state).inc()

    def run_once(self) -> int:
        """Archive what is due; the number of rows taken."""
        taken = self.take()
        for item in taken:
            if item.ref is None:
                with self.engine.begin() as conn:  # its DAG was deleted: nothing to keep
                    conn.execute(
                        text("DELETE FROM log_outbox WHERE id = :id"), {"id": item.outbox_id}
                    )
                continue
            outcome = self.archive(item.ref)
            if outcome.state == "later":
                log.warning("log not archived yet", ti=item.ref.ti_id,
                            try_number=item.ref.try_number, error=outcome.reason)  # fmt: skip
            self.record(item, outcome)
        return len(taken)

    # -- the thread -------------------------------------------------------------------

    def start(self) -> None:
        enable(self.engine)
        self._thread = threading.Thread(target=self._run, name="log-archiver", daemon=True)
        self._thread.start()

    def step(self) -> bool:
        """One turn of the thread: archive what is due, then expire a batch if that is due;
        True if either may have left work (the thread goes on without waiting)."""
        try:
            busy = self.run_once() > 0
        except Exception as exc:  # the database is away: the next pass tries again
            log.warning("log archiver pass failed", error=f"{type(exc).__name__}: {exc}")
            busy = False
        now = self.clock()
        if self.retention is None or not self._retention_due(now):
            return busy
        try:
            full = self.retention.expire_once() >= self.retention.batch
        except Exception as exc:  # the store or the database: the next period tries again
            log.warning("expiring old logs failed", error=f"{type(exc).__name__}: {exc}")
            full = False
        self._retention_due.ran(now, again=full)
        return busy or full

    def _run(self) -> None:
        while not self._halt.is_set():
            if not self.step():
                self._halt.wait(1.0)

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def _taken(row: Any) -> Taken:
    ref = None
    if row.dag_id is not None:
        ref = TryRef(
            ti_id=row.task_instance_id,
            try_number=row.try_number,
            dag_id=row.dag_id,
            run_id=row.run_id,
            task_id=row.task_id,
            external_id=try_location(
                row.executor,
                row.latest_external_id,
                (row.task_instance_id, row.try_number, row.dag_id, row.run_id, row.task_id),
            ),
            pod=row.pod,
            node=row.node,
        )
    return Taken(row.id, row.attempts, ref)
