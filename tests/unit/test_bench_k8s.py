"""The Job-executor benchmark's pure parts: task segments, API request counts, CPU, tables."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bench.k8s_figures import (
    K8sTrial,
    Spread,
    background,
    cpu_rows,
    diff_counts,
    latency_table,
    parse_request_totals,
    sluice_requests,
    task_segments,
    task_times,
    without_watches,
)
from bench.k8s_report import markdown, verdicts

T0 = datetime(2026, 12, 3, 10, 0, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_and_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    job = {"metadata": {"name": "d-t0-1-abc", "creationTimestamp": stamp(1)}}
    pod = {
        "metadata": {"creationTimestamp": stamp(1)},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": stamp(9)},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(2)},
            ],
            "initContainerStatuses": [
                {
                    "name": "sluice-heartbeat",
                    "state": {"terminated": {"startedAt": stamp(4), "finishedAt": stamp(8)}},
                }
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "startedAt": stamp(5),
                            "finishedAt": stamp(5),
                        }
                    },
                }
            ],
        },
    }
    return job, pod


def test_a_tasks_segments_come_from_its_job_pod_and_postgres_times() -> None:
    job, pod = job_and_pod()
    queued = T0 + timedelta(seconds=0.25)
    ended = T0 + timedelta(seconds=5.75)
    segments = task_segments(task_times(queued, ended, job, pod))
    # Kubernetes' timestamps are whole seconds: each is taken as the middle of its second.
    assert segments == {
        "queued -> Job created": 1.25,
        "Job created -> pod created": 0.0,
        "pod created -> scheduled": 1.0,
        "scheduled -> sidecar started": 2.0,
        "sidecar started -> main started": 1.0,
        "main ran": 0.0,
        "main ended -> recorded end": 0.25,
        "Job created -> main running": 4.0,
        "main running -> recorded end": 0.25,
        "Job created -> recorded end": 4.25,
        "queued -> recorded end (Postgres only)": 5.5,
    }


def test_a_running_main_container_and_a_missing_pod_leave_out_what_is_unknown() -> None:
    job, pod = job_and_pod()
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": stamp(6)}}
    segments = task_segments(task_times(T0, None, job, pod))
    assert segments["Job created -> main running"] == 5.0
    assert "main ran" not in segments
    assert "main running -> recorded end" not in segments
    no_pod = task_segments(task_times(T0, T0 + timedelta(seconds=9), job, None))
    assert set(no_pod) == {
        "queued -> Job created",
        "Job created -> recorded end",
        "queued -> recorded end (Postgres only)",
    }


def test_latency_table_gives_p50_p95_and_mean_per_segment() -> None:
    per_task = [{"main ran": float(i)} for i in range(1, 101)]
    table = latency_table(per_task)
    assert table["main ran"] == Spread(n=100, p50=51.0, p95=95.0, mean=50.5)
    empty = table["pod created -> scheduled"]
    assert empty.n == 0
    assert math.isnan(empty.p50)


METRICS_BEFORE = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",\
resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",\
resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",\
resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",\
resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 3
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",\
scope="",subresource="/metrics",verb="GET",version=""} 7
apiserver_request_duration_seconds_count{verb="POST",resource="jobs"} 99
"""


def test_request_totals_sum_codes_and_a_diff_drops_watches_and_paths() -> None:
    before = parse_request_totals(METRICS_BEFORE)
    assert before == {
        "POST jobs": 12.0,
        "PATCH pods/status": 5.0,
        "WATCH pods": 3.0,
        "GET -/metrics": 7.0,
    }
    later = {"POST jobs": 17.0, "PATCH pods/status": 9.0, "WATCH pods": 4.0, "GET -/metrics": 8.0}
    counts, reset = diff_counts(before, later)
    assert not reset
    assert counts == {"POST jobs": 5, "PATCH pods/status": 4, "WATCH pods": 1, "GET -/metrics": 1}
    assert without_watches(counts) == {"POST jobs": 5, "PATCH pods/status": 4}
    assert sluice_requests(counts) == {"create": 5}


def test_a_counter_that_went_down_means_the_api_server_restarted() -> None:
    _, reset = diff_counts({"POST jobs": 100.0}, {"POST jobs": 3.0})
    assert reset


def test_sluice_requests_are_the_job_verbs_no_component_makes() -> None:
    counts = {"POST jobs": 1000, "GET jobs": 2, "DELETE jobs": 1, "LIST jobs": 3}
    counts |= {"PUT jobs/status": 2500, "POST pods": 1000}
    assert sluice_requests(counts) == {"create": 1000, "get": 2, "delete": 1, "list": 3}


