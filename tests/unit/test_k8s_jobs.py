"""The Job executor's pure parts: Job names, the Job manifest and its merge, outcomes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.executors.base import TaskLaunch
from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.manifest import (
    MAIN,
    SIDECAR,
    JobSettings,
    PodTemplateError,
    build_job,
)
from sluice.executors.kubernetes.outcome import judge
from sluice.spec.states import TaskState

T0 = datetime(2026, 12, 1, tzinfo=UTC)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def launch(**overrides: Any) -> TaskLaunch:
    values: dict[str, Any] = {
        "ti_id": 7,
        "try_number": 2,
        "dag_id": "hello",
        "task_id": "extract",
        "run_id": "scheduled__2026-12-01T00:00:00+00:00",
        "logical_date": T0,
        "data_interval_start": T0,
        "data_interval_end": T0 + timedelta(hours=1),
        "conf": {"k": "v"},
        "image": "localhost/task:1",
        "command": ["sh", "-c"],
        "args": ["echo $(SLUICE_LOGICAL_DATE)"],
        "env": {"GREETING": "hi"},
        "execution_timeout": timedelta(minutes=5),
        "skip_on_exit_code": frozenset({99}),
    }
    values.update(overrides)
    return TaskLaunch(**values)


SETTINGS = JobSettings(
    namespace="work", sidecar_image="localhost/sluice:dev", task_api_url="http://api:8793"
)


def main_container(job: dict[str, Any]) -> dict[str, Any]:
    (main,) = [c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == MAIN]
    return main


# -- names ---------------------------------------------------------------------------


def test_job_names_are_dns_labels_deterministic_and_distinct_for_long_names() -> None:
    long_dag, long_task = "d" * 60 + "-x", "t" * 60
    a = names.job_name(long_dag, "run-1", long_task, 1)
    assert len(a) <= 63, a
    assert DNS_LABEL.match(a), a
    assert a == names.job_name(long_dag, "run-1", long_task, 1)
    others = {
        names.job_name(long_dag, "run-1", long_task, 2),
        names.job_name(long_dag, "run-2", long_task, 1),
        names.job_name(long_dag + "y", "run-1", long_task, 1),
    }
    assert a not in others
    assert len(others) == 3
    short = names.job_name("hello", "scheduled__2026", "extract", 3)
    assert short.startswith("hello-extract-3-"), short


def test_label_values_are_kept_when_valid_and_hashed_when_not() -> None:
    assert names.label_value("extract") == "extract"
    value = names.label_value("scheduled__2026-12-01T00:00:00+00:00")
    assert len(value) <= 63
    assert re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value)
    assert value != names.label_value("scheduled__2026-12-01T01:00:00+00:00")
    assert len(names.label_value("x" * 200)) <= 63


# -- the manifest ------------------------------------------------------------------------


def test_a_job_has_identity_no_retries_the_timeout_and_restricted_security() -> None:
    job = build_job(launch(), SETTINGS, token="tok")
    meta, spec = job["metadata"], job["spec"]
    assert meta["namespace"] == "work"
    assert meta["labels"]["sluice.io/dag"] == "hello"
    assert meta["labels"]["sluice.io/task"] == "extract"
    assert meta["labels"]["sluice.io/try"] == "2"
    assert meta["labels"]["sluice.io/ti"] == "7"
    assert meta["annotations"]["sluice.io/run-id"] == "scheduled__2026-12-01T00:00:00+00:00"
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 300 + 300  # the timeout and the pod start timeout
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"]["sluice.io/ti"] == "7"
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    main = main_container(job)
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert main["image"] == "localhost/task:1"
    assert main["command"] == ["sh", "-c"]
    assert main["args"] == ["echo $(SLUICE_LOGICAL_DATE)"]
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["GREETING"] == "hi"
    assert env["SLUICE_LOGICAL_DATE"] == T0.isoformat()
    assert env["SLUICE_TRY_NUMBER"] == "2"
    assert env["SLUICE_CONF"] == '{"k": "v"}'


def test_the_run_context_reaches_the_container_as_written() -> None:
    """The params and the conf are data: Kubernetes expands `$(VAR)` in an env value and
    makes `$$` one `$`, so a `$` in them is written `$$`; the task's own env is left as is."""
    job = build_job(
        launch(
            conf={"cmd": "echo $(HOME) $$ $1"},
            dag_params={"mode": "full", "price": "$5"},
            env={"MINE": "$(SLUICE_DAG)"},
        ),
        SETTINGS,
        token="tok",
    )
    env = {e["name"]: e["value"] for e in main_container(job)["env"]}
    assert env["SLUICE_CONF"] == '{"cmd": "echo $$(HOME) $$$$ $$1"}'
    assert (
        env["SLUICE_PARAMS"] == '{"cmd": "echo $$(HOME) $$$$ $$1", "mode": "full", "price": "$$5"}'
    )
    assert env["SLUICE_PARAM_MODE"] == "full"
    assert env["SLUICE_PARAM_PRICE"] == "$$5"
    assert env["SLUICE_PARAM_CMD"] == "echo $$(HOME) $$$$ $$1"
    assert env["MINE"] == "$(SLUICE_DAG)"


