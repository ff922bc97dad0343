"""`sluice scheduler --executor kubernetes`: the options, and the executor they make."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer
from sqlalchemy import Engine

from sluice.api.server import TaskApi, utcnow
from sluice.api.tokens import KeysError, TrySigner, load_keys
from sluice.cli.errors import fail
from sluice.executors.kubernetes import KubernetesExecutor, KubernetesSettings

Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        envvar="SLUICE_NAMESPACE",
        help="kubernetes executor: the default namespace: the Jobs (and DagRun objects) of "
        "DAGs registered without one (--dags, `sluice dags`); a DAG applied as an object "
        "runs its Jobs in its own namespace",
        show_envvar=True,
    ),
]
JobNamespace = Annotated[
    str | None,
    typer.Option(
        "--job-namespace",
        envvar="SLUICE_JOB_NAMESPACE",
        help="kubernetes executor: run every task Job in this namespace, whatever its DAG's "
        "(a single-namespace install); default: each DAG's own namespace",
        show_envvar=True,
    ),
]
Kubeconfig = Annotated[
    Path | None,
    typer.Option(
        help="kubernetes executor: kubeconfig file (default: in-cluster, else $KUBECONFIG)"
    ),
]
SluiceImage = Annotated[
    str,
    typer.Option(
        envvar="SLUICE_IMAGE",
        help="kubernetes executor: the Sluice image (each task pod's heartbeat sidecar)",
        show_envvar=True,
    ),
]
TaskApiUrl = Annotated[
    str | None,
    typer.Option(
        envvar="SLUICE_TASK_API_URL",
        help="kubernetes executor: where task pods reach this replica's task API "
        "(e.g. http://sluice-task-api:8793); without it pods send no heartbeats",
        show_envvar=True,
    ),
]
PodStartTimeout = Annotated[
    float,
    typer.Option(
        help="kubernetes executor: seconds a try's pod may take to start (image pull, "
        "scheduling) before the try fails with the reason"
    ),
]
# A dead replica's finished try is reported from its Job by the replica that adopts it:
# the Job must outlive the time that takes (--scheduler-dead-after and a sweep).
MIN_JOB_TTL = 60
JobTtl = Annotated[
    int,
    typer.Option(
        "--job-ttl",
        help="kubernetes executor: seconds a finished task Job, its pod and the pod's log "
        "are kept before Kubernetes deletes them (the Job's ttlSecondsAfterFinished); at "
        f"least {MIN_JOB_TTL} and twice --scheduler-dead-after plus --zombie-check-interval",
    ),
]
TaskServiceAccount = Annotated[
    str | None,
    typer.Option(
        help="kubernetes executor: the ServiceAccount task pods run as, in their Job's "
        "namespace (the chart makes one with no rights in each namespace it serves)"
    ),
]
TaskImagePullPolicy = Annotated[
    str | None,
    typer.Option(
        help="kubernetes executor: imagePullPolicy of task containers (default: Kubernetes')"
    ),
]
TaskApiListen = Annotated[
    str,
    typer.Option(
        envvar="SLUICE_TASK_API_LISTEN",
        help="kubernetes executor: HOST:PORT the task API listens on (shared by the "
        "replicas on one host)",
        show_envvar=True,
    ),
]
TaskApiKeysFile = Annotated[
    Path | None,
    typer.Option(
        help="kubernetes executor: the task API's signing keys, one per line, the first signs "
        "(default: $SLUICE_TASK_API_KEYS_FILE, else $SLUICE_TASK_API_KEYS)"
    ),
]
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def kubernetes_settings(
    *,
    namespace: str | None,
    kubeconfig: Path | None,
    sluice_image: str,
    task_api_url: str | None,
    pod_start_timeout: float,
    heartbeat_interval: float,
    service_account: str | None,
    image_pull_policy: str | None,
    job_namespace: str | None = None,
    job_ttl: int = 3600,
    adoption_seconds: float = 0.0,
) -> KubernetesSettings:
    """Checked settings; every bad value exits naming the option and the fix.
    `adoption_seconds`: how long a dead replica's try may wait for another to adopt it
    (--scheduler-dead-after and a sweep); a finished Job must be kept twice that."""
    if not namespace:
        fail(
            "--executor kubernetes needs --namespace (or SLUICE_NAMESPACE): where the Jobs of "
            "DAGs registered without a namespace run"
        )
    for option, value in (("--namespace", namespace), ("--job-namespace", job_namespace)):
        if value is not None and not NAMESPACE_NAME.match(value):
            fail(
                f"{option} {value!r} is not a namespace name (lowercase letters, digits and "
                "'-', at most 63, starting and ending with a letter or digit)"
            )
    if pod_start_timeout <= 0:
        fail(f"--pod-start-timeout must be more than 0 seconds (got {pod_start_timeout})")
    least = max(MIN_JOB_TTL, math.ceil(2 * adoption_seconds))
    if job_ttl < least:
        fail(
            f"--job-ttl must be at least {least} seconds (got {job_ttl}): a replica that "
            "adopts a dead one's finished try reads its outcome from its Job, which must "
            "outlive twice --scheduler-dead-after plus --zombie-check-interval"
        )
    if image_pull_policy is not None and image_pull_policy not in PULL_POLICIES:
        fail(
            f"--task-image-pull-policy {image_pull_policy!r} is not one of "
            f"{', '.join(PULL_POLICIES)}"
        )
    if task_api_url is not None and not task_api_url.startswith(("http://", "https://")):
        fail(f"--task-api-url {task_api_url!r} must start with http:// or https://")
    host = urlsplit(task_api_url or "").hostname
    if job_namespace is None and host is not None and not {".", ":"} & set(host):
        # A bare Service name resolves only in the Service's own namespace (an IPv4 or
        # IPv6 address, or a name with a dot, is the same everywhere).
        fail(
            f"--task-api-url {task_api_url!r}: task pods run in their DAG's namespace, where "
            f"{host!r} does not resolve; name the Service's namespace "
            f"(http://{host}.NAMESPACE.svc:PORT), or pin every Job with --job-namespace"
        )
    if kubeconfig is not None and not kubeconfig.is_file():
        fail(f"--kubeconfig {kubeconfig} does not exist")
    return KubernetesSettings(
        namespace=namespace,
        sluice_image=sluice_image,
        task_api_url=task_api_url.rstrip("/") if task_api_url else None,
        service_account=service_account,
        pod_start_timeout=pod_start_timeout,
        heartbeat_interval=heartbeat_interval,
        image_pull_policy=image_pull_policy,
        kubeconfig=str(kubeconfig) if kubeconfig else None,
        job_namespace=job_namespace,
        ttl_seconds_after_finished=job_ttl,
    )


def listen_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"--task-api-listen {value!r} must be HOST:PORT, e.g. 0.0.0.0:8793")
    return host.strip("[]") or "0.0.0.0", int(port)


def task_signer(keys_file: Path | None) -> TrySigner:
    try:
        return TrySigner(load_keys(keys_file))
    except KeysError as exc:
        fail(f"--task-api-keys-file: {exc}")


def make_executor(settings: KubernetesSettings, signer: TrySigner | None) -> KubernetesExecutor:
    tokens = None if signer is None else signer.issue
    try:
        return KubernetesExecutor(settings, tokens=tokens)
    except Exception as exc:  # no kubeconfig, a broken one, an unreachable server
        fail(f"the kubernetes executor cannot reach the cluster: {exc}")


def start_task_api(
    engine: Engine,
    signer: TrySigner,
    listen: tuple[str, int],
    clock: Callable[[], datetime] | None = None,
    on_write: Callable[[bool, datetime], None] | None = None,
) -> TaskApi:
    api = TaskApi(
        engine,
        signer,
        listen[0],
        listen[1],
        reuse_port=True,
        clock=clock or utcnow,
        on_write=on_write,
    )
    try:
        api.start()
    except OSError as exc:
        fail(f"--task-api-listen {listen[0]}:{listen[1]}: cannot listen: {exc.strerror}")
    return api
