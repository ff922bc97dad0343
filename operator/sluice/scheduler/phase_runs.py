"""Phase 1 of a tick: create the runs the timetables call for, start queued runs within
maxActiveRuns and decide their first tasks (`runs.create_and_start_runs`), in batches,
each its own short transaction, while a time budget lasts (ADR 0023).

With a `Waker` the phase runs only when something may have changed (`due`): a
notification came, its last pass came back full, this replica ended a run, a
schedule fell due, or the look once per tick interval found it work. Without
one, the same, with the look replaced by a pass after every idle tick and once
per tick interval (ADR 0049). It tells
phase 2 of the runs it started and phase 3 of the first tasks it scheduled, both
in the same tick.
"""

from __future__ import annotations

import functools
from datetime import datetime

from sluice.metrics import families as metrics
from sluice.scheduler import ticks
from sluice.scheduler.runs import create_and_start_runs
from sluice.scheduler.ticks import TickReport


class Runs:
    def __init__(self, loop: ticks.Loop) -> None:
        self.loop = loop
        self.dues = loop.dues
        # When the next scheduled run falls due, as phase 1's last pass saw it: the idle
        # wait ends then, so a minute's runs are not seen up to a tick interval late.
        self.next_due: datetime | None = None

    def tick(self, now: datetime, report: TickReport) -> None:
        if self.due(now):
            with ticks.timed("runs"):
                self._create_and_start_runs(now, report)
            metrics.RUNS_CREATED.inc(report.runs_created)

    def due(self, now: datetime) -> bool:
        """Does phase 1 have anything new to look at?

        With a waker: when a notification came (a DAG registered or unpaused, a
        run inserted or ended), when the last phase 1 came back full or this
        replica ended a run, and otherwise when the loop's look once per tick
        interval (`SchedulerLoop._probe`) finds a schedule fallen due or a queued
        run (anything a notification missed). A busy replica so skips two queries
        per tick that would find nothing.

        Without one (ADR 0049): on the tick after an idle one (where what other
        processes changed, an unpause or a manual run, shows up, as before), when
        the last phase 1 came back full or this replica ended a run, when a
        schedule fell due, and once per tick interval within a burst. A burst's
        ticks so skip three reads that would find nothing.
        """
        if self.next_due is not None and now >= self.next_due:
            return True  # a schedule fell due (the idle wait ended for it)
        if self.loop.waker is None:
            return self.dues.runs(now)
        return self.loop._due(self.dues.runs, now)

    def _create_and_start_runs(self, now: datetime, report: TickReport) -> None:
        """Phase 1 in batches, each its own short transaction: due runs created, queued
        runs started and their first tasks decided (`runs.create_and_start_runs`).

        Another batch follows while the last came back full, the tick's
        `runs_created_per_tick` is not reached and the phase has taken less than
        `runs_phase_budget` of the loop's clock; otherwise the next tick goes on
        (a batch left full makes phase 1 due again at once), so a minute's burst
        of due runs is created in a tick or two without keeping the other phases
        waiting for long (ADR 0023).
        """
        loop = self.loop
        cfg = loop.config
        cap = cfg.runs_created_per_tick
        began = loop.clock()
        full = False
        first_tasks = 0
        while True:
            limit = min(cfg.runs_created_per_batch, cap - report.runs_created)
            batch = loop._transaction(
                "runs",
                functools.partial(create_and_start_runs, specs=loop.specs, now=now, limit=limit),
                None,
                report,
            )
            if batch is None:  # failed, or a lock busy: look again next tick
                full = True
                break
            report.runs_created += batch.created
            report.runs_started += batch.started
            first_tasks += batch.first_tasks.scheduled
            if batch.first_tasks.settled_ok_runs:
                loop._wake_next_runs(sorted(batch.first_tasks.settled_ok_runs), report)
            self.next_due = batch.next_due
            full = batch.created >= limit or batch.started >= limit
            spent = (loop.clock() - began).total_seconds() >= cfg.runs_phase_budget
            if not full or spent or max(report.runs_created, report.runs_started) >= cap:
                break
        self.dues.runs.ran(now, again=full)
        if report.runs_started:
            self.dues.examine.tell()  # their runs wait to be examined (timeouts, completion)
        if first_tasks:
            self.dues.queue.tell()  # their first tasks wait for a slot
