"""Engines and sessions: the only place that knows how to reach Postgres."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from sluice.db import plans, prepared


def normalize_url(url: str) -> str:
    """Accept plain `postgresql://` URLs and pin the psycopg2 driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    if not url.startswith("postgresql+psycopg2://"):
        raise ValueError(
            f"database URL {url!r} is not a Postgres URL; "
            "use postgresql://user:password@host:port/dbname (Sluice runs on Postgres only)"
        )
    return url


# How long a connection to a server that went silent (blackholed, not refused) may keep a
# thread waiting. The kernel's defaults are two hours before the first keepalive probe
# of an idle connection and about fifteen minutes of retransmissions on a busy one; a
# tick, the task API's flush or the wake-up listener would hang that long, far past
# `scheduler_dead_after` (30 s), so the replica would be taken for dead while stuck.
# Keepalive probes (idle connections, and a long statement: the server's kernel answers
# them while Postgres works) and `tcp_user_timeout` (data sent and never acknowledged)
# both give up within this bound. libpq's own parameters, set on this side's socket:
# nothing is sent to the server, so a pooler (PgBouncer) sees no startup option.
DEAD_CONNECTION_SECONDS = 20
TCP_KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,  # 10 + 3 * 3 = 19 s of silence on an idle connection
    "tcp_user_timeout": DEAD_CONNECTION_SECONDS * 1000,  # milliseconds
}


def connect_args(url: str, application_name: str = "sluice") -> dict[str, Any]:
    """psycopg2's connect arguments for `url`: TCP_KEEPALIVES, except where the URL's
    query sets a parameter itself (an operator's choice is kept)."""
    given = make_url(normalize_url(url)).query
    keepalives = {key: value for key, value in TCP_KEEPALIVES.items() if key not in given}
    return {"application_name": application_name, "connect_timeout": 10, **keepalives}


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    application_name: str = "sluice",
    prepare_statements: bool = True,
    read_only: bool = False,
) -> Engine:
    """An engine on psycopg2; the loop's hot statements are prepared per connection
    unless `prepare_statements` is off (behind PgBouncer in transaction mode). With
    `read_only` every transaction of its connections is READ ONLY (the UI on a cluster:
    Postgres refuses any write, whatever the role may do)."""
    engine = create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        # UPDATE executemany (reports, counter propagation) in pages, not a round trip per row.
        executemany_mode="values_plus_batch",
        connect_args=connect_args(url, application_name),
    )
    plans.enable(engine)
    if prepare_statements:
        prepared.enable(engine)
    if read_only:
        event.listen(engine, "connect", _read_only)
    return engine


def _read_only(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    cursor.close()
    connection.commit()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
