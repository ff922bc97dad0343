"""Timetables: cron (with presets), @once and manual-only, against Airflow 2.10's semantics.

`simulate` plays the scheduler's run-creation loop (`scheduler/runs.py`,
`create_due_runs` and `due_runs`, without maxActiveRuns): the DAG's next run is
computed when it is synced, then every run whose `run_after` has passed is
created, skipping to the latest interval first when catchup is off.

Four tests pin what these tables once found wrong (fixed in 3f1ad04): a daily
02:30 ran twice on the autumn fall-back day and at 03:00 instead of 03:30 on the
spring-forward day, a schedule change did not realign to the new cron, and a
later startDate was ignored once runs existed. Each docstring says what Airflow
does, which is what the test asserts. The conformance suite (`conformance/`,
issue 16) then found, on a real Airflow 2.10.5, that a repeated 02:30 is its
second occurrence, not its first; the DST tests below say so.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from sluice.spec.timetables import (
    CRON_PRESETS,
    CronTimetable,
    ManualOnlyTimetable,
    OnceTimetable,
    RunInfo,
    Timetable,
    timetable_for,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def U(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def simulate(
    tt: Timetable,
    *,
    start: datetime | None,
    now: datetime,
    catchup: bool,
    end: datetime | None = None,
    synced_at: datetime | None = None,
) -> tuple[list[RunInfo], RunInfo | None]:
    """The runs one scheduler tick at `now` creates, and the DAG's stored next run after it."""
    info = tt.next_run(None, now=synced_at or now, catchup=catchup, start_date=start, end_date=end)
    created: list[RunInfo] = []
    while info is not None and info.run_after <= now:
        if not catchup:
            info = tt.skip_to_latest(info, now=now)
        created.append(info)
        info = tt.next_run(info, now=now, catchup=catchup, start_date=start, end_date=end)
    return created, info


def walk(tt: Timetable, start: datetime, until: datetime) -> list[RunInfo]:
    """Every run from `start` (catchup on) whose interval has ended by `until`."""
    return simulate(tt, start=start, now=until, catchup=True)[0]


def assert_contiguous(runs: list[RunInfo]) -> None:
    for run in runs:
        assert run.logical_date == run.data_interval_start
        assert run.run_after == run.data_interval_end
        assert run.data_interval_start < run.data_interval_end
    for earlier, later in itertools.pairwise(runs):
        assert earlier.data_interval_end == later.data_interval_start
    assert len({r.logical_date for r in runs}) == len(runs)


# --- timetable_for ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "kind", "expression"),
    [
        pytest.param(None, ManualOnlyTimetable, None, id="none-manual-only"),
        pytest.param("@once", OnceTimetable, None, id="once"),
        pytest.param("@hourly", CronTimetable, "0 * * * *", id="hourly"),
        pytest.param("@daily", CronTimetable, "0 0 * * *", id="daily"),
        pytest.param("@weekly", CronTimetable, "0 0 * * 0", id="weekly"),
        pytest.param("@monthly", CronTimetable, "0 0 1 * *", id="monthly"),
        pytest.param("@yearly", CronTimetable, "0 0 1 1 *", id="yearly"),
        pytest.param("*/15 9-17 * * 1-5", CronTimetable, "*/15 9-17 * * 1-5", id="plain-cron"),
    ],
)
def test_timetable_for(schedule: str | None, kind: type, expression: str | None) -> None:
    tt = timetable_for(schedule, "Europe/Berlin")
    assert type(tt) is kind
    if isinstance(tt, CronTimetable):
        assert tt.expression == expression
        assert tt.tz == BERLIN


def test_presets_are_the_five_airflow_presets() -> None:
    assert set(CRON_PRESETS) == {"@hourly", "@daily", "@weekly", "@monthly", "@yearly"}


# --- the first run: aligned to the first tick at or after startDate ------------------------


