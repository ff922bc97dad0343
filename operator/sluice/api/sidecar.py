"""The heartbeat sidecar: keeps one try alive in the database, or stops its pod's work.

It runs in every task pod as a native sidecar (an init container with
`restartPolicy: Always`) from the Sluice image, so task images need nothing of
Sluice. Every `interval` it posts its try's heartbeat to the task API with the
try's token, the first one `interval` after it starts (the claim that started
the try counts as its first heartbeat; a try shorter than the interval, and
most are, never posts one), and what comes back decides what it does:

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
  interval; they never end it. One post waits at most the interval (and at
  least a second) for its answer, so a replica that hangs holds a heartbeat
  back for one interval, not for the request timeout.
- any other answer (including a 404/409 that is not the task API's JSON, say
  from a proxy at a wrong URL) is a misconfiguration: logged loudly, never a
  reason to kill the task.

Only the standard library talks HTTP here, and proxies from the environment
are ignored: the task API is a Service inside the cluster.

Every task pod starts this process, so it imports the standard library and
`sluice.api.protocol` only: `main` parses its options with argparse and logs
through `logging` (one `key=value` or JSON line per event), where the rest of
Sluice uses typer and structlog. Those two (with rich, which both load) cost
about 0.7 s of CPU to import, in every pod; the HTTP client (urllib, with
http.client and the email package under it) is imported at the first post,
so a pod whose task ends before it never loads it
(`tests/unit/test_api_sidecar.py` checks what this loads; `python -m
bench.sidecar_start` measures it).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from sluice.api import protocol

_logger = logging.getLogger("sluice.heartbeat")

# After SIGTERM, how long a heartbeat still in flight may delay the exit.
_EXIT_GRACE = 2.0
# The shortest wait for one answer, however short the interval.
MIN_TIMEOUT = 1.0

if TYPE_CHECKING:
    import urllib.request


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """The HTTP client, imported at the first post. No ProxyHandler from the environment:
    an HTTP_PROXY meant for the task would otherwise carry in-cluster heartbeats out of
    the cluster."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _log(level: int, event: str, **fields: Any) -> None:
    _logger.log(level, event, extra={"fields": fields})


