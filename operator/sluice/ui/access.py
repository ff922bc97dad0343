"""Who a UI request comes from and what they may do, the Kubernetes way (ADR 0040).

On a cluster (`sluice ui --auth kubernetes`) a request carries a Kubernetes bearer
token: in its `Authorization` header, or in the cookie the login page sets. The API
server says whose it is (a TokenReview) and whether they may see or change a
namespace's DAGs (a SubjectAccessReview per verb, resource and namespace, as
`kubectl auth can-i` asks). Answers are kept for `TTL_SECONDS`: a page's polling
costs the API server nothing more than one review per minute per user and namespace.
Actions are Kubernetes objects written with the user's own token (`cluster_actions`),
so the API server's RBAC decides those itself.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client

from sluice.handlers.crds import GROUP

TTL_SECONDS = 60.0
MAX_KEPT = 10_000  # answers kept at most (the cache empties when full)


@dataclass(frozen=True)
class Identity:
    """A user the API server vouched for, and the token that proved it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class Check:
    """One question for the API server: may they `verb` `resource` in `namespace`?"""

    verb: str
    resource: str
    namespace: str = ""  # "": cluster-wide (pools)
    subresource: str = ""
    group: str = GROUP

    def refusal(self, who: Identity) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        group = f".{self.group}" if self.group else ""
        return (
            f"refused: {who.name} may not {self.verb} {what}{group} {where}"
            " (a RoleBinding there to the view ClusterRole lets them see, to edit lets them act)"
        )


class Access(Protocol):
    """What the UI asks of the cluster (a fake in tests)."""

    def authenticate(self, token: str) -> Identity | None: ...

    def allowed(self, who: Identity, check: Check) -> bool: ...

    def api_for(self, who: Identity) -> client.ApiClient: ...


class _Kept:
    """Answers kept for a while, by key (thread-safe: reviews run in worker threads)."""

    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self.ttl, self.clock = ttl, clock
        self.answers: dict[Any, tuple[float, Any]] = {}
        self.lock = threading.Lock()

    def get(self, key: Any, ask: Callable[[], Any]) -> Any:
        now = self.clock()
        with self.lock:
            kept = self.answers.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        answer = ask()
        with self.lock:
            if len(self.answers) >= MAX_KEPT:
                self.answers.clear()
            self.answers[key] = (now + self.ttl, answer)
        return answer


class KubernetesAccess:
    """TokenReview and SubjectAccessReview through the UI's own account (which may create
    both and nothing else: the chart's `ui` ClusterRole)."""

    def __init__(
        self,
        configuration: client.Configuration,
        *,
        ttl: float = TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configuration = configuration
        self.api = client.ApiClient(configuration)
        self.identities = _Kept(ttl, clock)
        self.reviews = _Kept(ttl, clock)

    def authenticate(self, token: str) -> Identity | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        return self.identities.get(key, lambda: self._review_token(token))  # type: ignore[no-any-return]

    def _review_token(self, token: str) -> Identity | None:
        review = client.AuthenticationV1Api(self.api).create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.extra or {}).items()))
        return Identity(
            name=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra=extra,
            token=token,
        )

    def allowed(self, who: Identity, check: Check) -> bool:
        key = (who.name, who.uid, who.groups, who.extra, check)
        return bool(self.reviews.get(key, lambda: self._review_access(who, check)))

    def _review_access(self, who: Identity, check: Check) -> bool:
        review = client.AuthorizationV1Api(self.api).create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=who.name,
                    uid=who.uid or None,
                    groups=list(who.groups) or None,
                    extra={k: list(v) for k, v in who.extra} or None,
                    resource_attributes=client.V1ResourceAttributes(
                        group=check.group,
                        resource=check.resource,
                        subresource=check.subresource or None,
                        verb=check.verb,
                        namespace=check.namespace or None,
                    ),
                )
            )
        )
        return bool(review.status and review.status.allowed)

    def api_for(self, who: Identity) -> client.ApiClient:
        """A client that acts as `who` (their token; none of the UI's own credentials)."""
        base = self.configuration
        theirs = client.Configuration(host=base.host)
        theirs.ssl_ca_cert = base.ssl_ca_cert
        theirs.verify_ssl = base.verify_ssl
        theirs.api_key = {"authorization": f"Bearer {who.token}"}
        return client.ApiClient(theirs)


def kubernetes_access(kubeconfig: str | None = None) -> KubernetesAccess:
    """The UI's own account: in-cluster in a pod, else the kubeconfig's."""
    import os

    from kubernetes import config

    configuration = client.Configuration()
    if kubeconfig is None and config.incluster_config.SERVICE_HOST_ENV_NAME in os.environ:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    return KubernetesAccess(configuration)