@pytest.mark.parametrize(
    ("schedule", "tz", "start", "first_start", "first_end"),
    [
        pytest.param(
            "@hourly", "UTC", U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 1, 1), id="hourly-on-tick"
        ),
        pytest.param(
            "@hourly",
            "UTC",
            U(2026, 12, 1, 0, 10),
            U(2026, 12, 1, 1),
            U(2026, 12, 1, 2),
            id="hourly-off-tick",
        ),
        pytest.param(
            "@hourly",
            "UTC",
            U(2026, 12, 1, 0, 59) + timedelta(seconds=59, microseconds=999999),
            U(2026, 12, 1, 1),
            U(2026, 12, 1, 2),
            id="hourly-just-before-tick",
        ),
        pytest.param(
            "@daily", "UTC", U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 2), id="daily-on-tick"
        ),
        pytest.param(
            "@daily", "UTC", U(2026, 12, 1, 10), U(2026, 12, 2), U(2026, 12, 3), id="daily-off-tick"
        ),
        pytest.param(
            "@weekly",
            "UTC",
            U(2026, 12, 1),
            U(2026, 12, 6),
            U(2026, 12, 13),
            id="weekly-tuesday-start-to-sunday",
        ),
        pytest.param(
            "@weekly", "UTC", U(2026, 12, 6), U(2026, 12, 6), U(2026, 12, 13), id="weekly-on-sunday"
        ),
        pytest.param(
            "@monthly", "UTC", U(2026, 12, 1), U(2026, 12, 1), U(2027, 1, 1), id="monthly-on-tick"
        ),
        pytest.param(
            "@monthly", "UTC", U(2026, 12, 2), U(2027, 1, 1), U(2027, 2, 1), id="monthly-off-tick"
        ),
        pytest.param(
            "@monthly",
            "UTC",
            U(2027, 1, 31),
            U(2027, 2, 1),
            U(2027, 3, 1),
            id="monthly-short-february",
        ),
        pytest.param(
            "@yearly", "UTC", U(2026, 12, 1), U(2027, 1, 1), U(2028, 1, 1), id="yearly-off-tick"
        ),
        pytest.param(
            "@yearly", "UTC", U(2027, 1, 1), U(2027, 1, 1), U(2028, 1, 1), id="yearly-on-tick"
        ),
        pytest.param(
            "*/15 * * * *",
            "UTC",
            U(2026, 12, 1, 0, 20),
            U(2026, 12, 1, 0, 30),
            U(2026, 12, 1, 0, 45),
            id="every-15-min",
        ),
        pytest.param(
            "0 9 * * 1-5",
            "UTC",
            U(2026, 12, 4, 10),
            U(2026, 12, 7, 9),
            U(2026, 12, 8, 9),
            id="weekdays-friday-to-monday",
        ),
        # midnight in Berlin is 23:00 UTC the day before (CET, UTC+1)
        pytest.param(
            "@daily",
            "Europe/Berlin",
            U(2026, 11, 30, 23),
            U(2026, 11, 30, 23),
            U(2026, 12, 1, 23),
            id="daily-berlin-on-tick",
        ),
        pytest.param(
            "@daily",
            "Europe/Berlin",
            U(2026, 12, 1),
            U(2026, 12, 1, 23),
            U(2026, 12, 2, 23),
            id="daily-berlin-utc-midnight-is-off-tick",
        ),
        pytest.param(
            "0 6 * * *",
            "America/New_York",
            U(2026, 7, 1),
            U(2026, 7, 1, 10),
            U(2026, 7, 2, 10),
            id="ny-6am-summer",
        ),
        pytest.param(
            "0 6 * * *",
            "America/New_York",
            U(2026, 12, 1),
            U(2026, 12, 1, 11),
            U(2026, 12, 2, 11),
            id="ny-6am-winter",
        ),
    ],
)
def test_first_run_is_aligned_to_start_date(
    schedule: str, tz: str, start: datetime, first_start: datetime, first_end: datetime
) -> None:
    tt = timetable_for(schedule, tz)
    info = tt.next_run(None, now=U(2030, 1, 1), catchup=True, start_date=start, end_date=None)
    assert info == RunInfo(first_start, first_start, first_end, first_end)


def test_start_date_in_another_zone_is_the_same_instant() -> None:
    tt = timetable_for("@hourly", "UTC")
    start = datetime(2026, 12, 1, 1, 30, tzinfo=BERLIN)  # 00:30 UTC
    info = tt.next_run(None, now=U(2030, 1, 1), catchup=True, start_date=start, end_date=None)
    assert info is not None
    assert info.logical_date == U(2026, 12, 1, 1)
    assert info.logical_date.tzinfo is UTC


def test_cron_without_start_date_has_no_runs() -> None:
    tt = timetable_for("@daily", "UTC")
    assert (
        tt.next_run(None, now=U(2030, 1, 1), catchup=True, start_date=None, end_date=None) is None
    )


@pytest.mark.parametrize("catchup", [True, False], ids=["catchup", "no-catchup"])
def test_start_date_in_the_future_waits_for_it(catchup: bool) -> None:
    tt = timetable_for("@hourly", "UTC")
    now = U(2026, 12, 1)
    info = tt.next_run(
        None, now=now, catchup=catchup, start_date=U(2026, 12, 5, 0, 30), end_date=None
    )
    assert info == RunInfo(
        U(2026, 12, 5, 1), U(2026, 12, 5, 1), U(2026, 12, 5, 2), U(2026, 12, 5, 2)
    )
    assert simulate(tt, start=U(2026, 12, 5, 0, 30), now=now, catchup=catchup)[0] == []


# --- the scheduler loop: how many runs one tick creates -----------------------------------


def _hours(*hours: int, day: int = 1) -> list[datetime]:
    return [U(2026, 12, day, h) for h in hours]


