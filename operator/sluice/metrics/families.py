"""Every metric Sluice exports, in one place (prometheus_client's default registry).

The loop, the task API and the sampler record into these; `server.py` serves
them. A label only ever holds a value from a short, fixed set (a phase, a
state, an outcome) or a pool's name (pools are few): never a run, task, DAG or
try id. Every label value is a time series of its own for as long as the
process lives, and a replica sees millions of tries (ADR 0020).

Numbers the loop already has are recorded where it has them, with no query of
their own; numbers that need a query (`sluice_task_instances`, pools, the
status outbox) are set by `sampler.py`, at most once per sample interval, and
are the same on every replica (aggregate them with `max`, not `sum`).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

# A `_created` series beside every counter and histogram doubles the series count and
# carries nothing a dashboard uses.
disable_created_metrics()  # type: ignore[no-untyped-call]

# A tick's phases: the four of the loop, the fourth in its three parts.
PHASES = ("runs", "examine", "critical_section", "dispatch", "executor_events", "housekeeping")
# An idle tick takes a few milliseconds; one in a database outage may take seconds.
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# -- the loop (scheduler/loop.py and its phases, scheduler/phase_*.py) ------------------

LOOP_PHASE_SECONDS = Histogram(
    "sluice_loop_phase_duration_seconds",
    "Time one tick spent in each phase: runs, examine, critical_section, dispatch,"
    " executor_events, housekeeping (runs only on ticks where phase 1 ran)",
    ["phase"],
    buckets=_SECONDS,
)
LOOP_TICK_SECONDS = Histogram(
    "sluice_loop_tick_duration_seconds",
    "Time one tick took, every phase included (not the idle wait after it)",
    buckets=_SECONDS,
)
LOOP_ERRORS = Counter(
    "sluice_loop_errors",
    "Errors the loop logged and survived, by the step that failed (a phase's transaction,"
    " an executor call such as executor.start, or connect: a tick that could not connect)",
    ["phase"],
)
CRITICAL_SECTION_SECONDS = Histogram(
    "sluice_critical_section_duration_seconds",
    "Time one critical-section batch held the slot_pool lock, from taking it to the commit"
    " (also on ticks that only learned that nothing is scheduled)",
    buckets=_SECONDS,
)
CRITICAL_SECTION_BUSY = Counter(
    "sluice_critical_section_busy",
    "Critical-section batches skipped because another replica held the slot_pool lock"
    " (FOR UPDATE NOWAIT lost)",
)
TASKS_EXECUTABLE = Gauge(
    "sluice_tasks_executable",
    "Task instances the critical section found executable within pools and limits, and"
    " queued, in this replica's last tick that took the lock",
)
EXECUTOR_RUNNING_TRIES = Gauge(
    "sluice_executor_running_tries",
    "Tries this replica's executor runs or watches now (its own and adopted ones)",
)
RUNS_CREATED = Counter(
    "sluice_runs_created",
    "Runs this replica's phase 1 created because their schedule called for them",
)
ZOMBIES = Counter(
    "sluice_zombies",
    "Tries this replica failed as zombies (a stale heartbeat, and the executor could not"
    " vouch for them), committed",
)
ADOPTIONS = Counter(
    "sluice_adoptions",
    "Running tries of other replicas (dead ones, or with a stale heartbeat) this replica"
    " adopted because its executor saw them alive",
)
TRIES_REQUEUED_UNSTARTED = Counter(
    "sluice_tries_requeued_unstarted",
    "Tries of dead replicas this replica queued again (same try number) because the replica"
    " died between claiming and starting them and the executor proved no attempt existed",
)
TRIES_KILLED_EXTERNALLY = Counter(
    "sluice_tries_killed_externally",
    "Tries this replica's executor was told to kill because the database no longer had them"
    " running: their end was decided elsewhere (a run timed out, cancelled or marked,"
    " another replica's verdict)",
)
COUNTER_FIXES = Counter(
    "sluice_counter_fixes",
    "Task instances and runs whose counters this replica's reconciliation pass found wrong"
    " and fixed (should stay 0; scheduler_metric keeps the database's total)",
)

# -- sampled from the database (metrics/sampler.py) --------------------------------------

TASK_INSTANCES = Gauge(
    "sluice_task_instances",
    "Task instances in the database by state: scheduled (ready, waiting for a slot),"
    " queued, running; sampled every few seconds",
    ["state"],
)
POOL_OPEN_SLOTS = Gauge(
    "sluice_pool_open_slots",
    "Slots of each pool not held by a queued or running task instance; sampled",
    ["pool"],
)
TASKS_STARVING = Gauge(
    "sluice_tasks_starving",
    "Scheduled task instances in a pool with no open slot, or in a pool that does not"
    " exist; sampled",
)
STATUS_OUTBOX_ROWS = Gauge(
    "sluice_status_outbox_rows",
    "Rows in the status outbox (changes not yet published to Kubernetes objects); sampled",
)
STATUS_OUTBOX_OLDEST_SECONDS = Gauge(
    "sluice_status_outbox_oldest_age_seconds",
    "Age of the status outbox's oldest row (0 when it is empty); sampled",
)

# -- the task API (api/) -------------------------------------------------------------------

TASK_API_HEARTBEATS = Counter(
    "sluice_task_api_heartbeats",
    "Heartbeats posted by task pods, by outcome: accepted, not_running (409),"
    " not_found (404), unauthorized (401), forbidden (403), unavailable (503)",
    ["outcome"],
)
HEARTBEAT_FLUSH_SIZE = Histogram(
    "sluice_task_api_heartbeat_flush_size",
    "Distinct tries one heartbeat flush wrote (one statement each)",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500),
)

# -- the status publisher (status/publisher.py) --------------------------------------------

STATUS_DROPPED = Counter(
    "sluice_status_dropped",
    "Status publications this replica dropped because the API server refused them for good,"
    " by kind (run, dag, backfill; prune: a DagRun object's deletion) and outcome:"
    " invalid (400, 413, 422: at once),"
    " forbidden (403), namespace_gone (404), refused (other 4xx): after 10 failures in a row",
    ["kind", "outcome"],
)
DAGRUN_OBJECTS_PRUNED = Counter(
    "sluice_dagrun_objects_pruned",
    "DagRun objects of ended runs this replica deleted because their DAG had more than"
    " --dagrun-history-limit newer ones (the runs stay in the database)",
)

# -- the log archiver (scheduler/archiver.py, retention.py) -------------------------------

LOGS_ARCHIVED = Counter(
    "sluice_logs_archived",
    "Tries whose log this replica's archiver dealt with, by outcome: archived (in the log"
    " store), lost (its pod or file was gone first; task_log says why), later (the store or"
    " the API server did not answer: asked again after a backoff)",
    ["outcome"],
)
LOGS_EXPIRED = Counter(
    "sluice_logs_expired",
    "Archived logs this replica deleted from the log store because their try ended longer"
    " ago than --log-retention-days (task_log keeps them as expired)",
)
