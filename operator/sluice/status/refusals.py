"""Which refusals of the API server a status publication waits out, and which it drops.

A publication the API server refuses is given back to the outbox with a
growing delay (publisher.py). Most refusals pass: an overloaded or restarting
server (429, 5xx: the cycle waits, `ApiDown`), another writer (409), the
DagRun kind not installed yet (a 404 that names no namespace), the
publisher's own credentials being renewed (401). Some cannot pass for this
object, and retrying them forever keeps its outbox rows for ever: a body the
server refuses as it is (400, 413, 422: the same status is refused again) is
dropped at its first refusal; a refusal that an administrator may still lift
(403 Forbidden, a namespace that is gone, any other 4xx) after
`MAX_FAILURES` failures in a row, about four minutes of backoff. A dropped
publication is counted (`sluice_status_dropped_total`) and said on the object
(an Event) or, when there is no object, in the log; the run's next change
publishes it again, and a replica's start-up resync enqueues every run whose
object may be behind (ADR 0034).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

# Refusals an administrator may lift (RBAC, a namespace) are dropped after this many
# failures in a row: with the publisher's backoff (2, 4, 8, 16, then 30 s) about 4 min.
MAX_FAILURES = 10

# What a dropped publication is counted as (`outcome` of sluice_status_dropped_total).
INVALID = "invalid"
FORBIDDEN = "forbidden"
NAMESPACE_GONE = "namespace_gone"
REFUSED = "refused"

_INVALID_STATUSES = frozenset({400, 413, 422})  # the body itself: refused again as it is
_PASSING_STATUSES = frozenset({401, 408, 409, 429})  # credentials, timeouts, conflicts, rate


@dataclass(frozen=True)
class Refusal:
    """An answer of the API server that refused a call: its HTTP status, and from its
    Status body the reason (`Invalid`, `Forbidden`, `NotFound`) and `details.kind`."""

    status: int
    reason: str = ""
    kind: str = ""

    @classmethod
    def of(cls, exc: ApiException) -> Refusal:
        try:
            body = json.loads(exc.body or "{}")
        except (TypeError, ValueError):
            body = {}
        if not isinstance(body, dict):
            body = {}
        details = body.get("details")
        kind = details.get("kind") if isinstance(details, dict) else None
        return cls(
            status=int(exc.status or 0),
            reason=str(body.get("reason") or ""),
            kind=str(kind or ""),
        )


def cause(refusal: Refusal) -> str | None:
    """What the refusal is counted as once dropped; None: it passes, retry it for ever."""
    status = refusal.status
    if status >= 500 or status in _PASSING_STATUSES or status < 400:
        return None
    if status in _INVALID_STATUSES:
        return INVALID
    if status == 403:
        return FORBIDDEN
    if status == 404:
        # A namespace that is gone says so in its Status; a kind not installed (yet) has
        # no such details and passes once the CRD is applied.
        return NAMESPACE_GONE if refusal.kind == "namespaces" else None
    return REFUSED


def drops(refusal: Refusal, failures: int) -> bool:
    """Is a publication refused so, after `failures` failures in a row (this one
    included), dropped rather than given back?"""
    match cause(refusal):
        case None:
            return False
        case "invalid":
            return True
        case _:
            return failures >= MAX_FAILURES
