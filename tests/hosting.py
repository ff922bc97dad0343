"""What the tests' local servers share (tests/s3server.py, tests/registry.py): where
hack/ builds their binaries, and a free port to serve on."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def sluice_bin() -> Path:
    """hack/lib.sh's $SLUICE_BIN: $SLUICE_BIN, else $SLUICE_CACHE/bin, else ~/.cache/sluice/bin."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice"
    return Path(
        os.environ.get("SLUICE_BIN") or Path(os.environ.get("SLUICE_CACHE") or cache) / "bin"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