@pytest.mark.parametrize(
    ("schedule", "start", "end", "now", "catchup", "logical_dates", "next_logical"),
    [
        # the brief's example: each run is created once its interval has ended
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 5, 30),
            True,
            _hours(0, 1, 2, 3, 4),
            U(2026, 12, 1, 5),
            id="hourly-catchup-5-runs",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 5, 30),
            False,
            _hours(4),
            U(2026, 12, 1, 5),
            id="hourly-no-catchup-latest-only",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 5),
            True,
            _hours(0, 1, 2, 3, 4),
            U(2026, 12, 1, 5),
            id="hourly-catchup-now-on-tick",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 5),
            False,
            _hours(4),
            U(2026, 12, 1, 5),
            id="hourly-no-catchup-now-on-tick",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 0, 59),
            True,
            [],
            U(2026, 12, 1),
            id="hourly-catchup-first-interval-open",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 0, 59),
            False,
            [],
            U(2026, 12, 1),
            id="hourly-no-catchup-first-interval-open",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            None,
            U(2026, 12, 1, 1),
            True,
            _hours(0),
            U(2026, 12, 1, 1),
            id="hourly-catchup-first-interval-just-ended",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1, 0, 10),
            None,
            U(2026, 12, 1, 5, 30),
            True,
            _hours(1, 2, 3, 4),
            U(2026, 12, 1, 5),
            id="hourly-catchup-off-tick-start",
        ),
        pytest.param(
            "@daily",
            U(2026, 12, 1),
            None,
            U(2026, 12, 5, 12),
            True,
            [U(2026, 12, d) for d in (1, 2, 3, 4)],
            U(2026, 12, 5),
            id="daily-catchup-4-runs",
        ),
        pytest.param(
            "@daily",
            U(2026, 12, 1),
            None,
            U(2026, 12, 5, 12),
            False,
            [U(2026, 12, 4)],
            U(2026, 12, 5),
            id="daily-no-catchup-latest",
        ),
        pytest.param(
            "@monthly",
            U(2026, 1, 1),
            None,
            U(2026, 12, 15),
            True,
            [U(2026, m, 1) for m in range(1, 12)],
            U(2026, 12, 1),
            id="monthly-catchup-11-runs",
        ),
        pytest.param(
            "@monthly",
            U(2026, 1, 1),
            None,
            U(2026, 12, 15),
            False,
            [U(2026, 11, 1)],
            U(2026, 12, 1),
            id="monthly-no-catchup",
        ),
        # endDate: a run whose logical date is endDate still happens, none after it
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            U(2026, 12, 1, 2),
            U(2026, 12, 1, 5, 30),
            True,
            _hours(0, 1, 2),
            None,
            id="end-date-inclusive-catchup",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            U(2026, 12, 1, 1, 30),
            U(2026, 12, 1, 5, 30),
            True,
            _hours(0, 1),
            None,
            id="end-date-off-tick-catchup",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            U(2026, 12, 1, 2),
            U(2026, 12, 1, 2, 30),
            True,
            _hours(0, 1),
            U(2026, 12, 1, 2),
            id="end-date-not-reached-yet",
        ),
        # catchup off past endDate: the latest interval is after endDate, so nothing (as Airflow)
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            U(2026, 12, 1, 2),
            U(2026, 12, 1, 5, 30),
            False,
            [],
            None,
            id="end-date-passed-no-catchup",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            U(2026, 12, 1, 4),
            U(2026, 12, 1, 5, 30),
            False,
            _hours(4),
            None,
            id="end-date-is-latest-no-catchup",
        ),
    ],
)
def test_one_tick_creates(
    schedule: str,
    start: datetime,
    end: datetime | None,
    now: datetime,
    catchup: bool,
    logical_dates: list[datetime],
    next_logical: datetime | None,
) -> None:
    tt = timetable_for(schedule, "UTC")
    runs, nxt = simulate(tt, start=start, end=end, now=now, catchup=catchup)
    assert [r.logical_date for r in runs] == logical_dates
    assert all(r.run_after <= now for r in runs)
    assert_contiguous(runs)
    assert (nxt.logical_date if nxt else None) == next_logical
    if nxt is not None:
        assert nxt.run_after > now


@pytest.mark.parametrize(
    ("catchup", "logical_dates"),
    [
        pytest.param(True, _hours(0, 1, 2, 3, 4), id="catchup-walks-every-interval"),
        pytest.param(False, _hours(4), id="no-catchup-skips-to-latest"),
    ],
)
def test_scheduler_down_for_hours(catchup: bool, logical_dates: list[datetime]) -> None:
    """Synced at 00:00 (next run 00:00 stored), first tick at 05:30."""
    tt = timetable_for("@hourly", "UTC")
    runs, nxt = simulate(
        tt,
        start=U(2026, 12, 1),
        now=U(2026, 12, 1, 5, 30),
        catchup=catchup,
        synced_at=U(2026, 12, 1),
    )
    assert [r.logical_date for r in runs] == logical_dates
    assert nxt is not None
    assert nxt.logical_date == U(2026, 12, 1, 5)


