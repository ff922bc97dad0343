"""`sluice standalone DIR`: the whole scheduler on one machine, on an embedded Postgres."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live

from sluice.cli.common import (
    DatabaseUrl,
    Output,
    check_output,
    load_manifests,
    print_document,
    require_embedded_postgres,
)
from sluice.cli.errors import fail
from sluice.db.dags import DagNameTaken
from sluice.logs import configure_logging
from sluice.metrics.health import DEFAULT_STALE_AFTER
from sluice.metrics.sampler import Sampler
from sluice.metrics.server import MetricsServer
from sluice.runtime import LocalRuntime
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import TickReport, utcnow
from sluice.summaries import RunSummary, as_json, read_runs, runs_table


def standalone(
    dag_dir: Annotated[Path, typer.Argument(help="directory (or file) of DAG manifests")],
    until_idle: Annotated[
        bool, typer.Option(help="exit when no run is active and none is due")
    ] = False,
    output: Output = "table",
    database_url: DatabaseUrl = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="keep the embedded database and task logs here (default: temporary)"),
    ] = None,
    tick_interval: Annotated[float, typer.Option(help="idle sleep between ticks (s)")] = 0.5,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="serve /metrics, /readyz and /healthz on 127.0.0.1:PORT (default: off)",
            min=0,
            max=65535,
        ),
    ] = None,
    ui_port: Annotated[
        int | None,
        typer.Option(
            help="serve the web UI on 127.0.0.1:PORT beside the scheduler (0: any free port)",
            min=0,
            max=65535,
        ),
    ] = None,
) -> None:
    """Schedule every DAG in DIR locally: tasks run as subprocesses."""
    check_output(output)
    configure_logging("warning")
    manifests = load_manifests([dag_dir])
    if not manifests:
        fail(f"no DAG manifests (*.yaml, *.yml) in {dag_dir}", code=1)
    stop = _stop_on_signals()
    console = Console(stderr=output != "table")
    config = SchedulerConfig(tick_interval=tick_interval)
    if database_url is None:
        require_embedded_postgres()
    with (
        LocalRuntime(database_url=database_url, state_dir=state_dir, config=config) as runtime,
        contextlib.ExitStack() as metrics,
    ):
        if metrics_port is not None:
            server = MetricsServer(
                runtime.loop.health,
                host="127.0.0.1",
                port=metrics_port,
                stale_after=DEFAULT_STALE_AFTER,
            )
            try:
                metrics.enter_context(server)
            except OSError as exc:
                fail(f"--metrics-port {metrics_port}: {exc}")
            metrics.enter_context(Sampler(runtime.sessions))
        try:
            runtime.register(manifests)
        except DagNameTaken as exc:
            fail(f"{exc}, or leave it out of {dag_dir}")
        if ui_port is not None:
            from sluice.ui.server import UiServer

            ui = UiServer(
                runtime.sessions, host="127.0.0.1", port=ui_port, log_dir=runtime.state_dir / "logs"
            )
            try:
                metrics.enter_context(ui)
            except OSError as exc:
                fail(f"--ui-port {ui_port}: {exc}")
            console.print(f"[bold]Sluice UI[/bold]: {ui.url}")
        console.print(
            f"[bold]sluice standalone[/bold]: {len(manifests)} DAG(s) from {dag_dir}; "
            f"logs in {runtime.state_dir / 'logs'}"
        )

        def snapshot() -> list[RunSummary]:
            with runtime.sessions() as session:
                return read_runs(session)

        def done() -> bool:
            return stop.requested or (until_idle and runtime.is_idle(utcnow()))

        live_view = console.is_terminal and output == "table"
        if live_view:
            with Live(runs_table(snapshot()), console=console, refresh_per_second=4) as live:
                last = time.monotonic()

                def refresh(_: TickReport) -> None:
                    nonlocal last
                    if time.monotonic() - last > 0.25:
                        last = time.monotonic()
                        live.update(runs_table(snapshot()))

                runtime.run(done, on_tick=refresh)
                live.update(runs_table(snapshot()))
        else:
            runtime.run(done)
        runs = snapshot()
    if output != "table":
        print_document(as_json(runs), output)
    elif not live_view:
        console.print(runs_table(runs))
    if state_dir is not None and until_idle and ui_port is None:
        # The runs stay in the state dir: the UI can show them (a temporary one is gone).
        print(
            f"See these runs in the web UI: sluice ui --state-dir {state_dir}"
            " (then open http://127.0.0.1:8080/)",
            file=sys.stderr,
        )
    failed = [r for r in runs if r.state == "failed"]
    if failed:
        print(f"{len(failed)} run(s) failed", file=sys.stderr)
        if until_idle:
            raise typer.Exit(1)


class _Stop:
    requested = False


def _stop_on_signals() -> _Stop:
    stop = _Stop()

    def handler(signum: int, frame: object) -> None:
        stop.requested = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop
