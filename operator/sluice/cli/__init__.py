"""The `sluice` command: one CLI for every part (scheduler, operator, sidecar, tools).

`sluice heartbeat` runs in every task pod, so it starts without importing the
rest (SQLAlchemy, the Kubernetes client, the DAG models): about a third of the
memory and a tenth of the start time of the whole CLI.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    if sys.argv[1:2] == ["heartbeat"]:
        from sluice.cli.heartbeat import app as heartbeat_app

        heartbeat_app(args=sys.argv[2:], prog_name="sluice heartbeat")
        return
    from sluice.cli.commands import app

    app()


def __getattr__(name: str) -> Any:
    # `from sluice.cli import app`: the whole CLI, built on first use.
    if name == "app":
        from sluice.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
