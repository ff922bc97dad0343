"""Phase 3 of a tick: the critical section (`critical.queue_schedulable_task_instances`)
queues scheduled tasks within pools and limits, in batches of `max_tis_per_query`,
each its own short transaction whose commit releases the pool lock, repeated while
batches come back full (up to `critical_batches_per_tick`, ADR 0006).

A busy pool lock means another replica is in the section: this tick skips it. The
tries it queued wait for phase 4's claim, which it tells.
"""

from __future__ import annotations

import time
from datetime import datetime

from sluice.metrics import families as metrics
from sluice.scheduler import ticks
from sluice.scheduler.critical import queue_schedulable_task_instances
from sluice.scheduler.ticks import TickReport


class Critical:
    def __init__(self, loop: ticks.Loop) -> None:
        self.loop = loop
        self.dues = loop.dues

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
        for _ in range(cfg.critical_batches_per_tick):
            started = time.perf_counter()
            result = loop._transaction(
                "critical_section",
                lambda s: queue_schedulable_task_instances(
                    s, loop.clock(), job_id=loop.job_id, max_tis=cfg.max_tis_per_query
                ),
                None,
                report,
            )
            if result is None:
                again = True
                break
            if result.entered:
                entered = True
                metrics.CRITICAL_SECTION_SECONDS.observe(time.perf_counter() - started)
            else:
                metrics.CRITICAL_SECTION_BUSY.inc()
            report.critical_section_skipped = not result.entered
            report.tasks_queued += len(result.queued)
            if not result.entered:  # another replica holds the lock: this tick skips it
                again = True
                break
            again = len(result.queued) >= cfg.max_tis_per_query
            if not again:
                break
        self.dues.queue.ran(now, again=again)
        if report.tasks_queued:
            self.dues.claims.tell()
        return entered
