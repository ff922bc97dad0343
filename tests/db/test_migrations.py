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


def test_0011_keeps_what_rerun_failed_said_as_reprocess(db_url: str, engine: Engine) -> None:
    downgrade(db_url, "0010")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO dag (dag_id, is_paused, manifest_paused, is_active, timezone,"
                " catchup, max_active_runs, max_active_tasks)"
                " VALUES ('m', false, false, true, 'UTC', false, 16, 16)"
            )
        )
        for rerun_failed in (True, False):
            conn.execute(
                text(
                    "INSERT INTO backfill (dag_id, from_date, to_date, max_active_runs,"
                    " rerun_failed) VALUES ('m', now(), now(), 1, :rerun_failed)"
                ),
                {"rerun_failed": rerun_failed},
            )
    upgrade(db_url)
    with engine.connect() as conn:
        found = conn.execute(text("SELECT rerun_failed, reprocess FROM backfill ORDER BY id"))
        assert [tuple(row) for row in found] == [(True, "failed"), (False, "none")]
