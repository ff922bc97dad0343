"""The Kubernetes client Sluice uses: its own JSON bodies go out as built, unwalked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from sluice.executors.kubernetes.executor import JsonApiClient
from sluice.executors.kubernetes.manifest import JobSettings, build_job
from tests.unit.test_k8s_jobs import launch


@dataclass
class _Response:
    status: int = 201
    reason: str = "Created"
    data: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)


def _sent(monkeypatch: pytest.MonkeyPatch, api_client: client.ApiClient) -> list[Any]:
    sent: list[Any] = []

    def request(method: str, url: str, **kwargs: Any) -> _Response:
        sent.append((method, url, kwargs.get("body"), kwargs.get("headers")))
        return _Response()

    monkeypatch.setattr(api_client.rest_client.pool_manager, "request", request)
    return sent


def test_a_job_and_a_status_patch_go_out_as_the_stock_client_sends_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    job = build_job(
        launch(),
        JobSettings(namespace="work", sidecar_image="img", task_api_url="http://api:1"),
        token="t",
    )
    status = {"metadata": {"resourceVersion": "7"}, "status": {"state": "running", "n": [1]}}
    requests = []
    for api_client in (client.ApiClient(config), JsonApiClient(config)):
        sent = _sent(monkeypatch, api_client)
        client.BatchV1Api(api_client).create_namespaced_job("work", job, _preload_content=False)
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
            "sluice.io", "v1alpha1", "work", "dagruns", "r", status,
            _preload_content=False, _content_type="application/merge-patch+json",
        )  # fmt: skip
        client.BatchV1Api(api_client).list_namespaced_job(
            "work", label_selector="a=b", watch=True, _preload_content=False
        )
        requests.append(sent)
    assert requests[0] == requests[1]  # the same requests, byte for byte


def test_a_typed_body_still_takes_the_clients_conversion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `create_namespaced_event` validates its body into a model with datetimes: they must
    # still be written as the stock client writes them.
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    event = {
        "metadata": {"generateName": "r.", "namespace": "work"},
        "involvedObject": {"kind": "DagRun", "name": "r", "namespace": "work"},
        "reason": "RunStarted",
        "message": "run started",
        "firstTimestamp": "2026-12-01T00:00:00Z",
        "lastTimestamp": "2026-12-01T00:00:00Z",
    }
    requests = []
    for api_client in (client.ApiClient(config), JsonApiClient(config)):
        sent = _sent(monkeypatch, api_client)
        client.CoreV1Api(api_client).create_namespaced_event("work", event, _preload_content=False)
        requests.append(sent)
    assert requests[0] == requests[1]


def test_a_job_created_untyped_is_the_job_the_typed_method_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The executor posts a Job through the untyped endpoint (no model round trip): the same
    # URL and the same object as `create_namespaced_job` would send.
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    job = build_job(
        launch(),
        JobSettings(namespace="work", sidecar_image="img", task_api_url="http://api:1"),
        token="t",
    )
    typed = _sent(monkeypatch, stock := client.ApiClient(config))
    client.BatchV1Api(stock).create_namespaced_job("work", job, _preload_content=False)
    untyped = _sent(monkeypatch, ours := JsonApiClient(config))
    client.CustomObjectsApi(ours).create_namespaced_custom_object(
        "batch", "v1", "work", "jobs", job, _preload_content=False
    )
    (method, url, body, _), (method2, url2, body2, _) = typed + untyped
    assert (
        (method, url)
        == (method2, url2)
        == ("POST", f"{config.host}/apis/batch/v1/namespaces/work/jobs")
    )
    assert json.loads(body) == json.loads(body2) == job


def test_plain_bodies_are_not_walked_and_copied() -> None:
    body = {"spec": {"containers": [{"name": "main", "args": ["a"]}]}}
    assert JsonApiClient().sanitize_for_serialization(body) is body
    assert client.ApiClient().sanitize_for_serialization(body) is not body  # the stock copy
