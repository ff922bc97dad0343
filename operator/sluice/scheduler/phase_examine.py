"""Phase 2 of a tick: examine running runs (`examine.examine_running_runs`) in one
transaction: trigger rules, retries, timeouts, run completion; then flag the runs whose
dependsOnPast tasks it freed.

Its runs with work are looked for when something may have given them some, and
phase 2's round of quiet runs once per quiet round interval (ADR 0024). It tells
phase 1 of the runs it ended (a queued run may start) and phase 3 of the tasks it
scheduled, both in the same tick.
"""

from __future__ import annotations

from datetime import datetime

from sluice.scheduler import ticks
from sluice.scheduler.examine import examine_running_runs
from sluice.scheduler.ticks import TickReport


class Examine:
    def __init__(self, loop: ticks.Loop) -> None:
        self.loop = loop
        self.dues = loop.dues

    def tick(self, now: datetime, report: TickReport) -> None:
        with ticks.timed("examine"):
            self._examine(now, report)

    def _examine(self, now: datetime, report: TickReport) -> None:
        """Phase 2, in one transaction; then flag runs whose dependsOnPast tasks it freed.

        Runs with work are looked for when this replica may have made some (reports,
        runs started, a last pass that did something) or the look found some (what
        other replicas left, a run past its deadline or of a deleted DAG), and once per
        quiet round interval with the quiet runs too (the net for runs without a
        deadline: started before migration 0012).
        """
        loop = self.loop
        cfg = loop.config
        quiet = self.dues.quiet(now)
        if not quiet and not loop._due(self.dues.examine, now):
            return
        stats = loop._transaction(
            "examine",
            lambda s: examine_running_runs(
                s, loop.specs, now, cfg.runs_examined_per_tick, quiet=quiet
            ),
            None,
            report,
        )
        if quiet:
            self.dues.quiet.ran(now)
        if stats is None:
            self.dues.examine.ran(now, again=True)
            return
        report.runs_examined = stats.runs
        report.runs_finished = len(stats.finished_runs)
        if stats.finished_runs:
            self.dues.runs.tell()  # a queued run may start now
        report.tasks_scheduled = stats.scheduled + stats.retried
        if report.tasks_scheduled or stats.finished_runs:
            self.dues.queue.tell()  # tasks wait for a slot, or an ended run freed some
        # Runs taken without the quiet ones all had work, and what they did may leave
        # more (a full batch, a run at the cap of settling rounds): look again next tick.
        # So does a pass that decided anything. (A full quiet pass alone says nothing:
        # the runs with work come first in it.)
        worked = stats.runs > 0 and not quiet
        decided = stats.settled or report.tasks_scheduled or stats.finished_runs
        self.dues.examine.ran(now, again=worked or bool(decided))
        loop._wake_next_runs(sorted(stats.settled_ok_runs), report)
