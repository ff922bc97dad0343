"""Alembic environment: online migrations only, one transaction per run."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from sluice.db.engine import connect_args
from sluice.db.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url is set by sluice.db.migrate"
engine = create_engine(
    url, poolclass=pool.NullPool, connect_args=connect_args(url, "sluice-migrations")
)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata)
    with context.begin_transaction():
        # Several replicas may run `sluice db upgrade` at once; one waits for the other.
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7412001)")
        context.run_migrations()
engine.dispose()