def test_catchup_walks_every_interval_contiguously() -> None:
    tt = timetable_for("*/20 * * * *", "UTC")
    runs = walk(tt, U(2026, 12, 1), U(2026, 12, 2))
    assert len(runs) == 72
    assert_contiguous(runs)
    assert all(r.data_interval_end - r.data_interval_start == timedelta(minutes=20) for r in runs)


def test_catchup_off_resumes_after_its_last_run() -> None:
    """A later tick continues from the stored run, one interval at a time."""
    tt = timetable_for("@hourly", "UTC")
    last = RunInfo(U(2026, 12, 1, 4), U(2026, 12, 1, 4), U(2026, 12, 1, 5), U(2026, 12, 1, 5))
    info = tt.next_run(
        last, now=U(2026, 12, 1, 6, 1), catchup=False, start_date=U(2026, 12, 1), end_date=None
    )
    assert info == RunInfo(
        U(2026, 12, 1, 5), U(2026, 12, 1, 5), U(2026, 12, 1, 6), U(2026, 12, 1, 6)
    )


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        pytest.param(U(2026, 12, 1, 5), U(2026, 12, 1, 5), id="end-equals-logical-date"),
        pytest.param(U(2026, 12, 1, 4, 59), None, id="end-just-before"),
        pytest.param(U(2026, 12, 1, 5, 30), U(2026, 12, 1, 5), id="end-inside-interval"),
    ],
)
def test_end_date_against_next_logical_date(end: datetime, expected: datetime | None) -> None:
    tt = timetable_for("@hourly", "UTC")
    last = RunInfo(U(2026, 12, 1, 4), U(2026, 12, 1, 4), U(2026, 12, 1, 5), U(2026, 12, 1, 5))
    info = tt.next_run(last, now=U(2026, 12, 2), catchup=True, start_date=None, end_date=end)
    assert (info.logical_date if info else None) == expected


def test_schedule_change_realigns_to_new_cron() -> None:
    """After a schedule change the next run starts on a tick of the new cron, as in Airflow.

    Airflow: start = align_to_prev(last interval end). The DAG ran hourly (last
    interval ended 2026-12-01T05:00Z) and is now daily: the next interval is
    [2026-12-01T00:00, 2026-12-02T00:00), not one starting at 05:00 (a time that
    is not a tick of `0 0 * * *`, where Sluice once started it).
    """
    tt = timetable_for("@daily", "UTC")
    last = RunInfo(U(2026, 12, 1, 4), U(2026, 12, 1, 4), U(2026, 12, 1, 5), U(2026, 12, 1, 5))
    info = tt.next_run(
        last, now=U(2026, 12, 1, 6), catchup=True, start_date=U(2026, 11, 1), end_date=None
    )
    assert info == RunInfo(U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 2), U(2026, 12, 2))


def test_start_date_moved_later_is_respected_after_earlier_runs() -> None:
    """A startDate moved past the last run is honoured (catchup on), as in Airflow.

    Airflow: start = max(aligned last end, align_to_next(start_date)). The DAG
    ran daily up to 2026-12-02 and its startDate is moved to 2026-12-10: the next
    run is 2026-12-10 (Sluice once ignored startDate after the first run and
    caught up 12-02 .. 12-09).
    """
    tt = timetable_for("@daily", "UTC")
    last = RunInfo(U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 2), U(2026, 12, 2))
    info = tt.next_run(
        last, now=U(2026, 12, 20), catchup=True, start_date=U(2026, 12, 10), end_date=None
    )
    assert info is not None
    assert info.logical_date == U(2026, 12, 10)


# --- runs_between (backfill): logical dates in [start, end], both ends inclusive -----------


@pytest.mark.parametrize(
    ("schedule", "start", "end", "logical_dates"),
    [
        pytest.param(
            "@hourly",
            U(2026, 12, 1),
            U(2026, 12, 1, 3),
            _hours(0, 1, 2, 3),
            id="both-ends-on-ticks",
        ),
        pytest.param(
            "@hourly",
            U(2026, 12, 1, 0, 30),
            U(2026, 12, 1, 3),
            _hours(1, 2, 3),
            id="start-off-tick",
        ),
        pytest.param(
            "@hourly", U(2026, 12, 1), U(2026, 12, 1, 2, 59), _hours(0, 1, 2), id="end-off-tick"
        ),
        pytest.param("@hourly", U(2026, 12, 1, 2), U(2026, 12, 1, 2), _hours(2), id="single-tick"),
        pytest.param(
            "@hourly", U(2026, 12, 1, 2, 10), U(2026, 12, 1, 2, 50), [], id="no-tick-inside"
        ),
        pytest.param("@hourly", U(2026, 12, 1, 3), U(2026, 12, 1), [], id="start-after-end"),
        pytest.param(
            "@daily",
            U(2026, 11, 29),
            U(2026, 12, 2),
            [U(2026, 11, d) for d in (29, 30)] + [U(2026, 12, d) for d in (1, 2)],
            id="daily-across-month",
        ),
        pytest.param(
            "@weekly",
            U(2026, 12, 1),
            U(2026, 12, 31),
            [U(2026, 12, d) for d in (6, 13, 20, 27)],
            id="weekly-sundays",
        ),
    ],
)
def test_runs_between(
    schedule: str, start: datetime, end: datetime, logical_dates: list[datetime]
) -> None:
    runs = timetable_for(schedule, "UTC").runs_between(start, end)
    assert [r.logical_date for r in runs] == logical_dates
    assert_contiguous(runs)


