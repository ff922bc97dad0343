"""`sluice tasks clear|mark` against a real Postgres: what they print, change and refuse."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from sluice.cli import app
from sluice.db.models import DagRun, TaskInstance
from sluice.spec.states import TaskState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)


@pytest.fixture(autouse=True)
def _no_ambient_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_DATABASE_URL", raising=False)


def sluice(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--database-url", db_url])


@pytest.fixture
def failed_run(sessions: sessionmaker[Session]) -> tuple[str, ScriptedExecutor, FakeClock]:
    """Run `etl` of extract -> load where extract fails: the run failed, load upstream_failed.
    Returns the run id, the executor and the clock, to run the loop again."""
    clock = FakeClock()
    register(sessions, manifest("etl", chain("extract", "load"), schedule=None), clock.now)
    run_pk = trigger(sessions, "etl", clock.now)
    executor = ScriptedExecutor({"extract": [TaskState.FAILED]})
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions() as session:
        run = session.get_one(DagRun, run_pk)
        assert run.state == "failed"
        return run.run_id, executor, clock


def _states(sessions: sessionmaker[Session]) -> dict[str, tuple[str, int]]:
    with sessions() as session:
        return {
            ti.task_id: (ti.state, ti.try_number)
            for ti in session.execute(select(TaskInstance)).scalars()
        }


def test_clear_dry_run_prints_what_it_would_clear_and_changes_nothing(
    db_url: str, sessions: sessionmaker[Session], failed_run: tuple[str, object, object]
) -> None:
    run_id = failed_run[0]
    result = sluice(db_url, "tasks", "clear", "etl", "--run", run_id, "-t", "extract", "-d",
                    "--dry-run")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "extract" in result.stdout
    assert "load" in result.stdout
    assert "upstream_failed" in result.stdout
    assert "dry run: nothing changed" in result.stdout
    assert _states(sessions) == {"extract": ("failed", 1), "load": ("upstream_failed", 0)}


def test_clear_then_the_run_reruns_and_dags_runs_shows_every_try(
    db_url: str,
    sessions: sessionmaker[Session],
    failed_run: tuple[str, ScriptedExecutor, FakeClock],
) -> None:
    run_id, executor, clock = failed_run
    result = sluice(db_url, "tasks", "clear", "etl", "--run", run_id, "--only-failed", "--yes")
    assert result.exit_code == 0, result.output
    assert f"run {run_id}: cleared 2; the run is queued" in result.stdout
    assert _states(sessions) == {"extract": ("none", 1), "load": ("none", 0)}
    run_until_idle(make_loop(sessions, executor, clock))
    assert _states(sessions) == {"extract": ("success", 2), "load": ("success", 1)}
    shown = sluice(db_url, "dags", "runs", "etl", "--run", run_id)
    assert shown.exit_code == 0, shown.output
    assert "extract try 1 (scripted): failed: -" in shown.stdout  # kept across the clear
    assert "extract try 2 (scripted): success: -" in shown.stdout


def test_mark_success_resumes_the_failed_downstream(
    db_url: str,
    sessions: sessionmaker[Session],
    failed_run: tuple[str, ScriptedExecutor, FakeClock],
) -> None:
    run_id, executor, clock = failed_run
    result = sluice(db_url, "tasks", "mark", "etl", "success", "--run", run_id,
                    "--task", "extract", "--yes")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (
        f"run {run_id}: marked 1 task instance(s) success, cleared 1; the run is queued"
        in result.stdout
    )
    run_until_idle(make_loop(sessions, executor, clock))
    assert _states(sessions) == {"extract": ("success", 1), "load": ("success", 1)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["clear", "nope", "--run", "r"], "no DAG named 'nope'"),
        (["clear", "etl", "--run", "r"], "DAG 'etl' has no run 'r'"),
        (["clear", "etl", "--run", "{run}", "-t", "x"], "--task 'x': DAG 'etl' has no such task"),
        (["mark", "etl", "done", "--run", "{run}", "-t", "load"], "STATE 'done'"),
        (["mark", "etl", "success", "--run", "{run}"], "--task: name at least one task"),
    ],
)
def test_bad_input_exits_1_naming_what_to_fix(
    db_url: str,
    sessions: sessionmaker[Session],
    failed_run: tuple[str, object, object],
    args: list[str],
    message: str,
) -> None:
    result = sluice(db_url, "tasks", *[a.format(run=failed_run[0]) for a in args])
    assert result.exit_code == 1, result.output
    assert message in result.stderr
    assert _states(sessions) == {"extract": ("failed", 1), "load": ("upstream_failed", 0)}


def test_nothing_to_clear_says_so(
    db_url: str, sessions: sessionmaker[Session], failed_run: tuple[str, object, object]
) -> None:
    sluice(db_url, "tasks", "mark", "etl", "success", "--run", failed_run[0], "-t", "extract",
           "-t", "load", "--yes")  # fmt: skip
    result = sluice(db_url, "tasks", "clear", "etl", "--run", failed_run[0], "--only-failed")
    assert result.exit_code == 0, result.output
    assert "nothing to clear" in result.stdout
