"""The metadata database: SQLAlchemy 2 typed models for Postgres.

Postgres holds all run and task state (docs/architecture.md). The tables keep
what the scheduler's hot queries need on the row itself: a task instance carries
its upstream counters (event-driven readiness), its priority, pool and DAG, so
the critical section never joins to the spec. Unique keys make duplicate runs
impossible (invariant 4); indexes are partial on the states the loop scans.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sluice.spec.states import RunState, RunType, TaskState

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

DEFAULT_POOL = "default"
DEFAULT_POOL_SLOTS = 128
# Percent of each heap page filled by inserts (migration 0020, ADR 0053): the rest takes
# the rows' next versions. A task instance changes state three or more times, each change
# indexed (never HOT), so the room keeps its new versions on their page; a try's row is
# updated once when it ends, indexed by its key only, so with room that update is HOT.
TASK_INSTANCE_FILLFACTOR = 70
TASK_TRY_FILLFACTOR = 50


def _in(column: str, values: Any) -> str:
    return f"{column} IN ({', '.join(repr(str(v)) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSONB,
        list[str]: ARRAY(Text),
    }


class Dag(Base):
    """A DAG as the scheduler sees it: its current version and when its next run is due."""

    __tablename__ = "dag"

    dag_id: Mapped[str] = mapped_column(Text, primary_key=True)
    namespace: Mapped[str | None] = mapped_column(Text)
    # A plain pointer, not a foreign key: dag and dag_version reference each other.
    current_version_id: Mapped[int | None] = mapped_column(Integer)
    # The pause in force: set from the manifest when the DAG is created, then by
    # `sluice dags pause|unpause` or a change of the manifest's value (ADR 0011).
    is_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    # The manifest's `paused` at the last sync, to tell a change of it (migration 0006).
    manifest_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    schedule: Mapped[str | None] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text, default="UTC")
    catchup: Mapped[bool] = mapped_column(Boolean, default=False)
    max_active_runs: Mapped[int] = mapped_column(Integer, default=16)
    max_active_tasks: Mapped[int] = mapped_column(Integer, default=16)
    # The next run the timetable calls for; null when it calls for none.
    next_logical_date: Mapped[datetime | None]
    next_data_interval_start: Mapped[datetime | None]
    next_data_interval_end: Mapped[datetime | None]
    next_run_after: Mapped[datetime | None]
    # Set by the scheduler when the current version cannot be loaded (no runs are created
    # meanwhile); cleared when a manifest makes a loadable version current (migration 0006).
    broken_reason: Mapped[str | None] = mapped_column(Text)
    broken_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())

    __table_args__ = (
        # In phase 1's order (`runs._DUE_DAGS`: ORDER BY next_run_after, dag_id LIMIT n):
        # DAGs on one cron are due at the same instant (migration 0019).
        Index(
            "ix_dag_due",
            "next_run_after",
            "dag_id",
            postgresql_where=text(
                "NOT is_paused AND is_active AND next_run_after IS NOT NULL"
                " AND broken_reason IS NULL"
            ),
        ),
        # Deleted DAGs, whose running runs phase 2 ends (migration 0012).
        Index("ix_dag_deleted", "dag_id", postgresql_where=text("NOT is_active")),
    )


class DagVersion(Base):
    """An immutable DAG spec; runs keep the version they were created with."""

    __tablename__ = "dag_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
    version_number: Mapped[int] = mapped_column(Integer)
    spec_hash: Mapped[str] = mapped_column(Text)
    spec: Mapped[dict[str, Any]]
    # The shape `spec` was written in; read through sluice.spec.upgrades (migration 0006:
    # the versions stored before it are 1).
    spec_schema_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())

    __table_args__ = (
        UniqueConstraint("dag_id", "version_number", name="uq_dag_version_number"),
        UniqueConstraint("dag_id", "spec_hash", name="uq_dag_version_hash"),
    )


class Backfill(Base):
    __tablename__ = "backfill"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
    from_date: Mapped[datetime]
    to_date: Mapped[datetime]
    max_active_runs: Mapped[int] = mapped_column(Integer)
    rerun_failed: Mapped[bool] = mapped_column(Boolean, default=False)
    # Reprocess: none, failed (rerun_failed too) or completed; 0011.
    reprocess: Mapped[str] = mapped_column(Text, default="none", server_default="none")
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    completed_at: Mapped[datetime | None]
    # The Backfill object that made it (none for `sluice backfill`); 0009.
    object_namespace: Mapped[str | None] = mapped_column(Text)
    object_name: Mapped[str | None] = mapped_column(Text)
    object_uid: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index(
            "uq_backfill_object_uid",
            "object_uid",
            unique=True,
            postgresql_where=text("object_uid IS NOT NULL"),
        ),
    )


class DagRun(Base):
    __tablename__ = "dag_run"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    dag_id: Mapped[str] = mapped_column(ForeignKey("dag.dag_id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(Text)
    run_type: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text, default=RunState.QUEUED)
    dag_version_id: Mapped[int] = mapped_column(ForeignKey("dag_version.id"))
    backfill_id: Mapped[int | None] = mapped_column(ForeignKey("backfill.id"))
    logical_date: Mapped[datetime]
    data_interval_start: Mapped[datetime]
    data_interval_end: Mapped[datetime]
    conf: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    start_date: Mapped[datetime | None]
    end_date: Mapped[datetime | None]
    last_scheduling_decision: Mapped[datetime | None]
    # When phase 2 must end the run, set by phase 1 as it starts it: its start plus the
    # version's dagrunTimeout, or its start if the version cannot be loaded; NULL: none
    # (migration 0012, ADR 0024).
    deadline: Mapped[datetime | None]
    tasks_total: Mapped[int] = mapped_column(Integer, default=0)
    tasks_done: Mapped[int] = mapped_column(Integer, default=0)
    # The user's DagRun object this run was triggered by; NULL: the scheduler names the
    # object it publishes the run to (sluice.status.render.object_name). Its namespace
    # and uid (0013): the handlers act only on the run of the object with that uid, and
    # the publisher publishes only onto it (ADR 0031).
    object_name: Mapped[str | None] = mapped_column(Text)
    object_namespace: Mapped[str | None] = mapped_column(Text)
    object_uid: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("dag_id", "run_id", name="uq_dag_run_run_id"),
        UniqueConstraint("dag_id", "logical_date", "run_type", name="uq_dag_run_logical_date"),
        CheckConstraint(_in("state", RunState), name="state"),
        CheckConstraint(_in("run_type", RunType), name="run_type"),
        Index(
            "ix_dag_run_active",
            "dag_id",
            "state",
            "logical_date",
            postgresql_where=text("state IN ('queued', 'running')"),
        ),
        Index(
            "ix_dag_run_examine",
            "last_scheduling_decision",
            postgresql_where=text("state = 'running'"),
        ),
        Index("ix_dag_run_dag_logical_date", "dag_id", "logical_date"),
        Index(
            "ix_dag_run_deadline",
            "deadline",
            postgresql_where=text("state = 'running' AND deadline IS NOT NULL"),
        ),
        Index(
            "uq_dag_run_object_uid",
            "object_uid",
            unique=True,
            postgresql_where=text("object_uid IS NOT NULL"),
        ),
    )


class TaskInstance(Base):
    """One task of one run; the counters make readiness an O(1) check on the row."""

    __tablename__ = "task_instance"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    dag_run_id: Mapped[int] = mapped_column(ForeignKey("dag_run.id", ondelete="CASCADE"))
    dag_id: Mapped[str] = mapped_column(Text)
    task_id: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text, default=TaskState.NONE)
    try_number: Mapped[int] = mapped_column(Integer, default=0)
    max_tries: Mapped[int] = mapped_column(Integer, default=0)
    logical_date: Mapped[datetime]
    priority_weight: Mapped[int] = mapped_column(Integer, default=1)
    pool: Mapped[str] = mapped_column(Text, default=DEFAULT_POOL)
    pool_slots: Mapped[int] = mapped_column(Integer, default=1)
    trigger_rule: Mapped[str] = mapped_column(Text)
    upstream_task_ids: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    downstream_task_ids: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    # Event-driven readiness: the last terminal state reported by each upstream,
    # and the counters derived from it (kept in step by one UPDATE per report).
    upstream_states: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    n_success: Mapped[int] = mapped_column(Integer, default=0)
    n_failed: Mapped[int] = mapped_column(Integer, default=0)
    n_skipped: Mapped[int] = mapped_column(Integer, default=0)
    n_upstream_failed: Mapped[int] = mapped_column(Integer, default=0)
    # Set when the counters changed since the scheduler last looked at this row.
    needs_eval: Mapped[bool] = mapped_column(Boolean, default=False)
    depends_on_past: Mapped[bool] = mapped_column(Boolean, default=False)
    wait_for_downstream: Mapped[bool] = mapped_column(Boolean, default=False)
    queued_at: Mapped[datetime | None]
    start_date: Mapped[datetime | None]
    end_date: Mapped[datetime | None]
    next_retry_at: Mapped[datetime | None]
    last_heartbeat_at: Mapped[datetime | None]
    queued_by_job_id: Mapped[int | None] = mapped_column(Integer)
    # How often this instance was put back from `queued` after waiting too long.
    requeue_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    running_by_job_id: Mapped[int | None] = mapped_column(Integer)
    external_id: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))
    # Set while a try the database no longer wants may still run (migration 0017,
    # `scheduler.clearing`): cleared while running (the row stays `running`) or ended
    # under its process by a mark, a run's mark or timeout. No next try starts until its
    # replica has stopped it (or, its replica dead, its heartbeat has gone stale).
    stopping_since: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("dag_run_id", "task_id", name="uq_task_instance_run_task"),
        CheckConstraint(_in("state", TaskState), name="state"),
        # The critical section's scan, in its ORDER BY.
        Index(
            "ix_ti_scheduled",
            text("priority_weight DESC"),
            "logical_date",
            "id",
            postgresql_where=text("state = 'scheduled'"),
        ),
        Index(
            "ix_ti_occupying",
            "pool",
            "dag_id",
            postgresql_where=text("state IN ('queued', 'running')"),
        ),
        Index("ix_ti_needs_eval", "dag_run_id", postgresql_where=text("needs_eval")),
        Index("ix_ti_retry", "next_retry_at", postgresql_where=text("state = 'up_for_retry'")),
        Index("ix_ti_queued", "queued_at", postgresql_where=text("state = 'queued'")),
        # No index holds `last_heartbeat_at`: a heartbeat is then heap-only (migration 0021).
        Index("ix_ti_dag_task", "dag_id", "task_id", "logical_date"),
        Index("ix_ti_stopping", "id", postgresql_where=text("stopping_since IS NOT NULL")),
        # Room on each page for a row's next version (migration 0020, ADR 0053).
        {"postgresql_with": {"fillfactor": TASK_INSTANCE_FILLFACTOR}},
    )


class TaskTry(Base):
    """History: one row per try of a task instance."""

    __tablename__ = "task_try"

    task_instance_id: Mapped[int] = mapped_column(
        ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(Text)
    queued_at: Mapped[datetime | None]
    start_date: Mapped[datetime | None]
    end_date: Mapped[datetime | None]
    scheduler_job_id: Mapped[int | None] = mapped_column(Integer)
    external_id: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    # A zombie verdict's evidence (migration 0007), kept here for every try.
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))
    # Where it ran, as its executor saw it end (migration 0018): the pod (namespace/name)
    # and node, so its log is read by name.
    pod: Mapped[str | None] = mapped_column(Text)
    node: Mapped[str | None] = mapped_column(Text)

    # Room on each page for the try's ended version, so that update is heap-only (HOT:
    # no index entry; only the primary key indexes this table): migration 0020, ADR 0053.
    __table_args__ = ({"postgresql_with": {"fillfactor": TASK_TRY_FILLFACTOR}},)


class SlotPool(Base):
    """Pools: their rows are also the critical section's lock (FOR UPDATE NOWAIT)."""

    __tablename__ = "slot_pool"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    slots: Mapped[int] = mapped_column(Integer)
    description: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (CheckConstraint("slots >= 0", name="slots_nonnegative"),)