def test_the_heartbeat_sidecar_is_a_native_sidecar_with_the_try_and_its_token() -> None:
    job = build_job(launch(), SETTINGS, token="tok")
    (sidecar,) = job["spec"]["template"]["spec"]["initContainers"]
    assert sidecar["name"] == SIDECAR
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "localhost/sluice:dev"
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env == {
        "SLUICE_TASK_API_URL": "http://api:8793",
        "SLUICE_TI_ID": "7",
        "SLUICE_TRY_NUMBER": "2",
        "SLUICE_TRY_TOKEN": "tok",
        "SLUICE_HEARTBEAT_INTERVAL": "10",
    }
    text = repr(job)
    for secret in ("postgresql", "DATABASE", "password"):
        assert secret not in text


def test_pod_template_merges_under_the_tasks_own_fields() -> None:
    template = {
        "metadata": {"labels": {"team": "data", "sluice.io/ti": "forged"}},
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "securityContext": {"runAsUser": 1000},
            "containers": [
                {
                    "name": MAIN,
                    "image": "ignored:1",
                    "env": [{"name": "GREETING", "value": "template"}, {"name": "X", "value": "1"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "helper", "image": "helper:1"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "restartPolicy": "Always",
        },
    }
    job = build_job(launch(pod_template=template), SETTINGS, token="tok")
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "data"
    assert pod["metadata"]["labels"]["sluice.io/ti"] == "7"  # identity is not overridable
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["runAsNonRoot"] is True  # defaults kept where not set
    assert [c["name"] for c in spec["containers"]] == [MAIN, "helper"]
    main = main_container(job)
    assert main["image"] == "localhost/task:1"  # the task's image wins
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["GREETING"] == "hi"
    assert env["X"] == "1"
    assert main["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_bad_pod_templates_name_the_field_and_the_fix() -> None:
    with pytest.raises(PodTemplateError, match="PodTemplateSpec"):
        build_job(launch(pod_template={"containers": []}), SETTINGS)
    with pytest.raises(PodTemplateError, match=r"containers\[0\] needs a `name`"):
        build_job(launch(pod_template={"spec": {"containers": [{"image": "x"}]}}), SETTINGS)
    with pytest.raises(PodTemplateError, match="no image"):
        build_job(launch(image=None), SETTINGS)


def test_no_task_api_means_no_sidecar_and_no_timeout_means_no_deadline() -> None:
    settings = JobSettings(namespace="work", sidecar_image="s", task_api_url=None)
    job = build_job(launch(execution_timeout=None), settings)
    assert "initContainers" not in job["spec"]["template"]["spec"]
    assert "activeDeadlineSeconds" not in job["spec"]


# -- outcomes ----------------------------------------------------------------------------


def job_obj(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"activeDeadlineSeconds": 300},
        "status": {
            "conditions": [{"type": t, "status": "True", "reason": r} for t, r in conditions]
        },
    }


def pod_obj(main_state: dict[str, Any] | None, **status: Any) -> dict[str, Any]:
    statuses = [{"name": MAIN, "state": main_state}] if main_state is not None else []
    return {
        "metadata": {"name": "j-abcde"},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": status.pop("phase", "Pending"),
            "containerStatuses": statuses,
            **status,
        },
    }


def verdict(
    job: Any,
    pod: Any,
    waited: float = 1.0,
    timeout: float = 300.0,
    failed_create: str | None = None,
) -> Any:
    return judge(
        job,
        pod,
        now=T0 + timedelta(seconds=waited),
        started=T0,
        pod_start_timeout=timeout,
        skip_on_exit_code=frozenset({99}),
        failed_create=failed_create,
    )


def terminated(code: int, reason: str = "Completed") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason}}


