"""Test support: DAG manifests from short dicts, a settable clock, a scripted executor."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import sync_dag
from sluice.db.models import DagRun, SchedulerJob, TaskInstance
from sluice.db.prepared import sql_of
from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.models import DagManifest
from sluice.spec.states import TaskState
from sluice.spec.validation import parse_dag_manifest

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


def manifest(name: str, tasks: Sequence[dict[str, Any]], **spec: Any) -> DagManifest:
    body: dict[str, Any] = {"defaults": {"image": "busybox:1.36"}, "tasks": list(tasks)}
    body.update(spec)
    return parse_dag_manifest(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": name},
            "spec": body,
        }
    )


def chain(*names: str, **task_fields: Any) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        task = {"name": name, **task_fields}
        if i:
            task["dependsOn"] = [names[i - 1]]
        tasks.append(task)
    return tasks


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class ScriptedExecutor:
    """Ends every started try at the next poll with the state scripted for its task.

    `outcomes[task_id]` lists the state of try 1, 2, ...; past the list (or for
    unscripted tasks) the try succeeds. `hold` keeps tries of those tasks running.
    """

    name = "scripted"
    pods_heartbeat = False

    def __init__(self, outcomes: dict[str, Sequence[TaskState]] | None = None) -> None:
        self.outcomes = dict(outcomes or {})
        self.hold: set[str] = set()
        self.started: list[TaskLaunch] = []
        self.running: dict[tuple[int, int], TaskLaunch] = {}
        self.killed: list[tuple[int, int]] = []
        self.killed_ids: dict[tuple[int, int], str | None] = {}  # the external ids it was given
        self.adopted: list[tuple[int, int]] = []
        self.released: list[tuple[int, int]] = []

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        return None

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        for launch in launches:
            assert launch.key not in self.running, f"try started twice: {launch.key}"
            self.started.append(launch)
            self.running[launch.key] = launch

    def poll(self) -> list[TaskEvent]:
        events = []
        for key, launch in list(self.running.items()):
            if launch.task_id in self.hold:
                continue
            script = self.outcomes.get(launch.task_id, ())
            state = script[launch.try_number - 1] if launch.try_number <= len(script) else None
            state = state or TaskState.SUCCESS
            del self.running[key]
            events.append(TaskEvent(launch.ti_id, launch.try_number, state, 0))
        return events

    def alive(self) -> list[tuple[int, int]]:
        return list(self.running)

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {key: f"scripted:{key[0]}:{key[1]}" for key in self.running}

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return Inspection(state="unknown")

    def adopt(self, key: tuple[int, int], external_id: str, **_: object) -> None:
        self.adopted.append(key)

    def heartbeats_recorded(self, keys: Sequence[tuple[int, int]], at: float) -> None:
        pass

    def release(self, key: tuple[int, int]) -> None:
        self.released.append(key)
        self.running.pop(key, None)

    def kill(self, key: tuple[int, int], reason: str, external_id: str | None = None) -> None:
        self.killed.append(key)
        self.killed_ids[key] = external_id
        self.running.pop(key, None)

    def shutdown(self) -> None:
        self.running.clear()


def make_loop(
    sessions: sessionmaker[Session],
    executor: Any,
    clock: FakeClock,
    **config: Any,
) -> SchedulerLoop:
    return SchedulerLoop(
        sessions, executor, SchedulerConfig(**config), clock=clock, sleep=clock.sleep
    )


def register(sessions: sessionmaker[Session], m: DagManifest, now: datetime = T0) -> None:
    with sessions() as session:
        sync_dag(session, m, now)
        session.commit()


def run_until_idle(loop: SchedulerLoop, max_ticks: int = 200) -> int:
    """Tick until a tick changes nothing; returns the number of ticks."""
    for tick in range(1, max_ticks + 1):
        report = loop.tick()
        assert not report.errors, report.errors
        if not report.busy:
            return tick
    raise AssertionError(f"scheduler still busy after {max_ticks} ticks")


def task_states(session: Session, dag_id: str) -> dict[str, str]:
    rows = session.execute(
        select(TaskInstance.task_id, TaskInstance.state)
        .where(TaskInstance.dag_id == dag_id)
        .order_by(TaskInstance.id)
    ).all()
    return dict(rows)


def runs(session: Session, dag_id: str) -> list[DagRun]:
    return list(
        session.execute(
            select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.logical_date)
        ).scalars()
    )


def trigger(sessions: sessionmaker[Session], dag_id: str, now: datetime, **kwargs: Any) -> int:
    from sluice.db.dags import SpecCache
    from sluice.scheduler.triggers import trigger_run

    with sessions() as session:
        new = trigger_run(session, SpecCache(), dag_id, now, **kwargs)
        session.commit()
        return new.id


def corrupt_runs_version(sessions: sessionmaker[Session], dag_id: str) -> None:
    """Point the DAG's runs at a stored version whose spec no longer parses (as after a
    bad manual edit): `spec.tasks` is not a list."""
    with sessions() as session:
        session.execute(
            text(
                "INSERT INTO dag_version (dag_id, version_number, spec_hash, spec,"
                " spec_schema_version, created_at)"
                " VALUES (:dag, 99, 'corrupt', '{\"tasks\": \"not a list\"}', 2, now());"
                "UPDATE dag_run SET dag_version_id = (SELECT id FROM dag_version"
                " WHERE spec_hash = 'corrupt') WHERE dag_id = :dag"
            ),
            {"dag": dag_id},
        )
        session.commit()


def silence_replica(session: Session, job_id: int | None, now: datetime) -> None:
    """Make a replica look dead: its last heartbeat five minutes before `now` (the caller
    commits)."""
    session.execute(
        update(SchedulerJob)
        .where(SchedulerJob.id == job_id)
        .values(latest_heartbeat=now - timedelta(minutes=5))
    )


def ti_row(session: Session, dag_id: str, task_id: str) -> TaskInstance:
    return session.execute(
        select(TaskInstance)
        .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
        .order_by(TaskInstance.logical_date.desc())
        .limit(1)
    ).scalar_one()


def run_until_runs_end(
    loop: SchedulerLoop, sessions: sessionmaker[Session], max_ticks: int = 500
) -> None:
    """Tick (sleeping the fake clock when idle) until every run is terminal."""
    for _ in range(max_ticks):
        report = loop.tick()
        assert not report.errors, report.errors
        with sessions() as session:
            active = session.execute(
                select(DagRun.id).where(DagRun.state.in_(["queued", "running"])).limit(1)
            ).first()
        if active is None:
            return
        if not report.busy:
            loop.sleep(loop.config.tick_interval)
    raise AssertionError(f"runs still active after {max_ticks} ticks")


@contextmanager
def count_queries(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement the engine runs while the block runs, as in steady state:
    a prepared statement as its SQL, the one-off PREPARE left out."""
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sql = sql_of(statement)
        if sql is not None:
            statements.append(sql)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


def record_kill_minus_one(monkeypatch: Any) -> list[tuple[int, int]]:
    """Make `os.kill(pid <= 0, ...)` record the call instead of sending it: as root, the
    sidecar's `kill(-1)` would signal every process on the machine. Returns the record."""
    import os

    calls: list[tuple[int, int]] = []
    real = os.kill

    def guarded(pid: int, sig: int) -> None:
        if pid <= 0:
            calls.append((pid, sig))
            return
        real(pid, sig)

    monkeypatch.setattr(os, "kill", guarded)
    return calls
