"""The numbers that need a query, read every few seconds on a thread of their own.

Task instances by state, each pool's open slots, the starving tasks and the
status outbox's depth and oldest row live only in the database. One statement
every `interval` seconds (5 by default) reads them all, off the loop's thread
and with its own connection, so the loop pays nothing for them: the loop's own
numbers (`families.py`) are recorded where the loop already has them.

Every replica samples the same database, so these gauges agree across
replicas. A sample that fails (the database is down) is logged once per
outage and the gauges keep their last values.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from sluice.logs import first_line
from sluice.metrics import families

log = structlog.get_logger("sluice.metrics")

STATES = ("scheduled", "queued", "running")

# The three partial indexes on task_instance's state (ix_ti_scheduled, ix_ti_occupying)
# serve the first part; the status outbox is short unless publishing is stuck.
_SAMPLE = text(
    """
    SELECT 'tasks' AS kind, pool AS name, state, count(*) AS n,
           CAST(sum(pool_slots) AS float8) AS amount
      FROM task_instance WHERE state IN ('scheduled', 'queued', 'running')
     GROUP BY pool, state
    UNION ALL
    SELECT 'pool', name, NULL, CAST(slots AS bigint), NULL FROM slot_pool
    UNION ALL
    SELECT 'outbox', NULL, NULL, count(*),
           CAST(extract(epoch FROM clock_timestamp() - min(created_at)) AS float8)
      FROM status_outbox
    """
)


@dataclass(frozen=True)
class Sample:
    task_instances: dict[str, int]  # by state
    open_slots: dict[str, int]  # by pool: slots less those of queued and running tries
    starving: int  # scheduled, in a pool with no open slot or no pool at all
    outbox_rows: int
    outbox_oldest_seconds: float  # 0 when the outbox is empty


def summarize(rows: Iterable[Sequence[Any]]) -> Sample:
    """The sample from `_SAMPLE`'s rows (kind, name, state, n, amount)."""
    by_state = dict.fromkeys(STATES, 0)
    scheduled: dict[str, int] = defaultdict(int)
    used: dict[str, int] = defaultdict(int)
    slots: dict[str, int] = {}
    outbox_rows, oldest = 0, 0.0
    for kind, name, state, n, amount in rows:
        if kind == "tasks":
            by_state[state] += int(n)
            if state == "scheduled":
                scheduled[name] += int(n)
            else:
                used[name] += int(amount or 0)
        elif kind == "pool":
            slots[name] = int(n)
        else:
            outbox_rows, oldest = int(n), max(float(amount or 0.0), 0.0)
    open_slots = {pool: total - used[pool] for pool, total in slots.items()}
    starving = sum(n for pool, n in scheduled.items() if open_slots.get(pool, 0) <= 0)
    return Sample(by_state, open_slots, starving, outbox_rows, oldest)


def publish(sample: Sample, known_pools: set[str]) -> set[str]:
    """Set the gauges; a pool that is gone loses its series. Returns the pools shown."""
    for state, n in sample.task_instances.items():
        families.TASK_INSTANCES.labels(state).set(n)
    for pool, n in sample.open_slots.items():
        families.POOL_OPEN_SLOTS.labels(pool).set(n)
    for pool in known_pools - set(sample.open_slots):
        families.POOL_OPEN_SLOTS.remove(pool)
    families.TASKS_STARVING.set(sample.starving)
    families.STATUS_OUTBOX_ROWS.set(sample.outbox_rows)
    families.STATUS_OUTBOX_OLDEST_SECONDS.set(sample.outbox_oldest_seconds)
    return set(sample.open_slots)


class Sampler:
    def __init__(self, sessions: sessionmaker[Session], *, interval: float = 5.0) -> None:
        self.sessions = sessions
        self.interval = interval
        self._pools: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> Sample:
        """One query, then the gauges."""
        with self.sessions() as session:
            found = summarize(session.execute(_SAMPLE).all())
        self._pools = publish(found, self._pools)
        return found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        failing = False
        while True:
            try:
                self.sample()
                if failing:
                    log.info("metrics sampling works again")
                failing = False
            except Exception as exc:  # the database: the gauges wait for the next sample
                if not failing:
                    log.warning(
                        "metrics sample failed; sampled gauges keep their last values",
                        error=first_line(exc),
                    )
                failing = True
            if self._stop.wait(self.interval):
                return
