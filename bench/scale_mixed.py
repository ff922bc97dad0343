"""The scale benchmark's last level: a pool that binds, priorities, retries and failures.

Issue 14's scale workload asks for "pools that bind (e.g. 32 slots shared by 100
runs) with priority weights; retries and failures in the mix". Here: `runs` DAGs of
10 independent tasks, one manual run each, every task in the pool `bound` of 32
slots, with priority weights 1-10 (`weightRule: absolute`, so a weight is what the
task says). In every DAG `flaky-8` fails its first try and succeeds its retry; in
every tenth DAG `bad-9` fails both of its tries, so that run fails. Retries wait 0 s.

Each try holds its slot for a tick (`FlakyExecutor`: it ends at the executor's next
poll). Measured like the other levels (tick times, ticks, seconds to finish), and checked
after every tick, outside the timed tick:

- the pool's occupancy (queued plus running slots) never goes over 32;
- priority: of the pool's tasks that were `scheduled` before a tick, none left
  `scheduled` outweighs one the tick took (a priority inversion; ties are not);
- at the end: every run in its expected state and every try counted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from bench.metrics import percentile
from sluice.db.dags import SpecCache
from sluice.db.models import SlotPool
from sluice.executors.base import TaskEvent, TaskLaunch
from sluice.executors.noop import NoopExecutor
from sluice.scheduler.loop import SchedulerLoop
from sluice.scheduler.triggers import trigger_run
from sluice.spec.models import DagManifest
from sluice.spec.states import TaskState
from sluice.spec.validation import parse_dag_manifest

POOL, SLOTS = "bound", 32
TASKS = 10


class FlakyExecutor(NoopExecutor):
    """The no-op executor, except that a try lasts until the poll after the one that
    first sees it (so it holds its pool slot for a tick), `flaky-*` tasks fail their
    first try and `bad-*` tasks every try (exit code 1)."""

    def __init__(self) -> None:
        super().__init__()
        self._running: list[TaskLaunch] = []  # seen by the last poll: end at the next

    def poll(self) -> list[TaskEvent]:
        events = []
        for t in self._running:
            fails = t.task_id.startswith("bad-") or (
                t.task_id.startswith("flaky-") and t.try_number == 1
            )
            state = TaskState.FAILED if fails else TaskState.SUCCESS
            events.append(
                TaskEvent(
                    t.ti_id,
                    t.try_number,
                    state,
                    1 if fails else 0,
                    "exit code 1" if fails else None,
                )
            )
        self._running, self._started = self._started, []
        return events

    def alive(self) -> list[tuple[int, int]]:
        return [t.key for t in self._started + self._running]

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {t.key: "noop" for t in self._started + self._running}

    def release(self, key: tuple[int, int]) -> None:
        super().release(key)
        self._running = [t for t in self._running if t.key != key]

    def kill(self, key: tuple[int, int], reason: str, external_id: str | None = None) -> None:
        super().kill(key, reason, external_id)
        self._running = [t for t in self._running if t.key != key]

    def shutdown(self) -> None:
        super().shutdown()
        self._running.clear()


def dag_ids(runs: int) -> list[str]:
    return [f"mixed-{i:03d}" for i in range(runs)]


def manifests(runs: int, start_date: str) -> list[DagManifest]:
    """One DAG a run: 10 independent tasks in the bound pool, weights 1-10 in a
    different order in each DAG, one flaky task, and a bad one in every tenth DAG."""
    found = []
    for i, dag_id in enumerate(dag_ids(runs)):
        tasks: list[dict[str, Any]] = []
        for k in range(TASKS):
            name = f"t{k}"
            if k == TASKS - 2:
                name = f"flaky-{k}"
            elif k == TASKS - 1 and i % 10 == 0:
                name = f"bad-{k}"
            tasks.append(
                {
                    "name": name,
                    "pool": POOL,
                    "priorityWeight": 1 + (k * 3 + i) % TASKS,
                    "weightRule": "absolute",
                    "retries": 1,
                    "retryDelay": "0s",
                }
            )
        found.append(
            parse_dag_manifest(
                {
                    "apiVersion": "sluice.io/v1alpha1",
                    "kind": "DAG",
                    "metadata": {"name": dag_id},
                    "spec": {
                        "schedule": None,
                        "startDate": start_date,
                        "paused": False,
                        "maxActiveRuns": 1,
                        "defaults": {"image": "busybox:1.36"},
                        "tasks": tasks,
                    },
                }
            )
        )
    return found


def create_pool(session: Session) -> None:
    stmt = insert(SlotPool).values(name=POOL, slots=SLOTS, description="bench: binds")
    session.execute(
        stmt.on_conflict_do_update(index_elements=[SlotPool.name], set_={"slots": SLOTS})
    )


_SCHEDULED = text(
    "SELECT id, priority_weight FROM task_instance WHERE pool = :pool AND state = 'scheduled'"
)
_OCCUPANCY = text(
    "SELECT coalesce(sum(pool_slots), 0) FROM task_instance"
    " WHERE pool = :pool AND state IN ('queued', 'running')"
)


def _scheduled(session: Session) -> dict[int, int]:
    """The pool's `scheduled` task instances: id -> priority weight."""
    return {row.id: row.priority_weight for row in session.execute(_SCHEDULED, {"pool": POOL})}


