"""What a try's Job and pod say about it: still starting, running, ended, or failed to start.

Pure functions over the API objects as dicts (as a watch delivers them). The
failure messages follow Argo's: the pod's own message first (Evicted,
DeadlineExceeded), then the main container's reason and exit code, e.g.
`main: OOMKilled (exit code 137)`.

Start failures (the pod never got its main container running) become reasons
a user can read. `InvalidImageName` and `ErrImageNeverPull` fail at once (no
wait makes them work); `ErrImagePull`, `ImagePullBackOff`,
`CreateContainerConfigError`, `CreateContainerError` and `Unschedulable` may be
transient (a registry hiccup, a Secret applied late, an autoscaler adding a
node), so they fail only once the try has waited `pod_start_timeout`.

A pod the API server refused to create (the Job controller's `FailedCreate`
Event: Pod Security admission, a missing ServiceAccount, a LimitRange, an
admission webhook's denial) fails its try at once with the API server's
message: the Job controller would only try again with the same pod. Only a
full ResourceQuota and an admission webhook that could not be called may pass;
they fail the try once it has waited `pod_start_timeout`, with the message.

A task's `executionTimeout` counts from when its main container started
running (its status's `state.running.startedAt`), as Airflow's counts the
task's execution only: time spent Pending (an image pull, waiting for a node)
is the pod start timeout's. A try running past it fails with "execution
timeout (...) exceeded after running ...", and its Job is deleted. The Job's
`activeDeadlineSeconds` (the execution timeout plus the pod start timeout,
counted by the Job controller from the Job's start) is only a backstop for a
Job whose replicas are all gone; when it fires, the try fails all the same.

A try whose Job failed without its main container ending (the pod was
deleted, the node vanished), or whose main container was stopped because its
pod was being deleted, is not judged here: the zombie sweep decides it from
both signals, a stale heartbeat and the pod gone (invariant 7).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sluice.executors.kubernetes.manifest import MAIN
from sluice.spec.states import TaskState

FAIL_AT_ONCE = frozenset({"InvalidImageName", "ErrImageNeverPull"})
# A refused pod whose message says one of these may be created at a later attempt.
CREATE_MAY_PASS = ("exceeded quota", "failed calling webhook", "Internal error occurred")
# How much of a refusal's message a reason keeps (Pod Security lists every violation).
MESSAGE_CHARS = 1000
# How much of a failed main container's output its try's reason ends with.
TAIL_LINES = 5
TAIL_CHARS = 400
FAIL_AFTER_GRACE = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "ImageInspectError",
    }
)


@dataclass(frozen=True)
class Verdict:
    """`ended`: report `state`. `starting`/`running`: leave it. `lost`: the zombie sweep's."""

    phase: Literal["starting", "running", "ended", "lost"]
    state: TaskState | None = None
    exit_code: int | None = None
    reason: str | None = None
    # Delete the Job after reporting (a try that failed to start must not start later).
    delete: bool = False
    # The main container ran: stop its pod and keep it for its log (the executor's
    # `_stop_pods`) rather than delete the Job, where it can.
    keep_pod: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)
    # `running`: when the main container started (its kubelet's clock), if it says.
    running_since: datetime | None = None


