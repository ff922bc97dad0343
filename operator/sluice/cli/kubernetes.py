"""`sluice scheduler --executor kubernetes`: the options, and the executor they make."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.cli.common import fail
from sluice.executors.kubernetes import KubernetesExecutor, KubernetesSettings

Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        envvar="SLUICE_NAMESPACE",
        help="kubernetes executor: the namespace task Jobs run in",
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
TaskServiceAccount = Annotated[
    str | None,
    typer.Option(help="kubernetes executor: the ServiceAccount task pods run as"),
]
TaskImagePullPolicy = Annotated[
    str | None,
    typer.Option(
        help="kubernetes executor: imagePullPolicy of task containers (default: Kubernetes')"
    ),
]
PULL_POLICIES = ("Always", "IfNotPresent", "Never")


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
) -> KubernetesSettings:
    """Checked settings; every bad value exits naming the option and the fix."""
    if not namespace:
        fail("--executor kubernetes needs --namespace (or SLUICE_NAMESPACE): where task Jobs run")
    if pod_start_timeout <= 0:
        fail(f"--pod-start-timeout must be more than 0 seconds (got {pod_start_timeout})")
    if image_pull_policy is not None and image_pull_policy not in PULL_POLICIES:
        fail(
            f"--task-image-pull-policy {image_pull_policy!r} is not one of "
            f"{', '.join(PULL_POLICIES)}"
        )
    if task_api_url is not None and not task_api_url.startswith(("http://", "https://")):
        fail(f"--task-api-url {task_api_url!r} must start with http:// or https://")
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
    )


def make_executor(settings: KubernetesSettings) -> KubernetesExecutor:
    try:
        return KubernetesExecutor(settings)
    except Exception as exc:  # no kubeconfig, a broken one, an unreachable server
        fail(f"the kubernetes executor cannot reach the cluster: {exc}")
