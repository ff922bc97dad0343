"""A Postgres outage longer than the heartbeat kill threshold kills no running pod (ADR 0029).

While Postgres is down no heartbeat is recorded: the task pods' sidecars get
503 (or no answer while the scheduler pods are not ready) and retry. The first
stale-try sweep after it found every running try silent since before the
outage and killed its pod as a zombie, unless the sidecars' heartbeats happened
to get in first. A release of its own, with the scheduler's test timings
(a kill threshold of 20 s, a replica dead after 10 s), and an outage of 45 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .chart import Release, installed
from .cluster import Cluster
from .replicas import wait_for
from .test_chart_operations import VALUES, _sleepers

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]

OUTAGE = 45  # seconds Postgres is away, over --heartbeat-kill-threshold 20 (VALUES)
TASKS = 10


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster) -> Iterator[Release]:
    with installed(k8s_cluster) as release:
        release.install(*VALUES)
        yield release


def _count(rel: Release, query: str) -> int:
    ((value,),) = rel.sql(query)
    return int(value)


def _postgres_ready(rel: Release) -> bool:
    for pod in rel.pods("postgres"):
        conditions = pod["status"].get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return True
    return False


def test_a_postgres_outage_longer_than_the_kill_threshold_kills_no_running_pod(
    rel: Release,
) -> None:
    dag = "postgres-outage"
    rel.apply(_sleepers(dag, TASKS, 240))
    # Every try running, and its pod's sidecar heard from: the pods run through the outage.
    beating = (
        "SELECT count(*) FROM task_instance"
        f" WHERE dag_id = '{dag}' AND state = 'running' AND last_heartbeat_at > start_date"
    )
    wait_for(
        "every task's pod heartbeating",
        lambda: _count(rel, beating) == TASKS or None,
        timeout=300,
        every=2,
    )

    postgres = f"{rel.fullname}-postgres"
    rel.k("scale", "statefulset", postgres, "--replicas=0")
    wait_for("Postgres gone", lambda: not rel.pods("postgres") or None, timeout=120, every=1)
    time.sleep(OUTAGE)
    rel.k("scale", "statefulset", postgres, "--replicas=1")
    wait_for("Postgres back and ready", lambda: _postgres_ready(rel) or None, 240, every=2)

    run = rel.wait_run(dag, timeout=600)
    assert run["status"]["state"] == "success", f"{rel.dump()}\n{run['status']}"
    rel.assert_each_try_started_once(dag, run, tasks=TASKS)
    retried = f"SELECT count(*) FROM task_instance WHERE dag_id = '{dag}' AND try_number <> 1"
    assert _count(rel, retried) == 0, rel.unsuccessful_tries()
    zombies = (
        "SELECT count(*) FROM task_try tt JOIN task_instance ti ON ti.id = tt.task_instance_id"
        f" WHERE ti.dag_id = '{dag}' AND tt.evidence IS NOT NULL"
    )
    assert _count(rel, zombies) == 0, rel.unsuccessful_tries()
