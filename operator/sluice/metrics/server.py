"""The probe and metrics endpoints of a replica, on a port of their own.

Three paths, GET only:

- `/metrics`: every metric in prometheus_client's default registry (Sluice's
  own, `families.py`, and the client's process and Python collectors), in the
  Prometheus text format (or OpenMetrics, if the scraper asks for it);
- `/readyz`: 200 while a tick of the loop that reached the database ended
  within `stale_after` seconds, else 503; the body is the one-line reason
  (`health.readiness`);
- `/healthz`: 200 unless the loop is stuck or gone (`health.liveness`).

prometheus_client's WSGI app and threading server do the HTTP; the probes
answer from memory (`LoopHealth`), never from the database, so a database
outage cannot make a probe time out.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import structlog
from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from sluice.metrics.health import LoopHealth, Verdict

log = structlog.get_logger("sluice.metrics")

METRICS_PATH = "/metrics"
READY_PATH = "/readyz"
LIVE_PATH = "/healthz"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def make_app(health: LoopHealth, stale_after: float) -> App:
    metrics = make_wsgi_app(REGISTRY)
    probes: dict[str, Callable[[], Verdict]] = {
        READY_PATH: lambda: health.readiness(stale_after),
        LIVE_PATH: lambda: health.liveness(stale_after),
    }

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET":
            return _text(start_response, "405 Method Not Allowed", "use GET")
        if path == METRICS_PATH:
            body: Iterable[bytes] = metrics(environ, start_response)
            return body
        probe = probes.get(path)
        if probe is None:
            return _text(start_response, "404 Not Found", f"no such path; try {METRICS_PATH}")
        verdict = probe()
        status = "200 OK" if verdict.ok else "503 Service Unavailable"
        return _text(start_response, status, verdict.reason)

    return app


def _text(start_response: StartResponse, status: str, line: str) -> list[bytes]:
    body = f"{line}\n".encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    )
    return [body]


class _QuietHandler(WSGIRequestHandler):
    """No access log: probes and scrapes come every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """`/metrics`, `/readyz` and `/healthz` on a background thread.

    `start()` returns once the socket listens (port 0 picks a free port: see
    `port`); a port in use fails `start()` itself. `stop()` ends the thread.
    """

    def __init__(
        self, health: LoopHealth, *, host: str = "0.0.0.0", port: int, stale_after: float
    ) -> None:
        self.health = health
        self.host = host
        self.requested_port = port
        self.stale_after = stale_after
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the metrics server is not started")
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        """Where a client on this machine reaches it (a wildcard host means loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the metrics server is already started")

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in self.host else socket.AF_INET

        self._server = make_server(
            self.host,
            self.requested_port,
            make_app(self.health, self.stale_after),
            server_class=Server,
            handler_class=_QuietHandler,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics and probes listening", url=self.url, paths="/metrics /readyz /healthz")

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
