"""`sluice operator`: the kopf handlers; spec flows in from DAG, DagRun and Pool objects."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from sluice.config import DATABASE_URL_ENV


def operator(
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="watch these namespaces")
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="watch every namespace")
    ] = False,
    database_url: Annotated[
        str | None, typer.Option("--database-url", envvar=DATABASE_URL_ENV, show_envvar=True)
    ] = None,
) -> None:
    """Run the operator. Run one replica: peering between replicas is not set up yet."""
    import kopf

    import sluice.handlers.operator  # noqa: F401  (registers the handlers)

    if database_url:
        os.environ[DATABASE_URL_ENV] = database_url
    namespaces = namespace or []
    kopf.run(standalone=True, clusterwide=all_namespaces or not namespaces, namespaces=namespaces)
