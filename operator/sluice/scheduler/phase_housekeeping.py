"""Phase 4 of a tick, its housekeeping: the replica's heartbeat (and with it the live
replicas' count, by which the looks at the whole fleet's work are shared), the sweeps
for stale tries and tries stuck in `queued` once per `zombie_check_interval`, and the
counter reconciliation, one step a tick (`housekeeping.py`, `reconcile.py`).

The stale sweep adopts, reports, queues again or fails as zombies the tries whose
heartbeat went stale, and releases the stopping tries of dead replicas, each step its
own transaction; the executor acts only after the commit that decided it.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

import structlog
from sqlalchemy.orm import Session

from sluice.metrics import families as metrics
from sluice.scheduler import housekeeping, reconcile, ticks
from sluice.scheduler.results import Applied, apply_task_events
from sluice.scheduler.ticks import TickReport

log = structlog.get_logger("sluice.scheduler")


class Housekeeping:
    def __init__(self, loop: ticks.Loop) -> None:
        self.loop = loop
        self.dues = loop.dues
        self._last_heartbeat = loop.clock()
        self._reconcile_after: int | None = None  # a pass under way: the last run id reached
        self._reconcile_until: int | None = None  # and the newest run id when it began
        self._replicas = 1  # live replicas at the last heartbeat: they share the looks
        self._offsets = random.Random(loop.job_id)  # each replica its own phase of them

    def tick(self, now: datetime, report: TickReport) -> None:
        with ticks.timed("housekeeping"):
            self._housekeeping(now, report)

    def _housekeeping(self, now: datetime, report: TickReport) -> None:
        loop = self.loop
        cfg = loop.config
        if (now - self._last_heartbeat).total_seconds() >= cfg.heartbeat_interval:
            self._last_heartbeat = now

            def beat(session: Session) -> int:
                return housekeeping.heartbeat_scheduler(
                    session, loop.job_id, now, cfg.scheduler_dead_after, loop.contact
                )

            live = loop._transaction("heartbeat", beat, None, report)
            if live is not None:
                self._share_looks(live)
        if self.dues.sweep(now):
            self.dues.sweep.ran(now)
            self._sweep_stale_tries(now, report)
            self._handle_stuck_queued(now, report)
        if self._reconcile_after is None and self.dues.reconcile(now):
            self.dues.reconcile.ran(now)
            self._reconcile_after, self._reconcile_until = 0, None
        if self._reconcile_after is not None:
            self._reconcile_step(self._reconcile_after, report)

    def _share_looks(self, replicas: int) -> None:
        """With a waker, the looks once per tick interval are for what this replica cannot
        be told of (other replicas' work, the clock, a lost notification), and any
        replica's look serves them all: with N live replicas each looks once per N tick
        intervals, so together they still look about once per tick interval and an idle
        fleet costs what one idle replica does. The sweeps for stale tries and stuck
        queued tasks, the counter reconciliation and phase 2's quiet round look at the
        whole fleet's work with or without a waker, so they are shared the same way (a
        dead replica's tries are still found about once per `zombie_check_interval`).
        Each replica takes a random phase of its own (seeded by its job id), so their
        looks do not fall together.
        Everything this replica did or was notified of is still looked at on its next
        tick."""
        loop = self.loop
        replicas = max(1, replicas)
        if replicas == self._replicas:
            return
        self._replicas = replicas
        cfg = loop.config
        shared = [
            (self.dues.sweep, cfg.zombie_check_interval),
            (self.dues.reconcile, cfg.reconcile_interval),
            (self.dues.quiet, cfg.quiet_round_interval),
        ]
        if loop.waker is not None:
            shared.append((self.dues.probe, cfg.tick_interval))
        for due, every in shared:
            due.interval = every * replicas
            if math.isfinite(due.interval):  # a look switched off (infinite) has no phase
                due.last -= timedelta(seconds=self._offsets.uniform(0, due.interval - every))
        if loop.on_replicas is not None:
            loop.on_replicas(replicas)

    def _reconcile_step(self, after: int, report: TickReport) -> None:
        """One step of the counter reconciliation pass (a failed step ends the pass)."""
        loop = self.loop
        budget, until = loop.config.reconcile_tasks_per_tick, self._reconcile_until
        step = loop._transaction(
            "reconcile", lambda s: reconcile.reconcile_runs(s, after, budget, until), None, report
        )
        self._reconcile_after = None if step is None else step.through
        self._reconcile_until = None if step is None else step.until
        if step is not None and step.fixed:
            metrics.COUNTER_FIXES.inc(step.fixed)
            log.warning("counters reconciled", rows_fixed=step.fixed)

    def _sweep_stale_tries(self, now: datetime, report: TickReport) -> None:
        """Adopt, report or fail running tries whose heartbeat went stale, and release the
        stopping tries of dead replicas (up to six transactions: mark_dead, release_stopped,
        stale_tries, zombies, restart, adopt)."""
        loop = self.loop
        cfg = loop.config

        # Its own transaction: nothing about one try can keep dead replicas from being seen.
        no_ids: list[int] = []
        loop._transaction(
            "mark_dead",
            lambda s: housekeeping.mark_dead_schedulers(
                s, now, cfg.scheduler_dead_after, loop.contact
            ),
            no_ids,
            report,
        )
        # Tries ended under their process whose replica died: stopped once silent long
        # enough for a zombie's verdict (or a pod's own stop), so a cleared task goes on.
        released = loop._transaction(
            "release_stopped",
            lambda s: housekeeping.release_stopped(
                s,
                now,
                threshold=max(cfg.zombie_threshold, cfg.heartbeat_kill_threshold),
                dead_after=cfg.scheduler_dead_after,
                contact=loop.contact,
            ),
            no_ids,
            report,
        )
        if released:
            self.dues.examine.tell()

        def plan(session: Session) -> housekeeping.StalePlan:
            return housekeeping.plan_stale_tries(
                session,
                loop.specs,
                loop.executor,
                now,
                job_id=loop.job_id,
                threshold=cfg.zombie_threshold,
                dead_after=cfg.scheduler_dead_after,
                kill_after=cfg.heartbeat_kill_threshold,
                contact=loop.contact,
            )

        stale = loop._transaction("stale_tries", plan, None, report)
        if stale is None:
            return
        if stale.events:
            nothing: list[Applied] = []
            settled = loop._transaction(
                "zombies",
                lambda s: apply_task_events(
                    s, stale.events, loop.specs, now, evidence=stale.evidence
                ),
                nothing,
                report,
            )
            loop._settled(settled)
            loop._wake_past(settled, report)
            for applied in settled:
                if applied.ti_id in stale.evidence:
                    metrics.ZOMBIES.inc()
                    log.warning("zombie task", ti=applied.ti_id, try_number=applied.try_number)
            settled_keys = {(a.ti_id, a.try_number) for a in settled}
            for key in stale.kill:
                if key in settled_keys:  # only a verdict this replica made stops the try
                    loop._executor_call(
                        "kill",
                        lambda key=key: loop.executor.kill(  # type: ignore[misc]
                            key, "zombie: running but no heartbeat", stale.kill[key]
                        ),
                        None,
                        report,
                    )
        if stale.restarts:
            self._restart(stale.restarts, now, report)
        if stale.adoptions:
            no_adoptions: list[housekeeping.Adoption] = []
            taken = loop._transaction(
                "adopt",
                # The time of the adoption, not of the tick's start: the plan's executor
                # reads may have blocked long since (an unreachable API server).
                lambda s: housekeeping.adopt_tries(s, stale.adoptions, loop.job_id, loop.clock()),
                no_adoptions,
                report,
            )
            metrics.ADOPTIONS.inc(len(taken))
            for adoption in taken:
                loop._executor_call(
                    "adopt",
                    lambda a=adoption: loop.executor.adopt(  # type: ignore[misc]
                        a.key,
                        a.external_id,
                        elapsed=a.elapsed,
                        timeout=a.timeout,
                        skip_on_exit_code=a.skip_on_exit_code,
                    ),
                    None,
                    report,
                )
                log.info(
                    "adopted try",
                    ti=adoption.key[0],
                    try_number=adoption.key[1],
                    from_job=adoption.previous_owner,
                )
            if taken:
                # The adoption wrote `now` as their heartbeat: their leases count from then.
                keys = [adoption.key for adoption in taken]
                loop._executor_call(
                    "heartbeats_recorded",
                    lambda: loop.executor.heartbeats_recorded(keys, loop._tick_monotonic),
                    None,
                    report,
                )

    def _restart(
        self, restarts: list[housekeeping.Restart], now: datetime, report: TickReport
    ) -> None:
        """Queue again the tries dead replicas claimed but never started (same try)."""
        loop = self.loop
        nothing: list[housekeeping.Restart] = []
        taken = loop._transaction(
            "restart",
            lambda s: housekeeping.restart_tries(s, restarts, loop.job_id, now),
            nothing,
            report,
        )
        for restart in taken:
            log.warning(
                "queued a never-started try again",
                ti=restart.key[0],
                try_number=restart.key[1],
                from_job=restart.previous_owner,
                external_id=restart.external_id,
            )
        if taken:
            metrics.TRIES_REQUEUED_UNSTARTED.inc(len(taken))
            self.dues.claims.tell()

    def _handle_stuck_queued(self, now: datetime, report: TickReport) -> None:
        loop = self.loop
        cfg = loop.config
        nothing_failed: list[Applied] = []
        failed = loop._transaction(
            "queued_timeout_fail",
            lambda s: housekeeping.fail_stuck_tasks(
                s, loop.specs, now, queued_timeout=cfg.queued_timeout, max_requeues=cfg.max_requeues
            ),
            nothing_failed,
            report,
        )
        requeued = loop._transaction(
            "queued_timeout_requeue",
            lambda s: housekeeping.requeue_stuck_tasks(
                s, now, queued_timeout=cfg.queued_timeout, max_requeues=cfg.max_requeues
            ),
            0,
            report,
        )
        loop._settled(failed)
        if requeued:
            self.dues.queue.tell()  # scheduled again: they wait for a slot
        if requeued or failed:
            log.warning("tasks stuck in queued", requeued=requeued, failed=len(failed))
