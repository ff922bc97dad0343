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
    auth: Annotated[
        str,
        typer.Option(
            help="none: no login, loopback only; kubernetes: every user signs in with a"
            " Kubernetes token, checked and authorized by the API server (TokenReview,"
            " SubjectAccessReview), and actions are objects written as them"
        ),
    ] = "none",
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="with --auth kubernetes: the UI's own account (default: in-cluster)"),
    ] = None,
) -> None:
    """Serve the web UI (DAGs, their runs' grid, each run's tries and their logs) at
    http://HOST:PORT/, read from the metadata database (and the tries' logs as `sluice
    logs` reads them). Without --auth it has no login and listens on loopback only, as
    `airflow standalone` does; on a cluster it runs with --auth kubernetes (the chart's
    `ui` Deployment; ADR 0040)."""
    if auth not in ("none", "kubernetes"):
        fail(f"--auth {auth}: one of none, kubernetes")
    if auth == "none" and not loopback(host):
        fail(
            f"--host {host}: without --auth kubernetes the UI has no login, so it listens"
            " on loopback only (127.0.0.1, ::1 or localhost); from elsewhere, use an SSH"
            " tunnel or `kubectl port-forward`, or run it with --auth kubernetes"
        )
    from aiohttp import web

    from sluice.db.engine import make_engine, session_factory
    from sluice.ui.app import make_app

    if state_dir is not None:
        log_dir = state_dir / "logs"
    access = None
    if auth == "kubernetes":
        from sluice.ui.access import kubernetes_access

        try:
            access = kubernetes_access(kubeconfig)
        except Exception as exc:
            fail(f"--auth kubernetes: cannot load the UI's own account: {exc}")
    with database_or_state_dir(database_url, state_dir) as url:
        # On a cluster the UI only reads: its actions go through the API server.
        engine = make_engine(url, application_name="sluice-ui", read_only=access is not None)
        try:
            print(f"Sluice UI: http://{host}:{port}/", flush=True)
            app = make_app(
                session_factory(engine), log_store=log_store, log_dir=log_dir, access=access
            )
            web.run_app(app, host=host, port=port, print=None)
        finally:
            engine.dispose()
