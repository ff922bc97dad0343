"""Waking idle schedulers: Postgres LISTEN/NOTIFY on one channel.

An idle replica sleeps up to its tick interval; a change that creates work
(a DAG registered or unpaused, a run inserted: triggers from migration 0004;
a run ended, which may let a queued one start: 0005) commits a NOTIFY on
`sluice_wake`, and every listening replica wakes at once instead of at its
next tick. A busy replica asks `pending()` instead, to know whether phase 1
(runs) has anything new to look at before its next periodic look. The tick
interval still bounds everything time-based (schedules, retry delays,
timeouts), so a lost notification costs at most one tick interval, never
correctness.

The listening connection is a dedicated one, detached from the pool. If it
breaks (Postgres restarted, connection killed), the wait falls back to a plain
sleep and the next wait reconnects.
"""

from __future__ import annotations

import contextlib
import select
import time
from typing import cast

import psycopg2
import structlog
from psycopg2.extensions import connection as PgConnection
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from sluice.logs import first_line

CHANNEL = "sluice_wake"

log = structlog.get_logger("sluice.wakeups")


class Waker:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: PgConnection | None = None  # in autocommit, listening

    def wait(self, timeout: float) -> bool:
        """Sleep until a notification or `timeout` seconds; True if a notification came."""
        deadline = time.monotonic() + timeout
        conn = self._listening()
        if conn is None:
            time.sleep(max(0.0, timeout))
            return False
        try:
            while True:
                conn.poll()
                if conn.notifies:
                    conn.notifies.clear()
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                select.select([conn], [], [], left)
        except (psycopg2.Error, OSError, ValueError) as exc:
            log.info("wake-up listener lost; sleeping instead", error=first_line(exc))
            self.close()
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False

    def pending(self) -> bool:
        """Did a notification come since the last look? Never blocks.

        True, too, when it cannot tell: not listening, or listening only from now
        (a notification before that would have been missed).
        """
        conn = self._conn
        if conn is None:
            self._listening()  # heard from now on; what came before is unknown
            return True
        try:
            conn.poll()
        except (psycopg2.Error, OSError, ValueError) as exc:
            log.info("wake-up listener lost", error=first_line(exc))
            self.close()
            return True
        if conn.notifies:
            conn.notifies.clear()
            return True
        return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg2.Error):
                conn.close()

    def _listening(self) -> PgConnection | None:
        if self._conn is not None:
            return self._conn
        try:
            proxied = self.engine.raw_connection()
        # The pool hands out the driver's own error here, not SQLAlchemy's wrapper.
        except (SQLAlchemyError, psycopg2.Error) as exc:
            log.info("wake-up listener unavailable", error=first_line(exc))
            return None
        proxied.detach()  # ours for good: never handed back to the pool
        conn = cast(PgConnection, proxied.dbapi_connection)
        try:
            conn.rollback()
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
        except psycopg2.Error as exc:
            log.info("wake-up listener unavailable", error=first_line(exc))
            conn.close()
            return None
        self._conn = conn
        return conn
