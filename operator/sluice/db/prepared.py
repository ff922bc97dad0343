"""The loop's hot statements, prepared once per connection (SQL `PREPARE` / `EXECUTE`).

psycopg2 sends every statement as text, so Postgres parses and plans it on
every call. For the scheduler's statements on small batches, planning costs
about as much as running them (ADR 0010). A `Prepared` statement is prepared
the first time it runs on a connection and executed by name from then on;
Postgres keeps its plan for the session.

Preparing is per engine (`make_engine(prepare_statements=...)`): behind a pooler
that hands each transaction a different server connection (PgBouncer in
transaction mode), a statement prepared on one would be missing on the next, so
such deployments turn it off and the same SQL runs as plain text.

A `PREPARE` is not undone by a rollback, so a connection's set of prepared
names stays true whatever happens to the transaction that prepared them; a new
connection (a reconnect after a Postgres restart) starts with an empty set.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from sqlalchemy import CursorResult, Engine, event, text
from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import ConnectionPoolEntry

from sluice.db import plans

# The names prepared on one DBAPI connection, in its pool entry's `info`.
_PREPARED = "sluice_prepared"
# Positional $n parameters, numbered once per name, by SQLAlchemy's own parser.
_DOLLAR = pg_dialect.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]
# Each name's EXECUTE text, known after its first PREPARE on any connection: every
# argument cast to the type Postgres inferred for it (a list of NULLs is text[] until cast).
_EXECUTE: dict[str, str] = {}
# SQLSTATE 26000: "prepared statement ... does not exist".
_UNKNOWN_STATEMENT = "26000"
# Every statement by name, for `sql_of`.
_BY_NAME: dict[str, Prepared] = {}


def enable(engine: Engine) -> None:
    """Prepare `Prepared` statements on this engine's connections."""

    @event.listens_for(engine, "connect")
    def _fresh(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[_PREPARED] = set()


class Prepared:
    """One SQL text with `:name` parameters, run prepared where the engine allows it."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.text = text(sql)
        compiled = self.text.compile(dialect=_DOLLAR)
        self.params: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.name = "sluice_" + hashlib.sha256(sql.encode()).hexdigest()[:20]
        self._prepare = f"PREPARE {self.name} AS {compiled}"
        _BY_NAME[self.name] = self

    def __call__(self, session: Session, params: Mapping[str, Any] | None = None) -> Any:
        """Execute in the session's transaction; returns the result, as `session.execute`
        does for a `text()` (which does not autoflush pending ORM changes either)."""
        connection = session.connection()
        prepared = connection.connection.info.get(_PREPARED)
        if prepared is None:  # preparing is off for this engine
            return session.execute(self.text, dict(params or {}))
        self._ready(connection, prepared)
        try:
            result: CursorResult[Any] = connection.exec_driver_sql(
                _EXECUTE[self.name], dict(params or {}) or ()
            )
        except DBAPIError as exc:
            if getattr(exc.orig, "pgcode", None) == _UNKNOWN_STATEMENT:
                # Deallocated behind our back (`DEALLOCATE ALL`, a pooler that swapped the
                # server connection): prepare everything again on the next call.
                prepared.clear()
            raise
        return result

    def explain(self, session: Session, params: Mapping[str, Any] | None = None) -> str:
        """Postgres's plan for this statement as `__call__` runs it (`EXPLAIN EXECUTE`:
        the prepared plan, generic or custom as the session's `plan_cache_mode` has it;
        the plain text's plan when preparing is off), for tests and benchmarks. Prepares
        it on the session's connection first if need be, without running it."""
        connection = session.connection()
        prepared = connection.connection.info.get(_PREPARED)
        if prepared is None:
            rows = session.execute(text(f"EXPLAIN {self.sql}"), dict(params or {}))
        else:
            self._ready(connection, prepared)
            rows = connection.exec_driver_sql(
                f"EXPLAIN {_EXECUTE[self.name]}", dict(params or {}) or ()
            )
        return "\n".join(row[0] for row in rows)

    def _ready(self, connection: Any, prepared: set[str]) -> None:
        """Prepared on this connection, and its `EXECUTE` text known."""
        if self.name not in prepared:
            connection.exec_driver_sql(self._prepare)
            if self.name not in _EXECUTE:
                _EXECUTE[self.name] = self._execute_text(connection)
            prepared.add(self.name)

    def _execute_text(self, connection: Any) -> str:
        if not self.params:
            return f"EXECUTE {self.name}"
        types = connection.exec_driver_sql(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = %(name)s",
            {"name": self.name},
        ).scalar_one()
        args = ", ".join(
            f"CAST(%({param})s AS {type_})" for param, type_ in zip(self.params, types, strict=True)
        )
        return f"EXECUTE {self.name}({args})"


def sql_of(statement: str) -> str | None:
    """What a statement sent to Postgres runs: the SQL behind an `EXECUTE`, the statement
    itself otherwise, None for the one-off work of preparing (for logs and tests); the
    planner settings sent in front of a statement (`plans.through_indexes`) left out."""
    statement = plans.without_settings(statement)
    if statement.startswith("PREPARE ") or "FROM pg_prepared_statements" in statement:
        return None
    if statement.startswith("EXECUTE "):
        return _BY_NAME[statement.split()[1].split("(")[0]].sql
    return statement
