"""Phase 4 of a tick, its hand-over: claim the queued tries left on the outbox and
pending alerts and hand the tries to the executor (`dispatch.py`), then apply the
executor's reports and heartbeat (and fence) the tries it runs (`results.py`,
`housekeeping.heartbeat_tries`). The critical section claims what it queues itself
and starts it through `start` (ADR 0047).

Every executor call is under the loop's error policy (`_executor_call`): a batch the
executor failed to start fails with the reason, through the same reports as any other
end (kept here until they go in). A report applied frees a slot and may make tasks
ready or a run complete: the loop tells phases 2 and 3 (`_settled`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy.orm import Session

from sluice.executors.base import TaskEvent, TaskLaunch
from sluice.logs import first_line
from sluice.metrics import families as metrics
from sluice.scheduler import housekeeping, ticks
from sluice.scheduler.dispatch import claim_alerts, claim_task_starts
from sluice.scheduler.isolation import batch_or_each
from sluice.scheduler.results import Applied, apply_task_events
from sluice.scheduler.ticks import TickReport
from sluice.spec.states import TaskState

log = structlog.get_logger("sluice.scheduler")


class Handover:
    def __init__(self, loop: ticks.Loop) -> None:
        self.loop = loop
        self.dues = loop.dues
        # The executor's reports not yet applied (a failed transaction keeps them), and
        # the ends of tries it failed to start or stopped: they go in with the next.
        self._pending_events: list[TaskEvent] = []
        self._last_try_heartbeat = loop.clock()
        self._beaten: set[tuple[int, int]] = set()  # tries heartbeated since the last full beat

    def tick(self, now: datetime, report: TickReport) -> None:
        with ticks.timed("dispatch"):
            report.tasks_started += self._dispatch(now, report)
        with ticks.timed("executor_events"):
            report.events_applied = self._sync_executor(report)

    def _dispatch(self, now: datetime, report: TickReport) -> int:
        """Claim queued tries and pending alerts, a batch per transaction; act after each commit.

        The critical section claims what it queues (ADR 0047); what is left for
        this claim is what it queued beyond `dispatch_batch`, tries the sweep
        queued again for a replica that died before starting them, and any other
        writer's `start_task` rows. Queued tries are claimed when this replica
        left some, when the last claim came back full or failed, and otherwise
        once per tick interval (tries other replicas queued and did not claim),
        with a waker or without. Alerts are looked for when this replica failed a
        try since its last look (it wrote the alert), when the last look came back
        full, and otherwise once per tick interval (alerts written by replicas that
        died since).
        """
        loop = self.loop
        nothing: tuple[list[TaskLaunch], list[dict[str, Any]]] = ([], [])
        batch = loop.config.dispatch_batch
        starts_wanted = self.dues.claims(now)
        alerts_wanted = self.dues.alerts(now)
        if not starts_wanted and not alerts_wanted:
            return 0

        def claim(session: Session) -> tuple[list[TaskLaunch], list[dict[str, Any]]]:
            claimed_at = time.monotonic()  # no later than the claim: a local try's lease
            now = loop.clock()
            launches = (
                [
                    replace(launch, claimed_at=claimed_at)
                    for launch in claim_task_starts(
                        session,
                        loop.specs,
                        now,
                        job_id=loop.job_id,
                        executor_name=loop.executor.name,
                        limit=batch,
                        planned_id=loop.executor.planned_external_id,
                    )
                ]
                if starts_wanted
                else []
            )
            return launches, claim_alerts(session, now, limit=batch) if alerts_wanted else []

        started = 0
        more_starts = more_alerts = False
        for _ in range(loop.config.critical_batches_per_tick):
            errors = len(report.errors)
            launches, alerts = loop._transaction("dispatch", claim, nothing, report)
            failed = len(report.errors) > errors
            # Delivered at once after the commit that took them off the outbox (at most
            # once): not after the starts, which may take long, or never come.
            for alert in alerts:
                log.warning("alert: task try failed", **alert)
            # Started only after the claim committed: at most one start per try.
            if launches:
                self.start(launches, report)
            more_alerts = more_alerts or failed or len(alerts) >= batch  # look again next tick
            more_starts = failed or len(launches) >= batch
            started += len(launches)
            if not more_starts:
                break
        if starts_wanted:
            self.dues.claims.ran(now, again=more_starts)
        if alerts_wanted:
            self.dues.alerts.ran(now, again=more_alerts)
        return started

    def start(self, launches: list[TaskLaunch], report: TickReport) -> None:
        """Hand claimed tries to the executor; if it raises, the ones it did not start fail
        with the reason.

        A failure here (a spawn that raised, an API client that blew up) goes
        through the guarded report path like any other end, so the try retries
        if its task allows, and never waits for the zombie sweep. The tries of the
        batch the executor did start before it raised run on as usual: failing them
        would record them ended while they run (and free their pool slots) until
        fencing killed them.
        """
        loop = self.loop
        try:
            loop.executor.start(launches)
        except Exception as exc:
            loop._record_error("executor.start", exc, report)
            reason = f"the executor could not start the try: {first_line(exc)}"
            nothing: list[tuple[int, int]] = []
            started = set(loop._executor_call("alive", loop.executor.alive, nothing, report))
            self._pending_events.extend(
                TaskEvent(launch.ti_id, launch.try_number, TaskState.FAILED, reason=reason)
                for launch in launches
                if launch.key not in started
            )

    def _sync_executor(self, report: TickReport) -> int:
        """Apply the executor's reports; heartbeat (and fence) the tries it runs.

        Every try is heartbeated once per heartbeat interval, and a try new to
        the executor at once (its external id is what lets another replica adopt it).
        """
        loop = self.loop
        no_events: list[TaskEvent] = []
        self._pending_events.extend(
            loop._executor_call("poll", loop.executor.poll, no_events, report)
        )
        events = self._pending_events
        no_ids: dict[tuple[int, int], str] = {}
        running = loop._executor_call("external_ids", loop.executor.external_ids, no_ids, report)
        metrics.EXECUTOR_RUNNING_TRIES.set(len(running))
        now = loop.clock()
        every = (now - self._last_try_heartbeat).total_seconds() >= loop.config.heartbeat_interval
        beat = running if every else {k: v for k, v in running.items() if k not in self._beaten}
        if not events and not beat:  # nothing to apply or to heartbeat: no transaction
            if every:
                self._last_try_heartbeat = now
                self._beaten = set(running)
            return 0

        beat_at = time.monotonic()

        def apply(session: Session) -> tuple[list[Applied], housekeeping.Fence]:
            nonlocal beat_at
            beat_at = time.monotonic()  # no later than the heartbeats' timestamp
            now = loop.clock()
            applied, _ = batch_or_each(
                session,
                events,
                lambda batch: apply_task_events(session, batch, loop.specs, now),
                what="applying a task report",
                describe=lambda event: event.key,
            )
            fence = housekeeping.heartbeat_tries(
                session, beat, loop.job_id, now, refresh=not loop.executor.pods_heartbeat
            )
            loop._settled(applied)
            return applied, fence

        outcome = loop._transaction("executor_events", apply, None, report)
        if outcome is None:
            return 0  # kept in _pending_events for the next tick
        self._pending_events = []
        if every:
            self._last_try_heartbeat = now
            self._beaten = set(running)
        else:
            self._beaten.update(beat)
        applied, fence = outcome
        lost = set(fence.kill) | set(fence.release)
        recorded = [key for key in beat if key not in lost]
        metrics.TRIES_KILLED_EXTERNALLY.inc(len(fence.kill))
        if recorded:
            loop._executor_call(
                "heartbeats_recorded",
                lambda: loop.executor.heartbeats_recorded(recorded, beat_at),
                None,
                report,
            )
        stopping = set(fence.stopping)
        for key in fence.kill:
            stopped = loop._executor_call(
                "kill",
                lambda key=key: self._kill(key, beat.get(key)),  # type: ignore[misc]
                False,
                report,
            )
            if stopped and key in stopping:
                # A try asked to stop has been stopped: its end goes in with the next
                # reports, and a next try may start (`results`, `clearing`).
                self._pending_events.append(
                    TaskEvent(*key, TaskState.FAILED, None, "stopped by its replica")
                )
        for key in fence.release:
            loop._executor_call(
                "release",
                lambda key=key: loop.executor.release(key),  # type: ignore[misc]
                None,
                report,
            )
        loop._wake_past(applied, report)
        # A stop's end waiting to go in makes the tick busy: the next one follows at once.
        return len(applied) + sum(key in stopping for key in fence.kill)

    def _kill(self, key: tuple[int, int], external_id: str | None) -> bool:
        """Kill a try the database no longer has running here; True once it is stopped."""
        self.loop.executor.kill(key, "the database no longer has this try running", external_id)
        return True
