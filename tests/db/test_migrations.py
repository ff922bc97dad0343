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


def test_migrated_storage_parameters_match_the_models(engine: Engine) -> None:
    """Alembic's comparison leaves out a table's storage parameters (`fillfactor`)."""
    with engine.connect() as conn:
        migrated = dict(
            conn.execute(
                text(
                    "SELECT relname, reloptions FROM pg_class"
                    " WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace"
                )
            ).all()
        )
    modelled = {
        name: sorted(f"{k}={v}" for k, v in table.dialect_options["postgresql"]["with"].items())
        for name, table in Base.metadata.tables.items()
        if table.dialect_options["postgresql"]["with"]
    }
    assert {"task_instance", "task_try"} <= set(modelled)
    assert {name: sorted(o) for name, o in migrated.items() if o} == modelled


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


def test_0013_keeps_the_uid_of_each_users_object_its_run_id_was_made_from(
    db_url: str, engine: Engine
) -> None:
    """A user's run gets its DAG's namespace, and its publication's uid only where its run
    id was made from that uid (a later object under the same name is another object); the
    scheduler's runs get neither (their object is known by run_publication.uid)."""
    downgrade(db_url, "0012")
    runs = [  # (run id, object name, the uid its publication recorded)
        ("manual__mine__abcdef12", "mine", "abcdef12-0000-4000-8000-000000000001"),
        ("manual__again__11111111", "again", "22222222-0000-4000-8000-000000000002"),
        ("scheduled__2026-12-01", None, "33333333-0000-4000-8000-000000000003"),
    ]
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO dag (dag_id, namespace, is_paused, manifest_paused, is_active,"
                " timezone, catchup, max_active_runs, max_active_tasks)"
                " VALUES ('m', 'team-a', false, false, true, 'UTC', false, 16, 16);"
                "INSERT INTO dag_version (dag_id, version_number, spec_hash, spec,"
                " spec_schema_version, created_at) VALUES ('m', 1, 'h', '{}', 2, now())"
            )
        )
        for day, (run_id, name, uid) in enumerate(runs, start=1):
            conn.execute(
                text(
                    "INSERT INTO dag_run (dag_id, run_id, run_type, state, dag_version_id,"
                    " logical_date, data_interval_start, data_interval_end, conf, tasks_total,"
                    " tasks_done, object_name)"
                    " SELECT 'm', :run_id, 'manual', 'running', id, :at, :at, :at, '{}', 0, 0,"
                    " :name FROM dag_version;"
                    "INSERT INTO run_publication (dag_run_id, namespace, object_name, uid)"
                    " SELECT id, 'team-a', coalesce(:name, 'made'), :uid FROM dag_run"
                    " WHERE run_id = :run_id"
                ),
                {"run_id": run_id, "name": name, "uid": uid, "at": f"2026-12-0{day}T00:00:00Z"},
            )
    upgrade(db_url)
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT run_id, object_namespace, object_uid FROM dag_run ORDER BY id")
        )
        assert [tuple(row) for row in found] == [
            ("manual__mine__abcdef12", "team-a", runs[0][2]),
            ("manual__again__11111111", "team-a", None),
            ("scheduled__2026-12-01", None, None),
        ]
