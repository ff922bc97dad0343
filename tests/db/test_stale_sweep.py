"""The stale-try sweep's candidates: which running tries one sweep looks at.

The sweep reads at most `limit` tries per pass. Tries another live replica owns
are that replica's to heartbeat, report or fence, so they must not take the
places of the tries that need this replica: a dead replica's, whose owner will
never come back for them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from bench.heartbeat_writes import copy_task_instance
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.executors.base import Inspection
from sluice.scheduler import housekeeping
from tests.support import T0, ScriptedExecutor, manifest, register, trigger

LIMIT = 100


class PodsPending(ScriptedExecutor):
    """Tries that heartbeat themselves (task pods), every one seen alive and still starting."""

    name = "pods-pending"
    pods_heartbeat = True

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return Inspection(state="alive", running=False)


def _replica(session: Session, heartbeat_minutes_ago: float, state: str = "running") -> int:
    job = housekeeping.register_scheduler(session, T0)
    session.execute(
        text("UPDATE scheduler_job SET latest_heartbeat = :at, state = :state WHERE id = :id"),
        {"at": T0 - timedelta(minutes=heartbeat_minutes_ago), "state": state, "id": job},
    )
    return job


@pytest.mark.parametrize("many_owner", ["another live replica", "this replica"])
def test_a_dead_replica_s_try_is_adopted_past_more_stale_tries_of_a_live_one(
    sessions: sessionmaker[Session], many_owner: str
) -> None:
    """More stale tries than the limit, owned by a live replica (pods still Pending:
    their heartbeat is the claim's), come first in id order; the dead replica's try
    after them must still be adopted by this sweep."""
    tasks = [{"name": f"t{i:03}"} for i in range(LIMIT + 5)]
    register(sessions, manifest("wide", tasks))
    trigger(sessions, "wide", T0)
    with sessions() as session:
        me = _replica(session, 0)
        live = _replica(session, 0)
        dead = _replica(session, 30, state="dead")
        ids = list(session.execute(text("SELECT id FROM task_instance ORDER BY id")).scalars())
        session.execute(
            text(
                "UPDATE task_instance SET state = 'running', try_number = 1,"
                " running_by_job_id = :live, start_date = :claimed,"
                " last_heartbeat_at = :claimed, external_id = 'job-' || id"
            ),
            {
                "live": live if many_owner == "another live replica" else me,
                "claimed": T0 - timedelta(minutes=10),
            },
        )
        session.execute(
            text("UPDATE task_instance SET running_by_job_id = :dead WHERE id = :id"),
            {"dead": dead, "id": ids[-1]},
        )
        session.commit()

    with sessions() as session:
        plan = housekeeping.plan_stale_tries(
            session,
            SpecCache(),
            PodsPending(),
            T0,
            job_id=me,
            threshold=60,
            dead_after=30,
            kill_after=300,
            limit=LIMIT,
        )
        taken = housekeeping.adopt_tries(session, plan.adoptions, me, T0)
        session.commit()

    assert [a.key for a in taken] == [(ids[-1], 1)]
    assert not plan.events  # nothing of the live replica's is judged here
    with sessions() as session:
        owners = dict(
            session.execute(text("SELECT id, running_by_job_id FROM task_instance")).all()
        )
    assert owners.pop(ids[-1]) == me
    assert set(owners.values()) == {live if many_owner == "another live replica" else me}


def _a_dead_replicas_try(
    sessions: sessionmaker[Session], *, claimed: datetime, beat: datetime
) -> tuple[int, int]:
    """One running try of a dead replica, claimed and last heartbeated then: (this
    replica's id, the dead one's)."""
    register(sessions, manifest("one", [{"name": "t"}]))
    trigger(sessions, "one", T0)
    with sessions() as session:
        me = _replica(session, 0)
        dead = _replica(session, 30, state="dead")
        session.execute(
            text(
                "UPDATE task_instance SET state = 'running', try_number = 1,"
                " running_by_job_id = :dead, start_date = :claimed,"
                " last_heartbeat_at = :beat, external_id = 'job-' || id"
            ),
            {"dead": dead, "claimed": claimed, "beat": beat},
        )
        session.commit()
    return me, dead


class PodsGone(ScriptedExecutor):
    """Tries that heartbeat themselves, every pod gone without a result (deleted)."""

    name = "pods-gone"
    pods_heartbeat = True

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return Inspection(state="gone")


@pytest.mark.parametrize("heartbeat_seconds_ago", [2.7, 61.0])
def test_a_dead_replicas_try_gone_from_sight_is_a_zombie_only_once_its_heartbeat_is_stale(
    sessions: sessionmaker[Session], heartbeat_seconds_ago: float
) -> None:
    """A dead replica's try is a candidate whatever its heartbeat (to be adopted at once
    if alive), but a zombie takes both signals: its pod gone, and silence for the
    threshold. Deleted 2.7 s after its last heartbeat, it waits (the third cluster soak
    judged it at once); silent for 61 s against 60, it is a zombie."""
    me, _ = _a_dead_replicas_try(
        sessions,
        claimed=T0 - timedelta(minutes=10),
        beat=T0 - timedelta(seconds=heartbeat_seconds_ago),
    )

    with sessions() as session:
        plan = housekeeping.plan_stale_tries(
            session,
            SpecCache(),
            PodsGone(),
            T0,
            job_id=me,
            threshold=60,
            dead_after=30,
            kill_after=300,
        )
    assert not plan.adoptions
    if heartbeat_seconds_ago < 60:
        assert not plan.events
    else:
        (event,) = plan.events
        assert (event.reason or "").startswith("zombie: no heartbeat since")


def test_adopting_never_moves_a_tries_heartbeat_back(sessions: sessionmaker[Session]) -> None:
    """An adoption stamps the adopter's time only if it is newer: a tick whose time was
    taken before a long stall must not overwrite the pods' newer heartbeats (the cluster
    chaos run killed two healthy pods a second after adopting them with a minute-old
    time)."""
    me, dead = _a_dead_replicas_try(sessions, claimed=T0, beat=T0)
    with sessions() as session:
        (ti_id,) = session.execute(text("SELECT id FROM task_instance")).scalars()
        stale_now = T0 - timedelta(seconds=69)
        adoption = housekeeping.Adoption(
            (ti_id, 1), dead, f"job-{ti_id}", elapsed=0.0, timeout=None,
            skip_on_exit_code=frozenset(),
        )  # fmt: skip
        assert housekeeping.adopt_tries(session, [adoption], me, stale_now) == [adoption]
        session.commit()
        owner, beat = session.execute(
            text("SELECT running_by_job_id, last_heartbeat_at FROM task_instance")
        ).one()
    assert owner == me
    assert beat == T0


@pytest.mark.parametrize("self_beating", [True, False])
def test_the_sweep_reads_the_running_tries_through_an_index_not_the_whole_table(
    sessions: sessionmaker[Session], self_beating: bool
) -> None:
    """No index holds the heartbeat (migration 0021: a heartbeat is then heap-only), so
    the sweep reads the running instances through `ix_ti_occupying` and keeps the stale
    ones: on 20,000 instances, 500 running and fresh, it finds none and reads
    `task_instance` through an index only (the backend's own scan counts)."""
    register(sessions, manifest("many", [{"name": "t"}]))
    trigger(sessions, "many", T0)
    with sessions() as session:
        me = _replica(session, 0)
        copy_task_instance(session, 20_000, 500, owner=me, at=T0)
        session.commit()
        session.execute(text("ANALYZE task_instance"))
        session.commit()
        executor = PodsPending() if self_beating else ScriptedExecutor()
        scans = text(
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables"
            " WHERE relname = 'task_instance'"
        )
        # This backend's counts not yet handed over (they may span earlier transactions).
        seq_before, idx_before = session.execute(scans).one()
        plan = housekeeping.plan_stale_tries(
            session, SpecCache(), executor, T0, job_id=me, threshold=60, dead_after=30
        )
        seq, idx = session.execute(scans).one()
    assert (plan.events, plan.adoptions, plan.kill) == ([], [], {})
    assert seq - seq_before == 0
    assert idx - idx_before >= 1
