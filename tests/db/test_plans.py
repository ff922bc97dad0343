"""A transaction's planner settings (`plans.through_indexes`, ADR 0026) travel with its
next statement, in one round trip, and end with the transaction (ADR 0048)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session

from sluice.db import plans
from sluice.db.engine import normalize_url
from sluice.db.models import SlotPool
from sluice.db.prepared import Prepared, sql_of

_SETTINGS = Prepared(
    "SELECT current_setting('enable_seqscan') AS seqscan,"
    " current_setting('enable_sort') AS sort, CAST(:n AS int) AS n"
)


@pytest.fixture
def sent(engine: Engine) -> Iterator[list[str]]:
    """Every query string sent to Postgres, as sent (registered after `make_engine`'s
    listeners, so with the settings in front)."""
    texts: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        texts.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield texts
    event.remove(engine, "before_cursor_execute", record)


def _settings(session: Session) -> tuple[str, str]:
    row = session.execute(
        text("SELECT current_setting('enable_seqscan'), current_setting('enable_sort')")
    ).one()
    return row[0], row[1]


def test_the_settings_go_in_front_of_the_next_statement(engine: Engine, sent: list[str]) -> None:
    with Session(engine) as session:
        _settings(session)  # the transaction has begun
        sent.clear()
        plans.through_indexes(session, in_index_order=True)
        assert sent == []  # nothing sent yet
        assert _settings(session) == ("off", "off")
        assert len(sent) == 1
        assert sent[0].startswith("SELECT set_config('enable_seqscan', 'off', true), ")
        assert sql_of(sent[0]) == sent[0].split("; ", 1)[1]  # as tests count it
        assert _settings(session) == ("off", "off")  # for the rest of the transaction
        assert len(sent) == 2
        assert not sent[1].startswith("SELECT set_config")
        session.commit()
        assert _settings(session) == ("on", "on")  # SET LOCAL: gone with it


def test_a_prepared_statement_runs_under_them(engine: Engine, sent: list[str]) -> None:
    with Session(engine) as session:
        for n in range(8):  # prepared, and past the five custom plans
            plans.through_indexes(session)
            row = _SETTINGS(session, {"n": n}).one()
            assert (row.seqscan, row.sort, row.n) == ("off", "on", n)
            session.commit()
            row = _SETTINGS(session, {"n": n}).one()
            assert (row.seqscan, row.sort) == ("on", "on")
            session.commit()
        assert any(s.startswith(plans.PREFIXES[1] + f"EXECUTE {_SETTINGS.name}(") for s in sent), (
            sent
        )


def test_settings_never_sent_end_with_their_transaction(engine: Engine, sent: list[str]) -> None:
    with Session(engine) as session:
        plans.through_indexes(session, in_index_order=True)
        session.rollback()
        assert _settings(session) == ("on", "on")
        plans.through_indexes(session)
        session.commit()
        assert _settings(session) == ("on", "on")
        savepoint = session.begin_nested()
        plans.through_indexes(session)
        savepoint.rollback()  # as a SET LOCAL in it would be
        assert _settings(session) == ("on", "on")
        session.commit()
        savepoint = session.begin_nested()
        plans.through_indexes(session)
        savepoint.commit()  # released: kept, as a SET LOCAL in it would be
        assert _settings(session) == ("off", "on")
        session.commit()
        assert _settings(session) == ("on", "on")


def test_a_batch_gets_them_on_their_own(engine: Engine, sent: list[str]) -> None:
    with Session(engine) as session:
        session.add(SlotPool(name="a", slots=1))
        session.add(SlotPool(name="b", slots=2))
        session.flush()
        sent.clear()
        plans.through_indexes(session)
        session.execute(
            text("UPDATE slot_pool SET slots = :slots WHERE name = :name"),
            [{"name": "a", "slots": 5}, {"name": "b", "slots": 6}],
        )
        assert _settings(session) == ("off", "on")
        assert not any(s.startswith("SELECT set_config(") and "; " in s for s in sent), sent
        session.commit()
        rows = session.execute(text("SELECT name, slots FROM slot_pool"))
        assert {row.name: row.slots for row in rows} == {
            "default": 128,
            "a": 5,
            "b": 6,
        }


def test_another_engine_gets_them_at_once(db_url: str) -> None:
    engine = create_engine(normalize_url(db_url))
    try:
        with Session(engine) as session:
            plans.through_indexes(session, in_index_order=True)
            assert _settings(session) == ("off", "off")
            session.commit()
            assert _settings(session) == ("on", "on")
    finally:
        engine.dispose()
