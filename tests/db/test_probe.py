"""The one look for five phases (`probe.py`): whenever a phase would find work, the look
says so, in every state a schedule, retries, failures and a small pool go through."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache, set_paused
from sluice.handlers.store import deactivate_dag
from sluice.scheduler import probe
from sluice.scheduler.critical import queue_schedulable_task_instances
from sluice.scheduler.dispatch import claim_alerts, claim_task_starts
from sluice.scheduler.examine import examine_running_runs
from sluice.scheduler.runs import create_due_runs, start_queued_runs
from sluice.spec.states import RunState, TaskState
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    runs,
    trigger,
)


def _would_find(sessions: sessionmaker[Session], now: Any) -> dict[str, bool]:
    """What each phase's own statements would do now (each in a transaction rolled back)."""
    specs = SpecCache()
    steps = {
        "runs": lambda s: create_due_runs(s, specs, now, 10) + start_queued_runs(s, now, 10) > 0,
        "examine": lambda s: examine_running_runs(s, specs, now, 20, quiet=False).runs > 0,
        "queue": lambda s: bool(
            queue_schedulable_task_instances(s, now, job_id=None, max_tis=512).queued
        ),
        "claims": lambda s: bool(
            claim_task_starts(s, specs, now, job_id=None, executor_name="scripted", limit=512)
        ),
        "alerts": lambda s: bool(claim_alerts(s, now, limit=512)),
    }
    found = {}
    for name, step in steps.items():
        with sessions() as session:
            found[name] = step(session)
            session.rollback()
    return found


def _look(sessions: sessionmaker[Session], now: Any) -> dict[str, bool]:
    with sessions() as session:
        work = probe.look(session, now)
    return {name: getattr(work, name) for name in ("runs", "examine", "queue", "claims", "alerts")}


def test_the_look_says_yes_whenever_a_phase_would_find_work(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock(T0 + timedelta(minutes=30))
    retried = {"retries": 1, "retryDelay": "30s"}
    register(
        sessions,
        manifest(
            "hourly",
            [
                {"name": "a"},
                {"name": "flaky", "dependsOn": ["a"], **retried},
                {"name": "broken", "dependsOn": ["a"]},
                {"name": "b"},
                {"name": "c"},
            ],
            schedule="@hourly",
            startDate="2026-11-30T20:00:00Z",
            maxActiveRuns=2,
        ),
        clock.now,
    )
    register(
        sessions,
        manifest("chain", chain("x", "y"), schedule="@hourly", startDate="2026-11-30T22:00:00Z"),
        clock.now,
    )
    # A run that times out, and one whose DAG is deleted while it runs (ADR 0024).
    register(sessions, manifest("slow", chain("s1", "s2"), dagrunTimeout="2m"), clock.now)
    register(sessions, manifest("doomed", chain("d1", "d2")), clock.now)
    trigger(sessions, "slow", clock.now)
    trigger(sessions, "doomed", clock.now)
    with sessions() as session:
        session.execute(text("UPDATE slot_pool SET slots = 2 WHERE name = 'default'"))
        session.commit()
    executor = ScriptedExecutor(
        {"flaky": [TaskState.FAILED, TaskState.SUCCESS], "broken": [TaskState.FAILED]}
    )
    executor.hold.update({"s1", "d1"})
    # No waker: every phase every tick. The critical section claims one try per batch and
    # leaves the rest on the outbox (ADR 0047), so the claims have work to be looked for.
    loop = make_loop(sessions, executor, clock, dispatch_batch=1)
    seen: dict[str, int] = dict.fromkeys(("runs", "examine", "queue", "claims", "alerts"), 0)
    transaction = loop._transaction

    def checked(name: str, *args: Any) -> Any:
        """Before each of the loop's transactions (so between its phases too, where the
        critical section's tries wait for their claim), the look against the phases."""
        now = clock.now
        look, found = _look(sessions, now), _would_find(sessions, now)
        missed = {step for step, has in found.items() if has and not look[step]}
        assert not missed, f"before {name}: the look missed {missed} ({look}, {found})"
        for step, has in found.items():
            seen[step] += has
        return transaction(name, *args)

    loop._transaction = checked  # type: ignore[method-assign]
    for step in range(100):
        if step == 30:
            with sessions() as session:  # what deleting the DAG object does
                assert deactivate_dag(session, "doomed", None)
                session.commit()
        if step == 50:
            with sessions() as session:  # a paused DAG's runs and tasks wait
                set_paused(session, "chain", True)
                session.commit()
        loop.tick()
        clock.advance(seconds=5)
    # Every phase had work at some point, so each answer was checked when it mattered.
    assert all(seen.values()), seen
    with sessions() as session:  # and the timeout and the deletion were work it saw
        assert [r.state for r in runs(session, "slow")] == [RunState.FAILED]
        assert [r.state for r in runs(session, "doomed")] == [RunState.FAILED]
    clock.advance(hours=2)
    for _ in range(40):  # the next schedules, then everything ends
        loop.tick()
        clock.advance(seconds=5)
    look = _look(sessions, clock.now)
    # At rest nothing is left for phases 2 to 4 (phase 1 waits for the next hour).
    assert {step for step, has in look.items() if has and step != "runs"} == set()