def test_runs_between_matches_catchup_walk() -> None:
    tt = timetable_for("7 */3 * * *", "Europe/Berlin")
    backfill = tt.runs_between(U(2026, 12, 1), U(2026, 12, 3))
    walked = walk(tt, U(2026, 12, 1), U(2026, 12, 3, 23))
    assert backfill == [r for r in walked if r.logical_date <= U(2026, 12, 3)]


# --- skip_to_latest -----------------------------------------------------------------------


def _hourly(h: int) -> RunInfo:
    return RunInfo(
        U(2026, 12, 1, h), U(2026, 12, 1, h), U(2026, 12, 1, h + 1), U(2026, 12, 1, h + 1)
    )


@pytest.mark.parametrize(
    ("info", "now", "expected"),
    [
        pytest.param(
            _hourly(0), U(2026, 12, 1, 5, 30), _hourly(4), id="old-run-skips-to-latest-complete"
        ),
        pytest.param(_hourly(0), U(2026, 12, 1, 5), _hourly(4), id="now-on-tick-latest-ended-now"),
        pytest.param(_hourly(4), U(2026, 12, 1, 5, 30), _hourly(4), id="already-latest-kept"),
        pytest.param(_hourly(6), U(2026, 12, 1, 5, 30), _hourly(6), id="future-run-kept"),
        pytest.param(
            _hourly(3),
            U(2026, 12, 1, 5) - timedelta(microseconds=1),
            _hourly(3),
            id="just-before-tick",
        ),
    ],
)
def test_skip_to_latest(info: RunInfo, now: datetime, expected: RunInfo) -> None:
    assert timetable_for("@hourly", "UTC").skip_to_latest(info, now=now) == expected


# --- manual runs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "tz", "when", "start", "end"),
    [
        pytest.param(
            "@hourly",
            "UTC",
            U(2026, 12, 1, 5, 30),
            U(2026, 12, 1, 4),
            U(2026, 12, 1, 5),
            id="hourly-mid-interval",
        ),
        pytest.param(
            "@hourly",
            "UTC",
            U(2026, 12, 1, 5),
            U(2026, 12, 1, 4),
            U(2026, 12, 1, 5),
            id="hourly-on-tick",
        ),
        pytest.param(
            "@daily",
            "UTC",
            U(2026, 12, 25, 1),
            U(2026, 12, 24),
            U(2026, 12, 25),
            id="daily-airflow-docstring-example",
        ),
        pytest.param(
            "@daily",
            "Europe/Berlin",
            U(2026, 12, 25, 1),
            U(2026, 12, 23, 23),
            U(2026, 12, 24, 23),
            id="daily-berlin",
        ),
        pytest.param("@monthly", "UTC", U(2026, 3, 15), U(2026, 2, 1), U(2026, 3, 1), id="monthly"),
    ],
)
def test_manual_run_covers_last_complete_interval(
    schedule: str, tz: str, when: datetime, start: datetime, end: datetime
) -> None:
    info = timetable_for(schedule, tz).manual_run(when)
    assert info == RunInfo(when, start, end, when)


@pytest.mark.parametrize("schedule", [None, "@once"], ids=["manual-only", "once"])
def test_manual_run_without_cron_is_an_exact_instant(schedule: str | None) -> None:
    when = datetime(2026, 12, 1, 13, 7, tzinfo=BERLIN)
    info = timetable_for(schedule, "UTC").manual_run(when)
    instant = U(2026, 12, 1, 12, 7)
    assert info == RunInfo(instant, instant, instant, instant)
    assert info.logical_date.tzinfo is UTC


@pytest.mark.parametrize("schedule", [None, "@once", "@daily"], ids=["manual-only", "once", "cron"])
def test_manual_run_rejects_naive_datetime(schedule: str | None) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        timetable_for(schedule, "UTC").manual_run(datetime(2026, 12, 1))


# --- @once and schedule: null ----------------------------------------------------------------


@pytest.mark.parametrize("catchup", [True, False], ids=["catchup", "no-catchup"])
def test_once_runs_once_at_start_date(catchup: bool) -> None:
    tt = timetable_for("@once", "UTC")
    start = U(2026, 12, 1, 10)
    first = tt.next_run(None, now=U(2027, 1, 1), catchup=catchup, start_date=start, end_date=None)
    assert first == RunInfo(start, start, start, start)
    assert (
        tt.next_run(first, now=U(2027, 1, 1), catchup=catchup, start_date=start, end_date=None)
        is None
    )
    runs, nxt = simulate(tt, start=start, now=U(2027, 1, 1), catchup=catchup)
    assert runs == [first]
    assert nxt is None


