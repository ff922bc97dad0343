"""The state machine of runs and task instances, as plain enums and sets.

Names follow Airflow's so that its users read Sluice's tables without a
glossary. `none` is stored as a real value rather than NULL so that every
compare-and-set can name the state it expects.
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    NONE = "none"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"
    UPSTREAM_FAILED = "upstream_failed"
    UP_FOR_RETRY = "up_for_retry"


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


class RunType(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    BACKFILL = "backfill"


class Reprocess(StrEnum):
    """What a backfill does with a date whose run has ended (Airflow 3's reprocess
    behaviour): keep it, run it again if it failed, or run it again whatever its end."""

    NONE = "none"
    FAILED = "failed"
    COMPLETED = "completed"


# States a downstream task counts as "its upstream is done" (what the counters track).
TERMINAL_TASK_STATES = frozenset(
    {TaskState.SUCCESS, TaskState.FAILED, TaskState.SKIPPED, TaskState.UPSTREAM_FAILED}
)
# States that hold a pool slot and count against maxActiveTasks.
OCCUPYING_TASK_STATES = frozenset({TaskState.QUEUED, TaskState.RUNNING})
ACTIVE_RUN_STATES = frozenset({RunState.QUEUED, RunState.RUNNING})
TERMINAL_RUN_STATES = frozenset({RunState.SUCCESS, RunState.FAILED})
