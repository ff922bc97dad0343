"""Phase 3 of a tick: the critical section (`critical.queue_schedulable_task_instances`)
queues scheduled tasks within pools and limits, in batches of `max_tis_per_query`,
each its own short transaction whose commit releases the pool lock, repeated while
batches come back full (up to `critical_batches_per_tick`, ADR 0006).

Each batch claims for this replica what it queues, in the same transaction (ADR
0047): up to `dispatch_batch` of its tries go on to `running`, with their launches
built and their planned external ids recorded before the commit, and are handed to
the executor only after it (`start`, phase 4's: at most one start per try; a replica
that dies in between leaves running tries with no heartbeat, which the sweep
settles). Tries queued beyond that limit get an outbox row and wait for phase 4's
claim, which it tells.

A busy pool lock means another replica is in the section: this tick skips it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from sqlalchemy.orm import Session

from sluice.executors.base import TaskLaunch
from sluice.metrics import families as metrics
from sluice.scheduler import ticks
from sluice.scheduler.critical import CriticalSectionResult, queue_schedulable_task_instances
from sluice.scheduler.dispatch import launches_of
from sluice.scheduler.ticks import TickReport

Start = Callable[[list[TaskLaunch], TickReport], None]


class Critical:
    def __init__(self, loop: ticks.Loop, start: Start) -> None:
        self.loop = loop
        self.dues = loop.dues
        self.start = start  # hands claimed tries to the executor (`phase_handover`)

    def tick(self, now: datetime, report: TickReport) -> None:
        with ticks.timed("critical_section"):
            entered = self._queue_tasks(now, report)
        if entered:
            metrics.TASKS_EXECUTABLE.set(report.tasks_queued)

    def _queue_tasks(self, now: datetime, report: TickReport) -> bool:
        """Critical-section batches, each committed (releasing the pool lock) before the next;
        True if one took the lock.

        Another batch follows only while the last one came back full, so a
        backlog drains within a tick and the lock is never held for more than
        one batch. It runs when tasks may have become queueable through this
        replica (scheduled, or a slot freed), when the last pass was full, busy
        or failed, and otherwise once per tick interval (slots other replicas
        freed, tasks they scheduled and left).
        """
        loop = self.loop
        cfg = loop.config
        if not loop._due(self.dues.queue, now):
            return False
        entered = False
        again = False
        left_for_claims = False
        for _ in range(cfg.critical_batches_per_tick):
            started = time.perf_counter()
            outcome = loop._transaction("critical_section", self._section, None, report)
            if outcome is None:
                again = True
                break
            result, launches = outcome
            if result.entered:
                entered = True
                metrics.CRITICAL_SECTION_SECONDS.observe(time.perf_counter() - started)
            else:
                metrics.CRITICAL_SECTION_BUSY.inc()
            report.critical_section_skipped = not result.entered
            report.tasks_queued += len(result.queued)
            left_for_claims = left_for_claims or len(result.claimed) < len(result.queued)
            # Started only after the commit that claimed them: at most one start per try.
            if launches:
                self.start(launches, report)
                report.tasks_started += len(launches)
            if not result.entered:  # another replica holds the lock: this tick skips it
                again = True
                break
            again = len(result.queued) >= cfg.max_tis_per_query
            if not again:
                break
        self.dues.queue.ran(now, again=again)
        if left_for_claims:
            self.dues.claims.tell()
        return entered

    def _section(self, session: Session) -> tuple[CriticalSectionResult, list[TaskLaunch]]:
        """One batch: queue what the limits allow and claim up to `dispatch_batch` of it,
        with the claimed tries' launches (the caller commits, then starts them)."""
        loop = self.loop
        claimed_at = time.monotonic()  # no later than the claim: a local try's lease
        now = loop.clock()
        result = queue_schedulable_task_instances(
            session,
            now,
            job_id=loop.job_id,
            max_tis=loop.config.max_tis_per_query,
            claim=loop.config.dispatch_batch,
            executor_name=loop.executor.name,
        )
        launches = launches_of(
            session, loop.specs, now, result.claimed, loop.executor.planned_external_id
        )
        return result, [replace(launch, claimed_at=claimed_at) for launch in launches]
