"""A database outage longer than a heartbeat threshold is not held against anyone.

While Postgres is unreachable no heartbeat is recorded: not the task pods'
(the task API answers 503 and the sidecars retry), not the other replicas'.
So on the first sweep after an outage longer than `heartbeat_kill_threshold`
every running try looked silent since before it began and its pod was killed,
and every other replica looked dead. (A Postgres outage of 330 s against a 300 s
threshold, tried on a cluster, killed nothing: most likely the sidecars'
heartbeats, retried every few seconds, got in before the first sweep after
it; nothing made that order certain.) A replica counts silence
only over the time it could reach the database itself (ADR 0029); the
thresholds still hold, counted that way.
"""

from __future__ import annotations

import tempfile

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from sluice.api.heartbeats import record_heartbeats
from sluice.db.engine import make_engine, session_factory
from sluice.executors.base import Inspection, TaskLaunch
from sluice.scheduler import contact, housekeeping
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.states import TaskState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    make_loop,
    manifest,
    register,
    ti_row,
    trigger,
)

CONFIG = {
    "heartbeat_interval": 5,
    "scheduler_dead_after": 30,
    "zombie_threshold": 60,
    "heartbeat_kill_threshold": 300,
    "zombie_check_interval": 10,
}
OUTAGE = 330  # seconds, longer than every threshold
TICK = 10  # seconds between the replica's ticks, in the outage and after it


class Pods(ScriptedExecutor):
    """Task pods: they heartbeat themselves, and each one's pod is seen running."""

    name = "pods"
    pods_heartbeat = True

    def __init__(self) -> None:
        super().__init__()
        self.hold = {"t"}

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        return f"job-{launch.ti_id}-{launch.try_number}"

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {key: f"job-{key[0]}-{key[1]}" for key in self.running}

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return Inspection(state="alive", running=True)


