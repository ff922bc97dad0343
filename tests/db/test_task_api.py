"""The task API on a real socket against a real Postgres: verdicts, tokens, batching."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.api.heartbeats import record_heartbeats
from sluice.api.protocol import REFRESH_HEADER
from sluice.api.server import TaskApi
from sluice.api.tokens import TrySigner
from sluice.db.engine import make_engine
from sluice.db.models import TaskInstance
from tests.support import T0, count_queries, manifest, register, trigger

KEY = b"task-api-test-key-0123456789abcdef0123"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


def post(api: TaskApi, ti: int, try_number: int, token: str | None) -> Reply:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(
        f"{api.url}/v1/tries/{ti}/{try_number}/heartbeat", data=b"", method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw, status, got = response.read(), response.status, response.headers
    except urllib.error.HTTPError as exc:
        with exc:
            raw, status, got = exc.read(), exc.code, exc.headers
    return Reply(status, dict(got), json.loads(raw) if raw else {})


def running_tasks(sessions: sessionmaker[Session], count: int, dag: str = "pods") -> list[int]:
    """Ids of `count` task instances of one run, all running their first try."""
    tasks = [{"name": f"t{i}"} for i in range(count)]
    register(sessions, manifest(dag, tasks))
    trigger(sessions, dag, T0)
    with sessions() as session:
        session.execute(
            text(
                "UPDATE dag_run SET state = 'running' WHERE dag_id = :d;"
                "UPDATE task_instance SET state = 'running', try_number = 1 WHERE dag_id = :d"
            ),
            {"d": dag},
        )
        session.commit()
        return list(
            session.execute(
                select(TaskInstance.id).where(TaskInstance.dag_id == dag).order_by(TaskInstance.id)
            ).scalars()
        )


def heartbeat_at(sessions: sessionmaker[Session], ti: int) -> datetime | None:
    with sessions() as session:
        return session.get_one(TaskInstance, ti).last_heartbeat_at


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def counted(outcome: str) -> float:
    value = REGISTRY.get_sample_value("sluice_task_api_heartbeats_total", {"outcome": outcome})
    return value or 0.0


@pytest.fixture
def signer() -> TrySigner:
    return TrySigner([KEY])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(engine: Engine, signer: TrySigner, clock: Clock) -> Iterator[TaskApi]:
    with TaskApi(engine, signer, "127.0.0.1", 0, flush_interval=0.05, clock=clock) as server:
        yield server


def test_a_running_try_heartbeats(
    api: TaskApi, signer: TrySigner, clock: Clock, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    token = signer.issue(ti, 1, ttl_seconds=600)
    assert heartbeat_at(sessions, ti) is None
    accepted = counted("accepted")
    reply = post(api, ti, 1, token)
    assert reply.status == 204
    assert REFRESH_HEADER not in reply.headers  # the token is young
    assert heartbeat_at(sessions, ti) == T0
    clock.now = T0 + timedelta(seconds=10)
    assert post(api, ti, 1, token).status == 204
    assert heartbeat_at(sessions, ti) == T0 + timedelta(seconds=10)
    assert counted("accepted") == accepted + 2


def test_a_try_that_is_not_the_running_one_gets_409(
    api: TaskApi, signer: TrySigner, clock: Clock, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    with sessions() as session:
        session.execute(text("UPDATE task_instance SET try_number = 2 WHERE id = :i"), {"i": ti})
        session.commit()
    # The first try, fenced off by a second one that runs now.
    refused = counted("not_running")
    old = post(api, ti, 1, signer.issue(ti, 1, ttl_seconds=600))
    assert (old.status, old.body) == (
        409,
        {"reason": "not_running", "state": "running", "try_number": 2},
    )
    assert heartbeat_at(sessions, ti) is None
    # The second try, once it finished.
    with sessions() as session:
        session.execute(text("UPDATE task_instance SET state = 'success' WHERE id = :i"), {"i": ti})
        session.commit()
    done = post(api, ti, 2, signer.issue(ti, 2, ttl_seconds=600))
    assert (done.status, done.body) == (
        409,
        {"reason": "not_running", "state": "success", "try_number": 2},
    )
    assert heartbeat_at(sessions, ti) is None
    assert counted("not_running") == refused + 2


def test_an_unknown_task_instance_gets_404(api: TaskApi, signer: TrySigner) -> None:
    reply = post(api, 999_999, 1, signer.issue(999_999, 1, ttl_seconds=600))
    assert (reply.status, reply.body) == (404, {"reason": "not_found"})


def test_tokens_decide_before_the_database_is_asked(
    api: TaskApi, signer: TrySigner, engine: Engine, sessions: sessionmaker[Session]
) -> None:
    a, b = running_tasks(sessions, 2)
    forged = TrySigner([b"another-key-0123456789abcdef0123456789"]).issue(a, 1, 600)
    expired = TrySigner([KEY], clock=lambda: time.time() - 3600).issue(a, 1, 600)
    unauthorized, forbidden = counted("unauthorized"), counted("forbidden")
    with count_queries(engine) as statements:
        missing = post(api, a, 1, None)
        assert missing.status == 401
        assert missing.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        assert post(api, a, 1, "not-a-token").status == 401
        assert post(api, a, 1, forged).body["reason"] == "unauthorized"
        assert post(api, a, 1, expired).body == {
            "reason": "unauthorized",
            "detail": "token expired",
        }
        # A valid token for task b heartbeating for task a, or for another try of b.
        other = post(api, a, 1, signer.issue(b, 1, 600))
        assert (other.status, other.body["reason"]) == (403, "forbidden")
        assert post(api, b, 2, signer.issue(b, 1, 600)).status == 403
    assert statements == []
    assert heartbeat_at(sessions, a) is None
    assert counted("unauthorized") == unauthorized + 4
    assert counted("forbidden") == forbidden + 2


def test_a_token_near_its_end_comes_back_refreshed(
    api: TaskApi, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    issued = time.time() - 850  # 15 % of a 1000 s life left
    signer = TrySigner([KEY], clock=lambda: issued)
    reply = post(api, ti, 1, signer.issue(ti, 1, ttl_seconds=1000))
    assert reply.status == 204
    fresh = TrySigner([KEY]).verify(reply.headers[REFRESH_HEADER], ti, 1)
    assert fresh.lifetime == 1000
    assert fresh.expires_at >= int(time.time()) + 990
    # The refreshed token works, and needs no refresh itself.
    again = post(api, ti, 1, reply.headers[REFRESH_HEADER])
    assert again.status == 204
    assert REFRESH_HEADER not in again.headers
    # A refused heartbeat gets no new token.
    with sessions() as session:
        session.execute(text("UPDATE task_instance SET state = 'failed'"))
        session.commit()
    assert REFRESH_HEADER not in post(api, ti, 1, signer.issue(ti, 1, 1000)).headers


def test_many_concurrent_heartbeats_are_one_statement_per_batch(
    engine: Engine, signer: TrySigner, sessions: sessionmaker[Session]
) -> None:
    tis = running_tasks(sessions, 200)
    tokens = {ti: signer.issue(ti, 1, ttl_seconds=600) for ti in tis}

    async def post_all(url: str) -> list[int]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as client:

            async def one(ti: int) -> int:
                headers = {"Authorization": f"Bearer {tokens[ti]}"}
                async with client.post(f"{url}/v1/tries/{ti}/1/heartbeat", headers=headers) as r:
                    return r.status

            return await asyncio.gather(*(one(ti) for ti in tis))

    # A full batch flushes at once: 200 heartbeats in batches of 50 are four
    # statements, long before the (10 s) flush interval would have sent them.
    small_batches = TaskApi(engine, signer, "127.0.0.1", 0, flush_interval=10, max_batch=50)
    with small_batches, count_queries(engine) as statements:
        started = time.monotonic()
        statuses = asyncio.run(post_all(small_batches.url))
        elapsed = time.monotonic() - started
    assert statuses == [204] * 200
    assert elapsed < 5
    # Nothing but the four batch writes: no read, since every try was running.
    assert len(statements) == 4
    assert all(s.lstrip().startswith("UPDATE task_instance") for s in statements)
    with sessions() as session:
        beaten = session.execute(
            text("SELECT count(*) FROM task_instance WHERE last_heartbeat_at IS NOT NULL")
        ).scalar_one()
    assert beaten == 200

    # With the default batch size, a 1 s flush interval gathers them all in a handful.
    one_batch = TaskApi(engine, signer, "127.0.0.1", 0, flush_interval=1.0)
    with one_batch, count_queries(engine) as statements:
        statuses = asyncio.run(post_all(one_batch.url))
    assert statuses == [204] * 200
    assert 1 <= len(statements) <= 3
    assert all(s.lstrip().startswith("UPDATE task_instance") for s in statements)


def test_a_lone_heartbeat_waits_only_the_flush_interval(
    engine: Engine, signer: TrySigner, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    token = signer.issue(ti, 1, 600)
    with TaskApi(engine, signer, "127.0.0.1", 0, flush_interval=0.2, max_batch=500) as api:
        post(api, ti, 1, token)  # the first statement of a connection prepares it
        started = time.monotonic()
        assert post(api, ti, 1, token).status == 204
        elapsed = time.monotonic() - started
    assert 0.15 <= elapsed < 2


def test_a_row_the_scheduler_holds_is_skipped_not_waited_for(
    api: TaskApi, signer: TrySigner, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    token = signer.issue(ti, 1, 600)
    with sessions() as holder:
        holder.execute(text("SELECT 1 FROM task_instance WHERE id = :i FOR UPDATE"), {"i": ti})
        started = time.monotonic()
        busy = post(api, ti, 1, token)
        assert time.monotonic() - started < 2
        assert (busy.status, busy.body["reason"]) == (503, "unavailable")
        assert busy.headers["Retry-After"] == "1"
        holder.rollback()
    assert post(api, ti, 1, token).status == 204


def test_an_unreachable_database_is_503_and_the_server_carries_on(signer: TrySigner) -> None:
    nowhere = make_engine("postgresql://sluice@127.0.0.1:1/sluice")
    writes: list[bool] = []
    try:
        with TaskApi(
            nowhere,
            signer,
            "127.0.0.1",
            0,
            flush_interval=0.01,
            on_write=lambda ok, at: writes.append(ok),
        ) as api:
            unavailable = counted("unavailable")
            for _ in range(2):  # a failed flush does not stop the next one
                reply = post(api, 1, 1, signer.issue(1, 1, 600))
                assert reply.status == 503
                assert reply.body == {
                    "reason": "unavailable",
                    "detail": "the heartbeats could not be written; retry",
                }
            assert counted("unavailable") == unavailable + 2
            with urllib.request.urlopen(f"{api.url}/healthz", timeout=5) as health:
                assert health.status == 200
    finally:
        nowhere.dispose()
    # Each failed write was told (the loop does not count that time as silence).
    assert writes == [False, False]


def test_each_write_of_heartbeats_is_told_with_its_time(
    engine: Engine, signer: TrySigner, clock: Clock, sessions: sessionmaker[Session]
) -> None:
    writes: list[tuple[bool, datetime]] = []
    with TaskApi(
        engine, signer, "127.0.0.1", 0, flush_interval=0.01, clock=clock,
        on_write=lambda ok, at: writes.append((ok, at)),
    ) as api:  # fmt: skip
        (ti,) = running_tasks(sessions, 1)
        assert post(api, ti, 1, signer.issue(ti, 1, ttl_seconds=600)).status == 204
    assert writes == [(True, T0)]


def test_only_the_two_routes_exist(api: TaskApi) -> None:
    with urllib.request.urlopen(f"{api.url}/healthz", timeout=5) as health:
        assert (health.status, health.read()) == (200, b"ok\n")
    for path, method in (
        ("/v1/tries/1/1/heartbeat", "GET"),
        ("/v1/tries/x/1/heartbeat", "POST"),
        ("/metrics", "GET"),
        ("/", "GET"),
    ):
        request = urllib.request.Request(f"{api.url}{path}", data=None, method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code in (404, 405), path


def test_start_and_stop(engine: Engine, signer: TrySigner) -> None:
    api = TaskApi(engine, signer, "127.0.0.1", 0)
    with pytest.raises(RuntimeError, match="not started"):
        api.url  # noqa: B018
    api.start()
    assert api.port > 0
    assert api.url == f"http://127.0.0.1:{api.port}"
    with pytest.raises(OSError, match="in use"):
        TaskApi(engine, signer, "127.0.0.1", api.port).start()
    api.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{api.url}/healthz", timeout=5)
    api.stop()  # twice is harmless


def test_record_heartbeats_reads_only_when_some_were_not_written(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    a, b, c = running_tasks(sessions, 3)
    with sessions() as session:
        session.execute(text("UPDATE task_instance SET state = 'success' WHERE id = :c"), {"c": c})
        session.commit()
    with count_queries(engine) as all_running, sessions() as session:
        verdicts = record_heartbeats(session, [(a, 1), (b, 1), (a, 1)], T0)
        session.commit()
    assert {key: v.outcome for key, v in verdicts.items()} == {
        (a, 1): "accepted",
        (b, 1): "accepted",
    }
    with count_queries(engine) as some_not, sessions() as session:
        verdicts = record_heartbeats(session, [(a, 1), (b, 2), (c, 1), (10**9, 1)], T0)
        session.commit()
    assert {key: (v.outcome, v.state, v.try_number) for key, v in verdicts.items()} == {
        (a, 1): ("accepted", None, None),
        (b, 2): ("not_running", "running", 1),
        (c, 1): ("not_running", "success", 1),
        (10**9, 1): ("not_found", None, None),
    }
    # Queued again at the same try (its replica was taken for dead before starting it): a
    # late pod of that try is told to retry, not to stop; another try's pod is refused.
    with sessions() as session:
        session.execute(text("UPDATE task_instance SET state = 'queued' WHERE id = :b"), {"b": b})
        verdicts = record_heartbeats(session, [(b, 1), (b, 2)], T0)
        session.commit()
    assert {key: (v.outcome, v.state) for key, v in verdicts.items()} == {
        (b, 1): ("unsettled", None),
        (b, 2): ("not_running", "queued"),
    }
    work = [s for s in all_running if s.lstrip().startswith(("UPDATE", "SELECT"))]
    assert len(work) == 1
    work = [s for s in some_not if s.lstrip().startswith(("UPDATE", "SELECT"))]
    assert len(work) == 2
