"""The scheduler loop: four phases per tick, each its own short transaction.

1. create runs the timetables call for, start queued runs within maxActiveRuns and
   decide their first tasks, in batches while a time budget lasts (ADR 0023; with a
   `Waker`, only when something may have changed: see `phase_runs.Runs.due`);
2. examine running runs: trigger rules, retries, timeouts, run completion;
3. the critical section: queue scheduled tasks within pools and limits, in
   batches of `max_tis_per_query`, each its own short transaction, repeated
   while batches come back full (up to `critical_batches_per_tick`);
4. housekeeping: hand queued tries to the executor (and claim alerts) in one
   transaction, apply its reports and heartbeats, scheduler heartbeats,
   zombies, counter reconciliation.

With a `Waker`, phases 2 to 4 run like phase 1, when something may have
given them work (`Due`): this replica did (a report applied frees a slot and
may make tasks ready, tasks scheduled wait for the critical section, tries
queued wait for a claim), a notification came, or their last pass came back
full or failed; and otherwise when the look once per tick interval (one
statement for all of them, `probe.py`) finds them work that other replicas,
the clock or a lost notification brought. A tick that follows a busy one so
skips the statements that would find nothing, and an idle replica still looks
at everything once per tick interval (with N live replicas, each once per N
intervals: `_share_looks`). Without a waker every phase runs every tick.

A phase that meets a busy lock skips this tick; a deadlock is retried with
backoff; any other error is logged and the loop goes on (invariant 6). The
executor gets the same policy: an error from any of its calls is logged,
counted in the tick's report and survived; a batch it failed to start fails
with the reason (and retries as the task allows). The
clock is injected so tests can drive time. An idle loop sleeps one tick
interval, or less when a `Waker` hears that work appeared.

Each tick and phase is timed, and the numbers the loop already holds go to
`metrics/families.py` with no statement of their own; `LoopHealth` records
when ticks end and whether they reached the database, for the readiness and
liveness probes (ADR 0020).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import structlog
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from sluice.db import locks
from sluice.db.dags import SpecCache
from sluice.db.wakeups import Waker
from sluice.executors.base import Executor
from sluice.logs import first_line
from sluice.metrics import families as metrics
from sluice.metrics.health import LoopHealth
from sluice.scheduler import (
    contact,
    housekeeping,
    past,
    phase_critical,
    phase_examine,
    phase_handover,
    phase_runs,
    probe,
    reconcile,
    ticks,
)
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.isolation import ISOLATE, BatchFailed
from sluice.scheduler.results import Applied, apply_task_events
from sluice.scheduler.ticks import Clock, Due, TickReport
from sluice.spec.states import TaskState

# TickReport and Due live with the phases (`ticks.py`); what a tick returns is the loop's.
__all__ = ["Clock", "Due", "SchedulerLoop", "TickReport", "utcnow"]

log = structlog.get_logger("sluice.scheduler")

T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


class SchedulerLoop:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: Executor,
        config: SchedulerConfig | None = None,
        *,
        clock: Clock = utcnow,
        sleep: Callable[[float], None] = time.sleep,
        waker: Waker | None = None,
        health: LoopHealth | None = None,
        on_change: Callable[[], None] | None = None,
        on_replicas: Callable[[int], None] | None = None,
        recording: contact.HeartbeatRecording | None = None,
    ) -> None:
        self.sessions = sessions
        self.executor = executor
        self.config = config or SchedulerConfig()
        # The last error logged by phase and how often it came again since: in an outage
        # every tick fails the same way, and one traceback says it (ticks every few s).
        self._last_errors: dict[str, tuple[str, int]] = {}
        self.clock = clock
        self.sleep = sleep
        self.waker = waker
        # Called after a tick that changed a state or heard a notification (the status
        # publisher's `wake`: the outbox may have rows).
        self.on_change = on_change
        self._changed = False  # this tick settled a try outside the report's counts
        # When ticks end, for the probes (`sluice scheduler --metrics-port`).
        self.health = health or LoopHealth()
        self.specs = SpecCache()
        self._conn: Connection | None = None  # the tick's connection, while a tick runs
        self._share = False  # a tick runs and has not tried to check its connection out yet
        self._unreachable = False  # this tick could not check its connection out
        # No fallback here: a replica that cannot register exits and is restarted.
        with self.sessions() as session:
            self.job_id: int = housekeeping.register_scheduler(session, self.clock())
            session.commit()
        # When this replica could reach the database: silence is counted only then.
        cfg = self.config
        self.contact = contact.DatabaseContact(
            self.clock(),
            longest=max(
                cfg.scheduler_dead_after, cfg.zombie_threshold, cfg.heartbeat_kill_threshold
            ),
            recording=recording,
        )
        self._last_heartbeat = self.clock()
        self.dues = ticks.Dues.starting(self.config, self.clock)
        self.runs = phase_runs.Runs(self)
        self.examine = phase_examine.Examine(self)
        self.critical = phase_critical.Critical(self)
        self.handover = phase_handover.Handover(self)
        self._reconcile_after: int | None = None  # a pass under way: the last run id reached
        self._reconcile_until: int | None = None  # and the newest run id when it began
        self._replicas = 1  # live replicas at the last heartbeat: they share the looks
        # Told the live replicas' count when it changes (the status publisher shares its
        # own periodic looks the same way).
        self.on_replicas = on_replicas
        self._offsets = random.Random(self.job_id)  # each replica its own phase of them
        self._heard = False  # the idle wait was woken by a notification
        self._tick_monotonic = time.monotonic()

    # -- the tick -----------------------------------------------------------------

    def tick(self) -> TickReport:
        self.health.tick_started()
        with metrics.LOOP_TICK_SECONDS.time(), self._one_connection():
            report = self._tick()
        self.health.tick_ended(
            database_error=report.database_unreached, used_database=report.database_used
        )
        if report.database_answered and not report.errors:
            self._last_errors.clear()  # a good tick ends every series of errors
        if self.on_change is not None and (report.busy or self._changed):
            try:
                self.on_change()
            except Exception as exc:  # never the loop's problem
                self._record_error("on_change", exc, report)
        return report

    @contextlib.contextmanager
    def _one_connection(self) -> Iterator[None]:
        """Every phase of a tick on one pooled connection: at most one checkout (and ping)
        per tick, by the first phase that opens a transaction (a tick that opens none
        takes none).

        Each phase is still its own transaction; if a phase fails on the connection,
        the phases after it go back to a session each from the pool. When the
        connection cannot be had, the tick's remaining transactions are not tried,
        since each would wait out the same refusal or timeout on its own: in an
        outage whose connections time out (10 s each), such a tick took over three
        minutes (about 18 attempts, the database clock's included), close to the
        liveness limit. It ends at once instead, with the error (readiness counts it
        as a tick that did not reach the database), and the replica tries again
        after its idle wait; the executor's reports wait in the loop meanwhile.
        """
        self._share = True
        self._unreachable = False
        try:
            yield
        finally:
            self._share = False
            self._unreachable = False
            self._drop_connection()

    def _tick_connection(self, report: TickReport | None) -> Connection | None:
        """The tick's shared connection, checked out on first use. If that fails, the
        error is recorded (phase `connect`) and the tick's transactions are skipped."""
        if self._conn is None and self._share:
            self._share = False  # one try per tick
            bind = self.sessions.kw.get("bind")
            if isinstance(bind, Engine):
                try:
                    self._conn = bind.connect()
                except DBAPIError as exc:
                    self._unreachable = True
                    if contact.unreached(exc):
                        self.contact.failed()
                    self._record_error("connect", exc, report)
        return self._conn

    def _drop_connection(self) -> None:
        self._share = False  # the rest of the tick: a session each
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(DBAPIError):
                conn.close()

    def _tick(self) -> TickReport:
        report = TickReport()
        # This machine's monotonic time with the tick's `now`: what a try adopted with `now`
        # as its heartbeat has its local lease renewed to (`heartbeats_recorded`).
        self._tick_monotonic = time.monotonic()
        now = self.clock()
        self._changed = False
        self._listen()
        self._probe(now, report)

        # Phase 1: runs.
        self.runs.tick(now, report)

        # Phase 2: examine running runs (quiet ones too, once per quiet round interval).
        self.examine.tick(now, report)

        # Phase 3: the critical section.
        self.critical.tick(now, report)

        # Phase 4: hand over, collect reports, housekeeping.
        self.handover.tick(now, report)
        with ticks.timed("housekeeping"):
            self._housekeeping(now, report)
        return report

    def _due(self, due: Due, now: datetime) -> bool:
        """Without a waker, a step runs every tick: nothing would tell it what other
        processes changed (an unpause, a manual run) before the next tick interval."""
        return self.waker is None or due(now)

    def _listen(self) -> None:
        """A notification (a DAG registered or unpaused, a run inserted or ended, by any
        process) may have given every phase work: each looks this tick."""
        if self.waker is not None and (self.waker.pending() or self._heard):
            for due in (self.dues.runs, self.dues.examine, self.dues.queue, self.dues.claims):
                due.tell()
            self._changed = True  # another process changed a run or a DAG: status to publish
        self._heard = False

    def _probe(self, now: datetime, report: TickReport) -> None:
        """The look once per tick interval for work no one told this replica of, for five
        steps in one statement (`probe.py`): each step with work is told. Without a
        waker the first four run every tick, and the alerts are looked for once per
        interval, as before."""
        if not self.dues.probe(now):
            return
        self.dues.probe.ran(now)
        if self.waker is None:
            self.dues.alerts.tell()
            return
        steps = self.dues.told_only
        if all(due.told for due in steps):
            return  # every step looks this tick anyway
        work = self._transaction("probe", lambda s: probe.look(s, now), None, report)
        found = (
            steps
            if work is None  # the look failed: every step looks for itself
            else [
                due
                for due, has in zip(
                    steps,
                    (work.runs, work.examine, work.queue, work.claims, work.alerts),
                    strict=True,
                )
                if has
            ]
        )
        for due in found:
            due.tell()

    def _executor_call(
        self, what: str, call: Callable[[], T], default: T, report: TickReport | None
    ) -> T:
        """An executor call under the loop's error policy: logged, counted, survived."""
        try:
            return call()
        except Exception as exc:
            self._record_error(f"executor.{what}", exc, report)
            return default

    def _settled(self, applied: list[Applied]) -> None:
        """Tries this replica settled: their slots are free and their downstream tasks
        may be ready or their runs complete (phases 2 and 3 look next tick); a failed
        try's alert is in the outbox (this replica looks for it next tick)."""
        if not applied:
            return
        self._changed = True
        self.dues.examine.tell()
        self.dues.queue.tell()
        if any(a.state in (TaskState.FAILED, TaskState.UP_FOR_RETRY) for a in applied):
            self.dues.alerts.tell()

    def _wake_past(self, applied: list[Applied], report: TickReport) -> None:
        """Committed settlements may free the next run's dependsOnPast tasks: flag them,
        in a transaction of their own that locks those runs first."""
        self._wake_next_runs([a.wakes_run for a in applied if a.wakes_run is not None], report)

    def _wake_next_runs(self, run_ids: list[int], report: TickReport) -> None:
        if run_ids:
            self._transaction("wake_past", lambda s: past.wake_next_runs(s, run_ids), 0, report)
            self.dues.examine.tell()  # the tasks it flagged are decided next tick

    def _housekeeping(self, now: datetime, report: TickReport) -> None:
        cfg = self.config
        if (now - self._last_heartbeat).total_seconds() >= cfg.heartbeat_interval:
            self._last_heartbeat = now

            def beat(session: Session) -> int:
                return housekeeping.heartbeat_scheduler(
                    session, self.job_id, now, cfg.scheduler_dead_after, self.contact
                )

            live = self._transaction("heartbeat", beat, None, report)
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
        replicas = max(1, replicas)
        if replicas == self._replicas:
            return
        self._replicas = replicas
        cfg = self.config
        shared = [
            (self.dues.sweep, cfg.zombie_check_interval),
            (self.dues.reconcile, cfg.reconcile_interval),
            (self.dues.quiet, cfg.quiet_round_interval),
        ]
        if self.waker is not None:
            shared.append((self.dues.probe, cfg.tick_interval))
        for due, every in shared:
            due.interval = every * replicas
            if math.isfinite(due.interval):  # a look switched off (infinite) has no phase
                due.last -= timedelta(seconds=self._offsets.uniform(0, due.interval - every))
        if self.on_replicas is not None:
            self.on_replicas(replicas)

    def _reconcile_step(self, after: int, report: TickReport) -> None:
        """One step of the counter reconciliation pass (a failed step ends the pass)."""
        budget, until = self.config.reconcile_tasks_per_tick, self._reconcile_until
        step = self._transaction(
            "reconcile", lambda s: reconcile.reconcile_runs(s, after, budget, until), None, report
        )
        self._reconcile_after = None if step is None else step.through
        self._reconcile_until = None if step is None else step.until
        if step is not None and step.fixed:
            metrics.COUNTER_FIXES.inc(step.fixed)
            log.warning("counters reconciled", rows_fixed=step.fixed)

    def _sweep_stale_tries(self, now: datetime, report: TickReport) -> None:
        """Adopt, report or fail running tries whose heartbeat went stale, and release the
        stopping tries of dead replicas (five transactions)."""
        cfg = self.config

        # Its own transaction: nothing about one try can keep dead replicas from being seen.
        no_ids: list[int] = []
        self._transaction(
            "mark_dead",
            lambda s: housekeeping.mark_dead_schedulers(
                s, now, cfg.scheduler_dead_after, self.contact
            ),
            no_ids,
            report,
        )
        # Tries ended under their process whose replica died: stopped once silent long
        # enough for a zombie's verdict (or a pod's own stop), so a cleared task goes on.
        released = self._transaction(
            "release_stopped",
            lambda s: housekeeping.release_stopped(
                s,
                now,
                threshold=max(cfg.zombie_threshold, cfg.heartbeat_kill_threshold),
                dead_after=cfg.scheduler_dead_after,
                contact=self.contact,
            ),
            no_ids,
            report,
        )
        if released:
            self.dues.examine.tell()

        def plan(session: Session) -> housekeeping.StalePlan:
            return housekeeping.plan_stale_tries(
                session,
                self.specs,
                self.executor,
                now,
                job_id=self.job_id,
                threshold=cfg.zombie_threshold,
                dead_after=cfg.scheduler_dead_after,
                kill_after=cfg.heartbeat_kill_threshold,
                contact=self.contact,
            )

        stale = self._transaction("stale_tries", plan, None, report)
        if stale is None:
            return
        if stale.events:
            nothing: list[Applied] = []
            settled = self._transaction(
                "zombies",
                lambda s: apply_task_events(
                    s, stale.events, self.specs, now, evidence=stale.evidence
                ),
                nothing,
                report,
            )
            self._settled(settled)
            self._wake_past(settled, report)
            for applied in settled:
                if applied.ti_id in stale.evidence:
                    metrics.ZOMBIES.inc()
                    log.warning("zombie task", ti=applied.ti_id, try_number=applied.try_number)
            settled_keys = {(a.ti_id, a.try_number) for a in settled}
            for key in stale.kill:
                if key in settled_keys:  # only a verdict this replica made stops the try
                    self._executor_call(
                        "kill",
                        lambda key=key: self.executor.kill(  # type: ignore[misc]
                            key, "zombie: running but no heartbeat", stale.kill[key]
                        ),
                        None,
                        report,
                    )
        if stale.restarts:
            self._restart(stale.restarts, now, report)
        if stale.adoptions:
            no_adoptions: list[housekeeping.Adoption] = []
            taken = self._transaction(
                "adopt",
                # The time of the adoption, not of the tick's start: the plan's executor
                # reads may have blocked long since (an unreachable API server).
                lambda s: housekeeping.adopt_tries(s, stale.adoptions, self.job_id, self.clock()),
                no_adoptions,
                report,
            )
            metrics.ADOPTIONS.inc(len(taken))
            for adoption in taken:
                self._executor_call(
                    "adopt",
                    lambda a=adoption: self.executor.adopt(  # type: ignore[misc]
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
                self._executor_call(
                    "heartbeats_recorded",
                    lambda: self.executor.heartbeats_recorded(keys, self._tick_monotonic),
                    None,
                    report,
                )

    def _restart(
        self, restarts: list[housekeeping.Restart], now: datetime, report: TickReport
    ) -> None:
        """Queue again the tries dead replicas claimed but never started (same try)."""
        nothing: list[housekeeping.Restart] = []
        taken = self._transaction(
            "restart",
            lambda s: housekeeping.restart_tries(s, restarts, self.job_id, now),
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
        cfg = self.config
        nothing_failed: list[Applied] = []
        failed = self._transaction(
            "queued_timeout_fail",
            lambda s: housekeeping.fail_stuck_tasks(
                s, self.specs, now, queued_timeout=cfg.queued_timeout, max_requeues=cfg.max_requeues
            ),
            nothing_failed,
            report,
        )
        requeued = self._transaction(
            "queued_timeout_requeue",
            lambda s: housekeeping.requeue_stuck_tasks(
                s, now, queued_timeout=cfg.queued_timeout, max_requeues=cfg.max_requeues
            ),
            0,
            report,
        )
        self._settled(failed)
        if requeued:
            self.dues.queue.tell()  # scheduled again: they wait for a slot
        if requeued or failed:
            log.warning("tasks stuck in queued", requeued=requeued, failed=len(failed))

    # -- running ------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool]) -> None:
        try:
            while not should_stop():
                try:
                    report = self.tick()
                except Exception as exc:  # a defect outside any phase: never end the replica
                    self._record_error("tick", exc, None)
                    self.sleep(self.config.tick_interval)
                    continue
                if not report.busy:
                    self.idle()
        finally:
            self.health.stopped()

    def idle(self) -> None:
        """Wait one tick interval, or until the waker hears that work appeared, or until
        the next scheduled run falls due (a schedule falling due notifies no one)."""
        wait = self.config.tick_interval
        next_due = self.runs.next_due
        if next_due is not None and self.config.wake_at_next_due:
            until_due = (next_due - self.clock()).total_seconds()
            wait = min(wait, max(0.0, until_due))
        if self.waker is not None:
            self._heard = self.waker.wait(wait) or self._heard
        else:
            self.sleep(wait)

    def close(self) -> None:
        self.executor.shutdown()
        if self.waker is not None:
            self.waker.close()
        self._transaction(
            "end", lambda s: housekeeping.end_scheduler(s, self.job_id, self.clock()), None
        )

    def _transaction(
        self,
        phase: str,
        work: Callable[[Session], T],
        default: T,
        report: TickReport | None = None,
    ) -> T:
        """Run one unit of work in its own transaction, with the loop's error policy."""
        isolate = False
        for attempt in range(_DEADLOCK_RETRIES):
            if report is not None:
                report.database_used = True
            conn = self._tick_connection(report)
            if self._unreachable:  # this tick could not connect: no transaction is tried
                return default
            bound = {} if conn is None else {"bind": conn}
            failure: Exception | None = None
            with self.sessions(**bound, info={ISOLATE: isolate}) as session:
                try:
                    result = work(session)
                    session.commit()
                    self.contact.answered(self.clock())
                    if report is not None:
                        report.database_answered = True
                    return result
                except Exception as exc:
                    session.rollback()
                    failure = exc
            assert failure is not None
            if isinstance(failure, BatchFailed) and not isolate:
                isolate = True  # again, each item of the failed batch in its own savepoint
                continue
            self._drop_connection()  # maybe broken: the next phase takes a fresh one
            if contact.unreached(failure):
                self.contact.failed()
            if isinstance(failure, DBAPIError):
                conflict = locks.is_lock_not_available(failure)
                if report is not None and (conflict or locks.is_retryable_conflict(failure)):
                    report.database_answered = True  # it answered: another replica holds a lock
                if conflict:
                    return default
                if locks.is_retryable_conflict(failure) and attempt + 1 < _DEADLOCK_RETRIES:
                    log.info("lock conflict, retrying", phase=phase, attempt=attempt + 1)
                    self.sleep(0.05 * 2**attempt)
                    continue
            self._record_error(phase, failure, report)
            return default
        return default

    def _record_error(self, phase: str, exc: Exception, report: TickReport | None) -> None:
        """Count, log and report a failed phase. The first of a series of the same error
        in a phase is logged with its traceback; its repeats, one line each with their
        count, until a tick reaches the database again (then a new series starts)."""
        text = first_line(exc)
        last = self._last_errors.get(phase)
        repeated = last[1] + 1 if last is not None and last[0] == text else 0
        self._last_errors[phase] = (text, repeated)
        if repeated:
            log.error("phase failed again", phase=phase, error=text, repeated=repeated)
        else:
            log.error("phase failed", phase=phase, error=text, exc_info=exc)
        self._report_error(phase, exc, report)

    @staticmethod
    def _report_error(phase: str, exc: Exception, report: TickReport | None) -> None:
        metrics.LOOP_ERRORS.labels(phase).inc()
        if report is not None:
            report.errors.append(f"{phase}: {first_line(exc)}")
            if not phase.startswith("executor.") and report.database_error is None:
                report.database_error = report.errors[-1]


_DEADLOCK_RETRIES = 4
