"""When a DAG's runs happen: cron schedules in the DAG's timezone, `@once`, or none.

A scheduled run covers a data interval `[start, end)` between two cron ticks; its
logical date is the interval's start and it may be created once the interval has
ended, as in Airflow. Cron arithmetic is croniter's, done in the DAG's own
timezone so a daily 02:30 run stays at 02:30 local time across DST changes; the
results are returned in UTC, the only zone the database stores.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import croniter

CRON_PRESETS: dict[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
}
ONCE = "@once"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run a timetable calls for."""

    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    run_after: datetime


class Timetable(Protocol):
    def next_run(
        self,
        last: RunInfo | None,
        *,
        now: datetime,
        catchup: bool,
        start_date: datetime | None,
        end_date: datetime | None,
    ) -> RunInfo | None:
        """The run after `last` (the latest scheduled run so far), or None if no more."""
        ...

    def runs_between(self, start: datetime, end: datetime) -> list[RunInfo]:
        """Every run whose logical date lies in `[start, end]` (backfill)."""
        ...

    def manual_run(self, when: datetime) -> RunInfo:
        """The data interval a manual trigger at `when` covers."""
        ...

    def skip_to_latest(self, info: RunInfo, *, now: datetime) -> RunInfo:
        """`info`, or the latest run already due at `now` if that is later (catchup off)."""
        ...


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()} reached the timetable")
    return value.astimezone(UTC)


class CronTimetable:
    """Runs between consecutive ticks of a cron expression in a timezone."""

    def __init__(self, expression: str, tz: tzinfo) -> None:
        self.expression = CRON_PRESETS.get(expression, expression)
        self.tz = tz
        self._every_hour = _every_hour(croniter(self.expression))
        # A tick depends only on the instant asked about, and croniter parses the
        # expression again on every call (about 0.1 ms): the DAGs due together, which
        # share this timetable (`timetable_for`), ask about the same instants.
        self._next_tick = functools.lru_cache(maxsize=_TICKS_CACHED)(self._find_next_tick)
        self._prev_tick = functools.lru_cache(maxsize=_TICKS_CACHED)(self._find_prev_tick)

    # Cron arithmetic runs on naive wall-clock time, as in Airflow, so a daily 02:30
    # fires once per local day. A wall time fires at the instants `_readings` gives:
    # a missing one shifted forward by the gap; one that happens twice at its second
    # occurrence, or at both for a schedule that fires every hour (so a fall-back's
    # repeated hour runs), as in Airflow. Ticks are ordered by instant: the next
    # tick is the earliest instant after `after`. Far from a DST change that is
    # croniter's next wall time; near one, a moved tick can lie on the other side of
    # a neighbour's, so wall times within _DST_SLACK are all looked at (Airflow
    # orders by wall time or steps by elapsed time there; docs/semantics.md, deviations
    # `dst-instant-order` and `dst-hourly-step`).
    def _find_next_tick(self, after: datetime) -> datetime:
        after = _utc(after)
        wall = self._wall(after)
        tick: datetime = croniter(self.expression, wall).get_next(datetime)
        first = self._readings(tick)[0]
        if not (self._changes_near(after) or self._changes_near(first)):
            return first
        it = croniter(self.expression, wall - _DST_SLACK)
        best: datetime | None = None
        while True:
            tick = it.get_next(datetime)
            if best is not None and tick > max(wall, self._wall(best)) + _DST_SLACK:
                return best
            for instant in self._readings(tick):
                if instant > after and (best is None or instant < best):
                    best = instant

    def _find_prev_tick(self, before: datetime) -> datetime:
        before = _utc(before)
        wall = self._wall(before)
        tick: datetime = croniter(self.expression, wall).get_prev(datetime)
        last = self._readings(tick)[-1]
        if not (self._changes_near(before) or self._changes_near(last)):
            return last
        it = croniter(self.expression, wall + _DST_SLACK)
        best: datetime | None = None
        while True:
            tick = it.get_prev(datetime)
            if best is not None and tick < min(wall, self._wall(best)) - _DST_SLACK:
                return best
            for instant in self._readings(tick):
                if instant < before and (best is None or instant > best):
                    best = instant

    def _wall(self, when: datetime) -> datetime:
        return when.astimezone(self.tz).replace(tzinfo=None)

    def _readings(self, wall: datetime) -> tuple[datetime, ...]:
        """The instants a wall-clock tick in the DAG's zone fires at, in UTC, earliest first.

        A missing time's two readings (the offsets before and after the change) differ
        and the first is the later: it is the time shifted forward by the gap, as
        Airflow's `make_aware` (fold=1) gives. A repeated time's readings are its two
        occurrences: both for a schedule that fires every hour, else the second.
        """
        first, second = (wall.replace(tzinfo=self.tz, fold=f).astimezone(UTC) for f in (0, 1))
        if first < second and self._every_hour:
            return (first, second)
        return (max(first, second),)

    def _changes_near(self, instant: datetime) -> bool:
        """Whether the zone's UTC offset changes within _DST_SLACK of `instant`."""
        before = (instant - _DST_SLACK).astimezone(self.tz).utcoffset()
        return before != (instant + _DST_SLACK).astimezone(self.tz).utcoffset()

    def _align_forward(self, when: datetime) -> datetime:
        """The first tick at or after `when`."""
        return self._next_tick(_utc(when) - _EPSILON)

    def _align_back(self, when: datetime) -> datetime:
        """The last tick at or before `when`."""
        return self._prev_tick(_utc(when) + _EPSILON)

    def _info(self, start: datetime) -> RunInfo:
        end = self._next_tick(start)
        return RunInfo(start, start, end, end)

    def next_run(
        self,
        last: RunInfo | None,
        *,
        now: datetime,
        catchup: bool,
        start_date: datetime | None,
        end_date: datetime | None,
    ) -> RunInfo | None:
        earliest = self._align_forward(start_date) if start_date is not None else None
        if last is not None:
            # Realign in case the schedule changed since `last`; never before startDate.
            start = self._align_back(last.data_interval_end)
            if earliest is not None:
                start = max(start, earliest)
        elif earliest is not None:
            start = earliest
        else:
            return None
        info = self._info(start)
        if not catchup:
            info = self.skip_to_latest(info, now=now)
        if end_date is not None and info.logical_date > _utc(end_date):
            return None
        return info

    def runs_between(self, start: datetime, end: datetime) -> list[RunInfo]:
        return [self._info(tick) for tick in self._ticks(start, end)]

    def _ticks(self, start: datetime, end: datetime) -> Iterator[datetime]:
        tick = self._align_forward(_utc(start))
        while tick <= _utc(end):
            yield tick
            tick = self._next_tick(tick)

    def manual_run(self, when: datetime) -> RunInfo:
        end = self._align_back(when)
        return RunInfo(_utc(when), self._prev_tick(end), end, _utc(when))

    def skip_to_latest(self, info: RunInfo, *, now: datetime) -> RunInfo:
        latest_start = self._prev_tick(self._align_back(now))
        return info if info.logical_date >= latest_start else self._info(latest_start)


