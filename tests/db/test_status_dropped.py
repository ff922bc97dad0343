"""A status publication the API server refuses for good is dropped, not retried for ever.

Real Postgres and the fake API server of tests/db/test_status_publisher.py,
whose `refuse` answers a verb with the Status the real server sends (422
Invalid, 403 Forbidden, 404 naming a namespace). Transient refusals (5xx,
429, 401, a kind not installed yet) keep their rows, however long they last.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun
from sluice.metrics import families
from sluice.status import refusals
from sluice.status.publisher import DROPPED, StatusPublisher
from tests.db.test_status_publisher import (
    NS,
    Clock,
    drain,
    outbox_rows,
    publisher,
    register_in,
)
from tests.fake_kube import FakeKube, refusal
from tests.support import FakeClock, manifest, trigger


def _dropped(kind: str, outcome: str) -> float:
    value: float = families.STATUS_DROPPED.labels(kind, outcome)._value.get()
    return value


def _change(sessions: sessionmaker[Session], run_id: int, state: str) -> None:
    with sessions.begin() as session:
        session.execute(update(DagRun).where(DagRun.id == run_id).values(state=state))


def _run(sessions: sessionmaker[Session], name: str) -> int:
    register_in(sessions, manifest(name, [{"name": "a"}], schedule=None))
    return trigger(sessions, name, FakeClock().now)


def _fail_until_dropped(pub: StatusPublisher, clock: Clock, sessions: sessionmaker[Session]) -> int:
    """Publish past each backoff until the rows are gone; returns the failed cycles."""
    cycles = 0
    while outbox_rows(sessions):
        pub.run_once()
        cycles += 1
        clock.advance(31)  # past the longest backoff
        assert cycles <= refusals.MAX_FAILURES + 2, "never dropped"
    return cycles


def test_a_status_the_server_refuses_as_invalid_is_dropped_at_once_with_an_event(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock)
    run_id = _run(sessions, "invalid")
    drain(pub)
    (obj,) = kube.dagruns()
    before = _dropped("run", refusals.INVALID)
    kube.refuse["patch"] = refusal(422, "Invalid", "DagRun is invalid: status.reason: Too long")
    _change(sessions, run_id, "running")
    pub.run_once()
    assert outbox_rows(sessions) == 0  # dropped at its first refusal, not given back
    assert pub.counts.dropped == 1
    assert _dropped("run", refusals.INVALID) == before + 1
    (event,) = [e for e in kube.events if e["reason"] == DROPPED]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert "422" in event["message"]
    assert "Too long" in event["message"]
    # The refusal is lifted: the run's next change is published as before.
    del kube.refuse["patch"]
    clock.advance(31)
    _change(sessions, run_id, "success")
    drain(pub)
    assert kube.dagruns()[0]["status"]["state"] == "success"


@pytest.mark.parametrize(
    ("verb", "answer", "outcome"),
    [
        (
            "create",
            refusal(403, "Forbidden", 'dagruns.sluice.io is forbidden: User "x" cannot create'),
            refusals.FORBIDDEN,
        ),
        (
            "create",
            refusal(404, "NotFound", 'namespaces "team-a" not found', kind="namespaces"),
            refusals.NAMESPACE_GONE,
        ),
    ],
)
def test_a_refusal_that_may_be_lifted_is_dropped_after_the_bounded_failures(
    sessions: sessionmaker[Session], verb: str, answer: Any, outcome: str
) -> None:
    """No object was made (its create was refused): nothing to post an Event on; the log
    says it (the run's rows were kept for ever before)."""
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock)
    kube.refuse[verb] = answer
    _run(sessions, "refused")
    drain(pub)  # the DAG's object: none in this fake, skipped
    before = _dropped("run", outcome)
    cycles = _fail_until_dropped(pub, clock, sessions)
    assert cycles == refusals.MAX_FAILURES
    assert pub.counts.failures == refusals.MAX_FAILURES - 1
    assert pub.counts.dropped == 1
    assert _dropped("run", outcome) == before + 1
    assert kube.events == []
    assert kube.dagruns() == []


@pytest.mark.parametrize(
    "answer",
    [
        refusal(500, "InternalError", "etcdserver: request timed out"),
        refusal(429, "TooManyRequests", "the server has received too many requests"),
        refusal(401, "Unauthorized", "Unauthorized"),
        refusal(404, "NotFound", "the server could not find the requested resource"),
    ],
    ids=["500", "429", "401", "kind-not-installed"],
)
def test_refusals_that_pass_keep_their_rows_however_long_they_last(
    sessions: sessionmaker[Session], answer: Any
) -> None:
    kube = FakeKube()
    clock = Clock()
    pub = publisher(sessions, kube, clock)
    kube.refuse["create"] = answer
    _run(sessions, "waits")
    for _ in range(2 * refusals.MAX_FAILURES):
        pub.run_once()
        clock.advance(31)
    assert outbox_rows(sessions) >= 1
    assert pub.counts.dropped == 0
    del kube.refuse["create"]
    drain(pub)
    assert kube.dagruns()[0]["status"]["state"] == "queued"


def test_a_dags_object_refused_for_good_is_dropped_with_an_event_on_it(
    sessions: sessionmaker[Session],
) -> None:
    kube = FakeKube()
    kube.add_dag(NS, "dagobj")
    pub = publisher(sessions, kube)
    kube.refuse["patch"] = refusal(422, "Invalid", "DAG is invalid: status.lastRun: bad")
    before = _dropped("dag", refusals.INVALID)
    _run(sessions, "dagobj")
    pub.run_once()
    assert _dropped("dag", refusals.INVALID) == before + 1
    (event,) = [
        e for e in kube.events if e["reason"] == DROPPED and e["involvedObject"]["kind"] == "DAG"
    ]
    assert event["involvedObject"]["name"] == "dagobj"
    assert event["involvedObject"]["namespace"] == NS
