"""Readiness and liveness of a scheduler replica, decided from its loop's ticks.

The decisions are pure functions of what the loop reported (`Ticks`: when it
began, when its last tick ended, when its last tick that reached the database
ended) and now (`readiness`, `liveness`, and `after_tick` for the record
itself); `LoopHealth` is the small mutable holder the loop writes and the
probe endpoints read, on a monotonic clock (injected in tests).

- Ready: a tick that reached the database ended within `stale_after`
  seconds. A tick reached it unless every database transaction it tried
  failed (connection refused or timed out, or any other error: the tick got
  nothing done). A replica whose loop has not ticked for that long, or whose
  ticks all fail at the database, does none of the work, so it is not ready
  (and leaves the task API Service, whose heartbeats need the database too).
- Live: unless the loop's thread is gone, or no tick at all has ended for
  `LIVENESS_FACTOR * stale_after` seconds since the loop began. In a database
  outage ticks still end, and quickly: a tick that cannot get a connection
  runs no phase (`SchedulerLoop.tick`), so it costs one refused connection, or
  one connect timeout (10 s), where each of its phases would otherwise wait out
  its own. A restart would not bring the database back: only a loop stuck for
  far longer than an outage's ticks take (a hung call, a deadlock in the
  process) is worth one. Before the loop begins (the replica waits for the
  database to migrate, sync and register) the replica is live and not ready.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

# Readiness fails once no tick reached the database for this long (seconds; --health-stale-after).
DEFAULT_STALE_AFTER = 60.0
# Liveness fails only after this many readiness windows without a tick.
LIVENESS_FACTOR = 5


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # one line, for the probe's body and for whoever reads it


@dataclass(frozen=True)
class Ticks:
    """What the loop has reported, in monotonic seconds; replaced whole at each report."""

    started: float | None = None  # the loop's first tick began
    last_ended: float | None = None  # its last tick ended, whatever the database did
    last_reached: float | None = None  # its last tick that reached the database ended
    unreached: int = 0  # ticks ended since `last_reached` that did not reach it
    database_error: str = ""  # why the latest of those did not (one line)


def after_tick(
    ticks: Ticks, now: float, database_error: str | None, *, used_database: bool = True
) -> Ticks:
    """The record once a tick ended at `now`; `database_error` is None when the tick
    reached the database, else why it did not. A tick that did not use the database
    (nothing was due) only moves `last_ended`: it proves nothing about the database."""
    if not used_database:
        return replace(ticks, last_ended=now)
    if database_error is None:
        return replace(ticks, last_ended=now, last_reached=now, unreached=0, database_error="")
    return replace(
        ticks, last_ended=now, unreached=ticks.unreached + 1, database_error=database_error
    )


def readiness(
    ticks: Ticks, now: float, stale_after: float, *, loop_running: bool = True
) -> Verdict:
    """Ready while the loop runs and its last tick that reached the database ended at most
    `stale_after` seconds ago."""
    if not loop_running:
        return Verdict(False, "the loop has stopped")
    if ticks.last_ended is None:
        return Verdict(False, "the loop has not ticked yet")
    if ticks.unreached:  # then the last tick that reached it ended no later than the last one
        reached = ticks.last_reached
        return Verdict(reached is not None and now - reached <= stale_after, _unreached(ticks, now))
    ago = now - ticks.last_ended
    return Verdict(ago <= stale_after, f"the loop's last tick ended {ago:.0f} s ago")


def _unreached(ticks: Ticks, now: float) -> str:
    """`the loop's last 12 ticks could not use the database (the last that could ended
    75 s ago): <error>`."""
    n, error = ticks.unreached, ticks.database_error
    if ticks.last_reached is None:
        if n == 1:
            return f"the loop's only tick could not use the database: {error}"
        return f"none of the loop's {n} ticks could use the database: {error}"
    which = f"last {n} ticks" if n > 1 else "last tick"
    ago = now - ticks.last_reached
    return (
        f"the loop's {which} could not use the database"
        f" (the last that could ended {ago:.0f} s ago): {error}"
    )


def liveness(ticks: Ticks, now: float, stale_after: float, *, loop_running: bool = True) -> Verdict:
    """Live unless the loop is gone, or has gone `LIVENESS_FACTOR * stale_after` seconds
    without ending a tick, whatever the database did (counted from its start while it
    has none)."""
    if not loop_running:
        return Verdict(False, "the loop has stopped")
    last_tick = ticks.last_ended
    since = last_tick if last_tick is not None else ticks.started
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
    """What the loop reported (`ticks`), and whether its thread still runs it.

    Written by the loop's thread, read by the probe server's threads: `ticks` is
    one frozen record, replaced whole, so a probe never sees half of a report.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.ticks = Ticks()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def tick_started(self) -> None:
        if self._thread is None:
            self._thread = threading.current_thread()
            self.ticks = replace(self.ticks, started=self.clock())

    def tick_ended(self, *, database_error: str | None = None, used_database: bool = True) -> None:
        """A tick ended; `database_error` says why it did not reach the database, if it
        did not (every database transaction it tried failed); `used_database` False if
        it tried none."""
        self.ticks = after_tick(
            self.ticks, self.clock(), database_error, used_database=used_database
        )

    def stopped(self) -> None:
        """The loop returned (asked to stop, or on its way out)."""
        self._stopped = True

    @property
    def loop_running(self) -> bool:
        thread = self._thread
        return not self._stopped and (thread is None or thread.is_alive())

    def readiness(self, stale_after: float) -> Verdict:
        return readiness(self.ticks, self.clock(), stale_after, loop_running=self.loop_running)

    def liveness(self, stale_after: float) -> Verdict:
        return liveness(self.ticks, self.clock(), stale_after, loop_running=self.loop_running)
