"""Task logs outlive the pod (issue 30), with the chart on the local cluster.

A release whose schedulers archive to a real S3-compatible server (versitygw,
`make s3-server`) on the node's address inside the cluster's network
namespace, with the store's credentials from a Secret of the test's own
(`logs.existingSecret`). What a user does: read a failed try's output with
`sluice logs` in a scheduler pod after its Job was deleted; see the failure's
last lines in its reason; follow a running try live; lose a log only with the
reason; and storage that is down delays the archive, which catches up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosting import free_port
from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, find_versitygw

from .chart import Release, installed
from .cluster import Cluster
from .fleet import dag_manifest
from .replicas import wait_for
from .test_chart_operations import FAST_SCHEDULER_ARGS

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1500)]

BUCKET = "sluice-logs"


@pytest.fixture(scope="module")
def store(k8s_cluster: Cluster) -> Iterator[S3Server]:
    binary = find_versitygw()
    if binary is None:
        pytest.fail("versitygw not built: make s3-server", pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="sluice-k8s-s3-"))
    (base / "root" / BUCKET).mkdir(parents=True)
    host = k8s_cluster.host_address()
    server = S3Server(binary, base / "root", free_port(host), host=host)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster, store: S3Server) -> Iterator[Release]:
    with installed(k8s_cluster) as release:
        release.k(
            "create", "secret", "generic", "sluice-logs-s3",
            f"--from-literal=AWS_ACCESS_KEY_ID={ACCESS_KEY}",
            f"--from-literal=AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
            f"--from-literal=AWS_REGION={REGION}",
        )  # fmt: skip
        release.install(
            "--set-json", "scheduler.extraArgs=" + json.dumps(FAST_SCHEDULER_ARGS),
            "--set", "tasks.podStartTimeout=60",
            "--set", f"logs.store={store.url(BUCKET, 'tries')}",
            "--set", "logs.existingSecret=sluice-logs-s3",
        )  # fmt: skip
        yield release


def _logs(rel: Release, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`sluice logs` in a scheduler pod, as a user runs it (kubectl exec)."""
    cmd = [
        "-n", rel.namespace, "exec", f"deploy/{rel.fullname}-scheduler", "-c", "scheduler",
        "--", "sluice", "logs", *args,
    ]  # fmt: skip
    proc = rel.cluster.kubectl(*cmd, check=False)
    if check:
        assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return proc


def _run_id(rel: Release, dag: str) -> str:
    rows = rel.sql(f"SELECT run_id FROM dag_run WHERE dag_id = '{dag}' ORDER BY id LIMIT 1")
    return rows[0][0]


def _log_state(rel: Release, dag: str, task: str) -> list[str] | None:
    rows = rel.sql(
        "SELECT l.state, coalesce(l.reason, ''), coalesce(l.source, '') FROM task_log l"
        " JOIN task_instance ti ON ti.id = l.task_instance_id"
        f" WHERE ti.dag_id = '{dag}' AND ti.task_id = '{task}'"
    )
    return rows[0] if rows else None