def judge(
    job: dict[str, Any] | None,
    pod: dict[str, Any] | None,
    *,
    now: datetime,
    started: datetime,
    pod_start_timeout: float,
    skip_on_exit_code: frozenset[int],
    failed_create: str | None = None,
    execution_timeout: float | None = None,
) -> Verdict:
    """The verdict on one try from its Job and newest pod (None: not in the cache), the
    message of its Job's newest `FailedCreate` Event, if any (its pod was refused), and
    the task's execution timeout in seconds (None: none), counted from its main
    container's start."""
    evidence = describe(job, pod)
    job_failed = _condition(job, "Failed")
    if job_failed is not None and job_failed.get("reason") == "DeadlineExceeded":
        deadline = (job or {}).get("spec", {}).get("activeDeadlineSeconds")
        return Verdict(
            "ended",
            TaskState.FAILED,
            reason=f"execution timeout: the Job's deadline ({deadline}s from its start: "
            "the execution timeout plus the pod start timeout) passed (Job DeadlineExceeded)",
            evidence=evidence,
        )
    pod_status = (pod or {}).get("status", {})
    if pod_status.get("phase") == "Failed" and pod_status.get("reason"):
        # Evicted, NodeLost, UnexpectedAdmissionError...: the pod's own words come first.
        message = str(pod_status.get("message") or "").strip()[:300]
        return Verdict(
            "ended",
            TaskState.FAILED,
            reason=f"{pod_status['reason']}: {message}".rstrip(": "),
            evidence=evidence,
        )
    main = _container_status(pod, MAIN)
    terminated = (main or {}).get("state", {}).get("terminated")
    if terminated is not None:
        code = int(terminated.get("exitCode", 0))
        if code != 0 and (pod or {}).get("metadata", {}).get("deletionTimestamp"):
            # Killed because someone deleted its pod (kubectl delete, an eviction): its exit
            # code says how it was stopped, not how the task went. The zombie sweep decides,
            # on both signals, with the deletion in the evidence.
            return Verdict("lost", evidence=evidence)
        return _ended(code, terminated, skip_on_exit_code, evidence)
    if _condition(job, "Complete") is not None:
        return Verdict("ended", TaskState.SUCCESS, 0, evidence=evidence)
    if job is None or job_failed is not None:
        return Verdict("lost", evidence=evidence)
    if main is not None and "running" in main.get("state", {}):
        since = k8s_time((main["state"]["running"] or {}).get("startedAt"))
        if execution_timeout is not None and since is not None:
            ran = (now - since).total_seconds()
            if ran >= execution_timeout:
                return Verdict(
                    "ended",
                    TaskState.FAILED,
                    reason=f"execution timeout ({execution_timeout:g}s) exceeded after "
                    f"running {ran:.0f}s",
                    delete=True,
                    keep_pod=True,
                    evidence=evidence,
                    running_since=since,
                )
        return Verdict("running", evidence=evidence, running_since=since)
    if pod is None and failed_create is not None:
        refused = _refused(failed_create, now=now, started=started, timeout=pod_start_timeout)
        if refused is not None:
            return replace(refused, evidence={**evidence, "failed_create": failed_create})
    return _starting(
        pod, main, now=now, started=started, timeout=pod_start_timeout, evidence=evidence
    )


def _refused(message: str, *, now: datetime, started: datetime, timeout: float) -> Verdict | None:
    """The verdict on a try whose pod the API server refused, None while it may pass."""
    text = message.removeprefix("Error creating: ").strip()[:MESSAGE_CHARS]
    if not any(words in text for words in CREATE_MAY_PASS):
        return Verdict(
            "ended",
            TaskState.FAILED,
            reason=f"the API server refused the try's pod: {text}",
            delete=True,
        )
    waited = (now - started).total_seconds()
    if waited < timeout:
        return None
    return Verdict(
        "ended",
        TaskState.FAILED,
        reason=f"the API server refused the try's pod for {waited:.0f}s "
        f"(pod start timeout {timeout:g}s): {text}",
        delete=True,
    )


def _ended(
    code: int, terminated: dict[str, Any], skip: frozenset[int], evidence: dict[str, Any]
) -> Verdict:
    if code == 0:
        return Verdict("ended", TaskState.SUCCESS, 0, evidence=evidence)
    if code in skip:
        return Verdict("ended", TaskState.SKIPPED, code, f"exit code {code}", evidence=evidence)
    why = terminated.get("reason")
    reason = f"{MAIN}: {why} (exit code {code})" if why and why != "Error" else f"exit code {code}"
    tail = output_tail(terminated.get("message"))
    if tail:
        reason += f"; its output ended: {tail}"
    return Verdict("ended", TaskState.FAILED, code, reason, evidence=evidence)


