"""What the phases of a tick share: when each step runs (`Due`, one table of them in
`Dues`), what a tick did (`TickReport`), the phase timer (`timed`) and what a phase
asks of the loop that drives it (`Loop`).

The phases live in modules of their own (`phase_runs.py`, `phase_examine.py`,
`phase_critical.py`, `phase_handover.py`, `phase_housekeeping.py`); `loop.py` drives
them in order on one connection and holds the plumbing they share (`Loop`): the one
error policy for transactions and executor calls, and what a settled try tells the
other phases. This module imports none of them, so none imports another through it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sluice.metrics import families as metrics

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from sluice.db.dags import SpecCache
    from sluice.db.wakeups import Waker
    from sluice.executors.base import Executor
    from sluice.scheduler.config import SchedulerConfig
    from sluice.scheduler.contact import DatabaseContact
    from sluice.scheduler.results import Applied

Clock = Callable[[], datetime]
T = TypeVar("T")


@dataclass
class Due:
    """When a step runs: when told that something may have given it work (`tell`), and
    otherwise once per `interval` seconds since it last ran."""

    interval: float
    last: datetime
    told: bool = True  # a new loop looks at once

    def __call__(self, now: datetime) -> bool:
        return self.told or (now - self.last).total_seconds() >= self.interval

    def tell(self) -> None:
        self.told = True

    def ran(self, now: datetime, *, again: bool = False) -> None:
        """It ran at `now`; `again`: it may have left work (a full batch, a failure)."""
        self.last = now
        self.told = again


@dataclass
class Dues:
    """When each step of the tick runs. A phase runs (`ran`) its own and tells (`tell`)
    the others it may have given work; the loop's look (`probe`) tells the five steps
    that run only when told."""

    runs: Due  # phase 1
    examine: Due  # phase 2, runs with work
    quiet: Due  # phase 2's round of quiet runs
    queue: Due  # phase 3
    claims: Due  # phase 4: queued tries to claim
    alerts: Due  # phase 4: alerts to deliver
    probe: Due  # the look for the five steps above that run when told
    sweep: Due  # housekeeping: stale tries and stuck queued tasks
    reconcile: Due  # housekeeping: a counter reconciliation pass

    @classmethod
    def starting(cls, config: SchedulerConfig, clock: Clock) -> Dues:
        """A new loop's: the sweeps and the reconciliation first fall due an interval
        from now; every other step runs on the first tick, then when told (or due: the
        quiet round and the look)."""
        # The sweeps for stale tries and stuck queued tasks, and the counter reconciliation:
        # their look is at the whole fleet's work, so live replicas share them too.
        sweep = Due(config.zombie_check_interval, clock(), told=False)
        reconcile = Due(config.reconcile_interval, clock(), told=False)
        every = config.tick_interval
        long_ago = clock() - timedelta(seconds=every)
        return cls(
            # These five run when told (with a waker; without one, the first three run
            # every tick). What no one can tell this replica of is found by one look for
            # all five once per tick interval (`probe`).
            runs=Due(math.inf, long_ago),
            examine=Due(math.inf, long_ago),
            queue=Due(math.inf, long_ago),
            claims=Due(math.inf, long_ago),
            alerts=Due(math.inf, long_ago),
            # Phase 2's round of quiet runs: once at start, then once per quiet round interval.
            quiet=Due(config.quiet_round_interval, long_ago),
            probe=Due(every, long_ago, told=False),
            sweep=sweep,
            reconcile=reconcile,
        )

    @property
    def told_only(self) -> tuple[Due, ...]:
        """The steps that run when told, in the order of the look's answers."""
        return (self.runs, self.examine, self.queue, self.claims, self.alerts)


@dataclass
class TickReport:
    runs_created: int = 0
    runs_started: int = 0
    runs_examined: int = 0
    runs_finished: int = 0
    tasks_scheduled: int = 0
    tasks_queued: int = 0
    tasks_started: int = 0
    events_applied: int = 0
    critical_section_skipped: bool = False
    errors: list[str] = field(default_factory=list)
    # Did any of the tick's transactions get an answer from the database (a commit, or
    # a lock conflict)? And the first database failure, `phase: error`, if any.
    database_answered: bool = False
    database_error: str | None = None
    # Did the tick try the database at all? (A tick whose phases had nothing due opens
    # no transaction; it says nothing about the database either way.)
    database_used: bool = False

    @property
    def database_unreached(self) -> str | None:
        """Why the tick got nothing done in the database (its first failure), or None if
        it did: a tick whose every transaction failed did none of the replica's work."""
        return None if self.database_answered else self.database_error

    @property
    def busy(self) -> bool:
        """Did this tick change anything? An idle tick is followed by a sleep."""
        return any(
            (
                self.runs_created,
                self.runs_started,
                self.runs_finished,
                self.tasks_scheduled,
                self.tasks_queued,
                self.tasks_started,
                self.events_applied,
            )
        )


def timed(phase: str) -> contextlib.AbstractContextManager[Any]:
    """Observe the block's duration in the phase histogram (even if it raises)."""
    return metrics.LOOP_PHASE_SECONDS.labels(phase).time()


class Loop(Protocol):
    """What a phase uses of the loop that drives it (`loop.SchedulerLoop`)."""

    config: SchedulerConfig
    executor: Executor
    specs: SpecCache
    clock: Clock
    job_id: int
    contact: DatabaseContact
    waker: Waker | None
    on_replicas: Callable[[int], None] | None
    dues: Dues
    _tick_monotonic: float  # this machine's monotonic time at the tick's `now`

    def _transaction(
        self,
        phase: str,
        work: Callable[[Session], T],
        default: T,
        report: TickReport | None = None,
    ) -> T: ...

    def _executor_call(
        self, what: str, call: Callable[[], T], default: T, report: TickReport | None
    ) -> T: ...

    def _record_error(self, phase: str, exc: Exception, report: TickReport | None) -> None: ...

    def _due(self, due: Due, now: datetime) -> bool: ...

    def _settled(self, applied: list[Applied]) -> None: ...

    def _wake_past(self, applied: list[Applied], report: TickReport) -> None: ...

    def _wake_next_runs(self, run_ids: list[int], report: TickReport) -> None: ...
