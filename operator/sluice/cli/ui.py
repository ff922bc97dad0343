"""`sluice ui`: the web UI on this machine (issue 32, ADR 0039)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from sluice.cli.common import DatabaseUrl, LogStoreUrl, StateDir, database_or_state_dir
from sluice.cli.errors import fail


def loopback(host: str) -> bool:
    """Whether `host` is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui(
    host: Annotated[str, typer.Option(help="the address to listen on (loopback only)")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="the port to listen on")] = 8080,
    database_url: DatabaseUrl = None,
    log_store: LogStoreUrl = None,
    log_dir: Annotated[
        Path, typer.Option(help="the local executor's log directory (its --log-dir)")
    ] = Path("sluice-logs"),
    state_dir: StateDir = None,
) -> None:
    """Serve the web UI (DAGs, their runs' grid, each run's tries and their logs) at
    http://HOST:PORT/, read from the metadata database (and the tries' logs as `sluice
    logs` reads them). No login: it listens on loopback only, as `airflow standalone`
    does; on a cluster, reach it with `kubectl port-forward`."""
    if not loopback(host):
        fail(
            f"--host {host}: the UI has no login yet, so it listens on loopback only"
            " (127.0.0.1, ::1 or localhost); from elsewhere, use an SSH tunnel or"
            " `kubectl port-forward`"
        )
    from aiohttp import web

    from sluice.db.engine import make_engine, session_factory
    from sluice.ui.app import make_app

    if state_dir is not None:
        log_dir = state_dir / "logs"
    with database_or_state_dir(database_url, state_dir) as url:
        engine = make_engine(url, application_name="sluice-ui")
        try:
            print(f"Sluice UI: http://{host}:{port}/", flush=True)
            app = make_app(session_factory(engine), log_store=log_store, log_dir=log_dir)
            web.run_app(app, host=host, port=port, print=None)
        finally:
            engine.dispose()
