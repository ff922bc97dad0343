"""The Alembic migrations build exactly the schema the models describe, and go down again."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, text

from sluice.db.migrate import downgrade, upgrade
from sluice.db.models import Base


def test_migrated_schema_matches_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_migrations_go_down_and_up_again(db_url: str, engine: Engine) -> None:
    downgrade(db_url, "base")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('task_instance')")).scalar() is None
    upgrade(db_url)
    with engine.connect() as conn:
        assert (
            conn.execute(text("SELECT slots FROM slot_pool WHERE name = 'default'")).scalar() == 128
        )
