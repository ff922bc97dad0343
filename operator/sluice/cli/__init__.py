"""The `sluice` command: one CLI for every part (scheduler, operator, sidecar, tools).

`sluice heartbeat` runs in every task pod, so it starts without importing the
rest, typer included: `sluice.api.sidecar` parses its own options with the
standard library (see there).
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    if sys.argv[1:2] == ["heartbeat"]:
        from sluice.api import sidecar

        sys.exit(sidecar.main(sys.argv[2:]))
    from sluice.cli.commands import app

    app()


def __getattr__(name: str) -> Any:
    # `from sluice.cli import app`: the whole CLI, built on first use.
    if name == "app":
        from sluice.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
