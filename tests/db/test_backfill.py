"""Backfill: the same machinery over given logical dates, under its own maxActiveRuns."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache, clear_schedule
from sluice.db.models import TaskInstance
from sluice.scheduler.backfill import BackfillError, create_backfill
from sluice.spec.states import Reprocess, RunState, RunType, TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    runs,
)

DAILY = {"schedule": "@daily", "startDate": "2026-11-01T00:00:00Z", "catchup": False}


def _backfill(
    sessions: sessionmaker[Session], dag: str, days: int, end_days: int = 1, **kw: object
) -> object:
    with sessions() as session:
        plan = create_backfill(
            session,
            SpecCache(),
            dag,
            T0 - timedelta(days=days),
            T0 - timedelta(days=end_days),
            T0,
            **kw,  # type: ignore[arg-type]
        )
        session.commit()
        return plan


def _only_backfill_runs(sessions: sessionmaker[Session], dag_id: str) -> None:
    with sessions() as session:
        clear_schedule(session, dag_id)
        session.commit()


def test_backfill_creates_a_run_per_date_and_respects_its_limit(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("bf", chain("a", "b"), **DAILY), clock.now)
    _only_backfill_runs(sessions, "bf")
    plan = _backfill(sessions, "bf", 5, max_active_runs=2)
    assert len(plan.created) == 5  # type: ignore[attr-defined]
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    for _ in range(4):
        loop.tick()
    with sessions() as session:
        states = [r.state for r in runs(session, "bf")]
    assert states.count(RunState.RUNNING) == 2
    assert states.count(RunState.QUEUED) == 3
    executor.hold.clear()
    run_until_idle(loop)
    with sessions() as session:
        done = runs(session, "bf")
    assert [r.state for r in done] == [RunState.SUCCESS] * 5
    assert {r.run_type for r in done} == {RunType.BACKFILL}
    assert [r.logical_date for r in done] == [T0 - timedelta(days=d) for d in range(5, 0, -1)]


def test_rerun_failed_clears_failed_tasks_and_skips_the_rest(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    register(sessions, manifest("rr", chain("a", "b"), **DAILY), clock.now)
    _only_backfill_runs(sessions, "rr")
    _backfill(sessions, "rr", 2)
    # The first date fails (a fails, b upstream_failed), the second succeeds.
    executor = ScriptedExecutor({"a": [TaskState.FAILED]})
    executor.outcomes["a"] = [TaskState.FAILED]
    loop = make_loop(sessions, executor, clock, runs_examined_per_tick=1)
    run_until_idle(loop)
    with sessions() as session:
        before = {r.logical_date: r.state for r in runs(session, "rr") if r.run_type == "backfill"}
    assert sorted(before.values()) == ["failed", "failed"]  # every try 1 of `a` fails

    plain = _backfill(sessions, "rr", 2)
    assert len(plain.skipped) == 2  # type: ignore[attr-defined]
    rerun = _backfill(sessions, "rr", 2, reprocess=Reprocess.FAILED)
    assert len(rerun.rerun) == 2  # type: ignore[attr-defined]
    run_until_idle(loop)  # try 2 of `a` succeeds
    with sessions() as session:
        after = runs(session, "rr")
        assert [r.state for r in after if r.run_type == "backfill"] == [RunState.SUCCESS] * 2
        assert all(r.tasks_done == 2 for r in after)


def _tries(sessions: sessionmaker[Session], dag_id: str) -> dict[int, dict[str, tuple[str, int]]]:
    """Each run's (by days before T0) tasks' state and try number."""
    with sessions() as session:
        return {
            (T0 - run.logical_date).days: {
                ti.task_id: (ti.state, ti.try_number)
                for ti in session.execute(
                    select(TaskInstance).where(TaskInstance.dag_run_id == run.id)
                ).scalars()
            }
            for run in runs(session, dag_id)
        }


def test_reprocess_failed_then_completed_runs_ended_runs_again(
    sessions: sessionmaker[Session],
) -> None:
    """Day -2's run fails (b's try 1), day -1's succeeds; `failed` runs b of day -2 again,
    `completed` then every task of both, each under the new backfill."""
    clock = FakeClock()
    register(sessions, manifest("rp", chain("a", "b"), **DAILY), clock.now)
    _only_backfill_runs(sessions, "rp")
    executor = ScriptedExecutor({"b": [TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    _backfill(sessions, "rp", 2, end_days=2)
    run_until_idle(loop)
    executor.outcomes.clear()
    _backfill(sessions, "rp", 1)
    run_until_idle(loop)
    assert _tries(sessions, "rp") == {
        2: {"a": ("success", 1), "b": ("failed", 1)},
        1: {"a": ("success", 1), "b": ("success", 1)},
    }

    kept = _backfill(sessions, "rp", 2, reprocess=Reprocess.NONE)
    assert (kept.created, kept.rerun, len(kept.skipped)) == ([], [], 2)  # type: ignore[attr-defined]

    failed = _backfill(sessions, "rp", 2, reprocess=Reprocess.FAILED)
    assert len(failed.rerun) == 1  # type: ignore[attr-defined]
    assert len(failed.skipped) == 1  # type: ignore[attr-defined]
    run_until_idle(loop)
    assert _tries(sessions, "rp") == {
        2: {"a": ("success", 1), "b": ("success", 2)},
        1: {"a": ("success", 1), "b": ("success", 1)},
    }

    completed = _backfill(sessions, "rp", 2, reprocess=Reprocess.COMPLETED)
    assert len(completed.rerun) == 2  # type: ignore[attr-defined]
    with sessions() as session:
        assert {r.state for r in runs(session, "rp")} == {RunState.QUEUED}
        assert {r.backfill_id for r in runs(session, "rp")} == {completed.backfill_id}  # type: ignore[attr-defined]
    run_until_idle(loop)
    assert _tries(sessions, "rp") == {
        2: {"a": ("success", 2), "b": ("success", 3)},
        1: {"a": ("success", 2), "b": ("success", 2)},
    }


def test_reprocess_never_takes_a_run_that_has_not_ended(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    register(sessions, manifest("rq", chain("a"), **DAILY), clock.now)
    _only_backfill_runs(sessions, "rq")
    _backfill(sessions, "rq", 1)  # queued: no replica ran it
    for reprocess in Reprocess:
        plan = _backfill(sessions, "rq", 1, reprocess=reprocess)
        assert plan.rerun == []  # type: ignore[attr-defined]
        assert [why for _, why in plan.skipped] == [  # type: ignore[attr-defined]
            f"run backfill__{(T0 - timedelta(days=1)).isoformat()} exists (queued)"
        ]


@pytest.mark.parametrize(
    ("dag", "start", "end", "message"),
    [
        ("nope", -3, -1, "is not registered"),
        ("bfe", -1, -3, "is after --end"),
        ("manual", -3, -1, "needs a cron schedule"),
        ("bfe", -3, -3, "no logical dates"),
    ],
)
def test_backfill_errors_say_what_to_fix(
    sessions: sessionmaker[Session], dag: str, start: float, end: float, message: str
) -> None:
    register(sessions, manifest("bfe", chain("a"), **DAILY))
    register(sessions, manifest("manual", chain("a"), schedule=None))
    with sessions() as session, pytest.raises(BackfillError, match=message):
        create_backfill(
            session,
            SpecCache(),
            dag,
            T0 + timedelta(days=start, hours=1),
            T0 + timedelta(days=end, hours=2),
            T0,
        )


def test_backfill_takes_only_intervals_that_have_ended(sessions: sessionmaker[Session]) -> None:
    """As Airflow 3's backfill: a tick whose data interval has not ended by `now` gets no
    run (the interval of the day before T0 ends at T0; the day of T0 ends a day later)."""
    register(sessions, manifest("bff", chain("a"), **DAILY))
    _only_backfill_runs(sessions, "bff")
    with sessions() as session:
        plan = create_backfill(
            session, SpecCache(), "bff", T0 - timedelta(days=2), T0 + timedelta(days=2), T0
        )
        session.commit()
        created = [r.logical_date for r in runs(session, "bff")]
    assert created == [T0 - timedelta(days=2), T0 - timedelta(days=1)]
    assert [date for date, _ in plan.skipped] == [
        (T0 + timedelta(days=d)).isoformat() for d in (0, 1, 2)
    ]
    assert "has not ended" in plan.skipped[0][1]
    with sessions() as session, pytest.raises(BackfillError, match=r"has ended yet.*earlier --end"):
        create_backfill(session, SpecCache(), "bff", T0, T0 + timedelta(days=2), T0)
