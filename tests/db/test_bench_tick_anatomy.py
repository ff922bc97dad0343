"""`bench.tick_anatomy` does not rot: a tiny burst through one loop, every statement of
it counted in a phase. No timing is asserted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from bench.common import Postgres
from bench.shapes import Workload


@pytest.mark.db
def test_a_tiny_burst_is_taken_apart_by_phase(tmp_path: Path) -> None:
    from bench import tick_anatomy

    pg = Postgres()
    try:
        explain = tmp_path / "plans.txt"
        a = tick_anatomy.measure(pg, Workload("linear", 2, 3), 16, explain=explain)
    finally:
        pg.stop()
    assert a.ticks >= 3  # a chain of three moves a task a tick
    assert a.tasks_per_s > 0
    phases = a.phases
    assert phases["critical"].statements >= 3  # one section a tick that queued
    assert phases["handover"].statements > 0  # the reports went in
    # Every statement of the burst is in one row of the table (a phase, or outside them).
    assert sum(p.statements for p in phases.values()) == sum(n for _, n in a.statements.values())
    assert a.commits >= a.ticks
    assert "duration:" in explain.read_text()  # Postgres's own plans and times
    # The prepared statements' plans, read back from the loop's connection.
    assert a.plans
    assert all(generic + custom > 0 for generic, custom in a.plans.values())
    # The notices' logger is as it was: later statements log nowhere near the closed file.
    notices = logging.getLogger("sqlalchemy.dialects.postgresql")
    assert notices.handlers == []
    assert notices.propagate
    table = tick_anatomy.render(a)
    for name in tick_anatomy.PHASES:
        assert f"| {name} |" in table


@pytest.mark.db
def test_with_capture_the_status_triggers_run_and_are_explained(tmp_path: Path) -> None:
    from bench import tick_anatomy

    pg = Postgres()
    try:
        explain = tmp_path / "plans.txt"
        tick_anatomy.measure(pg, Workload("linear", 2, 3), 16, explain=explain, capture=True)
    finally:
        pg.stop()
    # The task trigger got past its "is a publisher there" check and inserted, and its
    # plan was written beside the loop's (the triggers' statements are nested ones).
    assert "Query Text: INSERT INTO status_outbox (dag_run_id)" in explain.read_text()
