"""What happened: DAGs, runs and their tasks read back from the database, for people and scripts.

`sluice standalone --output json`, `sluice dags test --output json` and
`sluice dags runs DAG --output json` print `{"runs": [{"dag", "run_id",
"run_type", "logical_date", "state", "tasks": [{"task", "state", "try_number",
"start", "end", "external_id", "reason", "evidence"}]}]}` (`external_id`: the
try's Job name with the Job executor; `reason`: why it failed, was skipped or
was retried; `evidence`: what a zombie verdict saw); `sluice dags list
--output json` prints `{"dags": [{"dag", "namespace", "version",
"schedule", "paused", "active", "next_run_after", "broken_reason",
"broken_at"}]}`. `--output yaml` prints the same documents as YAML.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.db.models import Dag, DagRun, DagVersion, TaskInstance, TaskTry
from sluice.spec.states import TaskState


@dataclass(frozen=True)
class DagSummary:
    dag: str
    namespace: str | None
    version: int | None
    schedule: str | None
    paused: bool
    active: bool
    next_run_after: str | None
    # Why the scheduler creates no runs for it: its current version cannot be loaded.
    broken_reason: str | None
    broken_at: str | None


def read_dags(session: Session) -> list[DagSummary]:
    rows = session.execute(
        select(
            Dag.dag_id,
            Dag.namespace,
            DagVersion.version_number,
            Dag.schedule,
            Dag.is_paused,
            Dag.is_active,
            Dag.next_run_after,
            Dag.broken_reason,
            Dag.broken_at,
        )
        .outerjoin(DagVersion, DagVersion.id == Dag.current_version_id)
        .order_by(Dag.dag_id)
    )
    return [
        DagSummary(
            dag=row.dag_id,
            namespace=row.namespace,
            version=row.version_number,
            schedule=row.schedule,
            paused=row.is_paused,
            active=row.is_active,
            next_run_after=_iso(row.next_run_after),
            broken_reason=row.broken_reason,
            broken_at=_iso(row.broken_at),
        )
        for row in rows
    ]


def dags_as_json(dags: list[DagSummary]) -> dict[str, Any]:
    return {"dags": [asdict(dag) for dag in dags]}


def dags_table(dags: list[DagSummary]) -> Table:
    """One row per DAG; a broken DAG's reason is long, so it is in `broken_lines`."""
    table = Table(title="Sluice DAGs", expand=False)
    for column in ("DAG", "NAMESPACE", "VERSION", "SCHEDULE", "PAUSED", "NEXT RUN", "STATUS"):
        table.add_column(column, overflow="fold")
    for dag in dags:
        if dag.broken_reason is not None:
            state = "[red]broken[/red]"
        else:
            state = "active" if dag.active else "inactive"
        table.add_row(
            dag.dag,
            dag.namespace or "-",
            str(dag.version) if dag.version is not None else "-",
            dag.schedule or "manual",
            "yes" if dag.paused else "no",
            dag.next_run_after or "-",
            state,
        )
    return table


def broken_lines(dags: list[DagSummary]) -> list[str]:
    """Why each broken DAG gets no runs, one line each."""
    return [
        f"{dag.dag}: broken since {dag.broken_at}: {dag.broken_reason}"
        for dag in dags
        if dag.broken_reason is not None
    ]


@dataclass(frozen=True)
class TrySummary:
    """One try of a task instance, from its `task_try` row (kept across clears)."""

    try_number: int
    state: str
    start: str | None
    end: str | None
    external_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class TaskSummary:
    task: str
    # Airflow's `restarting` for a running try a clear asked to stop (`scheduler.clearing`).
    state: str
    try_number: int
    start: str | None
    end: str | None
    external_id: str | None = None
    reason: str | None = None
    evidence: dict[str, Any] | None = None
    tries: list[TrySummary] = field(default_factory=list)


