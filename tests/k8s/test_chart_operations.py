"""What happens to a `helm install`ed Sluice while it works (issue 13's end-to-end suite).

One release for the module (installed once, uninstalled after), with the
scheduler's test timings (`replicas.FAST`: heartbeats every 2 s, zombies after
8 s, a replica dead after 10 s) so that zombies and adoption are seen within
seconds, and a 45 s pod start timeout. Each test runs DAGs of its own through
one disturbance a user or the cluster causes: scheduler pods killed, the
Deployment scaled, a task pod deleted, an image that does not exist, `helm
upgrade`, the bundled Postgres restarted. After each: every run ended as it
must, and no (task instance, try) has two Jobs. The first test applies
examples/ as the README's quick start does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from .chart import Release, installed
from .cluster import ROOT, Cluster
from .fleet import dag_manifest
from .replicas import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]

FAST_SCHEDULER_ARGS = [
    "--heartbeat-interval", "2",
    "--zombie-threshold", "8",
    "--zombie-check-interval", "2",
    "--heartbeat-kill-threshold", "20",
    "--scheduler-dead-after", "10",
]  # fmt: skip
VALUES = [
    "--set-json", "scheduler.extraArgs=" + json.dumps(FAST_SCHEDULER_ARGS),
    "--set", "tasks.podStartTimeout=45",
]  # fmt: skip


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster) -> Iterator[Release]:
    with installed(k8s_cluster) as release:
        release.install(*VALUES)
        yield release


def _run_states(rel: Release, dag: str) -> list[str]:
    return [
        (item.get("status") or {}).get("state", "")
        for item in rel.json("dagruns")["items"]
        if item["spec"]["dagName"] == dag
    ]


def _sleepers(dag: str, n: int, seconds: int) -> str:
    return dag_manifest(dag, [{"name": f"t{i}", "args": [f"sleep {seconds}"]} for i in range(n)])


def test_the_examples_run_as_jobs_of_the_scheduler_pods(rel: Release) -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    for path in examples:
        rel.apply(path.read_text())
    rel.k("create", "-f", str(ROOT / "examples" / "runs" / "hello-manual.yaml"))
    dags = {str(yaml.safe_load(path.read_text())["metadata"]["name"]) for path in examples}
    expected = {dag: 2 if dag == "hello" else 1 for dag in dags}  # hello: also the manual run

    def all_ended() -> bool:
        states = {dag: _run_states(rel, dag) for dag in dags}
        return all(
            len([s for s in states[dag] if s in ("success", "failed")]) >= n
            for dag, n in expected.items()
        )

    try:
        wait_for("every example run to end", all_ended, timeout=600, every=3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{rel.dump()}") from None
    for dag in dags:
        # (A run started since, if the test crossed the hour, may still be going.)
        states = _run_states(rel, dag)
        assert "failed" not in states, f"{dag}: {rel.dump()}"
        assert states.count("success") >= expected[dag], f"{dag}: {rel.dump()}"
        assert rel.jobs(dag), dag
    # Every try was started by one of this release's scheduler pods.
    starters = {
        row[0]
        for row in rel.sql(
            "SELECT DISTINCT j.hostname FROM task_try t JOIN scheduler_job j"
            " ON j.id = t.scheduler_job_id"
        )
    }
    assert starters
    assert all(h.startswith(f"{rel.fullname}-scheduler-") for h in starters), starters


def test_a_deleted_task_pod_is_retried_and_a_bad_image_fails_with_its_reason(
    rel: Release,
) -> None:
    dag = "zombie-and-bad-image"
    manifest = json.loads(
        dag_manifest(
            dag,
            [
                {
                    "name": "gone",
                    "retries": 1,
                    "retryDelay": "0s",
                    "args": ['if [ "$SLUICE_TRY_NUMBER" = 1 ]; then sleep 600; fi; echo ok'],
                },
                {"name": "bad", "image": "localhost/sluice-no-such-image:1", "args": ["true"]},
            ],
        )
    )
    rel.apply(json.dumps(manifest))

    def first_try_running() -> str | None:
        rows = rel.sql(
            "SELECT ti.id FROM task_instance ti WHERE ti.dag_id = "
            f"'{dag}' AND ti.task_id = 'gone' AND ti.state = 'running'"
            " AND ti.try_number = 1 AND ti.last_heartbeat_at > ti.start_date"
        )
        return rows[0][0] if rows else None

    ti = wait_for("the first try heartbeating", first_try_running, timeout=240, every=2)
    # Gone at once, as a node's loss does: no exit code, only the two signals.
    selector = f"sluice.io/ti={ti},sluice.io/try=1"
    rel.k("delete", "pod", "-l", selector, "--grace-period=0", "--force")

    # That try's run.
    run_id = rel.sql(
        f"SELECT r.run_id FROM dag_run r JOIN task_instance ti ON ti.dag_run_id = r.id"
        f" WHERE ti.id = {ti}"
    )[0][0]
    run = rel.wait_run(dag, timeout=300, run_id=run_id)
    assert run["status"]["state"] == "failed", run["status"]  # `bad` failed
    tries = rel.sql(
        "SELECT try_number, state, coalesce(reason, '') FROM task_try"
        f" WHERE task_instance_id = {ti} ORDER BY try_number"
    )
    assert [(t[0], t[1]) for t in tries] == [("1", "failed"), ("2", "success")], tries
    assert tries[0][2].startswith("zombie:"), tries
    bad = rel.sql(
        "SELECT ti.state, coalesce(ti.reason, '') FROM task_instance ti"
        " JOIN dag_run r ON r.id = ti.dag_run_id"
        f" WHERE r.dag_id = '{dag}' AND r.run_id = '{run_id}' AND ti.task_id = 'bad'"
    )[0]
    assert bad[0] == "failed", bad
    assert bad[1].startswith(("ErrImagePull", "ImagePullBackOff")), bad
    # What a user reads: `sluice dags runs` in a scheduler pod shows the reason.
    shown = rel.k(
        "exec", f"deploy/{rel.fullname}-scheduler", "-c", "scheduler", "--",
        "sluice", "dags", "runs", dag, "--run", run_id,
    )  # fmt: skip
    assert "ErrImagePull" in shown or "ImagePullBackOff" in shown, shown
    rel.assert_each_try_started_once(dag)


def test_200_tasks_keep_their_pool_limit_through_scheduler_pod_kills(
    rel: Release, k8s_cluster: Cluster
) -> None:
    pool, slots = f"p-{rel.name}", 10
    k8s_cluster.apply(
        json.dumps(
            {
                "apiVersion": "sluice.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": pool},
                "spec": {"slots": slots, "description": "test_chart_operations"},
            }
        )
    )
    try:
        wait_for(
            "the Pool in the database",
            lambda: rel.sql(f"SELECT slots FROM slot_pool WHERE name = '{pool}'") == [[str(slots)]],
            timeout=120,
            every=2,
        )
        dags = [f"load-{i}" for i in range(4)]
        for dag in dags:
            tasks = [{"name": f"t{i:02d}", "pool": pool, "args": ["true"]} for i in range(50)]
            rel.apply(dag_manifest(dag, tasks))

        # Sample the pool's occupancy (queued + running slots, as the critical section
        # counts them) while the kills happen.
        peak = 0
        samples = 0
        stop = threading.Event()
        errors: list[str] = []

        def sample() -> None:
            nonlocal peak, samples
            while not stop.is_set():
                try:
                    rows = rel.sql(
                        "SELECT coalesce(sum(pool_slots), 0) FROM task_instance"
                        f" WHERE pool = '{pool}' AND state IN ('queued', 'running')"
                    )
                    peak = max(peak, int(rows[0][0]))
                    samples += 1
                except Exception as exc:  # kubectl exec failed: note it, go on
                    errors.append(str(exc)[:200])
                stop.wait(1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        killed: dict[str, set[str]] = {}
        runs: dict[str, dict[str, Any]] = {}
        try:
            for _ in range(3):
                held = wait_for(
                    "a scheduler pod running a try", rel.running_tries_by_host, 300, every=1
                )
                victim = sorted(held)[0]
                killed[victim] = held[victim]
                rel.k("delete", "pod", victim, "--grace-period=0", "--force")
                time.sleep(30)
            for dag in dags:
                runs[dag] = run = rel.wait_run(dag, timeout=900)
                assert run["status"]["state"] == "success", f"{dag}: {rel.dump()}\n{run['status']}"
        finally:
            stop.set()
            sampler.join(10)
        assert samples >= 30, (samples, errors)
        assert 0 < peak <= slots, f"the pool held {peak} slots at once, limit {slots}"
        for dag in dags:
            rel.assert_each_try_started_once(dag, runs[dag], tasks=50)
        adopted = set().union(*killed.values())
        assert set(rel.task_states(adopted).values()) == {("success", 1)}, killed
    finally:
        k8s_cluster.kubectl("delete", "pool", pool, "--wait=false", check=False)


def _live_scheduler_pods(rel: Release) -> set[str]:
    """The scheduler pods not being deleted."""
    return {
        p["metadata"]["name"]
        for p in rel.pods("scheduler")
        if not p["metadata"].get("deletionTimestamp")
    }


def _scheduler_deployment_ready(rel: Release, replicas: int) -> bool:
    status = rel.json(f"deployment/{rel.fullname}-scheduler").get("status") or {}
    return (
        status.get("readyReplicas") == replicas
        and status.get("updatedReplicas") == replicas
        and len(_live_scheduler_pods(rel)) == replicas
    )


def test_scaling_the_schedulers_3_1_3_mid_run_loses_nothing(rel: Release) -> None:
    dag = "scale-3-1-3"
    rel.apply(_sleepers(dag, 20, 6))
    wait_for("task Jobs running", lambda: rel.running_jobs(dag), timeout=240, every=1)
    deployment = f"deployment/{rel.fullname}-scheduler"
    rel.k("scale", deployment, "--replicas=1")
    wait_for("one scheduler", lambda: _scheduler_deployment_ready(rel, 1), timeout=180, every=2)
    time.sleep(15)  # the one left works alone for a while
    rel.k("scale", deployment, "--replicas=3")
    wait_for("three schedulers", lambda: _scheduler_deployment_ready(rel, 3), timeout=240, every=2)
    run = rel.wait_run(dag, timeout=600)
    assert run["status"]["state"] == "success", f"{rel.dump()}\n{run['status']}"
    rel.assert_each_try_started_once(dag, run, tasks=20)


def _migration_job_events(rel: Release) -> list[dict[str, Any]]:
    events = rel.json("events", "--field-selector", "involvedObject.kind=Job")["items"]
    name = f"{rel.fullname}-migrations"
    return [e for e in events if e["involvedObject"]["name"] == name]


def test_helm_upgrade_mid_run_rolls_the_schedulers_migrates_once_and_loses_nothing(
    rel: Release,
) -> None:
    dag = "upgrade"
    rel.apply(_sleepers(dag, 20, 6))
    wait_for("task Jobs running", lambda: rel.running_jobs(dag), timeout=240, every=1)
    before = _live_scheduler_pods(rel)
    assert not _migration_job_events(rel)  # the bundled Postgres: no pre-install hook
    # A changed pod template: the replicas roll.
    rel.install(*VALUES, "--set", "scheduler.logLevel=debug", command="upgrade")
    after = _live_scheduler_pods(rel)
    assert before.isdisjoint(after), (before, after)
    # The hook ran once: one pod created for its Job, which succeeded and was deleted.
    created = [e for e in _migration_job_events(rel) if e["reason"] == "SuccessfulCreate"]
    assert sum(e.get("count", 1) for e in created) == 1, created
    assert not rel.k("get", "jobs", f"{rel.fullname}-migrations", "--ignore-not-found")
    run = rel.wait_run(dag, timeout=600)
    assert run["status"]["state"] == "success", f"{rel.dump()}\n{run['status']}"
    rel.assert_each_try_started_once(dag, run, tasks=20)


def test_a_postgres_restart_mid_run_keeps_the_replicas_up_and_every_run_ends(
    rel: Release,
) -> None:
    dag = "postgres-restart"
    rel.apply(_sleepers(dag, 20, 6))
    wait_for("task Jobs running", lambda: rel.running_jobs(dag), timeout=240, every=1)

    def restarts() -> dict[str, int]:
        return {
            p["metadata"]["name"]: sum(
                c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []
            )
            for p in rel.pods("scheduler") + rel.pods("operator")
            if not p["metadata"].get("deletionTimestamp")  # an earlier test's, on its way out
        }

    before = restarts()
    postgres = f"{rel.fullname}-postgres-0"
    uid = rel.json(f"pod/{postgres}")["metadata"]["uid"]
    rel.k("delete", "pod", postgres)  # returns once it is gone
    wait_for("a new Postgres pod, ready", lambda: _new_and_ready(rel, postgres, uid), 240, every=2)
    run = rel.wait_run(dag, timeout=600)
    assert run["status"]["state"] == "success", f"{rel.dump()}\n{run['status']}"
    assert restarts() == before, "a replica restarted or was replaced during the outage"
    rel.assert_each_try_started_once(dag, run, tasks=20)


def _new_and_ready(rel: Release, name: str, old_uid: str) -> bool:
    found = rel.k("get", "pod", name, "--ignore-not-found", "-o", "json").strip()
    if not found:
        return False
    pod = json.loads(found)
    if pod["metadata"]["uid"] == old_uid:
        return False
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
