"""Every Postgres connection Sluice makes gives up on a vanished server within seconds.

Without TCP keepalives and `tcp_user_timeout`, a connection to a server that
went silent (blackholed, not refused) waits for the kernel's defaults: two
hours before the first keepalive probe on an idle connection, about fifteen
minutes of retransmissions on a busy one. The thread using it (a tick, the task
API's flush, the wake-up listener) hangs that long, far past every heartbeat
threshold. These tests read the libpq parameters each connection was made with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg2.extensions import connection as PgConnection
from sqlalchemy import Engine, event

from sluice.db import engine as engines
from sluice.db.engine import make_engine
from sluice.db.migrate import upgrade
from sluice.db.wakeups import Waker

EXPECTED = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "3",
    "keepalives_count": "3",
    "tcp_user_timeout": "20000",
}


def _parameters(conn: PgConnection) -> dict[str, str]:
    found: dict[str, str] = conn.info.dsn_parameters
    return {key: found.get(key, "<unset>") for key in EXPECTED}


def test_the_constant_bounds_a_hang_well_under_the_heartbeat_thresholds() -> None:
    settings = engines.TCP_KEEPALIVES
    idle_probe = (
        settings["keepalives_idle"] + settings["keepalives_interval"] * settings["keepalives_count"]
    )
    assert idle_probe <= engines.DEAD_CONNECTION_SECONDS
    assert settings["tcp_user_timeout"] == engines.DEAD_CONNECTION_SECONDS * 1000
    assert engines.DEAD_CONNECTION_SECONDS < 30  # the default scheduler_dead_after


def test_a_pooled_connection_has_them(engine: Engine) -> None:
    raw = engine.raw_connection()
    try:
        assert _parameters(raw.dbapi_connection) == EXPECTED  # type: ignore[arg-type]
    finally:
        raw.close()


def test_the_wake_up_listener_has_them(engine: Engine) -> None:
    waker = Waker(engine)
    try:
        waker.pending()  # opens the listening connection
        assert waker._conn is not None
        assert _parameters(waker._conn) == EXPECTED
    finally:
        waker.close()


def test_a_value_in_the_url_is_kept(db_url: str) -> None:
    separator = "&" if "?" in db_url else "?"
    engine = make_engine(f"{db_url}{separator}keepalives_idle=42")
    try:
        raw = engine.raw_connection()
        try:
            parameters = _parameters(raw.dbapi_connection)  # type: ignore[arg-type]
        finally:
            raw.close()
    finally:
        engine.dispose()
    assert parameters == {**EXPECTED, "keepalives_idle": "42"}


@pytest.fixture
def connect_params() -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments of every DBAPI connect, by any engine, while the test runs."""
    seen: list[dict[str, Any]] = []

    def record(dialect: object, conn_rec: object, cargs: object, cparams: dict[str, Any]) -> None:
        seen.append(dict(cparams))

    event.listen(Engine, "do_connect", record)
    yield seen
    event.remove(Engine, "do_connect", record)


def test_the_migrations_connection_has_them(
    db_url: str, connect_params: list[dict[str, Any]]
) -> None:
    upgrade(db_url)
    assert connect_params
    for params in connect_params:
        assert {key: str(params.get(key, "<unset>")) for key in EXPECTED} == EXPECTED
