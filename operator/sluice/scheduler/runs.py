"""Phase 1 of the loop: create the runs the timetables call for, and start queued runs.

Runs are created `queued` and promoted to `running` only while their DAG (or
their backfill) is under its `maxActiveRuns`. DAG rows are taken with
`FOR UPDATE SKIP LOCKED`, so replicas share the work without waiting on one
another, and the unique keys on (dag, run_id) and (dag, logical date, run type)
make a duplicate run impossible even if two replicas disagree (invariant 4).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import structlog
from sqlalchemy import Table, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, StoredSpecError, set_next_run
from sluice.db.models import Dag, DagRun
from sluice.db.prepared import Prepared
from sluice.logs import first_line
from sluice.scheduler import endings
from sluice.spec.compiled import CompiledDag
from sluice.spec.states import RunState, RunType
from sluice.spec.timetables import RunInfo

log = structlog.get_logger("sluice.scheduler")


def run_id_for(run_type: RunType, logical_date: datetime) -> str:
    return f"{run_type.value}__{logical_date.isoformat()}"


@dataclass(frozen=True)
class NewRun:
    id: int
    run_id: str


@dataclass(frozen=True)
class RunRequest:
    """A run to create: its DAG version, type and interval, and what a trigger adds."""

    compiled: CompiledDag
    run_type: RunType
    info: RunInfo
    run_id: str | None = None
    conf: dict[str, Any] | None = None
    backfill_id: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (
            self.compiled.dag_id,
            self.run_id or run_id_for(self.run_type, self.info.logical_date),
        )


_RUNS_PER_INSERT = 500


def insert_runs(
    session: Session, requests: Sequence[RunRequest], now: datetime
) -> list[NewRun | None]:
    """Create queued runs and their task instances, two statements per 500 runs.

    Returns one entry per request: the new run, or None where it already existed.
    """
    if len(requests) > _RUNS_PER_INSERT:
        return [
            new
            for start in range(0, len(requests), _RUNS_PER_INSERT)
            for new in insert_runs(session, requests[start : start + _RUNS_PER_INSERT], now)
        ]
    if not requests:
        return []
    runs = cast(Table, DagRun.__table__)
    made = {
        (row.dag_id, row.run_id): row.id
        for row in session.execute(
            pg_insert(runs)
            .values(
                [
                    {
                        "dag_id": r.compiled.dag_id,
                        "run_id": r.key[1],
                        "run_type": r.run_type.value,
                        "state": RunState.QUEUED.value,
                        "dag_version_id": r.compiled.version_id,
                        "backfill_id": r.backfill_id,
                        "logical_date": r.info.logical_date,
                        "data_interval_start": r.info.data_interval_start,
                        "data_interval_end": r.info.data_interval_end,
                        "conf": r.conf or {},
                        "created_at": now,
                        "tasks_total": len(r.compiled.tasks),
                        "tasks_done": 0,
                    }
                    for r in requests
                ]
            )
            .on_conflict_do_nothing()
            .returning(runs.c.id, runs.c.dag_id, runs.c.run_id)
        )
    }
    created: list[NewRun | None] = []
    columns: dict[str, list[Any]] = defaultdict(list)
    for r in requests:
        new_id = made.pop(r.key, None)  # popped: a request repeated in the batch is made once
        if new_id is None:
            created.append(None)
            continue
        created.append(NewRun(new_id, r.key[1]))
        count = len(r.compiled.tasks)
        columns["run"] += [new_id] * count
        columns["dag"] += [r.compiled.dag_id] * count
        columns["logical_date"] += [r.info.logical_date] * count
        for name, values in r.compiled.instance_columns.items():
            columns[name] += values
    if columns:
        _INSERT_TASKS(session, columns)
    return created


def insert_run(
    session: Session,
    compiled: CompiledDag,
    *,
    run_type: RunType,
    info: RunInfo,
    now: datetime,
    run_id: str | None = None,
    conf: dict[str, Any] | None = None,
    backfill_id: int | None = None,
) -> NewRun | None:
    """Create a queued run and its task instances; None if it already exists."""
    request = RunRequest(compiled, run_type, info, run_id, conf, backfill_id)
    return insert_runs(session, [request], now)[0]


# Every task instance of the new runs, in one statement: one array per column (the
# version's `instance_columns` repeated per run), lists of names as JSON text.
_INSERT_TASKS = Prepared(
    """
    INSERT INTO task_instance (
        dag_run_id, dag_id, task_id, state, try_number, max_tries, logical_date,
        priority_weight, pool, pool_slots, trigger_rule, upstream_task_ids, downstream_task_ids,
        upstream_states, n_success, n_failed, n_skipped, n_upstream_failed, needs_eval,
        depends_on_past, wait_for_downstream)
    SELECT v.run, v.dag, v.task, 'none', 0, v.max_tries, v.logical_date,
        v.weight, v.pool, v.slots, v.rule,
        ARRAY(SELECT jsonb_array_elements_text(CAST(v.up AS jsonb))),
        ARRAY(SELECT jsonb_array_elements_text(CAST(v.down AS jsonb))),
        '{}', 0, 0, 0, 0, v.ready, v.past, v.wait
    FROM unnest(
        CAST(:run AS bigint[]), CAST(:dag AS text[]), CAST(:task AS text[]),
        CAST(:max_tries AS int[]), CAST(:logical_date AS timestamptz[]), CAST(:weight AS int[]),
        CAST(:pool AS text[]), CAST(:slots AS int[]), CAST(:rule AS text[]),
        CAST(:up AS text[]), CAST(:down AS text[]), CAST(:ready AS boolean[]),
        CAST(:past AS boolean[]), CAST(:wait AS boolean[])
    ) AS v(run, dag, task, max_tries, logical_date, weight, pool, slots, rule, up, down,
           ready, past, wait)
    """
)


def create_due_runs(session: Session, specs: SpecCache, now: datetime, limit: int) -> int:
    """Create up to `limit` scheduled runs whose data interval has ended.

    A DAG whose current version cannot be loaded is marked broken, with the
    reason, and leaves the due list until a manifest makes a loadable version
    current (`sync_dag`); the batch is then taken again without it, so broken
    DAGs never take the places of the others, on this tick or a later one.
    """
    requests: list[RunRequest] = []
    seen: set[str] = set()
    while len(requests) < limit:
        due = _take_due_dags(session, now, limit, seen)
        specs.preload(session, [dag.current_version_id for dag, _ in due])
        marked = 0
        for dag, running in due:
            room = min(limit - len(requests), dag.max_active_runs - running)
            if room <= 0:
                break
            seen.add(dag.dag_id)
            assert dag.current_version_id is not None  # the query takes only DAGs with one
            try:
                compiled = specs.get(session, dag.current_version_id)
            except StoredSpecError as exc:
                _mark_broken(dag, exc, now)
                marked += 1
                continue
            except Exception as exc:
                log.error(
                    "DAG spec cannot be loaded; no runs created",
                    dag=dag.dag_id,
                    error=first_line(exc),
                )
                continue
            requests.extend(due_runs(dag, compiled, now, room))
        if not marked:
            break  # a batch without broken DAGs had every place it could use
    return sum(1 for new in insert_runs(session, requests, now) if new is not None)


# Due DAG rows, locked SKIP LOCKED, earliest first, with their queued and running
# scheduled runs (not a backfill's), leaving out the ones this tick has seen. Phase 1
# runs it once per tick interval and it almost always finds nothing, so it is a
# prepared text; the DAGs it finds are then loaded as ORM objects, already locked.
_DUE_DAGS = Prepared(
    """
    SELECT d.dag_id, a.active
    FROM dag d CROSS JOIN LATERAL (
        SELECT count(*) AS active FROM dag_run r
        WHERE r.dag_id = d.dag_id AND r.state IN ('queued', 'running')
          AND r.backfill_id IS NULL
    ) a
    WHERE d.is_active AND NOT d.is_paused AND d.next_run_after <= :now
      AND d.broken_reason IS NULL AND d.current_version_id IS NOT NULL
      AND a.active < d.max_active_runs
      AND NOT d.dag_id = ANY(CAST(:seen AS text[]))
    ORDER BY d.next_run_after, d.dag_id
    LIMIT :limit
    FOR UPDATE OF d SKIP LOCKED
    """
)


def _take_due_dags(
    session: Session, now: datetime, limit: int, seen: set[str]
) -> list[tuple[Dag, int]]:
    """Due DAG rows, locked, earliest first, leaving out the ones this tick has seen."""
    due = _DUE_DAGS(session, {"now": now, "limit": limit, "seen": sorted(seen)}).all()
    if not due:
        return []
    loaded = {
        dag.dag_id: dag
        for dag in session.execute(
            select(Dag).where(Dag.dag_id.in_([row.dag_id for row in due]))
        ).scalars()
    }
    return [(loaded[row.dag_id], int(row.active)) for row in due]


def _mark_broken(dag: Dag, error: StoredSpecError, now: datetime) -> None:
    dag.broken_reason = str(error)
    dag.broken_at = now
    log.error(
        "DAG marked broken: its current version cannot be loaded; no scheduled runs until "
        "a loadable version is applied",
        dag=dag.dag_id,
        reason=dag.broken_reason,
    )


def due_runs(dag: Dag, compiled: CompiledDag, now: datetime, room: int) -> list[RunRequest]:
    """The runs the timetable calls for now (at most `room`); moves the DAG's next run on.

    Pure over the (locked) DAG row: the conformance suite calls it on a transient row.
    """
    spec = compiled.spec
    requests: list[RunRequest] = []
    info = _stored_next_run(dag)
    while info is not None and info.run_after <= now and len(requests) < room:
        if not spec.catchup:
            # A DAG unpaused after a long pause starts from the latest interval, not the stored one.
            info = compiled.timetable.skip_to_latest(info, now=now)
        requests.append(RunRequest(compiled, RunType.SCHEDULED, info))
        info = compiled.next_run(info, now)
    set_next_run(dag, info)
    return requests


def _stored_next_run(dag: Dag) -> RunInfo | None:
    if dag.next_logical_date is None:
        return None
    assert dag.next_data_interval_start is not None
    assert dag.next_data_interval_end is not None
    assert dag.next_run_after is not None
    return RunInfo(
        dag.next_logical_date,
        dag.next_data_interval_start,
        dag.next_data_interval_end,
        dag.next_run_after,
    )


# The DAGs phase 1 acts on, DAG rows locked SKIP LOCKED (so two replicas never both count
# one DAG's running runs), found from the queued runs alone (a tick's cost does not grow
# with the number of DAGs or of finished runs). First, deleted DAGs (`is_active` false)
# with a queued run: their runs end. Then DAGs that can start a queued run: unpaused,
# with a queued run whose group (the DAG's own runs, or one backfill's) is under its
# limit (maxActiveRuns, or the backfill's), oldest queued run first, so DAGs at their
# limit with a backlog never take the turn of those that can start.
_DAGS_TO_ACT_ON = Prepared(
    """
    WITH waiting AS (
        SELECT dag_id, backfill_id, min(id) AS oldest
        FROM dag_run WHERE state = 'queued'
        GROUP BY dag_id, backfill_id
    ), candidates AS (
        SELECT w.dag_id, min(w.oldest) AS oldest
        FROM waiting w
        JOIN dag d ON d.dag_id = w.dag_id
        LEFT JOIN backfill b ON b.id = w.backfill_id
        WHERE NOT d.is_active
           OR (NOT d.is_paused
               AND (SELECT count(*) FROM dag_run r
                    WHERE r.dag_id = w.dag_id AND r.state = 'running'
                      AND r.backfill_id IS NOT DISTINCT FROM w.backfill_id)
                   < COALESCE(b.max_active_runs, d.max_active_runs))
        GROUP BY w.dag_id
    )
    SELECT d.dag_id, d.is_active
    FROM dag d JOIN candidates c ON c.dag_id = d.dag_id
    WHERE NOT (d.is_active AND d.is_paused)  -- checked again on the row as locked
    ORDER BY d.is_active, c.oldest, d.dag_id
    LIMIT :limit
    FOR UPDATE OF d SKIP LOCKED
    """
)

# In the locked DAGs, each group's queued runs by logical date fill the room its running
# runs leave under its limit. A fresh snapshot (READ COMMITTED) after the lock above, so
# the running runs counted are the ones there are.
_START = Prepared(
    """
    WITH ranked AS (
        SELECT r.id, r.state,
               row_number() OVER (
                   PARTITION BY r.dag_id, r.backfill_id
                   ORDER BY r.state = 'running' DESC, r.logical_date, r.id) AS rank,
               COALESCE(b.max_active_runs, d.max_active_runs) AS cap
        FROM dag_run r
        JOIN dag d ON d.dag_id = r.dag_id
        LEFT JOIN backfill b ON b.id = r.backfill_id
        WHERE r.dag_id = ANY(:dags) AND r.state IN ('queued', 'running')
    )
    UPDATE dag_run SET state = 'running', start_date = :now
    FROM ranked
    WHERE dag_run.id = ranked.id AND ranked.state = 'queued' AND ranked.rank <= ranked.cap
      AND dag_run.state = 'queued'
    """
)

# The queued and running runs of these (locked, deleted) DAGs, SKIP LOCKED: a run busy
# now (a report being applied) is ended on a later pass.
_RUNS_OF = Prepared(
    """
    SELECT id, dag_id FROM dag_run
    WHERE dag_id = ANY(:dags) AND state IN ('queued', 'running')
    ORDER BY id
    FOR UPDATE SKIP LOCKED
    """
)


def start_queued_runs(session: Session, now: datetime, limit: int) -> int:
    """Promote queued runs to running within their limits; two statements.

    Up to `limit` DAGs that can start a run are taken, oldest queued run first
    (a DAG at maxActiveRuns, or whose backfill is at its limit, is not taken, so
    a backlog never starves other DAGs); in each, queued runs start oldest
    logical date first, up to the DAG's maxActiveRuns (a backfill's runs up to
    the backfill's own limit). Deleted DAGs with a queued run are taken first,
    and their runs end instead (`end_runs_of_deleted_dags`).
    """
    dags = _DAGS_TO_ACT_ON(session, {"limit": limit}).all()
    end_runs_of_deleted_dags(session, [d.dag_id for d in dags if not d.is_active], now)
    startable = [d.dag_id for d in dags if d.is_active]
    if not startable:
        return 0
    return int(_START(session, {"dags": startable, "now": now}).rowcount)


def end_runs_of_deleted_dags(session: Session, dag_ids: Sequence[str], now: datetime) -> int:
    """A deleted DAG's runs end: its queued runs never start, its running runs stop (they
    fail, their unfinished tasks skipped with the reason, as a timed-out run's are; a
    deleted DAG with running runs only is left to examine). The caller holds the DAG
    rows' locks. Returns how many runs ended."""
    if not dag_ids:
        return 0
    runs = _RUNS_OF(session, {"dags": list(dag_ids)}).all()
    endings.end_runs(session, {run.id: endings.deleted_dag(run.dag_id) for run in runs}, now)
    if runs:
        log.warning("runs of deleted DAGs ended", dags=sorted(dag_ids), runs=len(runs))
    return len(runs)
