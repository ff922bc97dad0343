"""`sluice heartbeat`: the task pod's heartbeat sidecar (see `sluice.api.sidecar`)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from sluice.api import protocol, sidecar
from sluice.cli.errors import fail
from sluice.logs import configure_logging

# After SIGTERM, how long a heartbeat still in flight may delay the exit.
_EXIT_GRACE = 2.0


def heartbeat(
    url: Annotated[
        str | None,
        typer.Option(envvar=protocol.URL_ENV, show_envvar=True, help="the task API's base URL"),
    ] = None,
    ti_id: Annotated[
        int | None,
        typer.Option(envvar=protocol.TI_ID_ENV, show_envvar=True, help="the task instance id"),
    ] = None,
    try_number: Annotated[
        int | None,
        typer.Option(envvar=protocol.TRY_NUMBER_ENV, show_envvar=True, help="the try number"),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help=f"read the try's token from this file instead of ${protocol.TOKEN_ENV}"),
    ] = None,
    interval: Annotated[
        float,
        typer.Option(
            envvar=protocol.INTERVAL_ENV, show_envvar=True, help="seconds between heartbeats"
        ),
    ] = 10.0,
    timeout: Annotated[float, typer.Option(help="seconds to wait for one answer")] = 10.0,
    log_level: Annotated[str, typer.Option()] = "info",
    log_json: Annotated[bool, typer.Option()] = False,
) -> None:
    """Heartbeat one try to the task API until SIGTERM (exit 0).

    Runs inside a task pod as a native sidecar. If the task API says the try is
    no longer running (409) or its task instance is gone (404), it sends SIGTERM
    to every process it may signal (the pod shares one process namespace) and
    idles. Never run it outside a task pod.
    """
    configure_logging(log_level, json=log_json)
    if not url:
        fail(f"no task API URL: set {protocol.URL_ENV} or pass --url")
    if ti_id is None:
        fail(f"no task instance: set {protocol.TI_ID_ENV} or pass --ti-id")
    if try_number is None:
        fail(f"no try number: set {protocol.TRY_NUMBER_ENV} or pass --try-number")
    if interval <= 0 or timeout <= 0:
        fail(f"--interval and --timeout must be positive (got {interval} and {timeout})")
    token = _read_token(token_file)
    loop = sidecar.HeartbeatLoop(
        url,
        ti_id,
        try_number,
        token,
        stop_work=sidecar.terminate_pod_processes,
        interval=interval,
        timeout=timeout,
    )
    # The loop runs on a thread; this one only waits for signals, so a handler never
    # runs inside the loop's own locks, and a request in flight cannot delay the exit.
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
        fail(f"the heartbeat loop crashed: {crashed[0]!r}", code=1)


def _read_token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            fail(f"cannot read --token-file {token_file}: {exc.strerror or exc}")
        if not token:
            fail(f"--token-file {token_file} is empty")
        return token
    token = os.environ.get(protocol.TOKEN_ENV, "").strip()
    if not token:
        fail(f"no token: set {protocol.TOKEN_ENV} or pass --token-file")
    return token


# `sluice heartbeat` alone (`sluice.cli.main` runs it without importing the rest).
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(heartbeat)
