"""The scheduler loop: four phases per tick, each in a module of its own, each step its
own short transaction.

1. runs (`phase_runs.py`): create runs the timetables call for, start queued runs
   within maxActiveRuns and decide their first tasks, in batches while a time
   budget lasts (ADR 0023; with a `Waker`, only when something may have changed:
   see `phase_runs.Runs.due`);
2. examine (`phase_examine.py`): running runs: trigger rules, retries, timeouts,
   run completion;
3. the critical section (`phase_critical.py`): queue scheduled tasks within pools
   and limits, in batches of `max_tis_per_query`, each its own short transaction,
   repeated while batches come back full (up to `critical_batches_per_tick`);
4. hand-over and housekeeping: hand queued tries to the executor (and claim
   alerts) in one transaction, apply its reports and heartbeats
   (`phase_handover.py`); scheduler heartbeats, zombies, counter reconciliation
   (`phase_housekeeping.py`).

With a `Waker`, phases 2 to 4 run like phase 1, when something may have
given them work (`ticks.Due`): this replica did (a report applied frees a slot and
may make tasks ready, tasks scheduled wait for the critical section, tries
queued wait for a claim), a notification came, or their last pass came back
full or failed; and otherwise when the look once per tick interval (one
statement for all of them, `probe.py`) finds them work that other replicas,
the clock or a lost notification brought. A tick that follows a busy one so
skips the statements that would find nothing, and an idle replica still looks
at everything once per tick interval (with N live replicas, each once per N
intervals: `phase_housekeeping`'s `_share_looks`). Without a waker phases 2 and 3
run every tick; phase 1 runs when told, on the tick after an idle one and once per
tick interval (ADR 0049); phase 4's claims from the outbox and alerts run when this
replica gave them work and otherwise once per tick interval (the critical section
starts what it queues itself, ADR 0047: the outbox holds only what others left).

This module keeps what the phases share: the tick's order and its one connection,
the notifications and the look that tell the phases, the one error policy
(`_transaction`, `_executor_call`, `_record_error`) and what a settled try tells
the others (`_settled`, `_wake_past`). A phase that meets a busy lock skips this
tick; a deadlock is retried with backoff; any other error is logged and the loop
goes on (invariant 6). The executor gets the same policy: an error from any of its
calls is logged, counted in the tick's report and survived; a batch it failed to
start fails with the reason (and retries as the task allows). The
clock is injected so tests can drive time. An idle loop sleeps one tick
interval, or less when a `Waker` hears that work appeared.

Each tick and phase is timed, and the numbers the loop already holds go to
`metrics/families.py` with no statement of their own; `LoopHealth` records
when ticks end and whether they reached the database, for the readiness and
liveness probes (ADR 0020).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
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
    phase_housekeeping,
    phase_runs,
    probe,
    ticks,
)
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.isolation import ISOLATE, BatchFailed
from sluice.scheduler.results import Applied
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
        self.dues = ticks.Dues.starting(self.config, self.clock)
        self.runs = phase_runs.Runs(self)
        self.examine = phase_examine.Examine(self)
        self.handover = phase_handover.Handover(self)
        self.critical = phase_critical.Critical(self, self.handover.start)
        self.housekeeping = phase_housekeeping.Housekeeping(self)
        # Told the live replicas' count when it changes (the status publisher shares its
        # own periodic looks the same way).
        self.on_replicas = on_replicas
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
        if self.waker is None and not report.busy:
            # Without a waker phase 1 looks on the tick after an idle one: what other
            # processes changed meanwhile (an unpause, a manual run) shows up there.
            self.dues.runs.tell()
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
        self.housekeeping.tick(now, report)
        return report

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
        waker phases 2 and 3 run every tick, and phase 1, the outbox's claims and the
        alerts are looked for once per interval (no statement for the look: each
        step's own is as cheap)."""
        if not self.dues.probe(now):
            return
        self.dues.probe.ran(now)
        if self.waker is None:
            self.dues.runs.tell()
            self.dues.claims.tell()
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

    # -- what the phases share ----------------------------------------------------

    def _due(self, due: Due, now: datetime) -> bool:
        """Without a waker, a step runs every tick: nothing would tell it what other
        processes changed (an unpause, a manual run) before the next tick interval.
        (Phase 1 without a waker has its own rule, `phase_runs.Runs.due`.)"""
        return self.waker is None or due(now)

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