@pytest.mark.parametrize(
    ("now", "created"),
    [
        pytest.param(U(2026, 12, 1, 9, 59), 0, id="before-start-date"),
        pytest.param(U(2026, 12, 1, 10), 1, id="at-start-date"),
        pytest.param(U(2030, 1, 1), 1, id="years-later"),
    ],
)
def test_once_loop(now: datetime, created: int) -> None:
    runs, _ = simulate(
        timetable_for("@once", "UTC"), start=U(2026, 12, 1, 10), now=now, catchup=True
    )
    assert len(runs) == created


def test_once_without_start_date_never_runs() -> None:
    tt = timetable_for("@once", "UTC")
    assert (
        tt.next_run(None, now=U(2030, 1, 1), catchup=True, start_date=None, end_date=None) is None
    )


@pytest.mark.parametrize("schedule", [None, "@once"], ids=["manual-only", "once"])
def test_no_backfill_ticks_without_cron(schedule: str | None) -> None:
    assert timetable_for(schedule, "UTC").runs_between(U(2026, 1, 1), U(2027, 1, 1)) == []


@pytest.mark.parametrize("catchup", [True, False], ids=["catchup", "no-catchup"])
@pytest.mark.parametrize("start", [None, U(2026, 12, 1)], ids=["no-start", "start"])
def test_schedule_none_never_runs(catchup: bool, start: datetime | None) -> None:
    tt = timetable_for(None, "UTC")
    assert (
        tt.next_run(None, now=U(2030, 1, 1), catchup=catchup, start_date=start, end_date=None)
        is None
    )
    last = RunInfo(U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 1))
    assert (
        tt.next_run(last, now=U(2030, 1, 1), catchup=catchup, start_date=start, end_date=None)
        is None
    )


@pytest.mark.parametrize("schedule", [None, "@once"], ids=["manual-only", "once"])
def test_skip_to_latest_without_cron_keeps_the_run(schedule: str | None) -> None:
    info = RunInfo(U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 1), U(2026, 12, 1))
    assert timetable_for(schedule, "UTC").skip_to_latest(info, now=U(2030, 1, 1)) is info


# --- DST: Europe/Berlin daily at 02:30 ------------------------------------------------------
#
# 2026-03-29: clocks jump 02:00 CET -> 03:00 CEST, so 02:30 does not exist.
# 2026-10-25: clocks fall back 03:00 CEST -> 02:00 CET, so 02:30 happens twice
#             (00:30Z in CEST, then 01:30Z in CET).
# Airflow computes the cron on naive wall-clock time and localises the result
# with fold=1: a missing 02:30 becomes 03:30 CEST (shifted forward by the gap), a
# doubled 02:30 is its second occurrence (observed on Airflow 2.10.5 by
# conformance/cases/schedule/dst-daily-*.yaml); one run per local day either way.

BERLIN_0230 = "30 2 * * *"


def _berlin_runs(path: str, start: datetime, end: datetime) -> list[RunInfo]:
    tt = timetable_for(BERLIN_0230, "Europe/Berlin")
    if path == "runs_between":
        return tt.runs_between(start, end)
    return [r for r in walk(tt, start, end + 2 * DAY) if r.logical_date <= end]


PATHS = pytest.mark.parametrize("path", ["runs_between", "scheduler_loop"])


@PATHS
def test_berlin_spring_forward_one_run_per_local_day(path: str) -> None:
    runs = _berlin_runs(path, U(2026, 3, 26), U(2026, 3, 31, 12))
    assert_contiguous(runs)
    local_days = [r.logical_date.astimezone(BERLIN).date() for r in runs]
    assert local_days == [datetime(2026, 3, d).date() for d in (26, 27, 28, 29, 30, 31)]
    # every day but the transition day keeps 02:30 local
    for run in runs:
        local = run.logical_date.astimezone(BERLIN)
        if local.day != 29:
            assert (local.hour, local.minute) == (2, 30)


