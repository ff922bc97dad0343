"""A DAG's state beside its versions: the runtime pause (ADR 0011) and namespace ownership."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import DagNameTaken, set_paused, sync_dag
from sluice.db.migrate import downgrade, upgrade
from sluice.db.models import Dag
from sluice.handlers import store
from sluice.spec.models import DagManifest
from tests.support import T0, chain, manifest, register

HOURLY = {"schedule": "@hourly", "startDate": "2026-12-01T00:00:00Z"}


def dag(name: str = "p", namespace: str | None = None, **spec: Any) -> DagManifest:
    m = manifest(name, chain("a"), **{**HOURLY, **spec})
    if namespace is None:
        return m
    return m.model_copy(update={"metadata": m.metadata.model_copy(update={"namespace": namespace})})


def paused(sessions: sessionmaker[Session], name: str = "p") -> bool:
    with sessions() as session:
        return session.get_one(Dag, name).is_paused


def pause(sessions: sessionmaker[Session], value: bool, name: str = "p") -> None:
    with sessions() as session:
        assert set_paused(session, name, value)
        session.commit()


# --- pause ------------------------------------------------------------------------------------


def test_a_runtime_pause_survives_a_resync_of_the_same_manifest(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, dag())
    assert not paused(sessions)
    pause(sessions, True)
    register(sessions, dag())
    assert paused(sessions)


def test_a_runtime_unpause_survives_a_resync_of_a_manifest_that_says_paused(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, dag(paused=True))
    assert paused(sessions)  # the manifest's value applies when the DAG is created
    pause(sessions, False)
    register(sessions, dag(paused=True))
    assert not paused(sessions)


def test_a_new_version_with_the_same_paused_value_leaves_the_runtime_state(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, dag())
    pause(sessions, True)
    register(sessions, dag(catchup=True, maxActiveRuns=3))
    assert paused(sessions)


@pytest.mark.parametrize(
    ("start", "runtime", "then", "expected"),
    [
        (False, True, True, True),  # paused by hand, then in the manifest: paused
        (True, False, False, False),  # unpaused by hand, then in the manifest: unpaused
        (False, True, False, True),  # unchanged manifest value: the hand's pause stands
        (True, False, True, False),  # unchanged manifest value: the hand's unpause stands
    ],
)
def test_a_change_of_the_manifest_s_paused_is_applied(
    sessions: sessionmaker[Session], start: bool, runtime: bool, then: bool, expected: bool
) -> None:
    register(sessions, dag(paused=start))
    pause(sessions, runtime)
    register(sessions, dag(paused=then))
    assert paused(sessions) is expected


def test_an_explicit_change_overrides_a_runtime_pause(sessions: sessionmaker[Session]) -> None:
    register(sessions, dag(paused=True))
    register(sessions, dag(paused=False))
    assert not paused(sessions)
    pause(sessions, True)
    register(sessions, dag(paused=True))
    register(sessions, dag(paused=False))  # the manifest changed again: it wins
    assert not paused(sessions)


def test_pausing_in_the_manifest_makes_no_new_version(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        first = sync_dag(session, dag(), T0)
        second = sync_dag(session, dag(paused=True), T0)
        session.commit()
    assert (second.version_id, second.new_version) == (first.version_id, False)
    assert paused(sessions)


def test_a_deleted_dag_object_applied_again_starts_from_its_manifest(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        assert isinstance(store.apply_dag(session, dag(namespace="team-a"), T0), store.AppliedDag)
        session.commit()
    pause(sessions, True)
    with sessions() as session:
        assert store.deactivate_dag(session, "p", "team-a")
        assert isinstance(store.apply_dag(session, dag(namespace="team-a"), T0), store.AppliedDag)
        session.commit()
    assert not paused(sessions)


def test_the_migration_remembers_each_dag_s_manifest_value(db_url: str) -> None:
    """A DAG paused in its manifest and unpaused by hand before the upgrade stays unpaused
    when the same manifest is synced after it."""
    downgrade(db_url, "0005")
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO dag (dag_id, is_paused, is_active, timezone, catchup,"
                    " max_active_runs, max_active_tasks) VALUES ('p', false, true, 'UTC',"
                    " false, 16, 16)"
                )
            )
            version = conn.execute(
                text(
                    "INSERT INTO dag_version (dag_id, version_number, spec_hash, spec)"
                    " VALUES ('p', 1, 'old', CAST(:spec AS jsonb)) RETURNING id"
                ),
                {"spec": '{"paused": true, "tasks": [{"name": "a", "image": "busybox"}]}'},
            ).scalar_one()
            conn.execute(text("UPDATE dag SET current_version_id = :v"), {"v": version})
        upgrade(db_url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT manifest_paused, is_paused FROM dag")).one() == (
                True,
                False,
            )
        sessions = sessionmaker(engine)
        register(sessions, dag(paused=True))
        assert not paused(sessions)
    finally:
        engine.dispose()


# --- namespace ownership ----------------------------------------------------------------------


def owner(sessions: sessionmaker[Session], name: str = "p") -> tuple[str | None, int | None]:
    with sessions() as session:
        row = session.execute(
            select(Dag.namespace, Dag.current_version_id).where(Dag.dag_id == name)
        ).one()
        return row.namespace, row.current_version_id


def test_a_manifest_without_a_namespace_cannot_take_a_namespace_s_dag(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        store.apply_dag(session, dag(namespace="team-a"), T0)
        session.commit()
    before = owner(sessions)
    with sessions() as session, pytest.raises(DagNameTaken) as caught:
        sync_dag(session, dag(catchup=True), T0)
    assert caught.value.issue.path == "metadata.name"
    assert "already used by namespace 'team-a'" in str(caught.value)
    assert owner(sessions) == before == ("team-a", before[1])


def test_the_owner_and_a_free_name_may_sync(sessions: sessionmaker[Session]) -> None:
    register(sessions, dag())  # by the CLI: nobody owns it
    assert owner(sessions)[0] is None
    register(sessions, dag(namespace="team-a"))  # a namespace may claim a CLI DAG
    register(sessions, dag(namespace="team-a", catchup=True))
    assert owner(sessions)[0] == "team-a"
    with sessions() as session:
        assert store.deactivate_dag(session, "p", "team-a")
        session.commit()
    register(sessions, dag())  # its object was deleted: the name is free again
    assert owner(sessions)[0] is None


def test_apply_dag_reports_another_namespace_s_name_as_an_issue(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        store.apply_dag(session, dag(namespace="team-a"), T0)
        problem = store.apply_dag(session, dag(namespace="team-b"), T0)
        session.commit()
    assert not isinstance(problem, store.AppliedDag)
    assert problem.path == "metadata.name"
    assert "already used by namespace 'team-a'" in problem.message
    assert owner(sessions)[0] == "team-a"
