"""The Job executor on the real cluster: host-run replicas, one Job per try, pod heartbeats.

Replicas are `sluice scheduler --executor kubernetes` processes (tests/k8s/replicas.py)
on the test's Postgres, serving the task API on the node address inside the
cluster's network namespace, where the task pods' heartbeat sidecars reach it.
Task pods run the locally built Sluice image (it has a shell), never a public one.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from sluice.db.models import DagRun, TaskInstance
from sluice.executors.kubernetes import manifest, names
from sluice.executors.kubernetes.executor import KubernetesSettings, api_client_factory
from sluice.executors.kubernetes.watch import TryCache

from .cluster import EXAMPLES, Cluster
from .fleet import Fleet, dag_manifest
from .replicas import sidecar_pids, wait_for

pytestmark = pytest.mark.k8s


def _one_task_dag(name: str, script: str, **task: Any) -> str:
    return dag_manifest(name, [{"name": "t", "args": [script], **task}])


def test_example_dags_run_as_one_job_per_try(fleet: Fleet) -> None:
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert examples
    dag_ids = []
    for path in examples:
        fleet.add_dag(path.stem, path.read_text())
        dag_ids.append(path.stem)
    fleet.start("a")
    fleet.start("b", sync=False)
    for dag_id in dag_ids:
        assert fleet.wait_run(dag_id, ("success", "failed")) == "success", fleet.state_dump(dag_id)

    jobs = fleet.jobs()
    by_try = {
        (j["metadata"]["labels"][names.TI_LABEL], j["metadata"]["labels"][names.TRY_LABEL]): j
        for j in jobs
    }
    assert len(by_try) == len(jobs), "two Jobs for one try"
    ran = 0
    for dag_id in dag_ids:
        for task, ti in fleet.tis(dag_id).items():
            for try_number in range(1, ti.try_number + 1):
                job = by_try.get((str(ti.id), str(try_number)))
                assert job is not None, f"no Job for {dag_id}.{task} try {try_number}"
                meta = job["metadata"]
                assert meta["name"] == names.job_name(dag_id, _run_id(fleet, ti), task, try_number)
                assert len(meta["name"]) <= 63
                assert meta["labels"]["sluice.io/dag"] == dag_id
                assert meta["labels"]["sluice.io/task"] == task
                assert meta["annotations"]["sluice.io/run-id"] == _run_id(fleet, ti)
                assert job["spec"]["backoffLimit"] == 0
                ran += 1
            if ti.try_number:  # the try's namespace (the default: its DAG has none) and Job
                assert ti.external_id == fleet.namespace + "/" + names.job_name(
                    dag_id, _run_id(fleet, ti), task, ti.try_number
                )
    assert ran == len(jobs), "a Job that belongs to no try"
    # etl-retries' extract fails its first try on purpose: two Jobs, the second succeeded.
    extract = fleet.tis("etl-retries")["extract"]
    assert (extract.try_number, extract.state) == (2, "success")
    assert [t.state for t in fleet.tries(extract.id)] == ["failed", "success"]


def _run_id(fleet: Fleet, ti: TaskInstance) -> str:
    with fleet.sessions() as session:
        run = session.get(DagRun, ti.dag_run_id)
        assert run is not None
        return run.run_id


def test_task_pods_carry_no_database_credentials(fleet: Fleet) -> None:
    fleet.add_dag("env", _one_task_dag("env", "env | sort; ls -a /var/run/secrets 2>&1 || true"))
    fleet.start("a")
    assert fleet.wait_run("env", ("success", "failed")) == "success", fleet.state_dump("env")
    (job,) = fleet.jobs()
    logs = fleet.cluster.kubectl(
        "-n", fleet.namespace, "logs", f"job/{job['metadata']['name']}", "-c", "main"
    ).stdout
    assert "SLUICE_LOGICAL_DATE=" in logs
    db = fleet.db_url
    for secret in (db, "SLUICE_DATABASE_URL", "postgresql", "PGPASSWORD"):
        assert secret not in logs, secret
    assert "serviceaccount" not in logs  # no API token mounted
    pod_spec = job["spec"]["template"]["spec"]
    text = json.dumps(pod_spec)
    assert "postgresql" not in text
    assert "secretKeyRef" not in text  # no env from a Secret
    assert '"secret":' not in text  # no Secret volume
    sidecar = pod_spec["initContainers"][0]
    assert sidecar["restartPolicy"] == "Always"
    assert {e["name"] for e in sidecar["env"]} >= {"SLUICE_TRY_TOKEN", "SLUICE_TASK_API_URL"}


def test_start_failures_fail_with_the_reason_after_the_pod_start_timeout(fleet: Fleet) -> None:
    fleet.add_dag(
        "no-image",
        _one_task_dag("no-image", "true", image="localhost/sluice-no-such-image:1"),
    )
    fleet.add_dag(
        "too-big",
        _one_task_dag("too-big", "true", resources={"requests": {"cpu": "64"}}),
    )
    fleet.start("a")
    for dag_id in ("no-image", "too-big"):
        assert fleet.wait_run(dag_id, ("success", "failed")) == "failed"
    no_image = fleet.tis("no-image")["t"]
    assert no_image.reason is not None
    assert no_image.reason.startswith(("ErrImagePull", "ImagePullBackOff")), no_image.reason
    too_big = fleet.tis("too-big")["t"]
    assert (too_big.reason or "").startswith("Unschedulable"), too_big.reason
    assert "Insufficient cpu" in too_big.reason
    # A try that could not start has its Job deleted: it must not start later.
    wait_for("the failed tries' Jobs deleted", lambda: not fleet.jobs(), timeout=60)
    # The reason is what `sluice dags runs` shows, with the try's Job.
    with fleet.sessions() as session:
        run_id = session.execute(
            select(DagRun.run_id).where(DagRun.dag_id == "too-big")
        ).scalar_one()
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("sluice")), "dags", "runs", "too-big",
         "--run", run_id, "--database-url", fleet.db_url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"t try 1 ({too_big.external_id}): failed: Unschedulable" in shown, shown


def test_an_execution_timeout_ends_the_job_and_fails_the_try(fleet: Fleet) -> None:
    """Timed from the main container's start by the replica, which deletes the Job; the
    Job's own deadline is only a backstop (the timeout plus the pod start timeout, 45 s
    here); a timed-out try is retried like any failure."""
    fleet.add_dag(
        "slow",
        _one_task_dag("slow", "sleep 300", executionTimeout="5s", retries=1, retryDelay="0s"),
    )
    fleet.start("a")
    assert fleet.wait_run("slow", ("success", "failed")) == "failed"
    ti = fleet.tis("slow")["t"]
    assert ti.try_number == 2  # retried once, as the task allows
    for tried in fleet.tries(ti.id):
        assert tried.reason is not None
        assert tried.reason.startswith("execution timeout (5s) exceeded after running"), (
            tried.reason
        )
    for job in fleet.jobs():
        assert job["spec"]["activeDeadlineSeconds"] == 5 + 45


def test_time_before_the_main_container_starts_does_not_count_against_the_timeout(
    fleet: Fleet,
) -> None:
    """An init container that sleeps past the execution timeout stands in for a slow image
    pull: the try's main container then runs for a second, well within its timeout, and
    the try succeeds (when the Job's deadline was the timeout, it failed)."""
    slow_start = {
        "name": "slow-start",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "sleep 15"],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    fleet.add_dag(
        "slow-start",
        _one_task_dag(
            "slow-start",
            "sleep 1",
            executionTimeout="5s",
            podTemplate={"spec": {"initContainers": [slow_start]}},
        ),
    )
    fleet.start("a")
    assert fleet.wait_run("slow-start", ("success", "failed")) == "success", fleet.state_dump(
        "slow-start"
    )
    ti = fleet.tis("slow-start")["t"]
    assert ti.try_number == 1


def test_the_task_api_refuses_forged_expired_and_other_tries_tokens(fleet: Fleet) -> None:
    """On the cluster's own network: the replica's task API, as a task pod reaches it."""
    from sluice.api.tokens import TrySigner, load_keys

    script = 'if [ "$SLUICE_TRY_NUMBER" = 1 ]; then sleep 600; fi'
    fleet.add_dag("tokens", _one_task_dag("tokens", script))
    fleet.start("a")
    ti = fleet.wait_task(
        "tokens", "t", lambda t: t.state == "running" and _heartbeats(fleet, t), "a heartbeat"
    )
    host, port = fleet.task_api
    url = f"http://{host}:{port}/v1/tries/{ti.id}/1/heartbeat"
    signer = TrySigner(load_keys(fleet.keys))
    forger = TrySigner([secrets.token_bytes(32)])
    expired = TrySigner(load_keys(fleet.keys), clock=lambda: time.time() - 7200)

    def post(token: str) -> int:
        request = urllib.request.Request(
            url, method="POST", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    assert post(signer.issue(ti.id, 1, 600)) == 204
    assert post(forger.issue(ti.id, 1, 600)) == 401
    assert post(expired.issue(ti.id, 1, 600)) == 401
    assert post(signer.issue(ti.id, 2, 600)) == 403  # a valid token of another try
    assert post(signer.issue(ti.id + 1, 1, 600)) == 403


def test_a_deleted_pod_is_a_zombie_on_both_signals_and_is_retried(fleet: Fleet) -> None:
    script = 'if [ "$SLUICE_TRY_NUMBER" = 1 ]; then sleep 600; fi; echo done'
    fleet.add_dag("gone", _one_task_dag("gone", script, retries=1, retryDelay="0s"))
    fleet.start("a")
    ti = fleet.wait_task(
        "gone", "t", lambda t: t.state == "running" and _heartbeats(fleet, t), "a heartbeating try"
    )
    fleet.cluster.kubectl(
        "-n", fleet.namespace, "delete", "pod", "-l", f"{names.TI_LABEL}={ti.id}",
        "--grace-period=0", "--force",
    )  # fmt: skip
    assert fleet.wait_run("gone", ("success", "failed")) == "success", fleet.state_dump("gone")
    first, second = fleet.tries(ti.id)
    assert first.state == "failed", first.reason
    assert (first.reason or "").startswith("zombie:"), first.reason
    assert second.state == "success"
    final = fleet.tis("gone")["t"]
    assert final.try_number == 2


def test_a_pod_that_stops_heartbeating_is_killed_as_a_zombie(fleet: Fleet) -> None:
    script = 'if [ "$SLUICE_TRY_NUMBER" = 1 ]; then sleep 600; fi; echo done'
    fleet.add_dag("mute", _one_task_dag("mute", script, retries=1, retryDelay="0s"))
    fleet.start("a")
    ti = fleet.wait_task(
        "mute", "t", lambda t: t.state == "running" and _heartbeats(fleet, t), "a heartbeating try"
    )
    pids = wait_for("the sidecar's process", lambda: sidecar_pids(ti.id, 1), timeout=30)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # alive (the pod runs) but silent
    assert fleet.wait_run("mute", ("success", "failed"), timeout=180) == "success", (
        fleet.state_dump("mute")
    )
    first = fleet.tries(ti.id)[0]
    assert first.state == "failed", first.reason
    assert (first.reason or "").startswith("zombie:"), first.reason
    assert "sent no heartbeat" in (first.reason or "")


def test_a_killed_replicas_job_is_adopted_not_started_again(fleet: Fleet) -> None:
    # Long enough to be adopted while it runs, on a busy machine too.
    fleet.add_dag("adopt", _one_task_dag("adopt", "sleep 90; echo finished"))
    doomed = fleet.start("doomed")
    ti = fleet.wait_task("adopt", "t", lambda t: t.state == "running", "the try running")
    assert ti.running_by_job_id == doomed.job_id
    fleet.follow(f"{names.TI_LABEL}={ti.id}", manifest.SIDECAR)
    # The try is `running` from its claim, committed before its Job is created (ADR 0047).
    (job,) = wait_for("its Job", lambda: fleet.jobs(f"{names.TI_LABEL}={ti.id}"), 60, every=0.5)
    doomed_label = job["metadata"]["labels"][names.REPLICA_LABEL]  # its watch selects on it
    survivor = fleet.start("survivor", sync=False)
    doomed.kill9()
    done = fleet.wait_task(
        "adopt", "t", lambda t: t.state in ("success", "failed"), "the try to end", timeout=180
    )
    assert done.state == "success", f"{fleet.state_dump('adopt')}\n{fleet.logs()}"
    assert done.try_number == 1
    assert done.running_by_job_id == survivor.job_id, "the survivor did not adopt it"
    survivor.stop()  # its log ends with what it asked of the API server
    jobs = [j["metadata"]["name"] for j in fleet.jobs(f"{names.TI_LABEL}={ti.id}")]
    logs = fleet.logs()
    job_name = str(ti.external_id).rpartition("/")[2]  # <namespace>/<Job name>
    assert set(jobs) <= {job_name}, f"started twice: {jobs}\n{logs}"
    assert "'create': " not in survivor.output(), f"the survivor created a Job\n{logs}"
    # Sluice never deletes a Job that succeeded (its logs are what a user reads next).
    assert not re.search(rf"deleted Job\s+job={re.escape(job_name)}\b", logs), logs
    # Adopting moved the try into the survivor's watches: its label on the Job and the pod.
    for obj in (
        fleet.jobs(f"{names.TI_LABEL}={ti.id}")
        + fleet.cluster.get_json("pods", "-n", fleet.namespace, "-l", f"{names.TI_LABEL}={ti.id}")[
            "items"
        ]
    ):
        moved = obj["metadata"]["labels"].get(names.REPLICA_LABEL)
        assert moved not in (None, doomed_label), (obj["metadata"]["name"], moved, logs)
    assert "adopted try moved into this replica's watches" in survivor.output(), logs
    if not jobs:  # seen once in CI (2026-12-03), never here: keep what it looked like
        warnings.warn(
            f"the Job is gone, and no replica deleted it\n{fleet.state_dump('adopt')}\n{logs}",
            stacklevel=1,
        )


def _heartbeats(fleet: Fleet, ti: TaskInstance) -> bool:
    """The try's heartbeat moved after its start (its sidecar reaches the task API)."""
    return (
        ti.last_heartbeat_at is not None
        and ti.start_date is not None
        and ((ti.last_heartbeat_at - ti.start_date).total_seconds() > 0.5)
    )


def _probe_job(name: str, image: str, command: list[str]) -> str:
    labels = {names.TI_LABEL: "1", names.TRY_LABEL: "1"}
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "main",
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "command": command,
                            }
                        ],
                    },
                },
            },
        }
    )


