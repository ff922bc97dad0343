"""Durations: every accepted spelling, every rejection, and the way back to text."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from sluice.spec.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w2d", timedelta(days=9)),
        ("500ms", timedelta(milliseconds=500)),
        ("1s500ms", timedelta(seconds=1, milliseconds=500)),
        ("250us", timedelta(microseconds=250)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
        (" 10m ", timedelta(minutes=10)),
        ("90", timedelta(seconds=90)),
        ("2.5", timedelta(seconds=2.5)),
        (90, timedelta(seconds=90)),
        (0.25, timedelta(milliseconds=250)),
        ("PT5M", timedelta(minutes=5)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("pt30s", timedelta(seconds=30)),
        ("P2W", timedelta(weeks=2)),
        (timedelta(hours=3), timedelta(hours=3)),
    ],
)
def test_parse_accepts(value: str | int | float | timedelta, expected: timedelta) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("5 minutes", "invalid duration '5 minutes'; use a duration like '30s'"),
        ("5x", "ISO 8601 like 'PT5M'"),
        ("30m1h", "invalid duration '30m1h'"),
        ("m", "invalid duration 'm'"),
        ("", "empty duration"),
        ("-5m", "must not be negative"),
        ("-PT5M", "must not be negative"),
        ("-3", "must not be negative"),
        (-1, "must not be negative"),
        (timedelta(seconds=-1), "must not be negative"),
        ("PTX", "invalid ISO 8601 duration 'PTX'"),
        ("P1M", "months or years, which have no fixed length"),
        ("P1Y", "use days instead"),
        (True, "expected a duration, got True"),
        (float("nan"), "finite"),
        ("1e400", "finite"),
        ("999999999999d", "too large"),
        ([5], "expected a duration, got list"),
    ],
)
def test_parse_rejects_with_accepted_forms(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=30), "30s"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(days=2, hours=3), "2d3h"),
        (timedelta(weeks=2), "14d"),
        (timedelta(milliseconds=1500), "1s500ms"),
        (timedelta(microseconds=7), "7us"),
        (timedelta(seconds=-30), "-30s"),
    ],
)
def test_format(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize(
    "value",
    [timedelta(0), timedelta(days=400, seconds=1, microseconds=1), timedelta(hours=25)],
)
def test_format_then_parse_round_trips(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value
