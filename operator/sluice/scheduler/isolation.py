"""One bad row must not stop every replica: batches fall back to one item at a time.

The loop works in batches for speed. A batch first runs as it is, with no
savepoint (two round trips saved on every tick). If it fails for a reason that
is not a lock conflict (a corrupt spec, a constraint the row breaks), it raises
`BatchFailed`: the loop rolls the transaction back and runs it again with
`ISOLATE` set in the session's info, and then the batch is done item by item,
each in its own savepoint; the items that still fail are logged and left out,
and everything else goes through (invariant 6). Lock conflicts are re-raised:
the loop skips or retries the whole transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import structlog
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from sluice.db import locks
from sluice.logs import first_line

log = structlog.get_logger("sluice.scheduler")

Item = TypeVar("Item")
Result = TypeVar("Result")


def _is_lock_conflict(exc: BaseException) -> bool:
    return isinstance(exc, DBAPIError) and (
        locks.is_lock_not_available(exc) or locks.is_retryable_conflict(exc)
    )


ISOLATE = "sluice.isolate_items"


class BatchFailed(Exception):
    """A batch failed outside a savepoint: redo the transaction with `ISOLATE` set."""


def batch_or_each(
    session: Session,
    items: Sequence[Item],
    work: Callable[[Sequence[Item]], list[Result]],
    *,
    what: str,
    describe: Callable[[Item], object],
) -> tuple[list[Result], list[Item]]:
    """Run `work` on all items; isolated, on each alone. Returns (results, bad items)."""
    if not session.info.get(ISOLATE):
        try:
            return work(items), []
        except Exception as exc:
            if _is_lock_conflict(exc):
                raise
            raise BatchFailed(f"{what}: {first_line(exc)}") from exc
    results: list[Result] = []
    bad: list[Item] = []
    for item in items:
        try:
            with session.begin_nested():
                results.extend(work([item]))
        except Exception as exc:
            if _is_lock_conflict(exc):
                raise
            log.error(f"{what} failed; left out", item=describe(item), error=first_line(exc))
            bad.append(item)
    return results, bad
