"""Plans that stay right however small a table was when a statement was first planned.

The loop's statements are prepared (ADR 0010), so after a few runs Postgres plans
each one once, from the table sizes and statistics of that moment, and keeps the plan
until the table is analyzed again. A burst into tables that were small then (a new
install, a quiet spell, every benchmark trial) ran on plans made for a handful of
rows: a sequential scan of every task instance to apply sixteen reports, a sort of
every scheduled row to take a window of sixteen. A transaction whose statements are
all meant to go through an index says so, for itself only (ADR 0026): a sequential
scan or a sort is then used only where no index can do the work.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

# `set_config(..., true)` is `SET LOCAL`: undone at the end of the transaction (or of
# the savepoint it ran in). One statement, whichever settings.
_INDEX_PATHS = "SELECT set_config('enable_seqscan', 'off', true)"
_INDEX_ORDER = (
    "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true)"
)


def through_indexes(session: Session, *, in_index_order: bool = False) -> None:
    """The rest of this transaction plans with index paths wherever an index serves
    (`in_index_order`: also for an ORDER BY an index gives, instead of a sort)."""
    session.connection().exec_driver_sql(_INDEX_ORDER if in_index_order else _INDEX_PATHS)
