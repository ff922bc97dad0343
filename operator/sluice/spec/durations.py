"""Durations as people write them in DAG manifests, and back.

Retry delays, timeouts and similar settings are written by hand in YAML, so we
accept the short forms people already know from Go and Kubernetes (`30s`,
`1h30m`, `500ms`), plain numbers of seconds, and ISO 8601 (`PT5M`), and we
always write them back in the short form so a stored spec reads like the one
that was applied.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

import isodate  # type: ignore[import-untyped]

ACCEPTED_FORMS = (
    "a duration like '30s', '5m', '1h30m', '2d', '500ms', "
    "a number of seconds, or ISO 8601 like 'PT5M' or 'P1DT2H'"
)

# Largest unit first: format_duration walks this list, and parse_duration
# requires the same order so that '30m1h' is rejected as a likely typo.
_UNITS: tuple[tuple[str, timedelta], ...] = (
    ("w", timedelta(weeks=1)),
    ("d", timedelta(days=1)),
    ("h", timedelta(hours=1)),
    ("m", timedelta(minutes=1)),
    ("s", timedelta(seconds=1)),
    ("ms", timedelta(milliseconds=1)),
    ("us", timedelta(microseconds=1)),
)
_UNIT_RANK = {name: rank for rank, (name, _) in enumerate(_UNITS)}
_UNIT_SIZE = dict(_UNITS)
# 'ms' and 'us' must be tried before 'm' and 's' so '500ms' is not read as 500m + 's'.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|w|d|h|m|s)")
_NUMBER = re.compile(r"(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """Parse any accepted duration form; raise ValueError naming the forms we accept."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        # bool is an int subclass; 'retryDelay: true' is a mistake, not 1 second.
        raise ValueError(f"expected a duration, got {value!r}; use {ACCEPTED_FORMS}")
    elif isinstance(value, int | float):
        result = _from_seconds(value)
    elif isinstance(value, str):
        result = _parse_text(value)
    else:
        raise ValueError(f"expected a duration, got {type(value).__name__}; use {ACCEPTED_FORMS}")
    if result < timedelta(0):
        raise ValueError(f"duration must not be negative, got {value!r}")
    return result


def format_duration(td: timedelta) -> str:
    """Write a duration in the short form, e.g. `1h30m`; `0s` for zero."""
    if td < timedelta(0):
        return "-" + format_duration(-td)
    if td == timedelta(0):
        return "0s"
    remaining = td
    parts: list[str] = []
    # Weeks are skipped on output: '14d' reads better than '2w' in a status column.
    for name, size in _UNITS[1:]:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{name}")
    return "".join(parts)


def _from_seconds(seconds: float) -> timedelta:
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite number of seconds, got {seconds!r}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {seconds!r} seconds is too large") from None


def _parse_text(text: str) -> timedelta:
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"empty duration; use {ACCEPTED_FORMS}")
    # The sign is taken off first so '-5m' is reported as negative, not as malformed.
    negative = stripped.startswith("-")
    body = stripped[1:] if negative else stripped.removeprefix("+")
    if _NUMBER.fullmatch(body):
        result = _from_seconds(float(body))
    elif body[:1] in ("P", "p"):
        result = _parse_iso(body)
    else:
        result = _parse_units(body)
    return -result if negative else result


def _parse_units(text: str) -> timedelta:
    total = timedelta(0)
    position = 0
    last_rank = -1
    for match in _PART.finditer(text):
        number, unit = match.groups()
        rank = _UNIT_RANK[unit]
        if match.start() != position or rank <= last_rank:
            break
        try:
            total += float(number) * _UNIT_SIZE[unit]
        except OverflowError:
            raise ValueError(f"duration {text!r} is too large") from None
        position = match.end()
        last_rank = rank
    if position != len(text) or position == 0:
        raise ValueError(f"invalid duration {text!r}; use {ACCEPTED_FORMS}")
    return total


def _parse_iso(text: str) -> timedelta:
    try:
        parsed = isodate.parse_duration(text.upper())
    except (isodate.ISO8601Error, ValueError):
        raise ValueError(f"invalid ISO 8601 duration {text!r}; use {ACCEPTED_FORMS}") from None
    if not isinstance(parsed, timedelta):
        # isodate returns its own Duration for months and years, which have no fixed length.
        raise ValueError(
            f"duration {text!r} uses months or years, which have no fixed length; "
            "use days instead (e.g. 'P30D')"
        )
    return parsed
