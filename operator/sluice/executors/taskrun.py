"""The wrapper every local try runs under: it says where the try runs and how it ended.

`python -m sluice.executors.taskrun --result FILE [--pid-file FILE] -- COMMAND [ARGS...]`
first writes `{"pid": N, "start": T, "view": V}` to the pid file (its own pid,
its start time in clock ticks since boot, and the machine and PID namespace
that pid belongs to), then runs the command as its child in the wrapper's own
process group and, when the child ends, writes `{"exit_code": N}` to the result
file. Both are written atomically and keyed by the try, so any scheduler
replica on this machine can find a try from the moment it was claimed (its
external id names the try, not the pid) and learn its outcome even when the
replica that started it has died or is paused: the local counterpart of
reading a Kubernetes Job's status. The wrapper itself ignores SIGTERM (the group
signal reaches the child, and the wrapper must outlive it to write the result).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid), "0" if unknown."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


# Where a pid means something: the machine and the PID namespace. Replicas with the same
# view can see (and adopt) each other's tries; others cannot.
VIEW = f"{socket.gethostname()}/{pid_namespace()}"


def proc_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22)."""
    fields = proc_stat(pid)
    return fields[19] if fields else None


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (the state) on, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after it are fixed.
    return raw[raw.rindex(")") + 2 :].split()


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def write_result(path: Path, exit_code: int) -> None:
    write_json(path, {"exit_code": exit_code})


def _parse(argv: list[str]) -> tuple[Path, Path | None, list[str]] | None:
    result: Path | None = None
    pid_file: Path | None = None
    i = 0
    while i + 1 < len(argv) and argv[i] in ("--result", "--pid-file"):
        if argv[i] == "--result":
            result = Path(argv[i + 1])
        else:
            pid_file = Path(argv[i + 1])
        i += 2
    if result is None or i >= len(argv) or argv[i] != "--" or i + 1 >= len(argv):
        return None
    return result, pid_file, argv[i + 1 :]


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        print(
            "usage: python -m sluice.executors.taskrun --result FILE [--pid-file FILE]"
            " -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    result, pid_file, command = parsed
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if pid_file is not None:
        # Before the command starts: whenever the task runs, it can be found.
        me = os.getpid()
        write_json(pid_file, {"pid": me, "start": proc_start_time(me), "view": VIEW})
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
