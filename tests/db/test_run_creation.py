"""Phase 1: the runs the schedule calls for, exactly (invariant 4), and maxActiveRuns."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache, set_paused
from sluice.db.models import DagRun
from sluice.scheduler import runs as runs_module
from sluice.scheduler.runs import create_due_runs, start_queued_runs
from sluice.scheduler.triggers import TriggerError, trigger_run
from sluice.spec.states import RunState
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

HOURLY = {"schedule": "@hourly", "startDate": "2026-12-01T00:00:00Z"}


def _create(sessions: sessionmaker[Session], now_hours: float, limit: int = 100) -> int:
    with sessions() as session:
        created = create_due_runs(session, SpecCache(), T0 + timedelta(hours=now_hours), limit)
        session.commit()
        return created


def test_catchup_creates_one_run_per_elapsed_interval(sessions: sessionmaker[Session]) -> None:
    register(sessions, manifest("c", chain("a"), catchup=True, **HOURLY))
    assert _create(sessions, 5.5) == 5
    with sessions() as session:
        dates = [r.logical_date for r in runs(session, "c")]
    assert dates == [T0 + timedelta(hours=h) for h in range(5)]
    assert _create(sessions, 5.9) == 0  # the 05:00 interval has not ended yet
    assert _create(sessions, 6.0) == 1


def test_without_catchup_only_the_latest_interval_runs(sessions: sessionmaker[Session]) -> None:
    register(sessions, manifest("nc", chain("a"), catchup=False, **HOURLY))
    assert _create(sessions, 5.5) == 1
    with sessions() as session:
        (run,) = runs(session, "nc")
    assert run.logical_date == T0 + timedelta(hours=4)
    assert run.data_interval_end == T0 + timedelta(hours=5)


def test_unpause_after_a_long_pause_skips_ahead_without_catchup(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, manifest("p", chain("a"), catchup=False, **HOURLY), T0)
    with sessions() as session:
        set_paused(session, "p", True)
        session.commit()
    assert _create(sessions, 10.5) == 0
    with sessions() as session:
        set_paused(session, "p", False)
        session.commit()
    assert _create(sessions, 10.5) == 1
    with sessions() as session:
        assert [r.logical_date for r in runs(session, "p")] == [T0 + timedelta(hours=9)]


def test_end_date_stops_runs(sessions: sessionmaker[Session]) -> None:
    register(
        sessions,
        manifest("e", chain("a"), catchup=True, endDate="2026-12-01T02:00:00Z", **HOURLY),
    )
    assert _create(sessions, 24) == 3  # 00:00, 01:00, 02:00: the end date is inclusive


def test_once_runs_once(sessions: sessionmaker[Session]) -> None:
    register(
        sessions, manifest("o", chain("a"), schedule="@once", startDate="2026-12-01T01:00:00Z")
    )
    assert _create(sessions, 0.5) == 0
    assert _create(sessions, 1) == 1
    assert _create(sessions, 48) == 0


def test_a_second_replica_with_stale_state_cannot_duplicate_a_run(
    sessions: sessionmaker[Session],
) -> None:
    m = manifest("dup", chain("a"), catchup=True, **HOURLY)
    register(sessions, m)
    assert _create(sessions, 1) == 1
    # Reset the DAG's next-run pointer as a replica with an old view would have it.
    register(sessions, m, T0)
    with sessions() as session:
        from sluice.db.models import Dag

        dag = session.get_one(Dag, "dup")
        dag.next_logical_date = T0
        dag.next_data_interval_start = T0
        dag.next_data_interval_end = T0 + timedelta(hours=1)
        dag.next_run_after = T0 + timedelta(hours=1)
        session.commit()
    _create(sessions, 1)
    with sessions() as session:
        count = session.execute(select(func.count()).select_from(DagRun)).scalar_one()
    assert count == 1


def test_runs_start_only_under_max_active_runs(sessions: sessionmaker[Session]) -> None:
    register(sessions, manifest("m", chain("a"), catchup=True, maxActiveRuns=2, **HOURLY))
    assert _create(sessions, 6) == 2  # creation stops at the limit too
    with sessions() as session:
        assert start_queued_runs(session, T0 + timedelta(hours=6), 10) == 2
        session.commit()
        assert start_queued_runs(session, T0 + timedelta(hours=6), 10) == 0
        states = [r.state for r in runs(session, "m")]
    assert states == [RunState.RUNNING, RunState.RUNNING]


def test_max_active_runs_one_runs_intervals_in_order(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock(T0 + timedelta(hours=3))
    register(sessions, manifest("seq", chain("a", "b"), catchup=True, maxActiveRuns=1, **HOURLY))
    executor = ScriptedExecutor()
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions() as session:
        done = runs(session, "seq")
    assert [r.state for r in done] == [RunState.SUCCESS] * 3
    # Never two runs at once: each run started after the previous one ended.
    for earlier, later in itertools.pairwise(done):
        assert earlier.end_date is not None
        assert later.start_date is not None
        assert later.start_date >= earlier.end_date
    assert [(t.run_id[-25:], t.task_id) for t in executor.started][:2] == [
        ("2026-12-01T00:00:00+00:00", "a"),
        ("2026-12-01T00:00:00+00:00", "b"),
    ]


def test_paused_dag_gets_no_runs_and_its_running_runs_wait(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    register(sessions, manifest("pz", chain("a", "b"), **HOURLY), clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    loop.tick()
    loop.tick()
    with sessions() as session:
        set_paused(session, "pz", True)
        session.commit()
    executor.hold.clear()
    run_until_idle(loop)
    with sessions() as session:
        (run,) = runs(session, "pz")
        assert run.state == RunState.RUNNING  # a finished; b is not scheduled while paused
        set_paused(session, "pz", False)
        session.commit()
    run_until_idle(loop)
    with sessions() as session:
        assert runs(session, "pz")[0].state == RunState.SUCCESS


def test_a_dag_whose_spec_cannot_be_loaded_does_not_stop_the_others(
    sessions: sessionmaker[Session],
) -> None:
    for name in ("a-broken", "b-fine"):
        register(sessions, manifest(name, chain("t"), catchup=True, **HOURLY))
    with sessions() as session:
        session.execute(
            text("UPDATE dag_version SET spec = '{\"tasks\": 1}' WHERE dag_id = 'a-broken'")
        )
        session.commit()
    assert _create(sessions, now_hours=2) == 2  # b-fine's two hours; a-broken is logged
    with sessions() as session:
        assert [r.dag_id for r in runs(session, "b-fine")] == ["b-fine", "b-fine"]
        assert runs(session, "a-broken") == []


def _unloadable(sessions: sessionmaker[Session], *dag_ids: str) -> None:
    with sessions() as session:
        session.execute(
            text("UPDATE dag_version SET spec = '{\"tasks\": 1}' WHERE dag_id = ANY(:ids)"),
            {"ids": list(dag_ids)},
        )
        session.commit()


def _broken(sessions: sessionmaker[Session]) -> dict[str, str | None]:
    with sessions() as session:
        return dict(
            session.execute(text("SELECT dag_id, broken_reason FROM dag ORDER BY dag_id")).all()
        )


def test_unloadable_dags_are_marked_broken_and_do_not_hold_back_a_healthy_one(
    sessions: sessionmaker[Session],
) -> None:
    """Twelve unloadable DAGs come first in the due order, ahead of a healthy one, and the
    tick creates at most 10 runs: they must not take its place, on this tick or any other."""
    names = [f"a-broken-{i:02}" for i in range(12)]
    for name in [*names, "z-fine"]:
        register(sessions, manifest(name, chain("t"), **HOURLY))
    _unloadable(sessions, *names)
    clock = FakeClock(T0 + timedelta(hours=1, minutes=1))
    loop = make_loop(sessions, ScriptedExecutor(), clock, runs_created_per_tick=10)
    report = loop.tick()
    assert not report.errors, report.errors
    with sessions() as session:
        assert [r.dag_id for r in runs(session, "z-fine")] == ["z-fine"]
        assert all(runs(session, name) == [] for name in names)
    broken = _broken(sessions)
    assert broken.pop("z-fine") is None
    assert sorted(broken) == names
    for name, reason in broken.items():
        assert reason == (
            f"DAG {name!r} version 1 (dag_version.id {names.index(name) + 1}) cannot be loaded: "
            "spec.tasks: must be a list (e.g. [a, b]), got 1; apply the DAG's manifest again "
            "to store a valid version"
        )
    # Broken DAGs are out of the due list: a later tick does not look at them again.
    clock.advance(hours=1)
    with sessions() as session:
        due = session.execute(
            text("SELECT dag_id FROM dag WHERE next_run_after <= :now AND broken_reason IS NULL"),
            {"now": clock.now},
        ).scalars()
        assert list(due) == ["z-fine"]


def test_a_stored_cron_that_never_fires_marks_its_dag_broken_not_the_tick(
    sessions: sessionmaker[Session],
) -> None:
    """A version stored before such crons were refused ('0 0 30 2 *': croniter finds no
    date and raises) makes its DAG broken, naming the field, and the other DAGs' runs
    are created: the run phase does not fail on it every tick."""
    for name in ("a-never", "z-fine"):
        register(sessions, manifest(name, chain("t"), **HOURLY))
    with sessions() as session:
        session.execute(
            text(
                "UPDATE dag_version SET spec = jsonb_set(spec, '{schedule}', '\"0 0 30 2 *\"')"
                " WHERE dag_id = 'a-never'"
            )
        )
        session.commit()
    loop = make_loop(sessions, ScriptedExecutor(), FakeClock(T0 + timedelta(hours=1, minutes=1)))
    report = loop.tick()
    assert not report.errors, report.errors
    with sessions() as session:
        assert [r.dag_id for r in runs(session, "z-fine")] == ["z-fine"]
        assert runs(session, "a-never") == []
    reason = _broken(sessions)["a-never"]
    assert reason is not None
    assert "spec.schedule: cron expression '0 0 30 2 *' never fires" in reason


def test_a_new_version_clears_broken_and_the_schedule_goes_on(
    sessions: sessionmaker[Session],
) -> None:
    register(sessions, manifest("b", chain("t"), catchup=True, **HOURLY))
    _unloadable(sessions, "b")
    assert _create(sessions, now_hours=2) == 0
    assert _broken(sessions)["b"] is not None
    register(sessions, manifest("b", chain("t", "u"), catchup=True, **HOURLY), T0)
    assert _broken(sessions)["b"] is None
    assert _create(sessions, now_hours=2) == 2
    with sessions() as session:
        assert [r.tasks_total for r in runs(session, "b")] == [2, 2]


def test_reapplying_the_same_manifest_repairs_its_unloadable_version(
    sessions: sessionmaker[Session],
) -> None:
    """The manifest hashes to the stored version, so it is that version: its row is rewritten
    from the manifest, and the DAG is no longer broken."""
    m = manifest("same", chain("t"), catchup=True, **HOURLY)
    register(sessions, m)
    _unloadable(sessions, "same")
    assert _create(sessions, now_hours=2) == 0
    register(sessions, m, T0)
    assert _broken(sessions)["same"] is None
    assert _create(sessions, now_hours=2) == 2
    with sessions() as session:
        assert {r.dag_version_id for r in runs(session, "same")} == {1}


def test_the_reason_reaches_the_dag_object_s_status(sessions: sessionmaker[Session]) -> None:
    """An invalid edit of a broken DAG's object says that nothing runs, and why."""
    from sluice.handlers import status, store
    from sluice.spec.errors import SpecIssue

    register(sessions, manifest("obj", chain("t"), **HOURLY))
    _unloadable(sessions, "obj")
    _create(sessions, now_hours=2)
    with sessions() as session:
        kept = store.owned_version(session, "obj", None)
    assert kept is not None
    assert kept.number == 1
    assert kept.broken_reason == _broken(sessions)["obj"]
    message = status.issues_message(
        [SpecIssue("spec.x", "y")], kept_version=kept.number, kept_broken=kept.broken_reason
    )
    assert message.splitlines()[-1].startswith(
        "The current version 1 is broken: DAG 'obj' version 1 (dag_version.id 1) cannot be "
        "loaded: spec.tasks: must be a list"
    )


