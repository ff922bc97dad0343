"""Readiness and liveness of a scheduler replica, decided from its loop's last tick.

The decisions are pure functions of when the loop's last tick ended, when it
began, and now (`readiness`, `liveness`); `LoopHealth` is the small mutable
record the loop writes and the probe endpoints read, on a monotonic clock
(injected in tests).

- Ready: a tick ended within `stale_after` seconds. A replica whose loop has
  not ticked for that long is doing none of the work, so it is not ready.
- Live: unless the loop's thread is gone, or no tick has ended for
  `LIVENESS_FACTOR * stale_after` seconds since the loop began. In a database
  outage ticks still end (each phase fails and is logged), slowly when
  connections time out, and a restart would not bring the database back:
  only a loop stuck for far longer than an outage makes ticks is worth a
  restart. Before the loop begins (the replica waits for the database to
  migrate, sync and register) the replica is live and not ready.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# Readiness fails once the last tick ended this long ago (seconds; --health-stale-after).
DEFAULT_STALE_AFTER = 60.0
# Liveness fails only after this many readiness windows without a tick.
LIVENESS_FACTOR = 5


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # one line, for the probe's body and for whoever reads it


def readiness(
    last_tick: float | None, now: float, stale_after: float, *, loop_running: bool = True
) -> Verdict:
    """Ready while the loop runs and its last tick ended at most `stale_after` seconds ago."""
    if not loop_running:
        return Verdict(False, "the loop has stopped")
    if last_tick is None:
        return Verdict(False, "the loop has not ticked yet")
    ago = now - last_tick
    return Verdict(ago <= stale_after, f"the loop's last tick ended {ago:.0f} s ago")


def liveness(
    last_tick: float | None,
    started: float | None,
    now: float,
    stale_after: float,
    *,
    loop_running: bool = True,
) -> Verdict:
    """Live unless the loop is gone, or has gone `LIVENESS_FACTOR * stale_after` seconds
    without ending a tick (counted from its start while it has none)."""
    if not loop_running:
        return Verdict(False, "the loop has stopped")
    since = last_tick if last_tick is not None else started
    if since is None:
        return Verdict(True, "the loop has not started yet")
    ago = now - since
    limit = LIVENESS_FACTOR * stale_after
    if ago > limit:
        what = "ended its last tick" if last_tick is not None else "started and has not ticked"
        return Verdict(False, f"the loop {what} {ago:.0f} s ago (limit {limit:g} s): stuck")
    if last_tick is None:
        return Verdict(True, f"the loop started {ago:.0f} s ago and has not ticked yet")
    return Verdict(True, f"the loop's last tick ended {ago:.0f} s ago")


class LoopHealth:
    """When the loop began, when its last tick ended, and whether its thread still runs it.

    Written by the loop's thread, read by the probe server's threads: each field
    is one reference, written whole.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started: float | None = None
        self.last_tick: float | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def tick_started(self) -> None:
        if self._thread is None:
            self._thread = threading.current_thread()
            self.started = self.clock()

    def tick_ended(self) -> None:
        self.last_tick = self.clock()

    def stopped(self) -> None:
        """The loop returned (asked to stop, or on its way out)."""
        self._stopped = True

    @property
    def loop_running(self) -> bool:
        thread = self._thread
        return not self._stopped and (thread is None or thread.is_alive())

    def readiness(self, stale_after: float) -> Verdict:
        return readiness(self.last_tick, self.clock(), stale_after, loop_running=self.loop_running)

    def liveness(self, stale_after: float) -> Verdict:
        return liveness(
            self.last_tick,
            self.started,
            self.clock(),
            stale_after,
            loop_running=self.loop_running,
        )
