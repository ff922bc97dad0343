"""`sluice db upgrade`: migrate the metadata database to the newest schema."""

from __future__ import annotations

import typer

from sluice.cli.common import DatabaseUrl
from sluice.cli.errors import fail
from sluice.config import ConfigError, require_database_url
from sluice.db.migrate import upgrade as run_upgrade

app = typer.Typer(help="The metadata database.", no_args_is_help=True)


@app.command()
def upgrade(database_url: DatabaseUrl = None) -> None:
    """Apply every pending migration (safe to run from several replicas at once)."""
    try:
        url = require_database_url(database_url)
    except ConfigError as exc:
        fail(str(exc))
    run_upgrade(url)
    typer.echo("database is at the newest schema")
