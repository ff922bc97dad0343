"""Hot statements are prepared once per connection, and behave exactly as plain text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from sluice.db.engine import make_engine
from sluice.db.models import SlotPool
from sluice.db.prepared import Prepared
from tests.support import count_queries

_POOLS = Prepared(
    """
    SELECT name, slots, CAST(:extra AS int[]) AS extra FROM slot_pool
    WHERE slots >= :least AND name = ANY(:names) ORDER BY name
    """
)
_NAMES = "SELECT name FROM pg_prepared_statements"


def _run(session: Session, least: int = 0) -> list[tuple[str, int]]:
    rows = _POOLS(session, {"least": least, "names": ["default", "p"], "extra": [None]})
    return [(row.name, row.slots) for row in rows]


@pytest.fixture
def plain(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url, prepare_statements=False)
    yield engine
    engine.dispose()


def test_a_statement_is_prepared_once_per_connection(engine: Engine) -> None:
    with Session(engine) as session:
        session.add(SlotPool(name="p", slots=3))
        session.flush()
        assert _run(session) == [("default", 128), ("p", 3)]
        assert _POOLS.name in session.execute(text(_NAMES)).scalars().all()
        sent: list[str] = []
        event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
        with count_queries(engine) as statements:
            assert _run(session, least=10) == [("default", 128)]
        assert statements == [str(_POOLS.text)]  # as tests count it: the SQL it runs
        assert len(sent) == 1
        assert sent[0].startswith(f"EXECUTE {_POOLS.name}(CAST(")
        session.commit()


def test_a_rollback_keeps_the_statement_and_a_new_connection_prepares_it_again(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        _run(session)
        session.rollback()  # PREPARE is not transactional: the name stays prepared
        assert _run(session) == [("default", 128)]
        session.connection().invalidate()  # as after a Postgres restart
        session.rollback()
        assert _run(session) == [("default", 128)]
        assert session.execute(text(_NAMES)).scalars().all() == [_POOLS.name]


def test_a_statement_deallocated_behind_its_back_is_prepared_again_next_time(
    engine: Engine,
) -> None:
    with Session(engine) as session:
        _run(session)
        session.execute(text("DEALLOCATE ALL"))  # as a pooler resetting the server connection
        with pytest.raises(DBAPIError, match="does not exist"):
            _run(session)
        session.rollback()
        assert _run(session) == [("default", 128)]


def test_turned_off_the_same_sql_runs_as_plain_text(plain: Engine) -> None:
    with Session(plain) as session:
        assert _run(session) == [("default", 128)]
        assert session.execute(text(_NAMES)).scalars().all() == []


@pytest.mark.parametrize("prepare", [True, False], ids=["prepared", "plain"])
def test_explain_gives_the_plan_the_statement_runs_with(
    engine: Engine, plain: Engine, prepare: bool
) -> None:
    """Prepared: the plan of its `EXECUTE` (a generic one when forced, with `$n` in
    place of the arguments), the statement not run; plain: the text's own plan."""
    params = {"least": 0, "names": ["default"], "extra": [None]}
    with Session(engine if prepare else plain) as session:
        session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        plan = _POOLS.explain(session, params)
        assert "slot_pool" in plan, plan
        assert ("slots >= $2" in plan) is prepare, plan
        names = session.execute(text(_NAMES)).scalars().all()
        assert names == ([_POOLS.name] if prepare else [])
        assert _run(session) == [("default", 128)]  # and it runs after, as prepared
