"""Engines and sessions: the only place that knows how to reach Postgres."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from sluice.db import prepared


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


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    application_name: str = "sluice",
    prepare_statements: bool = True,
) -> Engine:
    """An engine on psycopg2; the loop's hot statements are prepared per connection
    unless `prepare_statements` is off (behind PgBouncer in transaction mode)."""
    engine = create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        # UPDATE executemany (reports, counter propagation) in pages, not a round trip per row.
        executemany_mode="values_plus_batch",
        connect_args={"application_name": application_name, "connect_timeout": 10},
    )
    if prepare_statements:
        prepared.enable(engine)
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