def test_dags_at_their_limit_do_not_starve_the_others(sessions: sessionmaker[Session]) -> None:
    """The first ten DAGs (alphabetically) have backlogs at their limit, five from manual
    runs at maxActiveRuns and five from backfills at the backfill's own limit; the forty
    others each have one queued run. The others start, oldest queued run first."""
    from sluice.scheduler.backfill import create_backfill

    daily = {"schedule": "@daily", "startDate": "2026-11-01T00:00:00Z"}
    names = [f"d{i:02d}" for i in range(50)]
    for name in names:
        register(sessions, manifest(name, chain("a"), maxActiveRuns=1, **daily))
    with sessions() as session:
        for name in names[:5]:  # manual backlogs at maxActiveRuns
            for hour in range(6):
                trigger_run(session, SpecCache(), name, T0, logical_date=T0 + timedelta(hours=hour))
        for name in names[5:10]:  # backfill backlogs at the backfill's limit
            create_backfill(
                session, SpecCache(), name, T0 - timedelta(days=6), T0 - timedelta(days=1), T0
            )
        session.execute(
            text(
                "UPDATE dag_run SET state = 'running' WHERE id IN"
                " (SELECT min(id) FROM dag_run GROUP BY dag_id)"
            )
        )
        # The others' runs, queued later, newest name first: fairness is not the alphabet.
        for minutes, name in enumerate(reversed(names[10:]), start=1):
            trigger_run(session, SpecCache(), name, T0 + timedelta(minutes=minutes))
        session.commit()
    started: list[list[str]] = []
    for _ in range(4):  # ten DAGs a call, as the loop's phase 1 takes them
        with sessions() as session:
            before = _running_dags(session)
            assert start_queued_runs(session, T0 + timedelta(hours=1), 10) == 10
            session.commit()
            started.append(sorted(_running_dags(session) - before))
    assert started[0] == sorted(names[40:])  # the oldest queued runs first
    assert sorted(itertools.chain.from_iterable(started)) == names[10:]
    with sessions() as session:
        assert start_queued_runs(session, T0 + timedelta(hours=1), 10) == 0
        for name in names[:10]:  # still one run each: their limits hold
            assert [r.state for r in runs(session, name)].count(RunState.RUNNING) == 1


