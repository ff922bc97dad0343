"""When this replica could reach the database: heartbeat silence counts only then.

Replicas and task pods heartbeat through Postgres. While it is unreachable no
heartbeat is recorded, so after an outage longer than a threshold every try
and every other replica looked silent since before it began: the first sweep
killed running pods as zombies and marked the other replicas dead, although
nothing had stopped but the database (ADR 0029). So a replica judges silence
only over time it could reach the database itself: a heartbeat is silent for
`seconds` when this replica has been in contact for that long since it was
recorded. An outage is the span from the last answer before a failure to reach
the database to the next answer; it is known only by that next answer, which
is also when the replica can act on anything again. Time is the loop's clock
(the database's, ADR 0016), carried forward through the outage.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import psycopg2
from sqlalchemy.exc import DBAPIError

# SQLSTATEs that mean the server is going away or not there yet: no heartbeat gets in.
_UNAVAILABLE = ("57P01", "57P02", "57P03")  # admin/crash shutdown, cannot connect now


def unreached(exc: BaseException) -> bool:
    """Whether a failure says the database could not be reached (rather than that it
    answered with an error): the connection failed, broke or was refused."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if not isinstance(orig, psycopg2.OperationalError | psycopg2.InterfaceError):
        return False
    code = orig.pgcode
    return code is None or code.startswith("08") or code in _UNAVAILABLE


class HeartbeatRecording:
    """When this replica's task API could not write the heartbeats it received: from its
    last write that worked to the next one (one failing now: to now). Partial outages
    make these differ from the loop's own contact: a Postgres shutting down ("smart")
    keeps the sessions already open, such as the loop's, and refuses new ones, such as
    the task API's; the loop then judges tries silent whose pods kept posting (found by
    the cluster chaos run, ADR 0035). Written from the task API's thread, read by the
    loop's."""

    def __init__(self, now: datetime, *, longest: float) -> None:
        self.longest = longest
        self._lock = threading.Lock()
        self._last_ok = now
        self._failing = False
        self._gaps: list[tuple[datetime, datetime]] = []

    def report(self, ok: bool, now: datetime) -> None:
        """A write of heartbeats worked (`ok`) or failed, at `now`."""
        with self._lock:
            if not ok:
                self._failing = True
                return
            if self._failing:
                self._gaps.append((self._last_ok, now))
                self._failing = False
                horizon = now - timedelta(seconds=2 * self.longest)
                self._gaps = [gap for gap in self._gaps if gap[1] > horizon]
            self._last_ok = max(self._last_ok, now)

    def gaps(self, now: datetime) -> list[tuple[datetime, datetime]]:
        with self._lock:
            return self._gaps + ([(self._last_ok, now)] if self._failing else [])


def _merged(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Overlapping or touching spans as one, oldest first."""
    merged: list[tuple[datetime, datetime]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class DatabaseContact:
    """This replica's outages, as many as can still matter to a threshold of `longest`
    seconds (older ones are forgotten); with `recording`, also the spans its task API
    could not write heartbeats, for judging tries (not replicas) silent."""

    def __init__(
        self, now: datetime, *, longest: float, recording: HeartbeatRecording | None = None
    ) -> None:
        self.longest = longest
        self.recording = recording
        self._answered = now  # the last answer from the database
        self._failed = False  # a failure to reach it since then
        self._outages: list[tuple[datetime, datetime]] = []  # (start, end), oldest first

    def answered(self, now: datetime) -> None:
        """The database answered at `now`: an outage under way ends here."""
        if self._failed:
            self._outages.append((self._answered, now))
            self._failed = False
            horizon = self.silent_before(now, self.longest)
            self._outages = [outage for outage in self._outages if outage[1] > horizon]
        self._answered = max(self._answered, now)

    def failed(self) -> None:
        """An attempt to reach the database failed: an outage began at the last answer."""
        self._failed = True

    def silent_before(self, now: datetime, seconds: float, *, tries: bool = False) -> datetime:
        """The instant a heartbeat must be older than to have been silent for `seconds`
        of this replica's contact with the database up to `now`: `now - seconds`, moved
        back over every outage in between (one under way ends at `now`: the caller is
        talking to the database). For a try's heartbeats (`tries`), also over every span
        its task API could not write them."""
        outages = self._outages + ([(self._answered, now)] if self._failed else [])
        if tries and self.recording is not None:
            outages = _merged(outages + self.recording.gaps(now))
        cutoff, left = now, timedelta(seconds=seconds)
        for start, end in reversed(outages):
            end = min(end, cutoff)
            if cutoff - end >= left:
                break
            left -= cutoff - end
            cutoff = min(start, cutoff)
        return cutoff - left
