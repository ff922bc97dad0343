"""The loop's error log in an outage: one traceback per series of the same error."""

from __future__ import annotations

import structlog
from sqlalchemy import create_engine
from sqlalchemy.orm import Session, sessionmaker

from sluice.executors.noop import NoopExecutor
from tests.support import FakeClock, make_loop


def test_a_refused_database_logs_one_traceback_then_one_line_per_tick(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    loop = make_loop(sessions, NoopExecutor(), clock)  # registered on the test database
    # Then the database goes: nothing listens on port 1, every connection is refused.
    engine = create_engine("postgresql+psycopg2://sluice@127.0.0.1:1/sluice")
    loop.sessions = sessionmaker(bind=engine)
    with structlog.testing.capture_logs() as logs:
        reports = [loop.tick() for _ in range(3)]
    assert all(r.errors and r.errors[0].startswith("connect: ") for r in reports)
    failures = [e for e in logs if e["event"].startswith("phase failed")]
    assert [(e["event"], e.get("repeated")) for e in failures] == [
        ("phase failed", None),
        ("phase failed again", 1),
        ("phase failed again", 2),
    ]
    assert "exc_info" in failures[0]
    assert all("exc_info" not in e for e in failures[1:])
    # Back: a good tick ends the series, and the next failure has its traceback again.
    loop.sessions = sessions
    assert not loop.tick().errors
    loop.sessions = sessionmaker(bind=engine)
    with structlog.testing.capture_logs() as logs:
        loop.tick()
    again = [e for e in logs if e["event"].startswith("phase failed")]
    assert [e["event"] for e in again] == ["phase failed"]
    engine.dispose()
