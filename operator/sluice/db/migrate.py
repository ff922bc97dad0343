"""Schema migrations: Alembic, driven from code so no alembic.ini has to be found."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from sluice.db.engine import normalize_url

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # ConfigParser interpolation would read '%' in passwords as syntax.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)
