"""The operator's safety net: Sluice objects that kopf never finished handling are nudged.

kopf is edge-triggered: it handles an object when an event for it arrives, and
lists again only when its watch breaks with `410 Gone` or its replica is
paused and resumed. An event lost between two replicas leaves the object
unhandled until it changes again. Seen in `make demo-cluster`: two operator
replicas started together while the examples were applied, one paused in
favour of the other (kopf peering) while it was adding its finalizer to a
DAG, and neither ever handled that DAG: it never reached the database, and
its run never came.

So every `interval` seconds each replica lists the Sluice objects it serves
and annotates those kopf never finished with `sluice.io/resync-requested-at`:
no `sluice.io/last-handled-configuration` (written by kopf once an object's
handlers have all succeeded), older than `grace` seconds, not being deleted.
The annotation is an event, which the active replica handles as the creation
it missed. Objects kopf is still retrying (a DagRun whose DAG is not applied
yet) are nudged too; an extra event only makes kopf look at them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from sluice.logs import first_line

log = structlog.get_logger("sluice.operator")

GROUP = "sluice.io"
VERSION = "v1alpha1"
HANDLED = f"{GROUP}/last-handled-configuration"
NUDGED = f"{GROUP}/resync-requested-at"
NAMESPACED = ("dags", "dagruns", "backfills", "taskactions")
CLUSTER_SCOPED = ("pools",)
# Objects per list request: a namespace with a year of DagRun objects is read in pages,
# never in one response held whole in memory.
PAGE = 500


class CustomObjects(Protocol):
    """The part of kubernetes.client.CustomObjectsApi used here."""

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, **kwargs: Any
    ) -> Any: ...

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **kwargs: Any
    ) -> Any: ...

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any: ...

    def patch_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: Any
    ) -> Any: ...


def unhandled(obj: Mapping[str, Any], now: datetime, grace: float) -> bool:
    """Did kopf never finish handling this object, created over `grace` seconds ago?"""
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp") or HANDLED in (meta.get("annotations") or {}):
        return False
    created = meta.get("creationTimestamp")
    if not created:
        return False
    try:
        born = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return False
    return (now - born).total_seconds() >= grace


def pages(list_page: Callable[..., Any]) -> Iterator[Mapping[str, Any]]:
    """Every item `list_page(limit=, _continue=)` returns, a page of `PAGE` at a time."""
    token: str | None = None
    while True:
        page = list_page(limit=PAGE, **({"_continue": token} if token else {}))
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def nudge_unhandled(
    api: CustomObjects, namespaces: Iterable[str] | None, now: datetime, grace: float
) -> list[str]:
    """Annotate every unhandled Sluice object in `namespaces` (None: all) and the Pools;
    returns `plural/[namespace/]name` of each nudged."""
    stamp = {"metadata": {"annotations": {NUDGED: now.strftime("%Y-%m-%dT%H:%M:%SZ")}}}
    nudged: list[str] = []
    for plural in NAMESPACED:
        scopes: list[str | None] = list(namespaces) if namespaces is not None else [None]
        for namespace in scopes:
            listed = pages(
                lambda namespace=namespace, plural=plural, **kw: (
                    api.list_cluster_custom_object(GROUP, VERSION, plural, **kw)
                    if namespace is None
                    else api.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, **kw)
                )
            )
            for obj in listed:
                if not unhandled(obj, now, grace):
                    continue
                meta = obj["metadata"]
                api.patch_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], plural, meta["name"], stamp
                )
                nudged.append(f"{plural}/{meta['namespace']}/{meta['name']}")
    for plural in CLUSTER_SCOPED:
        listed = pages(
            lambda plural=plural, **kw: api.list_cluster_custom_object(GROUP, VERSION, plural, **kw)
        )
        for obj in listed:
            if unhandled(obj, now, grace):
                name = obj["metadata"]["name"]
                api.patch_cluster_custom_object(GROUP, VERSION, plural, name, stamp)
                nudged.append(f"{plural}/{name}")
    return nudged


async def resync_forever(
    api_factory: Any, namespaces: list[str] | None, *, interval: float, grace: float
) -> None:
    """Nudge unhandled objects every `interval` seconds until cancelled; errors are logged
    and the next round tries again."""
    api: CustomObjects | None = None
    while True:
        await asyncio.sleep(interval)
        try:
            client = api if api is not None else await asyncio.to_thread(api_factory)
            api = client
            nudged = await asyncio.to_thread(
                nudge_unhandled, client, namespaces, datetime.now(UTC), grace
            )
        except Exception as exc:  # the API server away, RBAC: the next round tries again
            log.warning("resync: could not list or nudge objects", error=first_line(exc))
            continue
        if nudged:
            log.warning(
                "resync: nudged objects the operator never finished handling",
                objects=nudged,
            )