def test_exit_codes_map_to_success_skipped_and_failed() -> None:
    ok = verdict(job_obj(), pod_obj(terminated(0), phase="Succeeded"))
    assert (ok.phase, ok.state, ok.exit_code) == ("ended", TaskState.SUCCESS, 0)
    skipped = verdict(job_obj(), pod_obj(terminated(99, "Error"), phase="Failed"))
    assert (skipped.state, skipped.exit_code) == (TaskState.SKIPPED, 99)
    failed = verdict(job_obj(), pod_obj(terminated(3, "Error"), phase="Failed"))
    assert (failed.state, failed.reason) == (TaskState.FAILED, "exit code 3")
    oom = verdict(job_obj(), pod_obj(terminated(137, "OOMKilled"), phase="Failed"))
    assert oom.reason == "main: OOMKilled (exit code 137)"


def test_a_failed_tries_reason_ends_with_the_last_lines_of_its_output() -> None:
    """The kubelet's fallback termination message (the end of the log) becomes the end of
    the reason: the last five non-empty lines, on one line, cut from the front."""
    log = "\n".join(f"line {i}" for i in range(1, 80)) + "\nTraceback: boom\n\n"
    state = {"terminated": {"exitCode": 1, "reason": "Error", "message": log}}
    failed = verdict(job_obj(), pod_obj(state, phase="Failed"))
    assert failed.reason == (
        "exit code 1; its output ended: line 76 | line 77 | line 78 | line 79 | Traceback: boom"
    )
    long = {"terminated": {"exitCode": 2, "reason": "Error", "message": "x" * 5000 + "END"}}
    reason = verdict(job_obj(), pod_obj(long, phase="Failed")).reason or ""
    assert reason.endswith("xxEND")
    assert len(reason) < len("exit code 2; its output ended: ") + 401
    assert "its output" not in (verdict(job_obj(), pod_obj(terminated(3, "Error"))).reason or "")


def test_job_deadline_evictions_and_a_complete_job_without_its_pod() -> None:
    timeout = verdict(job_obj(("Failed", "DeadlineExceeded")), pod_obj(terminated(143, "Error")))
    assert timeout.state == TaskState.FAILED
    assert "DeadlineExceeded" in (timeout.reason or "")
    evicted = verdict(
        job_obj(),
        pod_obj(terminated(137, "Error"), phase="Failed", reason="Evicted", message="low memory"),
    )
    assert evicted.reason == "Evicted: low memory"
    done = verdict(job_obj(("Complete", "")), None)
    assert (done.phase, done.state) == ("ended", TaskState.SUCCESS)


def test_a_try_killed_by_its_pods_deletion_is_left_to_the_zombie_sweep() -> None:
    pod = pod_obj(terminated(143, "Error"), phase="Running")
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:05Z"
    lost = verdict(job_obj(), pod)
    assert lost.phase == "lost"
    assert lost.evidence["pod_deleting_since"] == "2026-12-01T00:00:05Z"
    pod["status"]["containerStatuses"][0]["state"] = terminated(0)
    assert verdict(job_obj(), pod).state == TaskState.SUCCESS  # it had finished: that stands