class OnceTimetable:
    """`@once`: a single run at the start date."""

    def next_run(
        self,
        last: RunInfo | None,
        *,
        now: datetime,
        catchup: bool,
        start_date: datetime | None,
        end_date: datetime | None,
    ) -> RunInfo | None:
        if last is not None or start_date is None:
            return None
        start = _utc(start_date)
        return RunInfo(start, start, start, start)

    def runs_between(self, start: datetime, end: datetime) -> list[RunInfo]:
        return []

    def manual_run(self, when: datetime) -> RunInfo:
        return RunInfo(_utc(when), _utc(when), _utc(when), _utc(when))

    def skip_to_latest(self, info: RunInfo, *, now: datetime) -> RunInfo:
        return info


class ManualOnlyTimetable(OnceTimetable):
    """`schedule: null`: runs only when triggered."""

    def next_run(
        self,
        last: RunInfo | None,
        *,
        now: datetime,
        catchup: bool,
        start_date: datetime | None,
        end_date: datetime | None,
    ) -> RunInfo | None:
        return None


def timetable_for(schedule: str | None, timezone: str) -> Timetable:
    if schedule is None:
        return ManualOnlyTimetable()
    if schedule == ONCE:
        return OnceTimetable()
    return _cron_timetable(schedule, timezone)


@functools.lru_cache(maxsize=256)
def _cron_timetable(schedule: str, timezone: str) -> CronTimetable:
    """One timetable per schedule and zone, shared by the DAGs that have them (it holds
    no state but its cache of ticks)."""
    return CronTimetable(schedule, ZoneInfo(timezone))


# Ticks each timetable remembers (a few instants per DAG run created).
_TICKS_CACHED = 1024


_EPSILON = timedelta(microseconds=1)
# More than any time zone's DST shift: how far a tick's instant can stray from its wall time
# (and from its neighbours' order).
_DST_SLACK = timedelta(hours=3)


def _every_hour(it: croniter) -> bool:
    """Whether the expression fires in every hour (its hour field is `*`)."""
    return bool(it.expanded[1] == ["*"])
