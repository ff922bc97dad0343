"""The chaos run on the cluster (issue 29): the local chaos run's invariants, on the Job executor.

A release of its own (three scheduler pods, the bundled Postgres) runs
`chaos_workload`'s DAGs while `chaos_cluster` injects every fault kind at least
once: scheduler pods killed and SIGSTOPped, the API server and the kubelet
restarted, Postgres away for longer than the heartbeat kill threshold, task
pods deleted, the task API unreachable. Then every run must end, and the
checker of `make chaos` must find no violation: one start per (run, task,
try), no two tries of a task at once, pool and maxActiveTasks limits in every
database sample and by the task pods' own lifetimes, the runs the schedule
asks for, no scheduler exiting by itself, every zombie verdict with its
evidence and none on a live task, one alert per failed try. And here, where
every task pod is healthy unless the run deleted it: no pod killed as a zombie
while it ran.

`make e2e` runs a short window (SLUICE_CHAOS_WINDOW, default 150 s);
`make chaos-cluster-soak` runs 30 minutes. The seed is random unless
SLUICE_CHAOS_SEED is set, and printed with the report (SLUICE_CHAOS_REPORT: a
file to write it to as well).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from .chaos_cluster import FAULTS, SCHEDULER_ARGS, ClusterChaos
from .chart import installed
from .cluster import Cluster

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(int(os.environ.get("SLUICE_CHAOS_WINDOW",
                                                                      "150")) + 2400)]  # fmt: skip

WINDOW = float(os.environ.get("SLUICE_CHAOS_WINDOW", "150"))


def test_the_job_executor_holds_every_invariant_under_cluster_faults(
    k8s_cluster: Cluster, tmp_path: Path
) -> None:
    if not k8s_cluster.is_local:
        pytest.skip(
            "its faults stop and restart the local cluster's own processes (API server,"
            " kubelet) by their pid files and read its node's /var/log/pods: make chaos-cluster"
        )
    seed = int(os.environ.get("SLUICE_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    with installed(k8s_cluster) as rel:
        rel.install(
            "--set-json", "scheduler.extraArgs=" + json.dumps(SCHEDULER_ARGS),
            "--set", "tasks.podStartTimeout=60",
        )  # fmt: skip
        chaos = ClusterChaos(rel, k8s_cluster, tmp_path, seed=seed, fault_window=WINDOW)
        try:
            chaos.start()
            chaos.inject_faults()
            chaos.settle()
            checker = chaos.check()
        finally:
            chaos.stop()
        killed = [
            z for z in checker.zombies if (z["evidence"] or {}).get("executor_says") == "alive"
        ]
        # The evidence to find why: each killed pod's heartbeat sidecar log (the pod is
        # kept, stopped, until its Job's TTL) and the zombie verdict's evidence.
        report_extra = {
            f"{z['task_instance_id']}/{z['try_number']}": {
                "evidence": z["evidence"],
                "sidecar_log": chaos.sidecar_log(z["task_instance_id"], z["try_number"]),
            }
            for z in killed
        }
        report = chaos.report(checker)
        if killed:
            report["violations"]["no healthy task pod killed as a zombie"] = [
                f"task instance {z['task_instance_id']} try {z['try_number']}: {z['reason']}"
                for z in killed
            ]
            report["healthy_pods_killed"] = report_extra
        text = json.dumps(report, indent=2, default=str)
        print(text)
        if os.environ.get("SLUICE_CHAOS_REPORT"):
            Path(os.environ["SLUICE_CHAOS_REPORT"]).write_text(text + "\n")
        missing = [kind for kind in FAULTS if not report["fault_counts"][kind]]
        assert not missing, f"seed {seed}: these faults never happened: {missing}\n{text}"
        assert report["task_events"] > 0, text
        assert report["samples"] > 0, text
        assert not report["violations"], (
            f"seed {seed}: invariants violated\n{text}\n{rel.unsuccessful_tries(20)}"
        )
