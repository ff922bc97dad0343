"""Which API server refusals a status publication waits out and which it drops."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from sluice.status import refusals
from sluice.status.refusals import Refusal


@pytest.mark.parametrize(
    ("status", "kind", "cause"),
    [
        (400, "", refusals.INVALID),
        (413, "", refusals.INVALID),
        (422, "", refusals.INVALID),
        (403, "", refusals.FORBIDDEN),
        (404, "namespaces", refusals.NAMESPACE_GONE),
        (405, "", refusals.REFUSED),
        (410, "", refusals.REFUSED),
        (404, "", None),  # the kind is not installed (yet): passes once the CRD is applied
        (401, "", None),
        (408, "", None),
        (409, "", None),
        (429, "", None),
        (500, "", None),
        (503, "", None),
    ],
)
def test_what_a_refusal_counts_as(status: int, kind: str, cause: str | None) -> None:
    assert refusals.cause(Refusal(status, kind=kind)) == cause


def test_an_invalid_body_is_dropped_at_once_others_after_the_bounded_failures() -> None:
    assert refusals.drops(Refusal(422), 1)
    assert not refusals.drops(Refusal(403), refusals.MAX_FAILURES - 1)
    assert refusals.drops(Refusal(403), refusals.MAX_FAILURES)
    assert not refusals.drops(Refusal(503), 1000)


def test_a_refusal_is_read_from_the_status_body() -> None:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = json.dumps(
        {"reason": "NotFound", "details": {"name": "team-a", "kind": "namespaces"}, "code": 404}
    )
    assert Refusal.of(exc) == Refusal(404, "NotFound", "namespaces")
    exc.body = "404 page not found"  # not a Status: only the HTTP status counts
    assert Refusal.of(exc) == Refusal(404)
    exc.body = None
    assert Refusal.of(exc) == Refusal(404)