def _complete(cache: TryCache, name: str) -> bool:
    job = cache.job(name)
    conditions = (job or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def test_watches_survive_an_api_server_restart_and_a_410_loses_no_ended_try(
    k8s_cluster: Cluster, kubeconfig: Path, k8s_namespace: str
) -> None:
    """Runs last in this module: it restarts the cluster's API server, twice.

    1. A watch resumed from a version older than the restarted server's watch
       cache gets a real `410 Gone`, relists, and finds the Job that ended
       meanwhile, with its end.
    2. A restart under running watches breaks them; they reconnect (the cache
       goes unsynced meanwhile) and see a Job that ends afterwards.
    """
    ns = ["-n", k8s_namespace]
    k8s_cluster.apply(_probe_job("ended", k8s_cluster.image, ["true"]), namespace=k8s_namespace)
    k8s_cluster.kubectl(
        *ns, "wait", "--for=condition=Complete", "job/ended", "--timeout=120s", timeout=150
    )
    k8s_cluster.restart_apiserver()
    settings = KubernetesSettings(
        namespace=k8s_namespace, sluice_image=k8s_cluster.image, kubeconfig=str(kubeconfig)
    )
    cache = TryCache(api_client_factory(settings), k8s_namespace)
    for kind in ("jobs", "pods"):
        cache._kinds[kind].resource_version = "1"  # before the restarted server's cache
    cache.start()
    try:
        assert cache.wait_synced(60), cache.stats()
        wait_for("the ended Job in the cache", lambda: _complete(cache, "ended"), timeout=30)
        stats = cache.stats()
        assert stats["jobs_gone"] >= 1, stats
        assert stats["pods_gone"] >= 1, stats
        pod = cache.newest_pod("ended")
        assert pod is not None
        assert pod["status"]["phase"] == "Succeeded"

        k8s_cluster.restart_apiserver()
        k8s_cluster.apply(_probe_job("after", k8s_cluster.image, ["true"]), namespace=k8s_namespace)
        wait_for(
            "the watches to see a Job created after the restart",
            lambda: _complete(cache, "after"),
            timeout=120,
        )
        assert cache.synced
        assert cache.stats()["jobs_errors"] >= 1, cache.stats()
    finally:
        cache.stop()