@PATHS
def test_berlin_spring_forward_utc_instants(path: str) -> None:
    """The missing 02:30 on 2026-03-29 runs at 03:30 CEST (01:30Z), as in Airflow.

    croniter 7 given an aware datetime moves it to 03:00 CEST = 01:00Z, which
    would make the intervals around it 23h30m and 23h30m instead of Airflow's
    24h and 23h; the timetable works in wall-clock time to avoid that.
    """
    runs = _berlin_runs(path, U(2026, 3, 27), U(2026, 3, 30, 12))
    assert [r.logical_date for r in runs] == [
        U(2026, 3, 27, 1, 30),  # 02:30 CET
        U(2026, 3, 28, 1, 30),  # 02:30 CET
        U(2026, 3, 29, 1, 30),  # 02:30 does not exist: 03:30 CEST as in Airflow
        U(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]
    assert [r.data_interval_end - r.data_interval_start for r in runs] == [
        DAY,
        DAY,
        DAY - HOUR,
        DAY,
    ]


@PATHS
def test_berlin_fall_back_one_run_per_local_day(path: str) -> None:
    """02:30 happens twice on 2026-10-25; the DAG runs once that day, at the second, as Airflow.

    Airflow 2.10.5 (conformance case dst-daily-repeated-hour): logical dates 10-23
    00:30Z, 10-24 00:30Z, 10-25 01:30Z (the second 02:30, CET), 10-26 01:30Z, 10-27
    01:30Z; the interval starting 10-24 is 25 hours long. (Sluice once ran at the
    first 02:30, 10-25 00:30Z, so that run and both intervals beside it differed.)
    """
    runs = _berlin_runs(path, U(2026, 10, 23), U(2026, 10, 27, 12))
    assert_contiguous(runs)
    assert [r.logical_date for r in runs] == [
        U(2026, 10, 23, 0, 30),
        U(2026, 10, 24, 0, 30),
        U(2026, 10, 25, 1, 30),
        U(2026, 10, 26, 1, 30),
        U(2026, 10, 27, 1, 30),
    ]
    assert [r.data_interval_end - r.data_interval_start for r in runs] == [
        DAY,
        DAY + HOUR,
        DAY,
        DAY,
        DAY,
    ]
    local = [r.logical_date.astimezone(BERLIN) for r in runs]
    assert len({t.date() for t in local}) == len(runs)
    assert all(t.strftime("%H:%M") == "02:30" for t in local)
    assert local[2].fold == 1


def test_every_two_hours_fires_at_the_second_of_a_repeated_hour() -> None:
    """`0 */2 * * *` is not hourly: its 02:00 on 2026-10-25 is the second one (01:00Z)."""
    runs = timetable_for("0 */2 * * *", "Europe/Berlin").runs_between(
        U(2026, 10, 24, 20), U(2026, 10, 25, 6)
    )
    assert [r.logical_date for r in runs] == [
        U(2026, 10, 24, 20),
        U(2026, 10, 24, 22),
        U(2026, 10, 25, 1),
        U(2026, 10, 25, 3),
        U(2026, 10, 25, 5),
    ]


# Sluice orders ticks by instant where Airflow compares wall-clock times (docs/semantics.md,
# deviation `dst-instant-order`): a tick shifted by a DST change still counts where
# its instant lies.


@pytest.mark.parametrize(
    ("start", "first"),
    [
        pytest.param(U(2026, 10, 25, 0, 30), U(2026, 10, 25, 1, 30), id="first-of-two-0230s"),
        pytest.param(U(2026, 3, 29, 1), U(2026, 3, 29, 1, 30), id="0300-after-missing-0230"),
        pytest.param(U(2026, 3, 28, 1, 30), U(2026, 3, 28, 1, 30), id="on-tick-day-before"),
    ],
)
def test_first_run_at_dst_is_the_first_tick_at_or_after_start(
    start: datetime, first: datetime
) -> None:
    tt = timetable_for(BERLIN_0230, "Europe/Berlin")
    info = tt.next_run(None, now=U(2027, 1, 1), catchup=True, start_date=start, end_date=None)
    assert info is not None
    assert info.logical_date == first


@pytest.mark.parametrize(
    ("when", "start", "end"),
    [
        pytest.param(
            U(2026, 10, 25, 0, 45),
            U(2026, 10, 23, 0, 30),
            U(2026, 10, 24, 0, 30),
            id="between-the-two-0230s",
        ),
        pytest.param(
            U(2026, 10, 25, 1, 45),
            U(2026, 10, 24, 0, 30),
            U(2026, 10, 25, 1, 30),
            id="after-the-second-0230",
        ),
        pytest.param(
            U(2026, 3, 29, 1, 15),
            U(2026, 3, 27, 1, 30),
            U(2026, 3, 28, 1, 30),
            id="before-the-shifted-tick",
        ),
        pytest.param(
            U(2026, 3, 29, 1, 45),
            U(2026, 3, 28, 1, 30),
            U(2026, 3, 29, 1, 30),
            id="after-the-shifted-tick",
        ),
    ],
)
def test_manual_run_at_dst_covers_the_last_interval_that_ended(
    when: datetime, start: datetime, end: datetime
) -> None:
    info = timetable_for(BERLIN_0230, "Europe/Berlin").manual_run(when)
    assert (info.data_interval_start, info.data_interval_end) == (start, end)


def test_start_date_in_dag_zone_aligns_by_instant() -> None:
    """A startDate given in the DAG's zone is the same instant as in UTC (no wall-clock step)."""
    tt = timetable_for(BERLIN_0230, "Europe/Berlin")
    start = datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN)  # 01:00Z, just after the gap
    info = tt.next_run(None, now=U(2027, 1, 1), catchup=True, start_date=start, end_date=None)
    assert info is not None
    assert info.logical_date == U(2026, 3, 29, 1, 30)