def test_a_failed_tries_log_is_read_after_its_job_is_deleted(rel: Release) -> None:
    dag = "logs-failed"
    # stdout and stderr reach the log file through two pipes, in no set order: a second
    # between them, so the last line is stderr's.
    script = 'for i in 1 2 3 4 5 6; do echo "out $i"; done; sleep 1; echo "err: boom" >&2; exit 3'
    rel.apply(dag_manifest(dag, [{"name": "load", "args": [script]}]))
    run = rel.wait_run(dag, timeout=300)
    assert run["status"]["state"] == "failed", run["status"]
    run_id = _run_id(rel, dag)
    # The reason ends with the last lines of its output (the kubelet's fallback message).
    ((reason,),) = rel.sql(f"SELECT reason FROM task_instance WHERE dag_id = '{dag}'")
    assert reason == "exit code 3; its output ended: out 3 | out 4 | out 5 | out 6 | err: boom"
    state = wait_for("the log archived", lambda: _log_state(rel, dag, "load"), 120, every=2)
    assert state[0] == "archived", state
    assert state[2].startswith(f"{rel.namespace}/logs-failed-load-1-"), state  # the pod
    # The Job (and so its pod) gone, as its TTL would take it:
    rel.k("delete", "jobs", "-l", f"sluice.io/dag={dag}", "--wait=true")
    wait_for("the pod gone", lambda: not rel.k("get", "pods", "-l", f"sluice.io/dag={dag}",
                                                "-o", "name").strip(), 120, every=2)  # fmt: skip
    shown = _logs(rel, dag, "--run", run_id, "--task", "load")
    assert shown.stdout == "".join(f"out {i}\n" for i in range(1, 7)) + "err: boom\n"
    assert shown.stderr.startswith(f"== {dag} / {run_id} / load, try 1: failed")
    assert f"pod {state[2]}" in shown.stderr
    tail = _logs(rel, dag, "--run", run_id, "--task", "load", "--tail", "2")
    assert tail.stdout == "out 6\nerr: boom\n"


def test_a_running_try_is_followed_live_and_a_deleted_pods_log_is_lost_with_why(
    rel: Release,
) -> None:
    dag = "logs-live"
    slow = 'for i in 1 2 3 4 5 6 7 8; do echo "tick $i"; sleep 2; done'
    rel.apply(
        dag_manifest(dag, [{"name": "slow", "args": [slow]}, {"name": "doomed",
                                                              "args": ["echo early; sleep 600"]}])
    )  # fmt: skip
    wait_for("both running", lambda: len(rel.running_jobs(dag) or []) == 2, 240, every=1)
    run_id = _run_id(rel, dag)
    # --follow while it runs: the whole output, ending when the try does.
    followed = _logs(rel, dag, "--run", run_id, "--task", "slow", "--follow")
    assert followed.stdout == "".join(f"tick {i}\n" for i in range(1, 9))
    # A pod deleted before its log was read (a node lost): its try's log is lost, and says so.
    wait_for(
        "doomed's output",
        lambda: "early" in _logs(rel, dag, "--run", run_id, "--task", "doomed", check=False).stdout,
        60, every=2,
    )  # fmt: skip
    rel.k("delete", "pods", "-l", f"sluice.io/dag={dag},sluice.io/task=doomed",
          "--grace-period=0", "--force")  # fmt: skip
    state = wait_for("doomed's log settled", lambda: _log_state(rel, dag, "doomed"), 180, every=2)
    assert state[0] == "lost", state
    assert "was deleted before its log could be read" in state[1], state
    gone = _logs(rel, dag, "--run", run_id, "--task", "doomed", check=False)
    assert gone.returncode == 1
    assert "was lost: " in gone.stderr


def test_storage_down_delays_the_archive_and_it_catches_up(rel: Release, store: S3Server) -> None:
    dag = "logs-outage"
    store.stop()
    try:
        rel.apply(dag_manifest(dag, [{"name": f"t{i}", "args": [f"echo task {i}"]}
                                     for i in range(3)]))  # fmt: skip
        run = rel.wait_run(dag, timeout=300)
        assert run["status"]["state"] == "success", run["status"]  # scheduling went on
        waiting = (
            "SELECT count(*) FROM log_outbox o JOIN task_instance ti"
            f" ON ti.id = o.task_instance_id WHERE ti.dag_id = '{dag}'"
            " AND o.last_error LIKE '%the log store%'"
        )
        wait_for("the archives waiting", lambda: rel.sql(waiting) == [["3"]], 120, every=2)
        assert not rel.sql(
            "SELECT 1 FROM task_log l JOIN task_instance ti ON ti.id = l.task_instance_id"
            f" WHERE ti.dag_id = '{dag}'"
        )
    finally:
        store.start()
    time.sleep(1)
    archived = (
        "SELECT count(*) FROM task_log l JOIN task_instance ti ON ti.id = l.task_instance_id"
        f" WHERE ti.dag_id = '{dag}' AND l.state = 'archived'"
    )
    # Backed off for at most five minutes (MAX_BACKOFF), then copied.
    wait_for("the archives caught up", lambda: rel.sql(archived) == [["3"]], 420, every=3)
    shown = _logs(rel, dag, "--run", _run_id(rel, dag), "--task", "t1")
    assert shown.stdout == "task 1\n"


