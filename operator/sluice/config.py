"""Process-level settings read once at the edge (CLI), then passed down explicitly."""

from __future__ import annotations

import os

DATABASE_URL_ENV = "SLUICE_DATABASE_URL"


class ConfigError(ValueError):
    pass


def require_database_url(url: str | None) -> str:
    """The URL given on the command line, else $SLUICE_DATABASE_URL, else a clear error."""
    value = url or os.environ.get(DATABASE_URL_ENV)
    if not value:
        raise ConfigError(
            f"no database: pass --database-url postgresql://user:pass@host:5432/db "
            f"or set {DATABASE_URL_ENV}"
        )
    return value
