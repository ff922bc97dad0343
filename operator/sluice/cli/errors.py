"""How every `sluice` command ends on bad input: one line on stderr, a non-zero exit.

Kept free of heavy imports: the heartbeat sidecar (every task pod) uses it.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)