def _select_task_api(rel: Release, component: str) -> None:
    patch = json.dumps({"spec": {"selector": {"app.kubernetes.io/component": component}}})
    rel.k("patch", f"service/{rel.fullname}-task-api", "--type=merge", "-p", patch)


def _stopped_pod(rel: Release, dag: str, task: str) -> dict[str, Any]:
    """The try's one pod, once its kubelet has stopped it (DeadlineExceeded). The run may
    end before that: the scheduler patches the pod's deadline after it ends the try, and
    the kubelet acts on the patch at its next sync of the pod."""
    seen: list[dict[str, Any]] = []

    def stopped() -> dict[str, Any] | None:
        pods = rel.json("pods", "-l", f"sluice.io/dag={dag},sluice.io/task={task}")["items"]
        seen[:] = pods
        if len(pods) == 1 and pods[0]["status"].get("reason") == "DeadlineExceeded":
            return pods[0]  # type: ignore[no-any-return]
        return None

    try:
        return wait_for(f"{dag}/{task}'s pod stopped (DeadlineExceeded)", stopped, 60, every=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {[pod['status'] for pod in seen]}") from None


def test_a_zombies_partial_log_is_archived_from_its_stopped_pod(rel: Release) -> None:
    """A running try whose heartbeats stop (the task API Service selects no pod) is killed
    as a zombie after the kill threshold (20 s here): its pod is stopped, not deleted, and
    what it printed until then is archived and read back."""
    dag = "logs-zombie"
    script = 'for i in 1 2 3; do echo "before $i"; done; sleep 600'
    rel.apply(dag_manifest(dag, [{"name": "stuck", "args": [script]}]))
    wait_for("running", lambda: rel.running_jobs(dag), 240, every=1)
    run_id = _run_id(rel, dag)
    # check=False: until its container starts (PodInitializing) there is no log to read.
    wait_for(
        "its output",
        lambda: "before 3"
        in _logs(rel, dag, "--run", run_id, "--task", "stuck", check=False).stdout,
        60, every=2,
    )  # fmt: skip
    _select_task_api(rel, "nowhere")
    try:
        run = rel.wait_run(dag, timeout=240)
    finally:
        _select_task_api(rel, "scheduler")
    assert run["status"]["state"] == "failed", run["status"]
    ((reason,),) = rel.sql(f"SELECT reason FROM task_instance WHERE dag_id = '{dag}'")
    assert reason.startswith("zombie"), reason
    _stopped_pod(rel, dag, "stuck")
    state = wait_for("the log archived", lambda: _log_state(rel, dag, "stuck"), 120, every=2)
    assert state[0] == "archived", state
    rel.k("delete", "jobs", "-l", f"sluice.io/dag={dag}", "--wait=true")
    shown = _logs(rel, dag, "--run", run_id, "--task", "stuck")
    assert shown.stdout == "before 1\nbefore 2\nbefore 3\n"
    assert shown.stderr.startswith(f"== {dag} / {run_id} / stuck, try 1: failed")


def test_a_timed_out_tries_pod_is_stopped_and_its_log_archived(rel: Release) -> None:
    dag = "logs-timeout"
    script = 'echo "started"; sleep 600'
    rel.apply(dag_manifest(dag, [{"name": "slow", "args": [script], "executionTimeout": "5s"}]))
    run = rel.wait_run(dag, timeout=300)
    assert run["status"]["state"] == "failed", run["status"]
    _stopped_pod(rel, dag, "slow")
    state = wait_for("the log archived", lambda: _log_state(rel, dag, "slow"), 120, every=2)
    assert state[0] == "archived", state
    shown = _logs(rel, dag, "--run", _run_id(rel, dag), "--task", "slow")
    assert shown.stdout == "started\n"
