"""The operator's resync: objects kopf never finished handling are annotated, others not."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.handlers import resync

NOW = datetime(2026, 12, 4, 14, 0, tzinfo=UTC)


def obj(
    name: str,
    *,
    namespace: str | None = "ns",
    age: float = 120,
    handled: bool = False,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "creationTimestamp": (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "annotations": {resync.HANDLED: "{}"} if handled else {"other": "x"},
    }
    if namespace is not None:
        meta["namespace"] = namespace
    if deleting:
        meta["deletionTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta}


class FakeApi:
    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects
        self.patched: list[tuple[str | None, str, str, Any]] = []
        self.listed: list[tuple[str | None, str]] = []
        self.limits: list[int | None] = []

    def _page(self, items: list[dict[str, Any]], limit: int | None, token: str | None) -> Any:
        """As the API server pages a list: `limit` items from the `_continue` token on."""
        self.limits.append(limit)
        start = int(token or 0)
        end = len(items) if limit is None else start + limit
        more = {"continue": str(end)} if end < len(items) else {}
        return {"items": items[start:end], "metadata": more}

    def list_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        limit: int | None = None,
        _continue: str | None = None,
    ) -> Any:
        self.listed.append((None, plural))
        return self._page(self.objects.get(plural, []), limit, _continue)

    def list_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        limit: int | None = None,
        _continue: str | None = None,
    ) -> Any:
        self.listed.append((namespace, plural))
        items = [o for o in self.objects.get(plural, []) if o["metadata"]["namespace"] == namespace]
        return self._page(items, limit, _continue)

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any:
        assert (group, version) == (resync.GROUP, resync.VERSION)
        self.patched.append((namespace, plural, name, body))

    def patch_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: Any
    ) -> Any:
        self.patched.append((None, plural, name, body))


def test_only_objects_kopf_never_finished_and_old_enough_are_unhandled() -> None:
    assert resync.unhandled(obj("a"), NOW, grace=30)
    assert not resync.unhandled(obj("a", handled=True), NOW, grace=30)
    assert not resync.unhandled(obj("a", age=10), NOW, grace=30)  # kopf may be on it now
    assert not resync.unhandled(obj("a", deleting=True), NOW, grace=30)
    assert not resync.unhandled({"metadata": {"name": "a"}}, NOW, grace=30)


def test_the_unhandled_are_annotated_in_the_namespaces_served_and_the_pools() -> None:
    api = FakeApi(
        {
            "dags": [obj("stuck"), obj("fine", handled=True), obj("young", age=5)],
            "dagruns": [obj("manual"), obj("elsewhere", namespace="other")],
            "pools": [obj("p", namespace=None), obj("q", namespace=None, handled=True)],
        }
    )
    nudged = resync.nudge_unhandled(api, ["ns"], NOW, grace=30)
    assert nudged == ["dags/ns/stuck", "dagruns/ns/manual", "pools/p"]
    stamp = {"metadata": {"annotations": {resync.NUDGED: "2026-12-04T14:00:00Z"}}}
    assert api.patched == [
        ("ns", "dags", "stuck", stamp),
        ("ns", "dagruns", "manual", stamp),
        (None, "pools", "p", stamp),
    ]
    assert ("other", "dagruns") not in api.listed  # a namespace it does not serve


def test_cluster_wide_it_lists_every_namespace_at_once() -> None:
    api = FakeApi({"dags": [obj("a", namespace="x"), obj("b", namespace="y")]})
    assert resync.nudge_unhandled(api, None, NOW, grace=30) == ["dags/x/a", "dags/y/b"]
    assert (None, "dags") in api.listed


def test_the_loop_goes_on_after_an_error_and_stops_when_cancelled() -> None:
    calls: list[str] = []

    class Flaky(FakeApi):
        def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("list")
            if len(calls) == 1:
                raise OSError("connection refused")
            return super().list_namespaced_custom_object(*args, **kwargs)

    api = Flaky({"dags": [obj("stuck")]})

    async def run() -> None:
        task = asyncio.create_task(
            resync.resync_forever(lambda: api, ["ns"], interval=0.01, grace=0)
        )
        for _ in range(500):
            await asyncio.sleep(0.01)
            if api.patched:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert calls[0] == "list"  # the first round failed, a later one nudged
    assert api.patched
    assert api.patched[0][2] == "stuck"


def test_lists_are_read_in_pages() -> None:
    """A namespace with a year of DagRun objects is never listed in one response."""
    runs = [obj(f"run-{i}") for i in range(2 * resync.PAGE + 7)]
    api = FakeApi({"dagruns": runs, "pools": [obj(f"p{i}", namespace=None) for i in range(3)]})
    nudged = resync.nudge_unhandled(api, ["ns"], NOW, grace=60)
    assert len(nudged) == len(runs) + 3
    assert api.listed.count(("ns", "dagruns")) == 3
    assert api.limits
    assert all(limit == resync.PAGE for limit in api.limits)
