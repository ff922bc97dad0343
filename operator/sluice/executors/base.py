"""The executor interface: what the scheduler hands over, and what comes back.

An executor starts task tries and reports how they ended. It never writes to
the database itself: the scheduler applies its reports through guarded
compare-and-set updates keyed by (task instance, try number), so a late or
duplicate report is a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from sluice.spec import params
from sluice.spec.states import TaskState


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one try of one task instance."""

    ti_id: int
    try_number: int
    dag_id: str
    task_id: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    conf: dict[str, Any]
    image: str | None
    command: list[str]
    args: list[str]
    env: dict[str, str]
    execution_timeout: timedelta | None
    skip_on_exit_code: frozenset[int]
    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_template: dict[str, Any] | None = None
    # The DAG's namespace (None: a DAG registered without one, from the CLI or standalone).
    # The Job executor runs the try there unless it pins every Job to one namespace.
    namespace: str | None = None
    # This machine's time.monotonic() just before the claim's transaction: a local try's
    # lease starts then, so one started long after its claim does not run (ADR 0015).
    claimed_at: float | None = None
    # The params of the run's DAG version (`spec.params`, their defaults): the run's `conf`
    # overrides them in the task's environment (`spec.params.environment`).
    dag_params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        return (self.ti_id, self.try_number)

    def context_env(self) -> dict[str, str]:
        """The run context every task sees as environment variables.

        Instants are written in UTC whatever zone the database session returned them in,
        as Airflow's `ts` is: a command can cut `ds` (the date) out of them
        (`sluice convert` does, for Airflow's `{{ ds }}`). The params are the DAG's under
        the conf, as Airflow's `params` are: JSON in SLUICE_PARAMS, and SLUICE_PARAM_<NAME>
        (see `spec.params`).
        """
        import json

        return {
            "SLUICE_DAG": self.dag_id,
            "SLUICE_TASK": self.task_id,
            "SLUICE_RUN_ID": self.run_id,
            "SLUICE_LOGICAL_DATE": self.logical_date.astimezone(UTC).isoformat(),
            "SLUICE_DATA_INTERVAL_START": self.data_interval_start.astimezone(UTC).isoformat(),
            "SLUICE_DATA_INTERVAL_END": self.data_interval_end.astimezone(UTC).isoformat(),
            "SLUICE_TRY_NUMBER": str(self.try_number),
            "SLUICE_CONF": json.dumps(self.conf, sort_keys=True),
            **params.environment(self.dag_params, self.conf),
        }


@dataclass(frozen=True)
class TaskEvent:
    """How one try ended, as the executor saw it."""

    ti_id: int
    try_number: int
    state: TaskState  # success, failed or skipped
    exit_code: int | None = None
    reason: str | None = None
    # Where it ran, when the executor knows: its pod (namespace/name) and node.
    pod: str | None = None
    node: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.ti_id, self.try_number)


@dataclass(frozen=True)
class Inspection:
    """What an executor can tell about a try it may not have started itself.

    - "alive": it still runs (`running`: its main process has started; False
      while a pod is still starting).
    - "gone": it ended; `exit_code` and/or `reason` say how when known
      (`failed` when the executor judged it failed without an exit code), and
      `evidence` what was seen.
    - "unknown": this executor cannot see it (another machine's process).
    - "unreachable": this executor could see it but cannot now (its watches
      lost the API server): ask again later, never judge a try on this.

    `stops_within`: when the try may still run (or still start) where this
    executor cannot see, it stops by itself at most this many seconds after the
    last heartbeat the database recorded for it (a local try's lease, ADR 0015);
    no zombie verdict before then. None: no such bound.

    `running_since`: when its main process started, if the executor knows; a try
    that heartbeats itself is not judged silent for the time before that (its pod
    may take long to start on a busy node).

    `restartable_within`: with "gone", this executor saw no trace of the try at
    all, and any attempt started at most this many seconds ago would have left
    one (a finished Job is kept that long). A try claimed more recently than
    that never started, and starting it again under the same external id cannot
    make a second attempt: a late start by its first replica collides with it
    (a Job's deterministic name). None: no such proof.
    """

    state: Literal["alive", "gone", "unknown", "unreachable"]
    exit_code: int | None = None
    reason: str | None = None
    failed: bool = False
    running: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)
    stops_within: float | None = None
    running_since: datetime | None = None
    restartable_within: float | None = None


class Executor(Protocol):
    name: str
    # True when the tries heartbeat themselves (task pods through the task API): the
    # scheduler then only fences the tries it runs and never refreshes their heartbeat.
    pods_heartbeat: bool

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        """The try's external id if it is known before it starts (a Job's name), else None."""

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        """Start each try; must not block on the tasks themselves."""

    def poll(self) -> list[TaskEvent]:
        """Tries that ended since the last poll."""

    def alive(self) -> list[tuple[int, int]]:
        """(task instance, try) keys of the tries this executor has running now."""

    def external_ids(self) -> dict[tuple[int, int], str]:
        """How to find each running try again from another replica (pid, pod name...)."""

    def heartbeats_recorded(self, keys: Sequence[tuple[int, int]], at: float) -> None:
        """The database took these tries' heartbeats (or, for tries that heartbeat
        themselves, confirmed them), stamped no earlier than `at` (this machine's
        time.monotonic()), and this replica still owned them then: local leases are
        renewed from it, and the Job executor moves a try into its watches only on such
        a word given after it read the try's objects (ADR 0033)."""

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        """Whether a try, maybe started by another replica, still runs ("unknown" if unsure)."""

    def adopt(
        self,
        key: tuple[int, int],
        external_id: str,
        *,
        elapsed: float,
        timeout: float | None,
        skip_on_exit_code: frozenset[int],
    ) -> None:
        """Watch a live try whose replica died; report it like one of ours."""

    def release(self, key: tuple[int, int]) -> None:
        """Stop watching a try another replica adopted, without stopping it."""

    def kill(self, key: tuple[int, int], reason: str, external_id: str | None = None) -> None:
        """Stop a try that the database says must not run any more (fenced), whether this
        executor tracks it or not (a try it dropped, a replica's before a restart):
        `external_id` (the database's) says where it runs when the executor does not."""

    def shutdown(self) -> None:
        """Stop watching, and leave the running tries running: a replica that stops
        (SIGTERM, a rolling restart) hands its tries over, and live replicas adopt
        them once its heartbeat is gone. Fenced tries are stopped with `kill`."""
