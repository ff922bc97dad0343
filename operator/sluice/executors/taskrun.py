"""The wrapper every local try runs under: it records how the task ended.

`python -m sluice.executors.taskrun --result FILE -- COMMAND [ARGS...]` runs the
command as its child in the wrapper's own process group and, when the child
ends, writes `{"exit_code": N}` to FILE atomically. The file is what lets any
scheduler replica on this machine learn a try's outcome even when the replica
that started it has died or is paused: the local counterpart of reading a
Kubernetes Job's status. The wrapper itself ignores SIGTERM (the group signal
reaches the child, and the wrapper must outlive it to write the result).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def write_result(path: Path, exit_code: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"exit_code": exit_code}))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--result" or argv[2] != "--":
        print(
            "usage: python -m sluice.executors.taskrun --result FILE -- COMMAND...", file=sys.stderr
        )
        return 2
    result = Path(argv[1])
    command = argv[3:]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        child = subprocess.Popen(command, preexec_fn=_default_sigterm)
    except OSError as exc:
        print(f"[sluice] could not start {command[0]!r}: {exc.strerror}", file=sys.stderr)
        write_result(result, 127)
        return 127
    code = child.wait()
    write_result(result, code)
    return code if code >= 0 else 128 - code


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
