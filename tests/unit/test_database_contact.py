"""Silence counted over the time a replica could reach the database (ADR 0029)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sluice.scheduler.contact import DatabaseContact

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def outage(contact: DatabaseContact, start: float, end: float) -> None:
    """Answers until `start`, fails, answers again at `end`."""
    contact.answered(at(start))
    contact.failed()
    contact.answered(at(end))


def test_without_an_outage_silence_is_plain_time() -> None:
    contact = DatabaseContact(T0, longest=300)
    contact.answered(at(50))
    assert contact.silent_before(at(100), 30) == at(70)


def test_an_outage_does_not_count() -> None:
    contact = DatabaseContact(T0, longest=300)
    outage(contact, 100, 430)  # 330 s without the database
    # 300 s of contact back from 450: 20 s after the outage, 280 s before it.
    assert contact.silent_before(at(450), 300) == at(-180)
    # A threshold the time since the outage covers is not moved.
    assert contact.silent_before(at(450), 10) == at(440)


def test_several_outages_each_do_not_count() -> None:
    contact = DatabaseContact(T0, longest=300)
    outage(contact, 100, 110)
    outage(contact, 200, 260)
    # Back from 300: 40 s, skip 60, 90 s, skip 10, then the remaining 20 s.
    assert contact.silent_before(at(300), 150) == at(80)


def test_an_outage_under_way_ends_now() -> None:
    """The first transaction after an outage judges before it has committed."""
    contact = DatabaseContact(T0, longest=300)
    contact.answered(at(100))
    contact.failed()
    assert contact.silent_before(at(430), 60) == at(40)


def test_a_failure_that_follows_an_answer_at_once_costs_nothing_before_it() -> None:
    contact = DatabaseContact(T0, longest=60)
    contact.answered(at(100))
    contact.failed()
    contact.answered(at(101))
    assert contact.silent_before(at(200), 60) == at(140)
    assert contact.silent_before(at(120), 60) == at(59)


def test_outages_that_can_no_longer_matter_are_forgotten() -> None:
    contact = DatabaseContact(T0, longest=60)
    outage(contact, 0, 100)
    outage(contact, 500, 510)
    # The first outage ended 410 s (of contact: 400 s) before the second: past `longest`.
    assert contact._outages == [(at(500), at(510))]
    assert contact.silent_before(at(520), 60) == at(450)


def test_time_the_task_api_could_not_write_heartbeats_is_no_tries_silence() -> None:
    """A Postgres shutting down keeps the loop's open session and refuses the task API's
    new ones: the loop never sees an outage, but heartbeats sent meanwhile were lost. For
    tries (not replicas) that span does not count (the cluster chaos run, ADR 0035)."""
    from sluice.scheduler.contact import HeartbeatRecording

    recording = HeartbeatRecording(T0, longest=300)
    contact = DatabaseContact(T0, longest=300, recording=recording)
    recording.report(True, at(100))
    recording.report(False, at(105))  # from the last write that worked ...
    recording.report(False, at(120))
    contact.answered(at(125))  # the loop's own session still answers
    # Under way: nothing after the last good write counts for tries.
    assert contact.silent_before(at(125), 20, tries=True) == at(80)
    assert contact.silent_before(at(125), 20) == at(105)  # replicas: plain time
    recording.report(True, at(130))  # ... to the next one
    assert contact.silent_before(at(140), 20, tries=True) == at(90)
    assert contact.silent_before(at(140), 5, tries=True) == at(135)
    # Overlapping an outage of the loop's own: one span, not counted twice.
    outage(contact, 110, 150)
    assert contact.silent_before(at(160), 20, tries=True) == at(90)


def test_writes_that_keep_working_leave_no_gap() -> None:
    from sluice.scheduler.contact import HeartbeatRecording

    recording = HeartbeatRecording(T0, longest=60)
    contact = DatabaseContact(T0, longest=60, recording=recording)
    for second in range(0, 100, 2):
        recording.report(True, at(second))
    assert recording.gaps(at(100)) == []
    assert contact.silent_before(at(100), 20, tries=True) == at(80)
