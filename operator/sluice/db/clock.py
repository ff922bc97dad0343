"""The database's clock, for everything replicas compare across machines.

Replicas judge each other by timestamps: a replica is dead when its heartbeat
is older than `scheduler_dead_after`, a try is a zombie when its heartbeat is
older than `zombie_threshold`, a run is due when `next_run_after` has passed.
Each of those timestamps is written by one replica and read by another, so
they must come from one clock. With each replica's wall clock, a replica 30 s
behind writes heartbeats that every other replica finds 30 s stale (it is
declared dead while it works, and its tries are taken or failed), and a
replica 30 s ahead finds every other replica dead and creates runs before
their data interval has ended.

`DatabaseClock` reads Postgres's `clock_timestamp()` once every `resync`
seconds and carries it forward on this machine's monotonic clock, so the
replica's wall clock (wrong, or stepped by NTP) is never used once the
database has answered. Until it first answers, the wall clock is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from sluice.logs import first_line

log = structlog.get_logger("sluice.db")


def wall_clock() -> datetime:
    return datetime.now(UTC)


class DatabaseClock:
    """A callable returning the database's time now (an aware UTC datetime)."""

    def __init__(
        self,
        engine: Engine,
        *,
        resync: float = 60.0,
        retry: float = 1.0,
        fallback: Callable[[], datetime] = wall_clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.resync = resync
        self.retry = retry
        self._fallback = fallback
        self._monotonic = monotonic
        self._base: datetime | None = None  # the database's time at `_base_at`
        self._base_at = 0.0
        self._next_sync = float("-inf")
        self._lock = threading.Lock()  # the task API's thread reads it too

    def __call__(self) -> datetime:
        with self._lock:
            now = self._monotonic()
            if now >= self._next_sync:
                self._sync(now)
            if self._base is None:
                return self._fallback()
            return self._base + timedelta(seconds=self._monotonic() - self._base_at)

    @property
    def synced(self) -> bool:
        return self._base is not None

    def offset(self) -> float | None:
        """How far the database's clock is ahead of this machine's wall clock (seconds)."""
        if self._base is None:
            return None
        return (self() - self._fallback()).total_seconds()

    def _sync(self, now: float) -> None:
        try:
            with self.engine.connect() as conn:
                before = self._monotonic()
                found = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
                after = self._monotonic()
        except DBAPIError as exc:
            self._next_sync = now + self.retry
            log.info("database clock not read; trying again", error=first_line(exc))
            return
        self._base = found.astimezone(UTC)
        self._base_at = (before + after) / 2  # the statement ran about halfway through
        self._next_sync = after + self.resync
