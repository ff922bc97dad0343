"""Stored specs keep loading when the spec model changes: schema versions and upgrades on read."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache, StoredSpecError, sync_dag
from sluice.db.migrate import downgrade, upgrade
from sluice.db.models import DagVersion
from sluice.scheduler.runs import create_due_runs
from sluice.spec import upgrades
from sluice.spec.models import DagManifest
from tests.support import T0, manifest, runs

# What the schema-1 model (before `paused` left the versioned spec) stored for this
# manifest, byte for byte, with the hash it computed:
#   {schedule: "@hourly", startDate: 2026-12-01T00:00:00Z, paused: true,
#    defaults: {image: busybox:1.36, retries: 2},
#    tasks: [{name: extract, args: [echo a]}, {name: load, dependsOn: [extract], args: [echo b]}]}
OLD_SPEC = (
    '{"schedule": "@hourly", "timezone": "UTC", "startDate": "2026-12-01T00:00:00Z", '
    '"endDate": null, "catchup": false, "maxActiveRuns": 16, "maxActiveTasks": 16, '
    '"paused": true, "dagrunTimeout": null, "defaults": {"image": "busybox:1.36", "retries": 2}, '
    '"tasks": [{"name": "extract", "image": "busybox:1.36", "command": [], "args": ["echo a"], '
    '"env": [], "resources": {}, "dependsOn": [], "triggerRule": "all_success", "retries": 2, '
    '"retryDelay": "5m", "retryExponentialBackoff": false, "maxRetryDelay": null, '
    '"executionTimeout": null, "pool": "default", "poolSlots": 1, "priorityWeight": 1, '
    '"weightRule": "downstream", "dependsOnPast": false, "waitForDownstream": false, '
    '"skipOnExitCode": [99], "podTemplate": null}, {"name": "load", "image": "busybox:1.36", '
    '"command": [], "args": ["echo b"], "env": [], "resources": {}, "dependsOn": ["extract"], '
    '"triggerRule": "all_success", "retries": 2, "retryDelay": "5m", '
    '"retryExponentialBackoff": false, "maxRetryDelay": null, "executionTimeout": null, '
    '"pool": "default", "poolSlots": 1, "priorityWeight": 1, "weightRule": "downstream", '
    '"dependsOnPast": false, "waitForDownstream": false, "skipOnExitCode": [99], '
    '"podTemplate": null}]}'
)
OLD_HASH = "486727b7c2f76b42831a92c5ccab9d899b822b56481352a7f8bbc5164768180c"
# What the schema-2 model (before `params`) stored for the same manifest is OLD_SPEC without
# `paused`; the hash it computed:
SCHEMA_2_HASH = "f46fe94bc916da3f4aa3c57831ec4f65c22435353d0fde76a41af9e29ed8a40f"


def the_same_manifest_today(**changes: Any) -> DagManifest:
    spec: dict[str, Any] = {
        "schedule": "@hourly",
        "startDate": "2026-12-01T00:00:00Z",
        "paused": True,
        "defaults": {"image": "busybox:1.36", "retries": 2},
    }
    tasks = [
        {"name": "extract", "args": ["echo a"]},
        {"name": "load", "dependsOn": ["extract"], "args": ["echo b"]},
    ]
    return manifest("old", tasks, **{**spec, **changes})


def store_old_dag(
    session: Session, spec: str = OLD_SPEC, schema_version: int = 1, digest: str = OLD_HASH
) -> int:
    """The rows an older release left: a due DAG whose current version is `spec` (paused in
    the manifest, unpaused by hand), as migration 0006 leaves them."""
    session.execute(
        text(
            "INSERT INTO dag (dag_id, is_paused, manifest_paused, is_active, timezone, catchup,"
            " max_active_runs, max_active_tasks, schedule, next_logical_date,"
            " next_data_interval_start, next_data_interval_end, next_run_after)"
            " VALUES ('old', false, true, true, 'UTC', false, 16, 16, '@hourly',"
            " :start, :start, :end, :end)"
        ),
        {"start": T0, "end": T0 + timedelta(hours=1)},
    )
    version_id: int = session.execute(
        text(
            "INSERT INTO dag_version (dag_id, version_number, spec_hash, spec, spec_schema_version)"
            " VALUES ('old', 1, :hash, CAST(:spec AS jsonb), :schema) RETURNING id"
        ),
        {"hash": digest, "spec": spec, "schema": schema_version},
    ).scalar_one()
    session.execute(
        text("UPDATE dag SET current_version_id = :v WHERE dag_id = 'old'"), {"v": version_id}
    )
    return version_id


def test_a_version_stored_by_the_schema_1_model_loads_through_the_chain(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        version_id = store_old_dag(session)
        compiled = SpecCache().get(session, version_id)
        assert [t.name for t in compiled.spec.tasks] == ["extract", "load"]
        assert compiled.spec.tasks[1].depends_on == ["extract"]
        assert compiled.spec.tasks[0].retries == 2
        assert not hasattr(compiled.spec, "paused")  # not part of a version any more
        # and the scheduler creates its runs
        assert create_due_runs(session, SpecCache(), T0 + timedelta(hours=1, minutes=1), 10) == 1
        session.commit()
        (run,) = runs(session, "old")
        assert run.dag_version_id == version_id


def test_the_migration_makes_the_versions_already_stored_schema_1(db_url: str) -> None:
    from sqlalchemy import create_engine

    downgrade(db_url, "0005")
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO dag (dag_id, is_paused, is_active, timezone, catchup,"
                    " max_active_runs, max_active_tasks) VALUES ('old', false, true, 'UTC',"
                    " false, 16, 16)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO dag_version (dag_id, version_number, spec_hash, spec)"
                    " VALUES ('old', 1, :hash, CAST(:spec AS jsonb))"
                ),
                {"hash": OLD_HASH, "spec": OLD_SPEC},
            )
        upgrade(db_url)
        with engine.connect() as conn:
            row = conn.execute(
                text("SELECT id, spec_schema_version FROM dag_version WHERE dag_id = 'old'")
            ).one()
            assert row.spec_schema_version == 1
            with Session(conn) as session:
                assert SpecCache().get(session, row.id).spec.schedule == "@hourly"
            default = conn.execute(
                text(
                    "SELECT column_default FROM information_schema.columns"
                    " WHERE table_name = 'dag_version' AND column_name = 'spec_schema_version'"
                )
            ).scalar_one()
            assert default is None  # a new row must say which shape it was written in
    finally:
        engine.dispose()


def test_a_version_from_a_newer_release_is_a_clear_error(sessions: sessionmaker[Session]) -> None:
    newer = upgrades.SPEC_SCHEMA_VERSION + 1
    with sessions() as session:
        version_id = store_old_dag(session, schema_version=newer)
        with pytest.raises(StoredSpecError) as caught:
            SpecCache().get(session, version_id)
    message = str(caught.value)
    assert message.startswith(f"DAG 'old' version 1 (dag_version.id {version_id}) cannot be")
    assert f"dag_version.spec_schema_version is {newer}, newer than this Sluice reads" in message
    assert "apply the DAG's manifest again" in message


def test_a_spec_the_model_rejects_names_the_field(sessions: sessionmaker[Session]) -> None:
    broken = json.dumps({**json.loads(OLD_SPEC), "tasks": 1})
    with sessions() as session:
        version_id = store_old_dag(session, spec=broken)
        with pytest.raises(StoredSpecError) as caught:
            SpecCache().get(session, version_id)
    assert "spec.tasks: must be a list (e.g. [a, b]), got 1" in str(caught.value)
    assert "apply the DAG's manifest again to store a valid version" in str(caught.value)


def test_a_version_stored_before_the_pod_rules_loads_as_broken(
    sessions: sessionmaker[Session],
) -> None:
    """A podTemplate an earlier release took (host network) starts no try: the DAG is broken."""
    old = json.loads(OLD_SPEC)
    old["tasks"][0]["podTemplate"] = {"spec": {"hostNetwork": True}}
    with sessions() as session:
        store_old_dag(session, spec=json.dumps(old))
        create_due_runs(session, SpecCache(), T0 + timedelta(hours=2), limit=10)
        broken = session.execute(text("SELECT broken_reason FROM dag")).scalar_one()
        assert runs(session, "old") == []
    assert "spec.tasks[0].podTemplate.spec.hostNetwork: a task's pod cannot share" in broken


def test_new_versions_are_stored_in_today_s_shape(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        result = sync_dag(session, the_same_manifest_today(), T0)
        stored = session.get_one(DagVersion, result.version_id)
        assert stored.spec_schema_version == upgrades.SPEC_SCHEMA_VERSION
        assert "paused" not in stored.spec


def test_an_unchanged_manifest_keeps_its_schema_1_version(sessions: sessionmaker[Session]) -> None:
    """The upgrade changes the spec's dump, so its hash; re-syncing must not make a version."""
    with sessions() as session:
        version_id = store_old_dag(session)
        result = sync_dag(session, the_same_manifest_today(), T0)
        assert (result.version_id, result.new_version) == (version_id, False)
        assert sync_dag(session, the_same_manifest_today(catchup=True), T0).new_version
        numbers = session.execute(
            select(DagVersion.version_number).where(DagVersion.dag_id == "old")
        ).scalars()
        assert sorted(numbers) == [1, 2]


def test_an_unchanged_manifest_keeps_its_schema_2_version(sessions: sessionmaker[Session]) -> None:
    """Schema 3 added `params` (an empty object when none are given), so the dump of every
    spec changed; a DAG applied again without params keeps its version."""
    schema_2 = {key: value for key, value in json.loads(OLD_SPEC).items() if key != "paused"}
    with sessions() as session:
        version_id = store_old_dag(
            session, spec=json.dumps(schema_2), schema_version=2, digest=SCHEMA_2_HASH
        )
        assert SpecCache().get(session, version_id).spec.params == {}
        result = sync_dag(session, the_same_manifest_today(), T0)
        assert (result.version_id, result.new_version) == (version_id, False)
        changed = sync_dag(session, the_same_manifest_today(params={"mode": "full"}), T0)
        assert changed.new_version
        stored = session.get_one(DagVersion, changed.version_id)
        assert (stored.spec["params"], stored.spec_schema_version) == ({"mode": "full"}, 3)