@PATHS
def test_berlin_fall_back_intervals_are_contiguous(path: str) -> None:
    assert_contiguous(_berlin_runs(path, U(2026, 10, 20), U(2026, 10, 30)))


# --- DST: America/New_York hourly -------------------------------------------------------------
#
# 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z).


@pytest.mark.parametrize(
    ("start", "end"),
    [
        pytest.param(U(2026, 3, 8, 3), U(2026, 3, 8, 12), id="spring-forward"),
        pytest.param(U(2026, 11, 1, 3), U(2026, 11, 1, 12), id="fall-back"),
    ],
)
@PATHS
def test_new_york_hourly_across_dst(path: str, start: datetime, end: datetime) -> None:
    tt = timetable_for("@hourly", "America/New_York")
    if path == "runs_between":
        runs = tt.runs_between(start, end)
    else:
        runs = [r for r in walk(tt, start, end + HOUR) if r.logical_date <= end]
    assert_contiguous(runs)
    # one run per real hour: every UTC hour from start to end, each exactly 1h long
    expected = [start + i * HOUR for i in range(int((end - start) / HOUR) + 1)]
    assert [r.logical_date for r in runs] == expected
    assert all(r.data_interval_end - r.data_interval_start == HOUR for r in runs)


def test_new_york_fall_back_runs_the_repeated_hour_twice() -> None:
    """01:00-02:00 local happens twice on 2026-11-01; an hourly DAG runs for both real hours."""
    runs = timetable_for("@hourly", "America/New_York").runs_between(
        U(2026, 11, 1, 4), U(2026, 11, 1, 7)
    )
    local = [r.logical_date.astimezone(NEW_YORK) for r in runs]
    assert [(t.hour, t.fold) for t in local] == [(0, 0), (1, 0), (1, 1), (2, 0)]


def test_new_york_spring_forward_has_no_2am() -> None:
    runs = timetable_for("@hourly", "America/New_York").runs_between(
        U(2026, 3, 8, 5), U(2026, 3, 8, 8)
    )
    assert [r.logical_date.astimezone(NEW_YORK).hour for r in runs] == [0, 1, 3, 4]


# --- layering: the pure domain imports no I/O libraries ----------------------------------------


def test_spec_imports_no_io_libraries() -> None:
    code = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import sluice.spec
        for mod in pkgutil.iter_modules(sluice.spec.__path__):
            importlib.import_module(f"sluice.spec.{mod.name}")
        banned = ("sqlalchemy", "kopf", "kubernetes", "psycopg2", "alembic")
        loaded = sorted(
            m for m in sys.modules if m.split(".")[0] in banned
        )
        spec = sorted(m for m in sys.modules if m.startswith("sluice.spec."))
        print(len(spec))
        print(",".join(loaded))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert int(out[0]) >= 12  # every spec module was imported
    assert out[1] == ""


# --- DST: schedules that fire every hour, where Airflow steps by elapsed time -------------------
#
# docs/semantics.md, deviation `dst-hourly-step`: Airflow 2.10.5 and 3.3.2 leave the schedule
# there and then stop making runs (conformance cases dst-hourly-lord-howe-half-hour and
# dst-hourly-mondays-across-week); Sluice once stalled on the first too, computing a
# previous tick half an hour off and creating the same run again and again.


def test_hourly_across_a_half_hour_dst_change_keeps_to_the_ticks() -> None:
    """Australia/Lord_Howe moves clocks from 02:00 to 02:30 on 2026-10-04 (15:30Z)."""
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    tt = timetable_for("@hourly", "Australia/Lord_Howe")
    runs = walk(tt, U(2026, 10, 3, 13), U(2026, 10, 3, 19))
    assert_contiguous(runs)
    local = [r.logical_date.astimezone(lord_howe).strftime("%H:%M") for r in runs]
    # 02:00 does not exist: it fires when clocks reach 02:30, then 03:00 as usual
    assert local == ["00:00", "01:00", "02:30", "03:00", "04:00", "05:00"]


def test_hourly_on_mondays_goes_from_monday_to_monday_across_dst() -> None:
    runs = walk(
        timetable_for("0 * * * 1", "Europe/Berlin"), U(2026, 10, 19, 20), U(2026, 10, 26, 2)
    )
    assert_contiguous(runs)
    assert [r.logical_date for r in runs[:3]] == [
        U(2026, 10, 19, 20),  # Monday 22:00 CEST
        U(2026, 10, 19, 21),  # Monday 23:00 CEST, until Monday 26 00:00 CET
        U(2026, 10, 25, 23),  # Monday 26 00:00 CET
    ]


def test_every_minute_far_from_dst_stays_fast() -> None:
    """Away from a DST change a tick is one croniter step (no scan)."""
    runs = timetable_for("* * * * *", "Europe/Berlin").runs_between(U(2026, 11, 1), U(2026, 11, 2))
    assert len(runs) == 24 * 60 + 1
