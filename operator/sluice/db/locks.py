"""Recognising lock errors: a busy lock skips a tick, a deadlock is retried.

Postgres reports `lock_not_available` (55P03) for NOWAIT on a held row and
`deadlock_detected` (40P01) when it breaks a cycle; neither is a bug in the
row, and neither may kill the loop (invariant 6).
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

LOCK_NOT_AVAILABLE = "55P03"
DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"


def pgcode(exc: BaseException) -> str | None:
    if isinstance(exc, DBAPIError):
        return getattr(exc.orig, "pgcode", None)
    return None


def is_lock_not_available(exc: BaseException) -> bool:
    return pgcode(exc) == LOCK_NOT_AVAILABLE


def is_retryable_conflict(exc: BaseException) -> bool:
    return pgcode(exc) in (DEADLOCK_DETECTED, SERIALIZATION_FAILURE)
