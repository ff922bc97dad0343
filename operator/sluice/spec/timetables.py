"""When a DAG's runs happen: cron schedules in the DAG's timezone, `@once`, or none.

A scheduled run covers a data interval `[start, end)` between two cron ticks; its
logical date is the interval's start and it may be created once the interval has
ended, as in Airflow. Cron arithmetic is croniter's, done in the DAG's own
timezone so a daily 02:30 run stays at 02:30 local time across DST changes; the
results are returned in UTC, the only zone the database stores.
"""

from __future__ import annotations

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

    # Cron arithmetic runs on naive wall-clock time, as in Airflow, so a daily 02:30
    # fires once per local day. A wall time is made an instant as Airflow makes it
    # (`_instant`): one that happens twice is its second occurrence, a missing one is
    # shifted forward by the gap. Ticks are then ordered by instant: the next tick is
    # the earliest instant after `after`, looked for among wall times from _DST_SLACK
    # before, since a shifted tick can lie after a later wall time's (Airflow 2.10.5
    # orders by wall time there; README, deviation `dst-instant-order`). Schedules
    # that fire every hour step by real elapsed time instead, as Airflow's do, so a
    # fall-back's repeated hour still runs.
    def _next_tick(self, after: datetime) -> datetime:
        after = _utc(after)
        wall = self._wall(after)
        if self._every_hour:
            tick: datetime = croniter(self.expression, wall).get_next(datetime)
            return after + (tick - wall)
        it = croniter(self.expression, wall - _DST_SLACK)
        best: datetime | None = None
        while True:
            tick = it.get_next(datetime)
            if best is not None and tick > wall + _DST_SLACK:
                return best
            instant = self._instant(tick)
            if instant > after and (best is None or instant < best):
                best = instant

    def _prev_tick(self, before: datetime) -> datetime:
        before = _utc(before)
        wall = self._wall(before)
        if self._every_hour:
            tick: datetime = croniter(self.expression, wall).get_prev(datetime)
            return before - (wall - tick)
        it = croniter(self.expression, wall + _DST_SLACK)
        best: datetime | None = None
        while True:
            tick = it.get_prev(datetime)
            if best is not None and tick < wall - _DST_SLACK:
                return best
            instant = self._instant(tick)
            if instant < before and (best is None or instant > best):
                best = instant

    def _wall(self, when: datetime) -> datetime:
        return when.astimezone(self.tz).replace(tzinfo=None)

    def _instant(self, wall: datetime) -> datetime:
        """A wall-clock time in the DAG's zone as UTC; of two readings, the later one.

        A repeated time's readings are its two occurrences; a missing time's are the
        offsets before and after the change, the later being the time shifted forward
        by the gap. This is what Airflow's `make_aware` (fold=1) gives.
        """
        readings = (wall.replace(tzinfo=self.tz, fold=fold).astimezone(UTC) for fold in (0, 1))
        return max(readings)

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
    return CronTimetable(schedule, ZoneInfo(timezone))


_EPSILON = timedelta(microseconds=1)
# More than any time zone's DST shift: how far a tick's instant can stray from its wall time.
_DST_SLACK = timedelta(hours=3)


def _every_hour(it: croniter) -> bool:
    """Whether the expression fires in every hour (its hour field is `*`)."""
    return bool(it.expanded[1] == ["*"])
