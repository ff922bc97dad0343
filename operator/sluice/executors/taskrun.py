"""The wrapper every local try runs under: it says where the try runs and how it ended.

`python -m sluice.executors.taskrun --result FILE [--pid-file FILE]
[--lease FILE --lease-seconds L] -- COMMAND [ARGS...]` first writes
`{"pid": N, "start": T, "view": V}` to the pid file (its own pid, its start
time in clock ticks since boot, and the machine and PID namespace that pid
belongs to), then runs the command as its child in the wrapper's own process
group and, when the child ends, writes `{"exit_code": N}` to the result file.
Both are written atomically and keyed by the try, so any scheduler replica on
this machine can find a try from the moment it was claimed (its external id
names the try, not the pid) and learn its outcome even when the replica that
started it has died or is paused: the local counterpart of reading a
Kubernetes Job's status. The wrapper itself ignores SIGTERM (the group signal
reaches the child, and the wrapper must outlive it to write the result).

With a lease, the try stops itself once nobody vouches for it: the lease file
holds the monotonic time (CLOCK_MONOTONIC, one clock for the whole machine) at
which a replica last recorded the try's heartbeat in the database. If it is
older than L seconds the command does not start, or, while it runs, it is
killed with its process group, and the result says why. A replica that cannot
see this machine's processes may then declare the try a zombie once its
heartbeat is older than the lease (ADR 0015): by then it has stopped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
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


def write_lease(path: Path, renewed: float) -> None:
    """Record a heartbeat taken at `renewed` (time.monotonic()) for the try's lease."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(repr(renewed))
    os.replace(tmp, path)


def lease_age(path: Path) -> float:
    """Seconds since the lease was last renewed; infinite if it cannot be read."""
    try:
        return time.monotonic() - float(path.read_text())
    except (OSError, ValueError):
        return float("inf")


@dataclass
class _Args:
    result: Path
    pid_file: Path | None
    lease: Path | None
    lease_seconds: float
    command: list[str]


def _parse(argv: list[str]) -> _Args | None:
    options: dict[str, str] = {}
    i = 0
    while i + 1 < len(argv) and argv[i] in ("--result", "--pid-file", "--lease", "--lease-seconds"):
        options[argv[i]] = argv[i + 1]
        i += 2
    if "--result" not in options or i + 1 >= len(argv) or argv[i] != "--":
        return None
    if ("--lease" in options) != ("--lease-seconds" in options):
        return None
    try:
        seconds = float(options.get("--lease-seconds", "0"))
    except ValueError:
        return None
    return _Args(
        Path(options["--result"]),
        Path(options["--pid-file"]) if "--pid-file" in options else None,
        Path(options["--lease"]) if "--lease" in options else None,
        seconds,
        argv[i + 1 :],
    )


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args is None:
        print(
            "usage: python -m sluice.executors.taskrun --result FILE [--pid-file FILE]"
            " [--lease FILE --lease-seconds SECONDS] -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.pid_file is not None:
        # Before the command starts: whenever the task runs, it can be found.
        me = os.getpid()
        write_json(args.pid_file, {"pid": me, "start": proc_start_time(me), "view": VIEW})
    if args.lease is not None and lease_age(args.lease) > args.lease_seconds:
        # Claimed too long ago (its replica stopped before starting it): another try may
        # run by now, so this one must not.
        why = f"lease expired before the start: no heartbeat recorded for {args.lease_seconds:g}s"
        write_json(args.result, {"exit_code": -signal.SIGKILL, "reason": why})
        return 128 + signal.SIGKILL
    try:
        child = subprocess.Popen(args.command, preexec_fn=_default_sigterm)
    except OSError as exc:
        print(f"[sluice] could not start {args.command[0]!r}: {exc.strerror}", file=sys.stderr)
        write_result(args.result, 127)
        return 127
    code = _wait(child, args.lease, args.lease_seconds)
    if code is None:  # the lease ran out: stopped, so that a new try cannot overlap it
        why = f"lease expired: no heartbeat recorded for {args.lease_seconds:g}s"
        print(f"[sluice] try stopped: {why}", file=sys.stderr)
        write_json(args.result, {"exit_code": -signal.SIGKILL, "reason": why})
        os.killpg(0, signal.SIGKILL)  # whatever the command left in the group, and us
        return 128 + signal.SIGKILL
    write_result(args.result, code)
    return code if code >= 0 else 128 - code


def _wait(child: subprocess.Popen[bytes], lease: Path | None, seconds: float) -> int | None:
    """The child's exit code; None if the lease ran out first (the child is then killed)."""
    if lease is None:
        return child.wait()
    every = min(0.5, seconds / 4)
    while True:
        try:
            return child.wait(timeout=every)
        except subprocess.TimeoutExpired:
            pass
        if lease_age(lease) > seconds:
            child.kill()
            child.wait()
            return None


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