class _Format(logging.Formatter):
    """One line per event: `time [level] event key=value ...`, or a JSON object."""

    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        when = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        level = record.levelname.lower()
        if self.as_json:
            line = {"event": record.getMessage(), **fields, "level": level, "timestamp": when}
            return json.dumps(line, default=str)
        pairs = " ".join(f"{key}={value!r}" for key, value in fields.items())
        return f"{when} [{level}] {record.getMessage()} {pairs}".rstrip()


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
    import http.client
    import urllib.error
    import urllib.request

    opener = _opener()
    request = urllib.request.Request(
        url,
        data=b"",
        method="POST",
        headers={"Authorization": f"Bearer {token}", "User-Agent": "sluice-heartbeat"},
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            return Reply(
                response.status,
                _json(response.read()),
                response.headers.get(protocol.REFRESH_HEADER),
            )
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read()
        return Reply(exc.code, _json(body), exc.headers.get(protocol.REFRESH_HEADER))
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
    _log(logging.WARNING, "sending SIGTERM to every process of the pod", reason=reason)
    try:
        os.kill(-1, signal.SIGTERM)
    except OSError as exc:  # ESRCH: nothing left to signal
        _log(logging.WARNING, "nothing to signal", error=str(exc))


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
        first_after: float | None = None,
        first_retry: float = 1.0,
        post: Callable[[str, str, float], Reply] = post_heartbeat,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self.url = api_url.rstrip("/") + protocol.heartbeat_path(ti_id, try_number)
        self.ti_id = ti_id
        self.try_number = try_number
        self.token = token
        self.interval = interval
        # A heartbeat not answered within the interval is given up and posted again, on a
        # new connection: the Service may send that one to another replica. A replica that
        # hangs while still Ready (a freeze, a stopped process: its readiness probe takes
        # 30 s to notice) must not silence the pods whose connections reach it for longer
        # than the kill threshold. (Found by the cluster chaos run: ADR 0035.)
        self.timeout = max(MIN_TIMEOUT, min(timeout, interval))
        # The first post comes one interval after the start (the claim heartbeated the
        # try when it started it), unless told otherwise.
        self.first_after = interval if first_after is None else first_after
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
        _log(logging.INFO, "heartbeating", url=self.url, interval=self.interval)
        if self.first_after > 0:
            self._wait(self.first_after)
        while not self._stopped.is_set():
            started = time.monotonic()
            reply = self._post(self.url, self.token, self.timeout)
            if reply.refreshed_token:
                self.token = reply.refreshed_token
                _log(logging.INFO, "adopted a refreshed token")
            step = next_step(reply)
            if step is Next.STOP_WORK:
                self._end_work(reply)
                self._stopped.wait()  # idle: a native sidecar that exits is restarted
                return
            if step is Next.RETRY:
                failures += 1
                delay = self._backoff(failures)
                _log(
                    logging.WARNING,
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
            _log(
                logging.ERROR,
                "the task API refuses this try's token; heartbeats are not recorded and the"
                " try will be failed as a zombie unless this is fixed (check the task API keys)",
                status=reply.status,
                detail=reply.body.get("detail"),
            )
        else:
            _log(
                logging.ERROR,
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
        _log(
            logging.ERROR,
            "the scheduler no longer runs this try: stopping the pod's work",
            reason=reason,
        )
        self._stop_work(reason)


# -- `sluice heartbeat` -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 with the usage, as typer's do
        self.print_usage(sys.stderr)
        self.exit(2, f"Error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = _Parser(
        prog="sluice heartbeat",
        description=(
            "Heartbeat one try to the task API until SIGTERM (exit 0). Runs inside a task"
            " pod as a native sidecar. If the task API says the try is no longer running"
            " (409) or its task instance is gone (404), it sends SIGTERM to every process"
            " it may signal (the pod shares one process namespace) and idles. Never run"
            " it outside a task pod."
        ),
    )
    for flag, variable, what in (
        ("--url", protocol.URL_ENV, "the task API's base URL"),
        ("--ti-id", protocol.TI_ID_ENV, "the task instance id"),
        ("--try-number", protocol.TRY_NUMBER_ENV, "the try number"),
        ("--interval", protocol.INTERVAL_ENV, "seconds between heartbeats (default 10)"),
    ):
        parser.add_argument(flag, default=env(variable), help=f"{what} [env {variable}]")
    parser.add_argument(
        "--token-file",
        type=Path,
        help=f"read the try's token from this file instead of ${protocol.TOKEN_ENV}",
    )
    parser.add_argument("--timeout", default="10", help="seconds to wait for one answer")
    parser.add_argument(
        "--log-level", default="info", help="the least severe level logged: debug, info, ..."
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines")
    return parser


def _number(parser: argparse.ArgumentParser, value: str, flag: str, kind: type) -> Any:
    try:
        number = kind(value)
    except ValueError:
        parser.error(f"{flag} must be a number, got {value!r}")
    if number <= 0:
        parser.error(f"{flag} must be positive (got {value})")
    return number


def main(argv: Sequence[str] | None = None) -> int:
    """`sluice heartbeat [options]`: heartbeat one try until SIGTERM; the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format(args.log_json))
    _logger.handlers[:] = [handler]
    _logger.propagate = False
    _logger.setLevel(logging.getLevelNamesMapping().get(args.log_level.upper(), logging.INFO))
    for value, flag, variable, what in (
        (args.url, "--url", protocol.URL_ENV, "no task API URL"),
        (args.ti_id, "--ti-id", protocol.TI_ID_ENV, "no task instance"),
        (args.try_number, "--try-number", protocol.TRY_NUMBER_ENV, "no try number"),
    ):
        if not value:
            parser.error(f"{what}: set {variable} or pass {flag}")
    loop = HeartbeatLoop(
        args.url,
        _number(parser, args.ti_id, "--ti-id", int),
        _number(parser, args.try_number, "--try-number", int),
        _read_token(parser, args.token_file),
        stop_work=terminate_pod_processes,
        interval=_number(parser, args.interval or "10", "--interval", float),
        timeout=_number(parser, args.timeout, "--timeout", float),
    )
    return _serve(loop)


def _serve(loop: HeartbeatLoop) -> int:
    """Run the loop on a thread until SIGTERM or SIGINT. This thread only waits for the
    signals, so a handler never runs inside the loop's own locks, and a request in
    flight delays the exit by at most `_EXIT_GRACE`."""
    crashed: list[BaseException] = []

    def _run() -> None:
        try:
            loop.run()
        except BaseException as exc:
            crashed.append(exc)
            raise

    worker = threading.Thread(target=_run, name="heartbeat", daemon=True)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        loop.stop()

    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker.start()
        while worker.is_alive() and not loop.stopped:
            worker.join(0.5)
        worker.join(_EXIT_GRACE)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if crashed:
        print(f"Error: the heartbeat loop crashed: {crashed[0]!r}", file=sys.stderr)
        return 1
    return 0


def _read_token(parser: argparse.ArgumentParser, token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            parser.error(f"cannot read --token-file {token_file}: {exc.strerror or exc}")
        if not token:
            parser.error(f"--token-file {token_file} is empty")
        return token
    token = os.environ.get(protocol.TOKEN_ENV, "").strip()
    if not token:
        parser.error(f"no token: set {protocol.TOKEN_ENV} or pass --token-file")
    return token


if __name__ == "__main__":
    sys.exit(main())
