"""Which run a DagRun object is: only the one the database ties to its uid and namespace.

Each case is an object someone could create (forged name, dagName, label,
annotation, in another namespace, or the same name again with a new uid) and
the rows the database holds; tests/db/test_dagrun_tenancy.py runs the same
cases through the kopf handlers on Postgres.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sluice.handlers.objects import DagRunObject, run_id_for_object
from sluice.handlers.ownership import Owned, Pending, RunRecord, Unknown, decide

SCHEDULED = "scheduled__2026-12-01T00:00:00+00:00"
NAME = "etl-scheduled-2026-12-01-abc"

USERS = RunRecord(
    id=1,
    dag_id="etl",
    run_id="manual__nightly__uid-a-1",
    state="running",
    dag_namespace="team-a",
    object_namespace="team-a",
    object_name="nightly",
    object_uid="uid-a-1",
    published_namespace="team-a",
    published_uid="uid-a-1",
    published_gone=False,
    scheduler_object_name=None,
)
SCHEDULERS = RunRecord(
    id=2,
    dag_id="etl",
    run_id=SCHEDULED,
    state="running",
    dag_namespace="team-a",
    object_namespace=None,
    object_name=None,
    object_uid=None,
    published_namespace="team-a",
    published_uid="uid-s-1",
    published_gone=False,
    scheduler_object_name=NAME,
)
COPIED = {"labelled_scheduler": True, "run_id_annotation": SCHEDULED}


def _obj(namespace: str, name: str, uid: str, **claims: object) -> DagRunObject:
    return DagRunObject(namespace, name, uid, dag_name="etl", **claims)  # type: ignore[arg-type]


def test_the_object_that_triggered_a_run_and_the_schedulers_own_are_theirs() -> None:
    runs = [USERS, SCHEDULERS]
    assert decide(_obj("team-a", "nightly", "uid-a-1"), runs) == Owned(USERS, by_scheduler=False)
    mine = _obj("team-a", NAME, "uid-s-1", **COPIED)
    assert decide(mine, runs) == Owned(SCHEDULERS, by_scheduler=True)


@pytest.mark.parametrize(
    "forged",
    [
        _obj("team-b", "nightly", "uid-b-1"),  # team A's name and dagName, in team B
        _obj("team-b", NAME, "uid-b-2", **COPIED),  # the scheduler's object copied to team B
        _obj("team-a", "nightly", "uid-a-2"),  # team A's name again: a new object
        _obj("team-a", NAME, "uid-a-3", **COPIED),  # a copy of the scheduler's, same namespace
        _obj("team-a", "other", "uid-a-4", run_id_annotation="manual__nightly__uid-a-1"),
        _obj("team-b", "nightly", "uid-a-1"),  # even the uid, in another namespace
        _obj("team-a", "nightly", ""),  # no uid at all
    ],
)
def test_forged_and_recreated_objects_are_no_ones(forged: DagRunObject) -> None:
    verdict = decide(forged, [USERS, SCHEDULERS])
    assert isinstance(verdict, Unknown), verdict
    assert f"{forged.namespace}/{forged.name}" in verdict.reason


def test_a_labelled_object_the_scheduler_did_not_make_is_told_how_to_trigger() -> None:
    verdict = decide(_obj("team-a", NAME, "uid-a-3", **COPIED), [SCHEDULERS])
    assert isinstance(verdict, Unknown)
    assert "remove the label sluice.io/origin" in verdict.reason


def test_the_schedulers_object_before_its_uid_is_recorded_is_pending_never_owned() -> None:
    unrecorded = replace(SCHEDULERS, published_namespace=None, published_uid=None)
    assert decide(_obj("team-a", NAME, "uid-s-1", **COPIED), [unrecorded]) == Pending(unrecorded)
    for not_it in (
        _obj("team-b", NAME, "uid-s-1", **COPIED),  # another namespace than the DAG's
        _obj("team-a", "another-name", "uid-s-1", **COPIED),  # not the name it makes
        _obj("team-a", NAME, "uid-s-1", run_id_annotation=SCHEDULED),  # no label
    ):
        assert isinstance(decide(not_it, [unrecorded]), Unknown), not_it
    gone = replace(unrecorded, published_gone=True)  # the publisher found it deleted
    assert isinstance(decide(_obj("team-a", NAME, "uid-s-2", **COPIED), [gone]), Unknown)


def test_a_run_triggered_before_uids_were_kept_is_found_by_its_run_id() -> None:
    uid = "0123456789abcdef"
    legacy = replace(
        USERS,
        run_id=run_id_for_object("nightly", uid),
        object_uid=None,
        published_uid=None,
        published_namespace=None,
    )
    assert decide(_obj("team-a", "nightly", uid), [legacy]) == Owned(legacy, by_scheduler=False)
    recreated = _obj("team-a", "nightly", "fedcba9876543210")
    assert isinstance(decide(recreated, [legacy]), Unknown)
    assert isinstance(decide(_obj("team-b", "nightly", uid), [legacy]), Unknown)
