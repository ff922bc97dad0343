"""Which schedule expressions and time zones a DAG may use.

The timetable code computes run dates from these; checking them here means a
DAG that was accepted can always be scheduled. croniter alone is too lenient
(it also takes 6- and 7-field expressions with seconds and years), so the
field count is checked first.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

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
    return None


def timezone_problem(name: str) -> str | None:
    """Why `name` is not a known IANA time zone, or None."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r}; use an IANA name like 'UTC' or 'Europe/Paris'"
    return None
