"""The scheduler's knobs, with Airflow-like defaults; one frozen object passed down."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    # Sleep between ticks when a tick found nothing to do (seconds).
    tick_interval: float = 1.0
    # Phase 1: scheduled runs created per tick, at most (Airflow's
    # max_dagruns_to_create_per_loop, 10 there; also the DAGs whose queued runs start).
    # Sluice leaves the pace to the budget below, so the runs of DAGs due together (a
    # minute's burst) are created in a tick or two (ADR 0023).
    runs_created_per_tick: int = 10_000
    # Phase 1 works in batches of at most this many runs (and DAGs whose queued runs
    # start), each a short transaction of its own; another follows while the last came
    # back full, until the phase has taken `runs_phase_budget` seconds of the tick (the
    # next tick goes on where it stopped).
    runs_created_per_batch: int = 250
    runs_phase_budget: float = 0.5
    # An idle wait ends when the next scheduled run falls due (off: it lasts the tick
    # interval, as Airflow's idle sleep does; the like-for-like benchmark's setting).
    wake_at_next_due: bool = True
    # Phase 2: running runs examined per tick (Airflow: max_dagruns_per_loop_to_schedule).
    runs_examined_per_tick: int = 20
    # Phase 2 also takes runs without work, round-robin, once per this interval (shared
    # by the live replicas). A run past its dagrunTimeout, of a deleted DAG or of a
    # version that cannot be loaded is work, found at once (its `deadline`, ADR 0024);
    # this round is the net for runs started before the deadline column existed.
    quiet_round_interval: float = 30.0
    # Phase 3: scheduled task instances read per critical section (Airflow: max_tis_per_query).
    max_tis_per_query: int = 512
    # Critical-section batches per tick: another follows only while the last came back full.
    critical_batches_per_tick: int = 8
    # Outbox rows claimed per dispatch.
    dispatch_batch: int = 512
    # Phase 4: housekeeping periods and thresholds (seconds). The replica heartbeats
    # itself and the tries its executor runs once per heartbeat interval.
    heartbeat_interval: float = 5.0
    scheduler_dead_after: float = 30.0
    zombie_threshold: float = 60.0
    # Tries that heartbeat themselves (task pods): one whose pod still runs but whose
    # heartbeat is older than this is killed and fails as a zombie (Airflow:
    # task_instance_heartbeat_timeout). A stale heartbeat with the pod gone is a zombie
    # after zombie_threshold.
    heartbeat_kill_threshold: float = 300.0
    zombie_check_interval: float = 10.0
    # A counter reconciliation pass starts once per interval and goes on one step per
    # tick, each step at most this many task instances (one short transaction).
    reconcile_interval: float = 60.0
    reconcile_tasks_per_tick: int = 1_000
    # A try queued longer than this goes back to `scheduled`, at most max_requeues times,
    # then fails (Airflow: task_queued_timeout).
    queued_timeout: float = 600.0
    max_requeues: int = 2