def test_a_backfill_at_its_limit_does_not_hold_back_the_dags_own_runs(
    sessions: sessionmaker[Session],
) -> None:
    from sluice.scheduler.backfill import create_backfill

    register(
        sessions, manifest("bd", chain("a"), schedule="@daily", startDate="2026-11-01T00:00:00Z")
    )
    with sessions() as session:
        create_backfill(
            session,
            SpecCache(),
            "bd",
            T0 - timedelta(days=4),
            T0 - timedelta(days=1),
            T0,
            max_active_runs=1,
        )
        session.commit()
        assert start_queued_runs(session, T0, 10) == 1  # the backfill's limit
        session.commit()
        trigger_run(session, SpecCache(), "bd", T0)
        session.commit()
        assert start_queued_runs(session, T0, 10) == 1  # the manual run, under maxActiveRuns
        session.commit()
        states = {(r.run_type, r.state) for r in runs(session, "bd")}
    assert ("manual", RunState.RUNNING) in states
    assert [s for t, s in states if t == "backfill"].count(RunState.RUNNING) == 1


def _running_dags(session: Session) -> set[str]:
    return set(
        session.execute(select(DagRun.dag_id).where(DagRun.state == RunState.RUNNING)).scalars()
    )


@pytest.mark.parametrize("given", [True, False])
def test_a_manual_run_before_the_start_date_is_refused_naming_the_field(
    sessions: sessionmaker[Session], given: bool
) -> None:
    """Airflow runs no task for a logical date before the DAG's start date (its trigger
    refuses one before default_args' start_date); Sluice refuses the run, with the fix."""
    register(sessions, manifest("early", chain("a"), **HOURLY))
    before = T0 - timedelta(minutes=1)
    with sessions() as session:
        now, logical_date = (T0, before) if given else (before, None)
        with pytest.raises(TriggerError, match=r"before its spec\.startDate 2026-12-01T00:00:00"):
            trigger_run(session, SpecCache(), "early", now, logical_date=logical_date)
        assert runs(session, "early") == []
        # At the start date itself it is created.
        trigger_run(session, SpecCache(), "early", T0, logical_date=T0)
        assert [r.logical_date for r in runs(session, "early")] == [T0]


