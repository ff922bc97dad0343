"""The Job executor's watches, one set per namespace it runs tries in (ADR 0032).

A DAG's Jobs run in the DAG's own namespace, so one replica may run tries in
many namespaces. Each gets its own `TryCache` (its Job, pod and `FailedCreate`
Event watches), started when the replica first creates (or finds) a Job there
or adopts a try there: a replica watches the namespaces its own tries are in,
and needs no list of them (its rights decide where it may create Jobs; a
refusal fails the try with the API server's message, and starts no watch).
Each namespace also keeps the time its watches could not see it, so an outage
of one namespace's watches (its RoleBinding removed) does not stretch the pod
start timeout of another's tries, nor stop them being judged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog
from kubernetes import client

from sluice.executors.kubernetes.watch import TryCache

log = structlog.get_logger("sluice.executors.kubernetes")
# After the watches resync, how long kubelets get to report what happened meanwhile before
# a pod that still looks Pending counts against its try's start timeout again.
RESYNC_SETTLE = 30.0


@dataclass
class Scope:
    """One namespace's watches, and the seconds they could not see it (plus a settle time
    after each resync): the pod start timeout counts only time the watches could see."""

    namespace: str
    cache: TryCache
    blind_total: float = 0.0
    blind_since: datetime | None = None

    def look(self, now: datetime) -> bool:
        """Whether the watches see the namespace now; notes the time they could not."""
        if not self.cache.synced:
            if self.blind_since is None:
                self.blind_since = now
            return False
        if self.blind_since is not None:
            # Right after a resync the cache shows what kubelets reported before the
            # outage: a pod that started meanwhile still looks Pending until its kubelet
            # reports again. Neither the outage nor that settle time counts as starting.
            blind = (now - self.blind_since).total_seconds() + RESYNC_SETTLE
            self.blind_total += blind
            self.blind_since = None
            log.info(
                "the watches see the namespace again",
                namespace=self.namespace,
                blind_seconds=round(blind, 1),
            )
        return True


class Watches:
    """The scopes of one replica, by namespace; a scope's watches start with the scope."""

    def __init__(self, api_factory: Callable[[], client.ApiClient], replica: str) -> None:
        self._api_factory = api_factory
        self._replica = replica
        self._scopes: dict[str, Scope] = {}
        self._lock = threading.Lock()

    def scope(self, namespace: str) -> Scope:
        """The namespace's scope, its watches started if they were not."""
        with self._lock:
            found = self._scopes.get(namespace)
            if found is not None:
                return found
            found = Scope(namespace, TryCache(self._api_factory, namespace, replica=self._replica))
            self._scopes[namespace] = found
        found.cache.start()
        log.info("watching a namespace's tries", namespace=namespace)
        return found

    def get(self, namespace: str) -> Scope | None:
        with self._lock:
            return self._scopes.get(namespace)

    def all(self) -> list[Scope]:
        with self._lock:
            return list(self._scopes.values())

    def stats(self) -> dict[str, int]:
        """The caches' counters, summed over the namespaces, and how many are watched."""
        total: dict[str, int] = {"namespaces_watched": 0}
        for scope in self.all():
            total["namespaces_watched"] += 1
            for key, value in scope.cache.stats().items():
                total[key] = total.get(key, 0) + value
        return total

    def stop(self) -> None:
        for scope in self.all():
            scope.cache.stop()
