"""A replica's heartbeat: one statement that beats and counts the live replicas."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from sluice.scheduler import housekeeping
from tests.support import T0


def test_a_heartbeat_revives_its_replica_and_counts_the_live_ones(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        me = housekeeping.register_scheduler(session, T0)
        other = housekeeping.register_scheduler(session, T0)
        stale = housekeeping.register_scheduler(session, T0 - timedelta(minutes=5))
        session.commit()
    with sessions() as session:
        # Paused past the threshold, this replica was marked dead by another.
        session.execute(
            text("UPDATE scheduler_job SET state = 'dead', ended_at = :t WHERE id = :id"),
            {"t": T0, "id": me},
        )
        session.commit()
    now = T0 + timedelta(seconds=10)
    with sessions() as session:
        # This one (revived) and `other` (beat 10 s ago); not `stale` (5 min ago).
        assert housekeeping.heartbeat_scheduler(session, me, now, dead_after=30) == 2
        session.commit()
    with sessions() as session:
        rows = dict(
            session.execute(
                text("SELECT id, state FROM scheduler_job WHERE id IN (:a, :b, :c)"),
                {"a": me, "b": other, "c": stale},
            ).all()
        )
        beat = session.execute(
            text("SELECT latest_heartbeat, ended_at FROM scheduler_job WHERE id = :id"),
            {"id": me},
        ).one()
    assert rows == {me: "running", other: "running", stale: "running"}
    assert beat == (now, None)
    later = now + timedelta(seconds=35)  # `other` stopped beating: alone
    with sessions() as session:
        assert housekeeping.heartbeat_scheduler(session, me, later, dead_after=30) == 1
