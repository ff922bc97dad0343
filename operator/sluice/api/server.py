"""The task API: the HTTP endpoint task pods heartbeat to, served by every scheduler replica.

Task pods never hold database credentials (invariant 9); a pod's heartbeat
sidecar posts to this API with its try's token instead, and any replica behind
the Service takes it. The routes are all there is:

- `POST /v1/tries/{ti}/{try}/heartbeat`, `Authorization: Bearer <token>`:
  204 while that try is the running one (with `Sluice-Refreshed-Token` when the
  token is near its end); 409 `{"reason": "not_running", "state", "try_number"}`
  when the task instance is not running at that try (fenced, superseded,
  finished): the pod must stop its work; 404 `{"reason": "not_found"}` when the
  task instance does not exist; 401/403 from the token (`tokens.py`); 503 when
  the heartbeat could not be written (the database is unreachable, the row
  was busy, or the try was queued again at that number because its replica
  died before recording the start): the pod retries.
- `GET /healthz`: 200 while the server runs.

Heartbeats are buffered and written in one statement per batch (`buffer.py`,
`heartbeats.py`). `TaskApi` runs the server on its own thread and event loop,
so the scheduler's synchronous loop is not touched.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import structlog
from aiohttp import web
from sqlalchemy import Engine

from sluice.api import protocol
from sluice.api.buffer import FlushFailed, HeartbeatBuffer
from sluice.api.heartbeats import TryKey, Verdict, record_heartbeats
from sluice.api.tokens import TokenRejected, TrySigner
from sluice.db.engine import session_factory
from sluice.metrics import families

log = structlog.get_logger("sluice.api")

# By outcome: accepted, not_running, not_found, unauthorized, forbidden, unavailable.
HEARTBEATS = families.TASK_API_HEARTBEATS

_BEARER = re.compile(r"Bearer +(\S+)\s*\Z", re.IGNORECASE)
# task_instance.id is a bigint, try_number an int: a larger number names no task instance.
_MAX_TI_ID = 2**63 - 1
_MAX_TRY = 2**31 - 1

_SIGNER = web.AppKey("signer", TrySigner)
_BUFFER = web.AppKey("buffer", HeartbeatBuffer)


def utcnow() -> datetime:
    return datetime.now(UTC)


def make_app(signer: TrySigner, buffer: HeartbeatBuffer) -> web.Application:
    app = web.Application()
    app[_SIGNER] = signer
    app[_BUFFER] = buffer
    app.router.add_post(protocol.HEARTBEAT_ROUTE, _heartbeat)
    app.router.add_get(protocol.HEALTH_PATH, _healthz)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _heartbeat(request: web.Request) -> web.Response:
    ti_id, try_number = int(request.match_info["ti"]), int(request.match_info["try"])
    signer = request.app[_SIGNER]
    try:
        claims = signer.verify(_bearer(request.headers.get("Authorization")), ti_id, try_number)
    except TokenRejected as exc:
        return _rejected(exc, ti_id, try_number)
    if ti_id > _MAX_TI_ID or try_number > _MAX_TRY:
        return _not_found(ti_id, try_number)
    try:
        verdict = await request.app[_BUFFER].submit((ti_id, try_number))
    except FlushFailed as exc:
        return _unavailable(str(exc))
    match verdict.outcome:
        case "accepted":
            HEARTBEATS.labels("accepted").inc()
            fresh = signer.refreshed(claims)
            return web.Response(
                status=204, headers={protocol.REFRESH_HEADER: fresh} if fresh else None
            )
        case "not_found":
            return _not_found(ti_id, try_number)
        case "not_running":
            return _not_running(verdict, ti_id, try_number)
        case "unsettled":
            return _unavailable("the task instance's row is being changed; retry")


def _bearer(header: str | None) -> str | None:
    match = _BEARER.match(header or "")
    return match.group(1) if match else None


def _rejected(exc: TokenRejected, ti_id: int, try_number: int) -> web.Response:
    outcome = protocol.UNAUTHORIZED if exc.status == 401 else protocol.FORBIDDEN
    HEARTBEATS.labels(outcome).inc()
    log.warning(
        "heartbeat rejected", ti=ti_id, try_number=try_number, status=exc.status, reason=exc.reason
    )
    headers = {"WWW-Authenticate": 'Bearer error="invalid_token"'} if exc.status == 401 else None
    return web.json_response(
        {"reason": outcome, "detail": exc.reason}, status=exc.status, headers=headers
    )


def _not_found(ti_id: int, try_number: int) -> web.Response:
    HEARTBEATS.labels(protocol.NOT_FOUND).inc()
    log.info("heartbeat for an unknown task instance", ti=ti_id, try_number=try_number)
    return web.json_response({"reason": protocol.NOT_FOUND}, status=404)


def _not_running(verdict: Verdict, ti_id: int, try_number: int) -> web.Response:
    HEARTBEATS.labels(protocol.NOT_RUNNING).inc()
    log.info(
        "heartbeat for a try that is not running",
        ti=ti_id,
        try_number=try_number,
        state=verdict.state,
        current_try=verdict.try_number,
    )
    return web.json_response(
        {"reason": protocol.NOT_RUNNING, "state": verdict.state, "try_number": verdict.try_number},
        status=409,
    )


def _unavailable(detail: str) -> web.Response:
    HEARTBEATS.labels(protocol.UNAVAILABLE).inc()
    return web.json_response(
        {"reason": protocol.UNAVAILABLE, "detail": detail}, status=503, headers={"Retry-After": "1"}
    )


class TaskApi:
    """The task API on a background thread with its own event loop.

    `start()` returns once the socket listens (port 0 picks a free port: see
    `port` and `url`); `stop()` stops accepting, lets requests in flight finish
    (up to `shutdown_timeout`) and ends the thread.
    """

    def __init__(
        self,
        engine: Engine,
        signer: TrySigner,
        host: str = "0.0.0.0",
        port: int = 8080,
        *,
        flush_interval: float = 0.2,
        max_batch: int = 500,
        shutdown_timeout: float = 10.0,
        clock: Callable[[], datetime] = utcnow,
        reuse_port: bool = False,
        on_write: Callable[[bool, datetime], None] | None = None,
    ) -> None:
        self._sessions = session_factory(engine)
        # Told of each write of heartbeats, whether it worked, and when: the replica's
        # loop counts a try's silence only over time its heartbeats could be written.
        self._on_write = on_write
        # SO_REUSEPORT: replicas on one host share the address, as replicas behind one
        # Service do; the kernel spreads connections over the live ones.
        self._reuse_port = reuse_port
        self._signer = signer
        self._host = host
        self._requested_port = port
        self._flush_interval = flush_interval
        self._max_batch = max_batch
        self._shutdown_timeout = shutdown_timeout
        self._clock = clock
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._buffer: HeartbeatBuffer | None = None
        self._flusher: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the task API is not started")
        return self._port

    @property
    def url(self) -> str:
        """Where a client on this machine reaches it (a wildcard host means loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self._host, self._host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def flushes(self) -> int:
        """How many batches were written (or failed) so far."""
        return self._buffer.flushes if self._buffer else 0

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the task API is already started")
        # Bound here, on the caller's thread: a port in use fails `start()` itself.
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.create_server(
            (self._host, self._requested_port), family=family, reuse_port=self._reuse_port
        )
        self._port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._serve, args=(sock,), name="task-api", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"the task API did not start: {self._failure}") from self._failure
        log.info("task API listening", url=self.url, host=self._host, port=self._port)

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if thread.is_alive():
            shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            shutdown.result(timeout=self._shutdown_timeout + 30)
            loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._thread = None
        log.info("task API stopped", url=self.url)

    def __enter__(self) -> TaskApi:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._setup(sock))
            except BaseException as exc:
                self._failure = exc
                sock.close()
                return
            finally:
                self._ready.set()
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _setup(self, sock: socket.socket) -> None:
        self._buffer = HeartbeatBuffer(
            self._write, flush_interval=self._flush_interval, max_batch=self._max_batch
        )
        self._flusher = asyncio.create_task(self._buffer.run(), name="heartbeat-flusher")
        # No access log: thousands of pods heartbeat every few seconds.
        self._runner = web.AppRunner(
            make_app(self._signer, self._buffer),
            access_log=None,
            shutdown_timeout=self._shutdown_timeout,
        )
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()  # requests in flight still get their flush
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._buffer is not None:
            self._buffer.close()

    def _write(self, keys: Sequence[TryKey]) -> dict[TryKey, Verdict]:
        try:
            with self._sessions() as session:
                verdicts = record_heartbeats(session, keys, self._clock())
                session.commit()
        except Exception:
            if self._on_write is not None:
                self._on_write(False, self._clock())
            raise
        if self._on_write is not None:
            self._on_write(True, self._clock())
        return verdicts
