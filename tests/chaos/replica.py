"""A chaos replica: `sluice scheduler` with fault hooks that only the harness arms.

`python -m tests.chaos.replica SCHEDULER-ARGS...` runs `sluice scheduler
SCHEDULER-ARGS...` unchanged except for what `CHAOS_CONTROL` (a path prefix,
e.g. `WORKDIR/replica-2`) asks for, through files the harness writes and this
replica reads (nothing in `sluice` itself reads them):

- `PREFIX.skew`: seconds added to this replica's wall clock, read again at
  most every 0.2 s; a missing file is 0. That is the clock `sluice scheduler`
  reads (`sluice.cli.scheduler.utcnow`): the loop's clock before ADR 0016, the
  fallback of its database clock since. The machine's clock, and so the
  tasks' and the harness's, is left alone.
- `PREFIX.die-at-start`: the next `executor.start()` starts the first half of
  its batch (none of a batch of one), writes `PREFIX.died-at-start` (the tries
  it claimed and the ones it started), and ends the process at once
  (`os._exit(137)`, no cleanup: as a SIGKILL would; `kill()` cannot, because
  a replica in its own PID namespace is its init, which ignores a SIGKILL from
  inside it).
- `PREFIX.raise-at-start`: the next `executor.start()` starts the first half of
  its batch, then raises.

Each `.…-at-start` file is removed when it fires, so one arming is one fault.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import structlog

import sluice.cli.scheduler as scheduler_cli
from sluice.executors.base import TaskLaunch
from sluice.executors.local import LocalExecutor
from sluice.scheduler.loop import utcnow

log = structlog.get_logger("chaos.replica")


class Control:
    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self._skew = 0.0
        self._read_at = 0.0

    def path(self, suffix: str) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.{suffix}")

    def skew(self) -> float:
        now = time.monotonic()
        if now - self._read_at >= 0.2:
            self._read_at = now
            try:
                self._skew = float(self.path("skew").read_text() or 0)
            except (OSError, ValueError):
                self._skew = 0.0
        return self._skew

    def fire(self, suffix: str) -> bool:
        """Was this fault armed? Disarms it."""
        try:
            self.path(suffix).unlink()
        except FileNotFoundError:
            return False
        return True


def chaos_executor(control: Control) -> type[LocalExecutor]:
    class ChaosExecutor(LocalExecutor):
        def start(self, launches: Sequence[TaskLaunch]) -> None:
            dies = control.fire("die-at-start")
            raises = not dies and control.fire("raise-at-start")
            if not (dies or raises):
                super().start(launches)
                return
            half = list(launches)[: len(launches) // 2]
            super().start(half)
            if dies:
                control.path("died-at-start").write_text(
                    json.dumps(
                        {
                            "claimed": [list(launch.key) for launch in launches],
                            "started": [list(launch.key) for launch in half],
                        }
                    )
                )
                os._exit(137)
            raise RuntimeError(
                f"chaos: the executor failed after starting {len(half)} of {len(launches)} tries"
            )

    return ChaosExecutor


def main(argv: list[str]) -> None:
    prefix = os.environ.get("CHAOS_CONTROL")
    if prefix:
        control = Control(Path(prefix))

        def skewed() -> datetime:
            return utcnow() + timedelta(seconds=control.skew())

        scheduler_cli.utcnow = skewed  # type: ignore[assignment]
        scheduler_cli.LocalExecutor = chaos_executor(control)  # type: ignore[misc]
    from sluice.cli import app

    app(["scheduler", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