def output_tail(message: object, *, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last lines of a container's termination message, on one line (` | ` between
    them): with `terminationMessagePolicy: FallbackToLogsOnError` (the Job's main
    container), the kubelet fills it with the end of a failed container's log (at most
    80 lines or 2 KiB) when the task wrote no message of its own. Cut from the front to
    `chars`, so that what is kept is what came last."""
    if not isinstance(message, str):
        return ""
    kept = [line.strip() for line in message.splitlines() if line.strip()][-lines:]
    text = " | ".join(kept)
    return text if len(text) <= chars else "..." + text[-(chars - 3) :]


def _starting(
    pod: dict[str, Any] | None,
    main: dict[str, Any] | None,
    *,
    now: datetime,
    started: datetime,
    timeout: float,
    evidence: dict[str, Any],
) -> Verdict:
    waited = (now - started).total_seconds()
    late = waited >= timeout
    waiting = (main or {}).get("state", {}).get("waiting") or {}
    why = waiting.get("reason")
    message = str(waiting.get("message") or "").strip()[:300]
    if why in FAIL_AT_ONCE or (why in FAIL_AFTER_GRACE and late):
        return Verdict(
            "ended",
            TaskState.FAILED,
            reason=f"{why}: {message}".rstrip(": ")
            if why in FAIL_AT_ONCE
            else f"{why} for {waited:.0f}s (pod start timeout {timeout:g}s): {message}".rstrip(
                ": "
            ),
            delete=True,
            evidence=evidence,
        )
    scheduled = _condition(pod, "PodScheduled", status="False")
    if scheduled is not None and scheduled.get("reason") == "Unschedulable" and late:
        return Verdict(
            "ended",
            TaskState.FAILED,
            reason=f"Unschedulable for {waited:.0f}s (pod start timeout {timeout:g}s): "
            f"{scheduled.get('message', '')}".rstrip(": "),
            delete=True,
            evidence=evidence,
        )
    if late:
        where = (
            "no pod was created"
            if pod is None
            else (
                f"pod {pod['metadata']['name']} is {pod.get('status', {}).get('phase', 'Pending')}"
                + (f" ({why})" if why else "")
            )
        )
        return Verdict(
            "ended",
            TaskState.FAILED,
            reason=f"did not start within the pod start timeout ({timeout:g}s): {where}",
            delete=True,
            evidence=evidence,
        )
    return Verdict("starting", evidence=evidence)


def describe(job: dict[str, Any] | None, pod: dict[str, Any] | None) -> dict[str, Any]:
    """The evidence kept on a try: what the Job and its pod looked like."""
    out: dict[str, Any] = {}
    if job is None:
        out["job"] = "gone"
    else:
        out["job"] = job["metadata"]["name"]
        conditions = [
            f"{c.get('type')}={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "")
            for c in job.get("status", {}).get("conditions") or []
        ]
        if conditions:
            out["job_conditions"] = conditions
    if pod is None:
        out["pod"] = "gone"
        return out
    status = pod.get("status", {})
    out["pod"] = pod["metadata"]["name"]
    out["pod_phase"] = status.get("phase")
    if pod["metadata"].get("deletionTimestamp"):
        out["pod_deleting_since"] = pod["metadata"]["deletionTimestamp"]
    if pod.get("spec", {}).get("nodeName"):
        out["node"] = pod["spec"]["nodeName"]
    if status.get("reason"):
        out["pod_reason"] = status["reason"]
    containers = {}
    for c in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        state = c.get("state") or {}
        kind = next(iter(state), "unknown")
        detail = state.get(kind) or {}
        text = kind
        if detail.get("reason"):
            text += f" ({detail['reason']})"
        if "exitCode" in detail:
            text += f" exit {detail['exitCode']}"
        containers[c.get("name", "?")] = text
    if containers:
        out["containers"] = containers
    return out


def _container_status(pod: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    for c in (pod or {}).get("status", {}).get("containerStatuses") or []:
        if c.get("name") == name:
            return dict(c)
    return None


def _condition(
    obj: dict[str, Any] | None, kind: str, *, status: str = "True"
) -> dict[str, Any] | None:
    for c in (obj or {}).get("status", {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == status:
            return dict(c)
    return None


def job_finished(job: dict[str, Any] | None) -> bool:
    """Has the Job ended, either way (its Complete or Failed condition)?"""
    return _condition(job, "Complete") is not None or _condition(job, "Failed") is not None


def pod_is_running(pod: dict[str, Any] | None) -> bool:
    main = _container_status(pod, MAIN)
    return main is not None and "running" in (main.get("state") or {})


def k8s_time(value: object) -> datetime | None:
    """A Kubernetes RFC 3339 time (`2026-12-04T04:48:43Z`), or None if absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