def test_the_archivers_pod_lookup_and_log_read_are_sluices_too() -> None:
    """As the API server counted them in an --archive trial of 200 tasks (2026-12-06): a
    log read is a CONNECT on pods/log; the pod LISTs are the archiver's 200 and the
    executor's watch's one; the Job controller's PATCH pods (its finalizer) is not ours."""
    counts = {"POST jobs": 200, "LIST jobs": 1, "LIST pods": 201, "CONNECT pods/log": 200}
    counts |= {"PATCH pods": 201, "GET pods": 1123, "POST pods": 200}
    assert sluice_requests(counts) == {"create": 200, "list": 1, "log": 200, "pods list": 201}


def test_background_scales_the_quiet_windows_rate() -> None:
    quiet = {"PUT leases": 2, "WATCH pods": 9, "GET -/readyz": 4}
    assert background(quiet, window_s=10, over_s=100) == 20
    assert background(quiet, window_s=0, over_s=100) == 0


def test_cpu_rows_put_the_largest_first_and_the_rest_of_the_machine_last() -> None:
    rows = cpu_rows({"kubelet": 30.0, "scheduler replicas": 10.0}, 100.0, 50.0, 1000)
    assert [r[0] for r in rows] == [
        "kubelet",
        "scheduler replicas",
        "other (runc, kernel, shim time not sampled, other processes)",
        "machine busy (all CPUs)",
    ]
    assert rows[0] == ("kubelet", 30.0, 0.6, 30.0)
    assert rows[2][1] == 60.0
    assert rows[3] == ("machine busy (all CPUs)", 100.0, 2.0, 100.0)


def trial(**fields: Any) -> K8sTrial:
    base: dict[str, Any] = {
        "shapes": ["linear", "no_structure"],
        "dags": 100,
        "tasks_per_dag": 10,
        "replicas": 1,
        "trial": 0,
        "namespace": "sluice-bench-x",
        "pool_slots": 40,
        "tasks_total": 1000,
        "tasks_succeeded": 1000,
        "makespan_s": 200.0,
        "tasks_per_s": 5.0,
        "api_cluster": {"POST jobs": 1000, "PATCH pods/status": 3000},
        "api_sluice_server": {"create": 1000, "list": 2},
        "api_sluice_executor": {"create": 1000, "list": 2},
        "api_background": 100,
        "cpu": {"scheduler replicas": 20.0, "kubelet": 90.0},
        "machine_busy_s": 380.0,
        "cpu_window_s": 200.0,
    }
    base.update(fields)
    return K8sTrial(**base)


def test_targets_are_judged_per_task() -> None:
    ok = trial()
    assert ok.scheduler_ms_per_task == 20.0
    assert ok.sluice_requests_per_task == pytest.approx(1.002)
    assert ok.cluster_requests_per_task == pytest.approx(3.9)
    cpu, api = verdicts(ok)
    assert "2.0% of a core per Job/s" in cpu
    assert cpu.endswith("met")
    assert api.endswith("met")
    slow = trial(cpu={"scheduler replicas": 60.0}, api_sluice_server={"create": 4000})
    cpu, api = verdicts(slow)
    assert cpu.endswith("MISSED")
    assert api.endswith("MISSED")
    restarted = trial(api_valid=False)
    assert math.isnan(restarted.sluice_requests_per_task)
    assert verdicts(restarted)[1].endswith("not measured")


def test_the_idle_fleets_cost_is_split_from_the_tasks() -> None:
    """20 s of replica CPU over a 200 s window for 1,000 tasks; idle, the fleet costs
    50 ms/s, 10 s of the window: the tasks' own part is 10 ms each."""
    measured = trial(replicas_idle_ms_per_s=50.0)
    assert measured.scheduler_marginal_ms_per_task == pytest.approx(10.0)
    cpu, split, api = verdicts(measured)
    assert api.endswith("met")
    assert cpu.endswith("met")  # the target stays on the total: 20 ms/task
    assert "idle fleet 50.0 ms/s over 200 s" in split
    assert "the tasks 10.0 ms each (1.0% of a core per Job/s" in split
    assert len(verdicts(trial())) == 2  # a trial saved before the idle figure existed


def test_markdown_shows_every_trial_and_failures_as_such() -> None:
    failed = trial(replicas=3, status="timed out", errors=["timed out after 1800s"])
    text = markdown([trial(), failed])
    assert "| x1 #0 | ok | 1000/1000 | 200.0 | 5.00 |" in text
    assert "| 20.0 (2.0%) | 1.002 / 1.002 | 3.9 | - | - (-) | - |" in text
    assert "| x3 #0 | timed out: timed out after 1800s |" in text
    assert "**Where the CPU went**" in text
    assert "kubelet" in text
