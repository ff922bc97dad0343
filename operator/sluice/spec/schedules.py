"""Which schedule expressions and time zones a DAG may use.

The timetable code computes run dates from these; checking them here means a
DAG that was accepted can always be scheduled. croniter alone is too lenient
(it also takes 6- and 7-field expressions with seconds and years), so the
field count is checked first; and an expression croniter parses but can
never find a date for (30 February) is refused too, since every later
computation of a run date would raise.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

# '@once' is ours (one run at startDate); the others are croniter's aliases.
SCHEDULE_PRESETS = ("@once", "@hourly", "@daily", "@weekly", "@monthly", "@yearly")

ACCEPTED_SCHEDULES = (
    "a 5-field cron expression like '0 3 * * *' (minute hour day-of-month month "
    f"day-of-week), one of {', '.join(SCHEDULE_PRESETS)}, or null for manual runs only"
)


def schedule_problem(expression: str) -> str | None:
    """Why `expression` is not an accepted schedule, or None."""
    text = expression.strip()
    if text.startswith("@"):
        if text in SCHEDULE_PRESETS:
            return None
        return f"unknown schedule preset {expression!r}; use {ACCEPTED_SCHEDULES}"
    fields = text.split()
    if len(fields) != 5:
        return (
            f"schedule {expression!r} has {len(fields)} fields, expected 5; "
            f"use {ACCEPTED_SCHEDULES}"
        )
    if not croniter.is_valid(text):
        return f"invalid cron expression {expression!r}; use {ACCEPTED_SCHEDULES}"
    if not _fires(text):
        return (
            f"cron expression {expression!r} never fires: no month in it has that day "
            "(e.g. 30 February, 31 April); use a day that every month in the expression "
            "has, 'L' for a month's last day, or list a month that has it"
        )
    return None


def _fires(expression: str) -> bool:
    """Whether croniter finds a tick of a valid 5-field expression at all.

    `is_valid` checks each field alone, so '0 0 30 2 *' passes it; asking for a tick
    then searches croniter's `max_years_between_matches` (50 years) and raises. A
    5-field expression repeats every 400 years and the rarest that fires at all
    (29 February on a given weekday) does so at least every 40, so one search from
    any date settles it.
    """
    try:
        croniter(expression, _SEARCH_FROM).get_next(datetime)
    except CroniterBadDateError:
        return False
    return True


_SEARCH_FROM = datetime(2000, 1, 1)


def timezone_problem(name: str) -> str | None:
    """Why `name` is not a known IANA time zone, or None."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r}; use an IANA name like 'UTC' or 'Europe/Paris'"
    return None