def trigger_one_run_each(sessions: sessionmaker[Session], ids: Sequence[str]) -> None:
    """A manual run of each DAG in `ids`, now (the scale levels' probes)."""
    specs = SpecCache()
    with sessions() as session:
        for dag_id in ids:
            trigger_run(session, specs, dag_id, datetime.now(UTC))
        session.commit()


def active_runs(session: Session, ids: Sequence[str]) -> int:
    """The runs of the DAGs in `ids` still queued or running."""
    return int(
        session.execute(
            text(
                "SELECT count(*) FROM dag_run WHERE dag_id = ANY(:ids)"
                " AND state IN ('queued', 'running')"
            ),
            {"ids": list(ids)},
        ).scalar_one()
    )


def probe(
    loop: SchedulerLoop, sessions: sessionmaker[Session], ids: Sequence[str]
) -> dict[str, Any]:
    """One run of each DAG in `ids`, ticked to the end; figures and checks."""
    trigger_one_run_each(sessions, ids)
    ticks: list[float] = []
    most_occupied, inversions, bound = 0, 0, 0
    while len(ticks) <= 5000:
        with sessions() as session:
            before = _scheduled(session)
        started = time.perf_counter()
        loop.tick()
        ticks.append(time.perf_counter() - started)
        with sessions() as session:
            after = _scheduled(session)
            occupied = int(session.execute(_OCCUPANCY, {"pool": POOL}).scalar_one())
            active = active_runs(session, ids)
        most_occupied = max(most_occupied, occupied)
        taken = [w for ti, w in before.items() if ti not in after]
        left = [w for ti, w in before.items() if ti in after]
        if taken and left:
            bound += 1  # the pool held some back: the priority check has something to judge
            inversions += max(left) > min(taken)
        if not active:
            break
    with sessions() as session:
        states: dict[str, int] = {
            row.state: row.n
            for row in session.execute(
                text(
                    "SELECT state, count(*) AS n FROM dag_run WHERE dag_id = ANY(:ids)"
                    " GROUP BY state"
                ),
                {"ids": list(ids)},
            )
        }
        tries = int(
            session.execute(
                text(
                    "SELECT coalesce(sum(try_number), 0) FROM task_instance"
                    " WHERE dag_id = ANY(:ids)"
                ),
                {"ids": list(ids)},
            ).scalar_one()
        )
    bad = len([i for i in range(len(ids)) if i % 10 == 0])
    expected = {"success": len(ids) - bad, "failed": bad}
    return {
        "ticks": len(ticks),
        "tick_median_ms": round(statistics.median(ticks) * 1000, 1),
        "tick_p95_ms": round(percentile(ticks, 95) * 1000, 1),
        "tick_max_ms": round(max(ticks) * 1000, 1),
        "probe_s": round(sum(ticks), 2),
        "pool_slots": SLOTS,
        "pool_most_occupied": most_occupied,
        "ticks_pool_bound": bound,
        "priority_inversions": inversions,
        "run_states": states,
        "run_states_expected": expected,
        # Every task's first try, the flaky ones' retry, and the bad ones' retry.
        "tries": tries,
        "tries_expected": len(ids) * TASKS + len(ids) + bad,
    }