class Fleet:
    """Replica A (the loop under test) runs a try of task `t` on a pod; replica B is
    another replica's heartbeat. `beat()` is what the pod and B do while they can."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.clock = FakeClock()
        register(sessions, manifest("grace", [{"name": "t"}]), self.clock.now)
        trigger(sessions, "grace", self.clock.now)
        self.pods = Pods()
        self.a: SchedulerLoop = make_loop(sessions, self.pods, self.clock, **CONFIG)
        with sessions() as session:
            self.b = housekeeping.register_scheduler(session, self.clock.now)
            session.commit()
        for _ in range(3):
            self.tick()
        (self.key,) = self.pods.running
        self.beat()

    def tick(self) -> None:
        self.clock.advance(seconds=TICK)
        self.a.tick()

    def beat(self) -> None:
        with self.sessions() as session:
            record_heartbeats(session, [self.key], self.clock.now)
            housekeeping.heartbeat_scheduler(session, self.b, self.clock.now, 30)
            session.commit()

    def outage(self, seconds: float) -> None:
        """Postgres unreachable for `seconds`: A's ticks fail, nobody's heartbeat is recorded."""
        gone = make_engine(f"postgresql://sluice@/sluice?host={tempfile.mkdtemp()}")
        self.a.sessions = session_factory(gone)
        try:
            for _ in range(int(seconds // TICK)):
                self.clock.advance(seconds=TICK)
                assert self.a.tick().database_unreached
        finally:
            self.a.sessions = self.sessions
            gone.dispose()

    def b_state(self) -> str:
        with self.sessions() as session:
            return str(
                session.execute(
                    text("SELECT state FROM scheduler_job WHERE id = :id"), {"id": self.b}
                ).scalar_one()
            )

    def try_state(self) -> TaskState:
        with self.sessions() as session:
            return TaskState(ti_row(session, "grace", "t").state)


@pytest.fixture
def fleet(sessions: sessionmaker[Session]) -> Fleet:
    return Fleet(sessions)


def test_the_first_sweep_after_a_long_outage_kills_nothing_and_declares_no_one_dead(
    fleet: Fleet,
) -> None:
    fleet.outage(OUTAGE)
    # Postgres is back. The pod's sidecar and replica B get their next heartbeats in
    # within seconds, but A's sweeps come first (up to a heartbeat interval later).
    for _ in range(2):
        fleet.tick()
    assert fleet.pods.killed == []
    assert fleet.try_state() == TaskState.RUNNING
    assert fleet.b_state() == "running"
    # Then they do, and everything goes on as before the outage.
    fleet.beat()
    for _ in range(int(CONFIG["heartbeat_kill_threshold"] // TICK) + 1):
        fleet.tick()
        fleet.beat()
    assert fleet.pods.killed == []
    assert fleet.try_state() == TaskState.RUNNING
    assert fleet.b_state() == "running"


def test_silence_after_the_outage_still_counts(fleet: Fleet) -> None:
    """The grace is the time heartbeats could not be recorded, no more: a pod and a
    replica that stay silent once Postgres is back are judged on their thresholds,
    counted from the end of the outage plus the silence before it."""
    fleet.outage(OUTAGE)
    after = 0
    while fleet.b_state() == "running":
        fleet.tick()
        after += TICK
    # B's last heartbeat came a tick before the outage: 30 s of contact since then.
    assert CONFIG["scheduler_dead_after"] - TICK <= after <= CONFIG["scheduler_dead_after"] + TICK
    while fleet.pods.killed == []:
        fleet.tick()
        after += TICK
        assert after <= CONFIG["heartbeat_kill_threshold"] + 2 * TICK, "never judged"
    assert after >= CONFIG["heartbeat_kill_threshold"] - 2 * TICK
    assert fleet.pods.killed == [fleet.key]
    assert fleet.try_state() != TaskState.RUNNING


def test_only_a_database_that_did_not_answer_is_an_outage(
    sessions: sessionmaker[Session],
) -> None:
    """A lock conflict, a statement timeout or a constraint are answers: heartbeats were
    being recorded meanwhile. A refused connection is not."""
    answers = [
        "SELECT 1 FROM slot_pool FOR UPDATE NOWAIT",  # while another transaction holds it
        "SET LOCAL statement_timeout = 1; SELECT pg_sleep(1)",
        "INSERT INTO slot_pool (name, slots) VALUES ('default', 1)",  # unique name
    ]
    with sessions() as holder:
        holder.execute(text("SELECT 1 FROM slot_pool FOR UPDATE"))
        for statement in answers:
            with sessions() as session, pytest.raises(DBAPIError) as caught:
                session.execute(text(statement))
            assert getattr(caught.value.orig, "pgcode", None), caught.value  # the server's
            assert not contact.unreached(caught.value), caught.value
    gone = make_engine(f"postgresql://sluice@/sluice?host={tempfile.mkdtemp()}")
    try:
        with pytest.raises(DBAPIError) as caught, gone.connect():
            pass
        assert contact.unreached(caught.value)
    finally:
        gone.dispose()


def test_a_partial_outage_the_loop_does_not_see_is_not_held_against_the_pods(
    fleet: Fleet,
) -> None:
    """A Postgres shutting down keeps the sessions already open (the loop's) and refuses
    new ones (the task API's): the loop sees no outage, the pods' heartbeats are refused
    for as long. The task API says so (`HeartbeatRecording`), and that span is not a try's
    silence; without its word, the same span kills the pod (the cluster soak's third
    healthy pod killed, ADR 0035)."""
    recording = contact.HeartbeatRecording(fleet.clock.now, longest=300)
    fleet.a.contact.recording = recording
    recording.report(True, fleet.clock.now)
    for _ in range(int(OUTAGE // TICK)):
        fleet.tick()  # the loop works; no heartbeat gets in
        recording.report(False, fleet.clock.now)
    fleet.tick()
    assert fleet.pods.killed == []
    assert fleet.try_state() == TaskState.RUNNING
    fleet.beat()
    recording.report(True, fleet.clock.now)
    for _ in range(3):
        fleet.tick()
        fleet.beat()
    assert fleet.pods.killed == []
    # The same span, with no word from the task API: the pod is killed as silent.
    fleet.a.contact.recording = None
    for _ in range(int(OUTAGE // TICK)):
        fleet.tick()
    assert fleet.pods.killed == [fleet.key]