class SchedulerJob(Base):
    __tablename__ = "scheduler_job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hostname: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(Text, default="running")
    started_at: Mapped[datetime] = mapped_column(server_default=func.now())
    latest_heartbeat: Mapped[datetime] = mapped_column(server_default=func.now())
    ended_at: Mapped[datetime | None]


class Outbox(Base):
    """Side effects written in the transaction that causes them, drained by any replica."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    not_before: Mapped[datetime] = mapped_column(server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_outbox_ready", "not_before", "id"),)


class StatusSink(Base):
    """One row once a status publisher runs: only then do the triggers fill `status_outbox`."""

    __tablename__ = "status_sink"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    enabled_at: Mapped[datetime] = mapped_column(server_default=func.now())

    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)


class StatusOutbox(Base):
    """A run whose status changed, written by triggers in the changing transaction
    (migration 0008); drained by the status publishers, coalesced per run."""

    __tablename__ = "status_outbox"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # 'run' (dag_run_id), 'dag' or 'backfill' (key: the DAG id, the backfill id); 0009.
    kind: Mapped[str] = mapped_column(Text, server_default="run")
    dag_run_id: Mapped[int | None] = mapped_column(BigInteger)
    key: Mapped[str | None] = mapped_column(Text)
    not_before: Mapped[datetime] = mapped_column(server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    # When the change was enqueued (`not_before` moves with leases and retries): the
    # age of the oldest row says how far behind publishing is (migration 0010).
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())

    __table_args__ = (Index("ix_status_outbox_ready", "not_before", "id"),)


class LogSink(Base):
    """One row once a log archiver runs: only then does the trigger fill `log_outbox`."""

    __tablename__ = "log_sink"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    enabled_at: Mapped[datetime] = mapped_column(server_default=func.now())

    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)


class LogOutbox(Base):
    """A started try that ended, written by a trigger in the ending transaction (migration
    0015); drained by the log archivers, each row leased while its log is copied."""

    __tablename__ = "log_outbox"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    task_instance_id: Mapped[int] = mapped_column(BigInteger)
    try_number: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    not_before: Mapped[datetime] = mapped_column(server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_log_outbox_ready", "not_before", "id"),)


class TaskLog(Base):
    """What became of a try's log: 'archived' (where, how big, cut or not), 'lost' (why), or
    'expired' (archived, then deleted after the retention: when, and under which setting)."""

    __tablename__ = "task_log"

    task_instance_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True
    )
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(Text)
    location: Mapped[str | None] = mapped_column(Text)
    raw_bytes: Mapped[int | None] = mapped_column(BigInteger)
    stored_bytes: Mapped[int | None] = mapped_column(BigInteger)
    truncated: Mapped[bool] = mapped_column(Boolean, server_default=false())
    reason: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(Text)  # the pod (namespace/name) or file
    node: Mapped[str | None] = mapped_column(Text)
    archived_at: Mapped[datetime] = mapped_column(server_default=func.now())
    expired_at: Mapped[datetime | None]  # migration 0016

    __table_args__ = (
        Index("ix_task_log_archived_at", "archived_at"),
        # The archived logs, oldest first: the next to expire (migration 0016).
        Index(
            "ix_task_log_to_expire",
            "archived_at",
            "task_instance_id",
            "try_number",
            postgresql_where=text("state = 'archived'"),
        ),
    )


class TaskAction(Base):
    """A TaskAction object the operator has done (migration 0017): by uid, once, with what
    it did (`scheduler.clearing.Outcome`, as its status shows it)."""

    __tablename__ = "task_action"

    uid: Mapped[str] = mapped_column(Text, primary_key=True)
    namespace: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    dag_run_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("dag_run.id", ondelete="CASCADE")
    )
    action: Mapped[str] = mapped_column(Text)
    outcome: Mapped[dict[str, Any]] = mapped_column(JSONB)
    done_at: Mapped[datetime] = mapped_column(server_default=func.now())


class RunPublication(Base):
    """Where a run is published (its DagRun object) and what was published last."""

    __tablename__ = "run_publication"

    dag_run_id: Mapped[int] = mapped_column(
        ForeignKey("dag_run.id", ondelete="CASCADE"), primary_key=True
    )
    namespace: Mapped[str] = mapped_column(Text)
    object_name: Mapped[str] = mapped_column(Text)
    uid: Mapped[str | None] = mapped_column(Text)
    resource_version: Mapped[str | None] = mapped_column(Text)
    generation: Mapped[int | None] = mapped_column(BigInteger)
    published_at: Mapped[datetime | None]
    state: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict[str, Any] | None]
    # The object was deleted by someone else, or by the history limit: never created again.
    gone: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # The run's DAG, and when the run ended once an end was published (NULL before): a
    # DAG's DagRun objects keep a bounded history, the newest by this (0014, ADR 0034).
    dag_id: Mapped[str | None] = mapped_column(Text)
    ended_at: Mapped[datetime | None]

    # The handlers find the run of a scheduler-made object by its uid (0013); the history
    # limit finds a DAG's objects of ended runs newest first, only those still there (0014).
    __table_args__ = (
        Index("ix_run_publication_uid", "uid", postgresql_where=text("uid IS NOT NULL")),
        Index(
            "ix_run_publication_history",
            "dag_id",
            "ended_at",
            "dag_run_id",
            postgresql_where=text("NOT gone AND uid IS NOT NULL AND ended_at IS NOT NULL"),
        ),
    )


class ObjectPublication(Base):
    """The last publication of a DAG's or a Backfill's status to its object (0009)."""

    __tablename__ = "object_publication"

    kind: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    namespace: Mapped[str] = mapped_column(Text)
    object_name: Mapped[str] = mapped_column(Text)
    resource_version: Mapped[str | None] = mapped_column(Text)
    published_at: Mapped[datetime | None]
    summary: Mapped[dict[str, Any] | None]


class SchedulerMetric(Base):
    """Counters the loop keeps in the database so every replica's work adds up."""

    __tablename__ = "scheduler_metric"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)
