"""A DAG keeps a bounded history of DagRun objects on the real cluster (ADR 0034).

A host-run replica (tests/k8s/replicas.py) with `--dagrun-history-limit 2`
publishes a file DAG's manual runs to DagRun objects in the test's namespace
(a file DAG has no namespace: `--namespace`); once four runs have ended, the
objects of the two that ended last remain, and the database still has all
four, as they ended. No operator runs here, so the objects carry no finalizer:
the delete handler's side is tests/db/test_status_history.py's.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from sluice.db.dags import SpecCache
from sluice.scheduler.triggers import trigger_run
from sluice.status import render, store

from .fleet import Fleet, dag_manifest
from .replicas import Replica, wait_for

pytestmark = pytest.mark.k8s

DAG = "kept"


def _objects(fleet: Fleet) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = fleet.cluster.get_json(
        "dagruns", "-n", fleet.namespace, "-l", f"sluice.io/dag={DAG}"
    )["items"]
    return items


def _ended_runs(fleet: Fleet) -> list[tuple[int, str]]:
    """(run id, state) of the DAG's ended runs, the last to end first."""
    with fleet.sessions() as session:
        rows = session.execute(
            text(
                "SELECT id, state FROM dag_run WHERE dag_id = :dag"
                " AND state IN ('success', 'failed') ORDER BY end_date DESC, id DESC"
            ),
            {"dag": DAG},
        ).all()
    return [(int(row[0]), str(row[1])) for row in rows]


def test_a_dag_keeps_the_objects_of_its_two_newest_ended_runs(fleet: Fleet) -> None:
    manifest = json.loads(dag_manifest(DAG, [{"name": "a", "args": ["true"]}]))
    manifest["spec"]["schedule"] = None  # manual runs only: no hour boundary adds one
    fleet.add_dag(DAG, json.dumps(manifest))
    replica = Replica(
        name="history",
        db_url=fleet.db_url,
        namespace=fleet.namespace,
        kubeconfig=Path(fleet.cluster.kubeconfig),
        image=fleet.cluster.image,
        task_api=fleet.task_api,
        keys_file=fleet.keys,
        dags=fleet.dags,
        extra=["--dagrun-history-limit", "2"],
    )
    fleet.replicas.append(replica)  # stopped with the fleet
    replica.registered(fleet.sessions)
    # Four manual runs, each triggered once the one before has ended.
    now = datetime.now(UTC)
    for hour in range(4):
        with fleet.sessions() as session:
            trigger_run(session, SpecCache(), DAG, now, logical_date=now - timedelta(hours=hour))
            session.commit()

        def ended_so_far(want: int = hour + 1) -> bool | None:
            return len(_ended_runs(fleet)) >= want or None

        wait_for(f"{hour + 1} run(s) of {DAG} to end", ended_so_far, timeout=240)
    ended = _ended_runs(fleet)
    assert len(ended) == 4, fleet.state_dump(DAG)
    assert all(state == "success" for _, state in ended), fleet.state_dump(DAG)

    with fleet.sessions() as session:
        views = store.read_runs(session, [run_id for run_id, _ in ended], fleet.namespace)
    newest = {render.object_name(views[run_id]) for run_id, _ in ended[:2]}
    wait_for(
        "the older runs' DagRun objects to be deleted",
        lambda: {o["metadata"]["name"] for o in _objects(fleet)} == newest or None,
        timeout=120,
    )
    assert all(o["status"]["state"] == "success" for o in _objects(fleet))
    # Nothing was cancelled or created again: the database has every run as it ended,
    # and the deleted objects stay deleted.
    assert _ended_runs(fleet) == ended
    with fleet.sessions() as session:
        gone = session.execute(
            text(
                "SELECT count(*) FROM run_publication p JOIN dag_run r ON r.id = p.dag_run_id"
                " WHERE r.dag_id = :dag AND p.gone"
            ),
            {"dag": DAG},
        ).scalar_one()
    assert gone == 2
    time.sleep(5)  # a few publisher cycles
    assert {o["metadata"]["name"] for o in _objects(fleet)} == newest
    assert replica.alive(), replica.output()
