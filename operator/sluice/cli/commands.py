"""Every `sluice` subcommand on one Typer app (imported only when one of them runs)."""

from __future__ import annotations

import typer

import sluice
from sluice.api import sidecar
from sluice.cli import backfill as backfill_cli
from sluice.cli import convert as convert_cli
from sluice.cli import dags as dags_cli
from sluice.cli import db as db_cli
from sluice.cli import logs as logs_cli
from sluice.cli import operator as operator_cli
from sluice.cli import scheduler as scheduler_cli
from sluice.cli import standalone as standalone_cli
from sluice.cli import tasks as tasks_cli
from sluice.cli import ui as ui_cli

app = typer.Typer(
    name="sluice",
    help="Airflow-style workflows on Kubernetes, scheduled by replicas on Postgres.",
    no_args_is_help=True,
    # --install-completion and --show-completion (bash, zsh, fish, PowerShell): the
    # script calls `sluice` back with _SLUICE_COMPLETE set, through sluice.cli.main.
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"sluice {sluice.__version__}")
        raise typer.Exit()


@app.callback()
def sluice_command(
    version: bool = typer.Option(
        False,
        "--version",
        help="print the installed version (pyproject.toml's) and exit",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """Airflow-style workflows on Kubernetes, scheduled by replicas on Postgres."""


app.add_typer(dags_cli.app, name="dags")
app.add_typer(db_cli.app, name="db")
app.add_typer(tasks_cli.app, name="tasks")
app.command("scheduler")(scheduler_cli.scheduler)
app.command("standalone")(standalone_cli.standalone)
app.command("backfill")(backfill_cli.backfill)
app.command("operator")(operator_cli.operator)
app.command("logs")(logs_cli.logs)
app.command("ui")(ui_cli.ui)
app.command("convert")(convert_cli.convert)


@app.command(
    "heartbeat",
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def heartbeat(ctx: typer.Context) -> None:
    """Heartbeat one try to the task API until SIGTERM: a task pod's sidecar
    (`sluice heartbeat --help` for its options)."""
    # `sluice heartbeat` itself never gets here (`sluice.cli.main` runs the sidecar's own
    # parser without typer); this is the same command for `sluice --help` and CliRunner.
    raise typer.Exit(sidecar.main(ctx.args))
