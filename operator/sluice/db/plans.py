"""Plans that stay right however small a table was when a statement was first planned.

The loop's statements are prepared (ADR 0010), so after a few runs Postgres plans
each one once, from the table sizes and statistics of that moment, and keeps the plan
until the table is analyzed again. A burst into tables that were small then (a new
install, a quiet spell, every benchmark trial) ran on plans made for a handful of
rows: a sequential scan of every task instance to apply sixteen reports, a sort of
every scheduled row to take a window of sixteen. A transaction whose statements are
all meant to go through an index says so, for itself only (ADR 0026): a sequential
scan or a sort is then used only where no index can do the work.

The settings travel with the transaction's next statement, in the same round trip
(ADR 0048): `through_indexes` leaves them on the connection, and the engine's
listener (`enable`, from `make_engine`) puts them in front of whatever statement the
transaction sends next, as one query string of two statements. Postgres runs the
statements of a query string in turn, each planned after the one before it ran, so
the second is planned under the settings, as if they had been sent on their own.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

# `set_config(..., true)` is `SET LOCAL`: undone at the end of the transaction (or of
# the savepoint it ran in). One statement, whichever settings.
_INDEX_PATHS = "SELECT set_config('enable_seqscan', 'off', true)"
_INDEX_ORDER = (
    "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true)"
)
# What goes in front of a statement: the settings and the statement separator.
PREFIXES = tuple(f"{settings}; " for settings in (_INDEX_ORDER, _INDEX_PATHS))
# The settings a connection's transaction asked for and has not yet sent, in `info`.
_PENDING = "sluice_pending_settings"


def through_indexes(session: Session, *, in_index_order: bool = False) -> None:
    """The rest of this transaction plans with index paths wherever an index serves
    (`in_index_order`: also for an ORDER BY an index gives, instead of a sort).

    Sent with the transaction's next statement on an engine from `make_engine`; on
    any other engine, at once."""
    connection = session.connection()
    settings = _INDEX_ORDER if in_index_order else _INDEX_PATHS
    if event.contains(connection.engine, "before_cursor_execute", _with_settings):
        connection.info[_PENDING] = settings
    else:
        connection.exec_driver_sql(settings)


def without_settings(statement: str) -> str:
    """A statement as sent, without the settings put in front of it."""
    for prefix in PREFIXES:
        if statement.startswith(prefix):
            return statement[len(prefix) :]
    return statement


def enable(engine: Engine) -> None:
    """Send the settings `through_indexes` asked for with the next statement."""
    event.listen(engine, "before_cursor_execute", _with_settings, retval=True)
    for name in ("begin", "commit", "rollback", "rollback_savepoint"):
        # Settings never sent end with the transaction (or savepoint) that asked.
        event.listen(engine, name, _drop_pending)


def _with_settings(
    conn: Connection,
    cursor: Any,
    statement: str,
    parameters: Any,
    context: Any,
    executemany: bool,
) -> tuple[str, Any]:
    settings = conn.info.pop(_PENDING, None)
    if settings is None:
        return statement, parameters
    if executemany:
        # A batch sends the statement once per page: the settings go on their own.
        cursor.execute(settings)
        return statement, parameters
    return f"{settings}; {statement}", parameters


def _drop_pending(conn: Connection, *args: Any) -> None:
    if not conn.invalidated:  # an invalidated connection's info went with it
        conn.info.pop(_PENDING, None)