def test_the_due_dags_are_read_in_the_index_order_however_many_fall_due_together(
    sessions: sessionmaker[Session],
) -> None:
    """DAGs on one cron fall due at the same instant. Phase 1's read walks `ix_dag_due` in
    its own order (next run, then DAG id) and stops at its limit, in the generic plan
    Postgres keeps for the prepared statement: no sort of every due DAG, nor a count of
    each one's active runs (migration 0019; 13 ms a call with 11,000 DAGs due before)."""
    from bench.arrival import copy_dag  # registers copies of one DAG in one statement

    register(sessions, manifest("d0", chain("a"), catchup=True, **HOURLY))
    with sessions() as session:
        copy_dag(session, "d0", [f"d{i}" for i in range(1, 3_000)])
        session.execute(
            text("UPDATE dag SET is_paused = false, next_run_after = :due"),
            {"due": T0 + timedelta(hours=1)},
        )
        session.commit()
    with sessions() as session:
        session.execute(text("ANALYZE dag"))
        session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        params = {"now": T0 + timedelta(hours=2), "limit": 10, "seen": ["d10"]}
        due = runs_module._DUE_DAGS(session, params).all()
        plan = runs_module._DUE_DAGS.explain(session, params)
    # The first ten in the index's order, the one phase 1 has just seen left out.
    expected = sorted(f"d{i}" for i in range(3_000) if i != 10)[:10]
    assert [d.dag_id for d in due] == expected
    assert "Index Scan using ix_dag_due" in plan, plan
    assert "Sort" not in plan, plan
