"""`sluice scheduler` waits out a database it cannot reach while it starts (issue 11).

A Postgres restart during a replica's start (its `db upgrade`, `--dags` sync or
registration) used to end the replica; the chaos checker counts that as a replica
exiting by itself.
"""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from sluice.cli.scheduler import until_reachable


def _unreachable() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))


def test_a_step_is_tried_again_until_the_database_answers() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def work() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise _unreachable()

    assert until_reachable("syncing --dags", work, lambda: False, sleep=slept.append)
    assert len(calls) == 3
    assert sum(slept) == pytest.approx(0.5 + 1.0)  # growing pauses


def test_a_stop_request_ends_the_wait() -> None:
    stop = {"now": False}

    def work() -> None:
        stop["now"] = True  # SIGTERM arrives while the database is down
        raise _unreachable()

    assert not until_reachable("registering the replica", work, lambda: stop["now"], sleep=print)


def test_other_errors_are_not_waited_out() -> None:
    def work() -> None:
        raise ValueError("a manifest that does not parse")

    with pytest.raises(ValueError, match="does not parse"):
        until_reachable("syncing --dags", work, lambda: False, sleep=lambda _: None)