@dataclass(frozen=True)
class RunSummary:
    dag: str
    run_id: str
    run_type: str
    logical_date: str
    state: str
    tasks: list[TaskSummary]

    @property
    def done(self) -> int:
        return sum(
            t.state in ("success", "failed", "skipped", "upstream_failed") for t in self.tasks
        )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def read_runs(
    session: Session,
    run_ids: list[int] | None = None,
    *,
    dag_id: str | None = None,
    run_id: str | None = None,
    limit: int | None = None,
) -> list[RunSummary]:
    """Runs (all, these ids, or one DAG's: the latest `limit` by logical date) and their tasks."""
    query = select(DagRun).order_by(DagRun.dag_id, DagRun.logical_date, DagRun.id)
    if run_ids is not None:
        query = query.where(DagRun.id.in_(run_ids))
    if dag_id is not None:
        query = query.where(DagRun.dag_id == dag_id)
    if run_id is not None:
        query = query.where(DagRun.run_id == run_id)
    if limit is not None:
        latest = query.order_by(None).order_by(DagRun.logical_date.desc(), DagRun.id.desc())
        query = select(DagRun).where(DagRun.id.in_(select(latest.limit(limit).subquery().c.id)))
        query = query.order_by(DagRun.logical_date, DagRun.id)
    runs = list(session.execute(query).scalars())
    tasks: dict[int, list[TaskSummary]] = defaultdict(list)
    if runs:
        instances = list(
            session.execute(
                select(TaskInstance)
                .where(TaskInstance.dag_run_id.in_([r.id for r in runs]))
                .order_by(TaskInstance.id)
            ).scalars()
        )
        tries = _tries(session, [ti.id for ti in instances]) if run_id is not None else {}
        for ti in instances:
            tasks[ti.dag_run_id].append(
                TaskSummary(
                    ti.task_id,
                    "restarting"
                    if ti.stopping_since is not None and ti.state == TaskState.RUNNING
                    else ti.state,
                    ti.try_number,
                    _iso(ti.start_date),
                    _iso(ti.end_date),
                    ti.external_id,
                    ti.reason,
                    ti.evidence,
                    tries.get(ti.id, []),
                )
            )
    return [
        RunSummary(
            run.dag_id,
            run.run_id,
            run.run_type,
            run.logical_date.isoformat(),
            run.state,
            tasks[run.id],
        )
        for run in runs
    ]


def _tries(session: Session, ti_ids: list[int]) -> dict[int, list[TrySummary]]:
    """Every try of these instances, in order (one run's: `read_runs` with a run id)."""
    found: dict[int, list[TrySummary]] = defaultdict(list)
    for row in session.execute(
        select(TaskTry)
        .where(TaskTry.task_instance_id.in_(ti_ids))
        .order_by(TaskTry.task_instance_id, TaskTry.try_number)
    ).scalars():
        found[row.task_instance_id].append(
            TrySummary(
                row.try_number,
                row.state,
                _iso(row.start_date),
                _iso(row.end_date),
                row.external_id,
                row.reason,
            )
        )
    return found


def as_json(runs: list[RunSummary]) -> dict[str, Any]:
    return {"runs": [asdict(run) for run in runs]}


_STATE_STYLE = {
    "success": "green",
    "failed": "red",
    "upstream_failed": "red",
    "running": "cyan",
    "restarting": "cyan",
    "queued": "blue",
    "scheduled": "blue",
    "up_for_retry": "yellow",
    "skipped": "magenta",
}


def _styled(state: str) -> str:
    style = _STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def runs_table(runs: list[RunSummary], *, with_tasks: bool = True) -> Table:
    table = Table(title="Sluice runs", expand=False)
    for column in ("DAG", "RUN", "STATE", "TASKS", "TASK STATES"):
        table.add_column(column)
    for run in runs:
        detail = (
            ", ".join(
                f"{t.task}={_styled(t.state)}" + (f"#{t.try_number}" if t.try_number > 1 else "")
                for t in run.tasks
            )
            if with_tasks
            else ""
        )
        table.add_row(
            run.dag, run.run_id, _styled(run.state), f"{run.done}/{len(run.tasks)}", detail
        )
    return table


def tasks_table(run: RunSummary) -> Table:
    table = Table(title=f"{run.dag} {run.run_id}: {run.state}")
    for column in ("TASK", "STATE", "TRY", "START", "END"):
        table.add_column(column)
    for t in run.tasks:
        table.add_row(t.task, _styled(t.state), str(t.try_number), t.start or "-", t.end or "-")
    return table


def task_detail_lines(run: RunSummary) -> list[str]:
    """One line per try of each task that ran or has a reason, earlier tries (kept across
    clears) first: the try's external id (its Job with the Job executor), how it ended and
    why. Long, so not a column."""
    lines = []
    for t in run.tasks:
        own = t.external_id is not None or t.reason is not None
        for old in t.tries:
            if own and old.try_number == t.try_number:
                continue  # the instance's own line below says more (its state now)
            where = f" ({old.external_id})" if old.external_id else ""
            lines.append(f"{t.task} try {old.try_number}{where}: {old.state}: {old.reason or '-'}")
        if not own:
            continue
        where = f" ({t.external_id})" if t.external_id else ""
        lines.append(f"{t.task} try {t.try_number}{where}: {t.state}: {t.reason or '-'}")
    return lines
