"""The heartbeat sidecar: keeps one try alive in the database, or stops its pod's work.

It runs in every task pod as a native sidecar (an init container with
`restartPolicy: Always`) from the Sluice image, so task images need nothing of
Sluice. Every `interval` it posts its try's heartbeat to the task API with the
try's token, and what comes back decides what it does:

- 204: the try is the running one. A `Sluice-Refreshed-Token` header replaces
  the token (so expiry never ends a healthy long task).
- 409 `not_running` / 404 `not_found` from the task API: the scheduler no
  longer wants this try (fenced, superseded, finished, deleted). It stops the
  pod's work (`terminate_pod_processes`: with `shareProcessNamespace`, SIGTERM
  to every process it may signal), says why, and idles: a native sidecar that
  exited would be restarted and ask again.
- 401/403: logged loudly every time, and it keeps trying (a rotated key can
  come back; the zombie check decides, not the sidecar).
- connection errors, timeouts, 5xx, 429: retried with backoff, capped at the
  interval; they never end it.
- any other answer (including a 404/409 that is not the task API's JSON, say
  from a proxy at a wrong URL) is a misconfiguration: logged loudly, never a
  reason to kill the task.

Only the standard library talks HTTP here, and proxies from the environment
are ignored: the task API is a Service inside the cluster.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import structlog

from sluice.api import protocol
from sluice.api.tokens import REFRESH_HEADER

log = structlog.get_logger("sluice.heartbeat")

# No ProxyHandler from the environment: an HTTP_PROXY meant for the task would
# otherwise carry in-cluster heartbeats out of the cluster.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Reply:
    """One heartbeat's answer; `status` None when there was no HTTP answer at all."""

    status: int | None
    body: dict[str, Any] = field(default_factory=dict)
    refreshed_token: str | None = None
    error: str | None = None


class Next(Enum):
    CONTINUE = "continue"  # accepted
    STOP_WORK = "stop_work"  # the task API says this try is over
    RETRY = "retry"  # transient: back off and try again soon
    COMPLAIN = "complain"  # 401/403 or a misconfiguration: log loudly, keep going


def post_heartbeat(url: str, token: str, timeout: float) -> Reply:
    """POST one heartbeat; never raises for network or HTTP errors."""
    request = urllib.request.Request(
        url,
        data=b"",
        method="POST",
        headers={"Authorization": f"Bearer {token}", "User-Agent": "sluice-heartbeat"},
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return Reply(
                response.status, _json(response.read()), response.headers.get(REFRESH_HEADER)
            )
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read()
        return Reply(exc.code, _json(body), exc.headers.get(REFRESH_HEADER))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return Reply(None, error=f"{type(cause).__name__}: {cause}")


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def next_step(reply: Reply) -> Next:
    """What a reply means for the loop (a pure function of the reply)."""
    status, reason = reply.status, reply.body.get("reason")
    if status is None or status >= 500 or status == 429:
        return Next.RETRY
    if 200 <= status < 300:
        return Next.CONTINUE
    if (status, reason) in ((409, protocol.NOT_RUNNING), (404, protocol.NOT_FOUND)):
        return Next.STOP_WORK
    return Next.COMPLAIN


def terminate_pod_processes(reason: str) -> None:
    """SIGTERM every process this one may signal (`kill(-1)`): with the pod's
    `shareProcessNamespace`, the main container's when it runs as the same uid
    (or this one as root). The kernel spares the caller and PID 1 (the pause
    container). Never run it outside a task pod."""
    log.warning("sending SIGTERM to every process of the pod", reason=reason)
    try:
        os.kill(-1, signal.SIGTERM)
    except OSError as exc:  # ESRCH: nothing left to signal
        log.warning("nothing to signal", error=str(exc))


class HeartbeatLoop:
    """Heartbeats one try until `stop()`; on a 409/404 calls `stop_work` once, then idles."""

    def __init__(
        self,
        api_url: str,
        ti_id: int,
        try_number: int,
        token: str,
        *,
        stop_work: Callable[[str], None],
        interval: float = 10.0,
        timeout: float = 10.0,
        first_retry: float = 1.0,
        post: Callable[[str, str, float], Reply] = post_heartbeat,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self.url = api_url.rstrip("/") + protocol.heartbeat_path(ti_id, try_number)
        self.ti_id = ti_id
        self.try_number = try_number
        self.token = token
        self.interval = interval
        self.timeout = timeout
        self.first_retry = first_retry
        self.stop_reason: str | None = None
        self.accepted = 0
        self._stop_work = stop_work
        self._post = post
        self._stopped = threading.Event()
        self._wait = wait or self._stopped.wait

    def stop(self) -> None:
        """End `run` (safe from a signal handler or another thread)."""
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def run(self) -> None:
        failures = 0
        log.info("heartbeating", url=self.url, interval=self.interval)
        while not self._stopped.is_set():
            started = time.monotonic()
            reply = self._post(self.url, self.token, self.timeout)
            if reply.refreshed_token:
                self.token = reply.refreshed_token
                log.info("adopted a refreshed token")
            step = next_step(reply)
            if step is Next.STOP_WORK:
                self._end_work(reply)
                self._stopped.wait()  # idle: a native sidecar that exits is restarted
                return
            if step is Next.RETRY:
                failures += 1
                delay = self._backoff(failures)
                log.warning(
                    "heartbeat not delivered; retrying",
                    status=reply.status,
                    error=reply.error or reply.body.get("detail"),
                    failures=failures,
                    retry_in=round(delay, 2),
                )
                self._wait(delay)
                continue
            failures = 0
            if step is Next.CONTINUE:
                self.accepted += 1
            else:
                self._complain(reply)
            self._wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _backoff(self, failures: int) -> float:
        # Doubling from first_retry, capped at the interval; jittered so that a fleet of
        # pods does not come back in step after an outage.
        delay = min(self.interval, self.first_retry * (1 << min(failures - 1, 30)))
        return delay * random.uniform(0.5, 1.0)

    def _complain(self, reply: Reply) -> None:
        if reply.status in (401, 403):
            log.error(
                "the task API refuses this try's token; heartbeats are not recorded and the"
                " try will be failed as a zombie unless this is fixed (check the task API keys)",
                status=reply.status,
                detail=reply.body.get("detail"),
            )
        else:
            log.error(
                f"unexpected answer from the task API; check {protocol.URL_ENV}",
                url=self.url,
                status=reply.status,
                body=reply.body,
            )

    def _end_work(self, reply: Reply) -> None:
        if reply.status == 404:
            reason = f"task instance {self.ti_id} no longer exists"
        else:
            reason = (
                f"try {self.try_number} of task instance {self.ti_id} is not running"
                f" (the task instance is {reply.body.get('state')!s}"
                f" at try {reply.body.get('try_number')!s})"
            )
        self.stop_reason = reason
        log.error("the scheduler no longer runs this try: stopping the pod's work", reason=reason)
        self._stop_work(reason)
