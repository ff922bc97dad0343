"""What the UI's pages show, each page a fixed number of indexed statements (no N+1).

- DAG list: one statement for the DAGs, one for the latest runs of all of them
  (a LATERAL join on `ix_dag_run_dag_logical_date`, at most `RUNS_PER_DAG` each).
- Grid: one for the DAG, one for its latest runs (the same index, paged back by
  logical date), one for their task instances (`dag_run_id = ANY(...)`), and
  the current version's spec for the task order (cached per version).
- Run: one for the run (its unique key), one for its task instances, one for
  their tries with what became of each try's log.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache

RUNS_PER_DAG = 10
GRID_RUNS = 25

# The state a cell shows: Airflow's names, and `restarting` for a running try a clear asked
# to stop (ADR 0038).
STATE_LETTERS = {
    "none": "·",
    "scheduled": "s",
    "queued": "q",
    "running": "R",
    "restarting": "↻",
    "success": "S",
    "failed": "F",
    "skipped": "K",
    "upstream_failed": "U",
    "up_for_retry": "r",
}


@dataclass(frozen=True)
class RunCell:
    run_id: str
    state: str
    logical_date: datetime


@dataclass
class DagRow:
    dag_id: str
    namespace: str | None
    schedule: str | None
    paused: bool
    active: bool
    next_run_after: datetime | None
    broken_reason: str | None
    runs: list[RunCell] = field(default_factory=list)  # newest first


# The DAG list's state filter: paused or not, a run running, the latest run failed.
DAG_STATES = ("paused", "unpaused", "running", "failed")

_DAGS = text(
    """
    SELECT dag_id, namespace, schedule, is_paused, is_active, next_run_after, broken_reason
    FROM dag
    WHERE (CAST(:namespace AS text) IS NULL OR namespace = :namespace)
      AND (CAST(:name AS text) IS NULL OR dag_id LIKE '%' || :name || '%')
      AND (NOT :within OR COALESCE(namespace, '') = ANY(CAST(:namespaces AS text[])))
      AND CASE CAST(:state AS text)
            WHEN 'paused' THEN is_paused
            WHEN 'unpaused' THEN NOT is_paused
            WHEN 'running' THEN EXISTS (
                SELECT FROM dag_run r WHERE r.dag_id = dag.dag_id AND r.state = 'running')
            WHEN 'failed' THEN (
                SELECT r.state FROM dag_run r WHERE r.dag_id = dag.dag_id
                ORDER BY r.logical_date DESC, r.id DESC LIMIT 1) = 'failed'
            ELSE true
          END
    ORDER BY dag_id
    LIMIT :limit
    """
)


def dag_namespaces(session: Session) -> list[str | None]:
    """Every namespace that has a DAG (None: DAGs from the CLI)."""
    return list(session.execute(text("SELECT DISTINCT namespace FROM dag")).scalars())


def dag_namespace(session: Session, dag_id: str) -> tuple[str | None] | None:
    """(the DAG's namespace,), or None when there is no such DAG."""
    row = session.execute(
        text("SELECT namespace FROM dag WHERE dag_id = :dag"), {"dag": dag_id}
    ).first()
    return None if row is None else (row[0],)


def run_object(session: Session, dag_id: str, run_id: str) -> tuple[str, str] | None:
    """(namespace, name) of the run's DagRun object: the user's that triggered it, else
    the one the scheduler published; None when it has none (yet)."""
    row = session.execute(
        text(
            "SELECT COALESCE(r.object_namespace, p.namespace), COALESCE(r.object_name,"
            " p.object_name) FROM dag_run r LEFT JOIN run_publication p ON p.dag_run_id = r.id"
            " WHERE r.dag_id = :dag AND r.run_id = :run"
        ),
        {"dag": dag_id, "run": run_id},
    ).first()
    return None if row is None or row[1] is None else (row[0], row[1])


_LATEST_RUNS = text(
    """
    SELECT d.dag_id, r.run_id, r.state, r.logical_date
    FROM unnest(CAST(:dags AS text[])) AS d(dag_id)
    CROSS JOIN LATERAL (
        SELECT run_id, state, logical_date FROM dag_run
        WHERE dag_run.dag_id = d.dag_id
        ORDER BY logical_date DESC, id DESC
        LIMIT :per_dag
    ) r
    """
)


def dag_rows(
    session: Session,
    *,
    namespace: str | None = None,
    name: str | None = None,
    within: Collection[str | None] | None = None,
    state: str | None = None,
    limit: int = 500,
) -> list[DagRow]:
    """The DAGs (filtered by namespace, a part of the name and a `state` of DAG_STATES,
    and to the namespaces `within` when given: those the user may see), each with its
    latest runs."""
    if state not in (None, *DAG_STATES):
        raise ValueError(f"state {state!r}: one of {', '.join(DAG_STATES)}")
    params = {
        "state": state,
        "namespace": namespace or None,
        "name": name or None,
        "within": within is not None,
        "namespaces": [ns or "" for ns in within or ()],
        "limit": limit,
    }
    rows = [DagRow(*row) for row in session.execute(_DAGS, params)]
    by_id = {row.dag_id: row for row in rows}
    if rows:
        for dag_id, run_id, state, logical_date in session.execute(
            _LATEST_RUNS, {"dags": list(by_id), "per_dag": RUNS_PER_DAG}
        ):
            by_id[dag_id].runs.append(RunCell(run_id, state, logical_date))
    return rows


@dataclass(frozen=True)
class TaskCell:
    state: str
    try_number: int
    start: datetime | None
    end: datetime | None

    @property
    def seconds(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds()


@dataclass
class Grid:
    dag: DagRow
    runs: list[RunCell]  # oldest first, as Airflow's grid reads left to right
    tasks: list[str]
    cells: dict[tuple[str, str], TaskCell]  # (run id, task id)
    older: datetime | None  # the logical date to page back from, if there are older runs


_GRID_RUNS = text(
    """
    SELECT id, run_id, state, logical_date FROM dag_run
    WHERE dag_id = :dag AND (CAST(:before AS timestamptz) IS NULL OR logical_date < :before)
    ORDER BY logical_date DESC, id DESC
    LIMIT :limit
    """
)

_GRID_CELLS = text(
    """
    SELECT dag_run_id, task_id, state,
           (state = 'running' AND stopping_since IS NOT NULL) AS restarting,
           try_number, start_date, end_date
    FROM task_instance WHERE dag_run_id = ANY(:runs)
    """
)

_CURRENT_VERSION = text("SELECT current_version_id FROM dag WHERE dag_id = :dag")


_ONE_DAG = text(
    """
    SELECT dag_id, namespace, schedule, is_paused, is_active, next_run_after, broken_reason,
           current_version_id
    FROM dag WHERE dag_id = :dag
    """
)


def grid(
    session: Session, specs: SpecCache, dag_id: str, *, before: datetime | None = None
) -> Grid | None:
    """A DAG's latest runs (those before `before`, paging back) by its tasks, in the
    current version's order (tasks only older runs had come after); None if there is no
    such DAG."""
    found = session.execute(_ONE_DAG, {"dag": dag_id}).one_or_none()
    if found is None:
        return None
    dag = DagRow(*found[:7])
    rows = session.execute(
        _GRID_RUNS, {"dag": dag_id, "before": before, "limit": GRID_RUNS + 1}
    ).all()
    older = rows[GRID_RUNS - 1].logical_date if len(rows) > GRID_RUNS else None
    rows = list(reversed(rows[:GRID_RUNS]))
    run_ids = {row.id: row.run_id for row in rows}
    cells: dict[tuple[str, str], TaskCell] = {}
    seen: list[str] = []
    if rows:
        for row in session.execute(_GRID_CELLS, {"runs": list(run_ids)}):
            state = "restarting" if row.restarting else row.state
            cells[(run_ids[row.dag_run_id], row.task_id)] = TaskCell(
                state, row.try_number, row.start_date, row.end_date
            )
            if row.task_id not in seen:
                seen.append(row.task_id)
    order = _task_order(session, specs, found.current_version_id)
    tasks = order + sorted(task for task in seen if task not in order)
    runs = [RunCell(row.run_id, row.state, row.logical_date) for row in rows]
    return Grid(dag, runs, tasks, cells, older)


def _task_order(session: Session, specs: SpecCache, version_id: int | None) -> list[str]:
    """The current version's tasks, each after its upstreams; none if it cannot be read
    (the DAG's broken reason says why)."""
    if version_id is None:
        return []
    try:
        return list(specs.get(session, version_id).order)
    except ValueError:  # StoredSpecError, or a spec that no longer validates
        return []


@dataclass(frozen=True)
class TryRow:
    """One try of a task instance, from its `task_try` row (kept across clears)."""

    try_number: int
    state: str
    start: datetime | None
    end: datetime | None
    external_id: str | None
    pod: str | None
    node: str | None
    reason: str | None
    evidence: dict[str, Any] | None
    log: str | None  # what became of its log (`task_log.state`), if anything yet


@dataclass
class TaskRow:
    task_id: str
    state: str
    try_number: int
    reason: str | None
    tries: list[TryRow] = field(default_factory=list)


@dataclass
class RunPage:
    dag_id: str
    run_id: str
    run_type: str
    state: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    start: datetime | None
    end: datetime | None
    conf: dict[str, Any]
    tasks: list[TaskRow]

    def bar(self, one: TryRow, now: datetime) -> tuple[float, float] | None:
        """Where a try's bar sits in the run's Gantt: (left, width) in percent of the span
        from the run's first try's start to its last end (or now); None if it never
        started."""
        starts = [t.start for task in self.tasks for t in task.tries if t.start]
        if one.start is None or not starts:
            return None
        ends = [t.end or now for task in self.tasks for t in task.tries if t.start]
        first, last = min(starts), max(ends)
        span = max((last - first).total_seconds(), 1e-6)
        left = (one.start - first).total_seconds() / span * 100
        width = max(((one.end or now) - one.start).total_seconds() / span * 100, 0.5)
        return round(left, 2), round(min(width, 100 - left), 2)


_RUN = text(
    """
    SELECT id, dag_id, run_id, run_type, state, logical_date, data_interval_start,
           data_interval_end, start_date, end_date, conf, dag_version_id
    FROM dag_run WHERE dag_id = :dag AND run_id = :run
    """
)

_RUN_TASKS = text(
    """
    SELECT id, task_id, state, (state = 'running' AND stopping_since IS NOT NULL) AS restarting,
           try_number, reason
    FROM task_instance WHERE dag_run_id = :run ORDER BY id
    """
)

_RUN_TRIES = text(
    """
    SELECT tt.task_instance_id, tt.try_number, tt.state, tt.start_date, tt.end_date,
           tt.external_id, tt.pod, tt.node, tt.reason, tt.evidence, l.state AS log
    FROM task_try tt
    JOIN task_instance ti ON ti.id = tt.task_instance_id
    LEFT JOIN task_log l
      ON l.task_instance_id = tt.task_instance_id AND l.try_number = tt.try_number
    WHERE ti.dag_run_id = :run
    ORDER BY tt.task_instance_id, tt.try_number
    """
)


def run_page(session: Session, specs: SpecCache, dag_id: str, run_id: str) -> RunPage | None:
    """One run: its dates and conf, every task (in the DAG's order) with each of its tries;
    None if there is no such run. Three statements, whatever the run's size."""
    run = session.execute(_RUN, {"dag": dag_id, "run": run_id}).one_or_none()
    if run is None:
        return None
    tasks: dict[int, TaskRow] = {}
    for row in session.execute(_RUN_TASKS, {"run": run.id}):
        state = "restarting" if row.restarting else row.state
        tasks[row.id] = TaskRow(row.task_id, state, row.try_number, row.reason)
    for row in session.execute(_RUN_TRIES, {"run": run.id}):
        tasks[row.task_instance_id].tries.append(
            TryRow(
                row.try_number,
                row.state,
                row.start_date,
                row.end_date,
                row.external_id,
                row.pod,
                row.node,
                row.reason,
                row.evidence,
                row.log,
            )
        )
    order = {name: i for i, name in enumerate(_task_order(session, specs, run.dag_version_id))}
    ordered = sorted(tasks.values(), key=lambda t: (order.get(t.task_id, len(order)), t.task_id))
    return RunPage(
        run.dag_id,
        run.run_id,
        run.run_type,
        run.state,
        run.logical_date,
        run.data_interval_start,
        run.data_interval_end,
        run.start_date,
        run.end_date,
        dict(run.conf or {}),
        ordered,
    )


@dataclass(frozen=True)
class PoolRow:
    name: str
    slots: int
    running: int  # slots held by running tries
    queued: int  # slots held by queued tries

    @property
    def open(self) -> int:
        return self.slots - self.running - self.queued


def pool_rows(session: Session) -> list[PoolRow]:
    """Every pool with the slots its queued and running tries hold (two statements)."""
    from sluice.status.store import pools_in_use

    return [
        PoolRow(name, slots, running, queued)
        for name, (slots, running, queued) in sorted(pools_in_use(session).items())
    ]


@dataclass
class BackfillRow:
    id: int
    dag_id: str
    start: datetime
    end: datetime
    reprocess: str
    max_active_runs: int
    created_at: datetime
    origin: str  # "Backfill ns/name", or "sluice backfill"
    namespace: str | None  # its DAG's
    runs: dict[str, int] = field(default_factory=dict)  # by state

    @property
    def progress(self) -> str:
        done = self.runs.get("success", 0) + self.runs.get("failed", 0)
        return f"{done}/{sum(self.runs.values())}"


_BACKFILLS = text(
    """
    SELECT b.id, b.dag_id, b.from_date, b.to_date, b.reprocess, b.max_active_runs,
           b.created_at, b.object_namespace, b.object_name, d.namespace
    FROM backfill b LEFT JOIN dag d ON d.dag_id = b.dag_id
    ORDER BY b.id DESC LIMIT :limit
    """
)
_BACKFILL_RUNS = text(
    """
    SELECT backfill_id, state, count(*) AS n FROM dag_run
    WHERE backfill_id = ANY(:ids) GROUP BY backfill_id, state
    """
)


def backfill_rows(session: Session, limit: int = 100) -> list[BackfillRow]:
    """The latest backfills, newest first, with their runs counted by state."""
    rows = [
        BackfillRow(
            row.id,
            row.dag_id,
            row.from_date,
            row.to_date,
            row.reprocess,
            row.max_active_runs,
            row.created_at,
            f"Backfill {row.object_namespace}/{row.object_name}"
            if row.object_name
            else "sluice backfill",
            row.namespace,
        )
        for row in session.execute(_BACKFILLS, {"limit": limit})
    ]
    by_id = {row.id: row for row in rows}
    if rows:
        for backfill_id, state, n in session.execute(_BACKFILL_RUNS, {"ids": list(by_id)}):
            by_id[backfill_id].runs[state] = int(n)
    return rows


@dataclass
class GraphPage:
    dag: DagRow
    run_id: str | None  # the run whose states colour the tasks, if any
    runs: list[str]  # the latest runs' ids, newest first, to choose from
    nodes: list[dict[str, str]]  # {"id", "state", "trigger_rule"}
    edges: list[tuple[str, str]]  # (upstream, downstream)


def graph_page(
    session: Session, specs: SpecCache, dag_id: str, run_id: str | None
) -> GraphPage | None:
    """The DAG's current tasks and edges, coloured by a run's states (the latest by
    default); None if there is no such DAG. Three statements and the spec (cached)."""
    found = session.execute(_ONE_DAG, {"dag": dag_id}).one_or_none()
    if found is None:
        return None
    dag = DagRow(*found[:7])
    runs = session.execute(_GRID_RUNS, {"dag": dag_id, "before": None, "limit": GRID_RUNS}).all()
    chosen = next((row for row in runs if row.run_id == run_id), runs[0] if runs else None)
    if run_id is not None and (chosen is None or chosen.run_id != run_id):
        chosen = session.execute(_RUN, {"dag": dag_id, "run": run_id}).one_or_none()
    states: dict[str, str] = {}
    if chosen is not None:
        for row in session.execute(_GRID_CELLS, {"runs": [chosen.id]}):
            states[row.task_id] = "restarting" if row.restarting else row.state
    nodes: list[dict[str, str]] = []
    edges: list[tuple[str, str]] = []
    if found.current_version_id is not None:
        try:
            spec = specs.get(session, found.current_version_id).spec
        except ValueError:
            spec = None
        for task in spec.tasks if spec else []:
            rule = task.trigger_rule.value
            nodes.append(
                {"id": task.name, "state": states.get(task.name, "none"), "trigger_rule": rule}
            )
            edges.extend((upstream, task.name) for upstream in task.depends_on)
    return GraphPage(
        dag,
        chosen.run_id if chosen is not None else None,
        [row.run_id for row in runs],
        nodes,
        edges,
    )