def test_a_failed_job_whose_pod_vanished_is_left_to_the_zombie_sweep() -> None:
    lost = verdict(job_obj(("Failed", "BackoffLimitExceeded")), None)
    assert lost.phase == "lost"
    assert lost.evidence["pod"] == "gone"
    assert verdict(None, None).phase == "lost"


@pytest.mark.parametrize("reason", ["InvalidImageName", "ErrImageNeverPull"])
def test_hopeless_images_fail_at_once(reason: str) -> None:
    v = verdict(job_obj(), pod_obj({"waiting": {"reason": reason, "message": "bad ref"}}))
    assert v.phase == "ended"
    assert v.delete
    assert v.reason == f"{reason}: bad ref"


@pytest.mark.parametrize(
    "reason",
    ["ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError"],
)
def test_maybe_transient_start_failures_wait_for_the_pod_start_timeout(reason: str) -> None:
    pod = pod_obj({"waiting": {"reason": reason, "message": "m"}})
    assert verdict(job_obj(), pod, waited=10).phase == "starting"
    late = verdict(job_obj(), pod, waited=301)
    assert late.phase == "ended"
    assert late.delete
    assert late.state == TaskState.FAILED
    assert late.reason is not None
    assert late.reason.startswith(f"{reason} for 301s")


@pytest.mark.parametrize(
    "message",
    [
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": host namespaces',
        'pods "p" is forbidden: error looking up service account a/sluice-task: not found',
        'pods "p" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi',
        'admission webhook "policy.example.com" denied the request: no latest tags',
    ],
)
def test_a_refused_pod_fails_at_once_with_the_api_servers_words(message: str) -> None:
    v = verdict(job_obj(), None, failed_create=f"Error creating: {message}")
    assert v.phase == "ended"
    assert v.state == TaskState.FAILED
    assert v.delete  # the Job controller would try again with the same pod, forever
    assert v.reason == f"the API server refused the try's pod: {message}"
    assert v.evidence["failed_create"] == f"Error creating: {message}"
    # A pod that exists says the refusal was an earlier attempt's: judged as a pod.
    assert verdict(job_obj(), pod_obj({"running": {}}), failed_create=message).phase == "running"


@pytest.mark.parametrize(
    "message",
    [
        'pods "p" is forbidden: exceeded quota: q, requested: cpu=1, used: cpu=4',
        'Internal error occurred: failed calling webhook "w.example.com": connection refused',
    ],
)
def test_a_refusal_that_may_pass_waits_for_the_pod_start_timeout(message: str) -> None:
    assert verdict(job_obj(), None, waited=10, failed_create=message).phase == "starting"
    late = verdict(job_obj(), None, waited=301, failed_create=message)
    assert late.phase == "ended"
    assert late.delete
    assert late.reason == (
        f"the API server refused the try's pod for 301s (pod start timeout 300s): {message}"
    )


def test_unschedulable_fails_with_the_schedulers_message_after_the_timeout() -> None:
    pod = pod_obj(
        None,
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
        ],
    )
    assert verdict(job_obj(), pod, waited=5).phase == "starting"
    late = verdict(job_obj(), pod, waited=400)
    assert late.reason is not None
    assert "Unschedulable" in late.reason
    assert "Insufficient cpu" in late.reason


def test_running_and_starting() -> None:
    running = verdict(job_obj(), pod_obj({"running": {}}, phase="Running"))
    assert running.phase == "running"
    assert running.evidence["node"] == "n1"
    assert running.running_since is None  # no startedAt: the last heartbeat counts alone
    since = verdict(job_obj(), pod_obj({"running": {"startedAt": "2026-12-04T04:49:12Z"}}))
    assert since.running_since == datetime(2026, 12, 4, 4, 49, 12, tzinfo=UTC)
    assert verdict(job_obj(), None, waited=5).phase == "starting"
    never = verdict(job_obj(), None, waited=500)
    assert never.phase == "ended"
    assert "no pod was created" in (never.reason or "")
