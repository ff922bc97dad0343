"""What the heartbeat sidecar costs each task pod to start: CPU and memory of one process.

    python -m bench.sidecar_start [--runs 5] [--operator PATH ...]

Starts `sluice heartbeat` (as the pod's command does: the `sluice` console
entry point with `heartbeat`) against a task API URL nothing listens on, so it
makes its first heartbeat attempt and then waits to retry; after `--seconds`
it gets SIGTERM and exits. Prints the process's CPU (user + system) and peak
RSS for each run. `--operator` takes one or more `operator/` directories to
measure side by side (another checkout's code, for a before/after); the
default is this checkout's. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent.parent / "operator"
# The console script's body, so no installed entry point is needed.
ENTRY = "import sys; sys.argv = ['sluice', 'heartbeat']; from sluice.cli import main; main()"


def one(operator: Path, seconds: float) -> tuple[float, int]:
    """(CPU seconds, peak RSS in KiB) of one sidecar process."""
    env = {
        **os.environ,
        "PYTHONPATH": str(operator),
        "SLUICE_TASK_API_URL": "http://127.0.0.1:9",  # discard port: refused
        "SLUICE_TI_ID": "1",
        "SLUICE_TRY_NUMBER": "1",
        "SLUICE_TRY_TOKEN": "token",
    }
    process = subprocess.Popen([sys.executable, "-c", ENTRY], env=env, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    process.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5, help="until SIGTERM")
    parser.add_argument("--operator", type=Path, nargs="+", default=[HERE])
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {args.runs} runs each, SIGTERM after {args.seconds} s")
    for operator in args.operator:
        runs = [one(operator, args.seconds) for _ in range(args.runs)]
        cpu = [c for c, _ in runs]
        rss = [r for _, r in runs]
        print(
            f"{operator}: CPU s median {median(cpu):.3f} (min {min(cpu):.3f}, max {max(cpu):.3f});"
            f" peak RSS MiB median {median(rss) / 1024:.1f}"
        )


if __name__ == "__main__":
    main()
