"""Phase 1 of the loop: create the runs the timetables call for, and start queued runs.

Runs are created `queued` and promoted to `running` only while their DAG (or
their backfill) is under its `maxActiveRuns`. DAG rows are taken with
`FOR UPDATE SKIP LOCKED`, so replicas share the work without waiting on one
another, and the unique keys on (dag, run_id) and (dag, logical date, run type)
make a duplicate run impossible even if two replicas disagree (invariant 4).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Row, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, StoredSpecError, set_next_run
from sluice.db.models import Dag
from sluice.db.prepared import Prepared
from sluice.logs import first_line
from sluice.scheduler import endings, examine
from sluice.spec.compiled import CompiledDag
from sluice.spec.states import RunType
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
    made = {
        (row.dag_id, row.run_id): row.id
        for row in _INSERT_RUNS(
            session,
            {
                "dag": [r.compiled.dag_id for r in requests],
                "run_id": [r.key[1] for r in requests],
                "run_type": [r.run_type.value for r in requests],
                "version": [r.compiled.version_id for r in requests],
                "backfill": [r.backfill_id for r in requests],
                "logical_date": [r.info.logical_date for r in requests],
                "start": [r.info.data_interval_start for r in requests],
                "end": [r.info.data_interval_end for r in requests],
                "conf": [json.dumps(r.conf or {}) for r in requests],
                "tasks": [len(r.compiled.tasks) for r in requests],
                "now": now,
            },
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


# The new runs, queued, in one statement: one array per column (conf as JSON text); a run
# whose keys exist already is left out (ON CONFLICT DO NOTHING) and not returned.
_INSERT_RUNS = Prepared(
    """
    INSERT INTO dag_run (
        dag_id, run_id, run_type, state, dag_version_id, backfill_id, logical_date,
        data_interval_start, data_interval_end, conf, created_at, tasks_total, tasks_done)
    SELECT v.dag, v.run_id, v.run_type, 'queued', v.version, v.backfill, v.logical_date,
        v.start, v."end", CAST(v.conf AS jsonb), :now, v.tasks, 0
    FROM unnest(
        CAST(:dag AS text[]), CAST(:run_id AS text[]), CAST(:run_type AS text[]),
        CAST(:version AS int[]), CAST(:backfill AS int[]),
        CAST(:logical_date AS timestamptz[]), CAST(:start AS timestamptz[]),
        CAST(:end AS timestamptz[]), CAST(:conf AS text[]), CAST(:tasks AS int[])
    ) AS v(dag, run_id, run_type, version, backfill, logical_date, start, "end", conf, tasks)
    ON CONFLICT DO NOTHING
    RETURNING id, dag_id, run_id
    """
)


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
    """Create up to `limit` scheduled runs whose data interval has ended; four statements
    (the due DAGs, the runs, their task instances, the DAGs' next runs) when no DAG is
    broken and their versions are cached.

    A DAG whose current version cannot be loaded is marked broken, with the
    reason, and leaves the due list until a manifest makes a loadable version
    current (`sync_dag`); the batch is then taken again without it, so broken
    DAGs never take the places of the others, on this tick or a later one.
    """
    requests: list[RunRequest] = []
    following: dict[str, RunInfo | None] = {}  # each DAG's next run, once it is moved on
    seen: set[str] = set()
    while len(requests) < limit:
        due = _DUE_DAGS(session, {"now": now, "limit": limit, "seen": sorted(seen)}).all()
        specs.preload(session, [row.current_version_id for row in due])
        marked = 0
        for row in due:
            room = min(limit - len(requests), row.max_active_runs - row.active)
            if room <= 0:
                break
            seen.add(row.dag_id)
            try:
                compiled = specs.get(session, row.current_version_id)
            except StoredSpecError as exc:
                _mark_broken(session, row.dag_id, exc, now)
                marked += 1
                continue
            except Exception as exc:
                log.error(
                    "DAG spec cannot be loaded; no runs created",
                    dag=row.dag_id,
                    error=first_line(exc),
                )
                continue
            made, following[row.dag_id] = plan_runs(_next_run_of(row), compiled, now, room)
            requests.extend(made)
        if not marked:
            break  # a batch without broken DAGs had every place it could use
    created = sum(1 for new in insert_runs(session, requests, now) if new is not None)
    _move_on(session, following)
    return created


# Due DAG rows, locked SKIP LOCKED, earliest first, with their queued and running
# scheduled runs (not a backfill's), leaving out the ones this tick has seen, and the
# columns phase 1 plans their runs from: plain rows, no ORM objects (a burst of a
# minute's runs takes thousands). Phase 1 runs it once per tick interval and it almost
# always finds nothing, so it is a prepared text.
_DUE_DAGS = Prepared(
    """
    SELECT d.dag_id, d.current_version_id, d.max_active_runs, d.next_logical_date,
           d.next_data_interval_start, d.next_data_interval_end, d.next_run_after, a.active
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

# The DAGs' next runs, in one statement (NULLs: the timetable calls for no more).
_MOVE_ON = Prepared(
    """
    UPDATE dag SET next_logical_date = v.logical_date, next_data_interval_start = v.start,
        next_data_interval_end = v."end", next_run_after = v.run_after
    FROM unnest(
        CAST(:dags AS text[]), CAST(:logical_date AS timestamptz[]),
        CAST(:start AS timestamptz[]), CAST(:end AS timestamptz[]),
        CAST(:run_after AS timestamptz[])
    ) AS v(dag_id, logical_date, start, "end", run_after)
    WHERE dag.dag_id = v.dag_id
    """
)


def _move_on(session: Session, following: dict[str, RunInfo | None]) -> None:
    if not following:
        return
    infos = list(following.values())
    _MOVE_ON(
        session,
        {
            "dags": list(following),
            "logical_date": [i.logical_date if i else None for i in infos],
            "start": [i.data_interval_start if i else None for i in infos],
            "end": [i.data_interval_end if i else None for i in infos],
            "run_after": [i.run_after if i else None for i in infos],
        },
    )


def _mark_broken(session: Session, dag_id: str, error: StoredSpecError, now: datetime) -> None:
    reason = str(error)
    session.execute(
        update(Dag).where(Dag.dag_id == dag_id).values(broken_reason=reason, broken_at=now)
    )
    log.error(
        "DAG marked broken: its current version cannot be loaded; no scheduled runs until "
        "a loadable version is applied",
        dag=dag_id,
        reason=reason,
    )


def due_runs(dag: Dag, compiled: CompiledDag, now: datetime, room: int) -> list[RunRequest]:
    """The runs the timetable calls for now (at most `room`); moves the DAG's next run on.

    Over a DAG row (the conformance suite calls it on a transient one); phase 1 plans
    from its plain rows with `plan_runs`, the same decisions.
    """
    requests, following = plan_runs(_next_run_of(dag), compiled, now, room)
    set_next_run(dag, following)
    return requests


def plan_runs(
    info: RunInfo | None, compiled: CompiledDag, now: datetime, room: int
) -> tuple[list[RunRequest], RunInfo | None]:
    """The runs the timetable calls for now (at most `room`), from the stored next run
    `info`, and the next run after them. Pure."""
    spec = compiled.spec
    requests: list[RunRequest] = []
    while info is not None and info.run_after <= now and len(requests) < room:
        if not spec.catchup:
            # A DAG unpaused after a long pause starts from the latest interval, not the stored one.
            info = compiled.timetable.skip_to_latest(info, now=now)
        requests.append(RunRequest(compiled, RunType.SCHEDULED, info))
        info = compiled.next_run(info, now)
    return requests, info


def _next_run_of(dag: Any) -> RunInfo | None:
    """The next run stored in a DAG row's `next_*` columns (an ORM object or a plain row)."""
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
    RETURNING dag_run.id, dag_run.dag_version_id
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
    """Promote queued runs to running within their limits; two statements. Returns how
    many started (`start_runs` says which)."""
    return len(start_runs(session, now, limit))


def start_runs(session: Session, now: datetime, limit: int) -> list[Row[Any]]:
    """Promote queued runs to running within their limits; two statements. Returns the
    runs started (`id`, `dag_version_id`).

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
        return []
    return list(_START(session, {"dags": startable, "now": now}).all())


@dataclass(frozen=True)
class RunsBatch:
    """What one pass of phase 1 did: runs created and started, and the first tasks of
    the started runs decided (`examine.decide_first_tasks`)."""

    created: int
    started: int
    first_tasks: examine.ExamineStats
    # When the next run falls due, if this pass left none due now (None: unknown, or
    # no schedule calls for one): the loop's idle wait ends then.
    next_due: datetime | None = None


def create_and_start_runs(
    session: Session, specs: SpecCache, now: datetime, limit: int
) -> RunsBatch:
    """One pass of phase 1, in the caller's transaction: create up to `limit` due runs,
    start queued runs of up to `limit` DAGs, and decide the first tasks of the runs
    started, so they wait for the critical section, not for phase 2.

    A run started gets its deadline (`set_deadlines`): a run whose version cannot
    be loaded is due at once, and phase 2 ends it with the reason."""
    created = create_due_runs(session, specs, now, limit)
    started = start_runs(session, now, limit)
    specs.preload(session, [run.dag_version_id for run in started])
    loadable = [run.id for run in started if _loads(session, specs, run.dag_version_id)]
    set_deadlines(session, specs, started, set(loadable), now)
    first_tasks = (
        examine.decide_first_tasks(session, sorted(loadable), now)
        if loadable
        else examine.ExamineStats()
    )
    emptied = created < limit and len(started) < limit
    next_due = _NEXT_DUE(session, {"now": now}).scalar() if emptied else None
    return RunsBatch(created, len(started), first_tasks, next_due)


def set_deadlines(
    session: Session,
    specs: SpecCache,
    started: Sequence[Row[Any]],
    loadable: set[int],
    now: datetime,
) -> None:
    """The deadlines of runs started at `now` (their `start_date`), in one statement when
    any has one: the start plus the version's dagrunTimeout, or the start itself for a
    run whose version cannot be loaded, so that phase 2 takes each as work when it is
    due (`examine._TAKE`, the loop's look) instead of finding it round-robin."""
    ids: list[int] = []
    deadlines: list[datetime] = []
    for run in started:
        if run.id in loadable:
            timeout = specs.get(session, run.dag_version_id).spec.dagrun_timeout
            if timeout is None:
                continue
            ids.append(run.id)
            deadlines.append(now + timeout)
        else:
            ids.append(run.id)
            deadlines.append(now)
    if ids:
        _SET_DEADLINES(session, {"ids": ids, "deadlines": deadlines})


_SET_DEADLINES = Prepared(
    """
    UPDATE dag_run r SET deadline = v.deadline
    FROM unnest(CAST(:ids AS bigint[]), CAST(:deadlines AS timestamptz[])) AS v(id, deadline)
    WHERE r.id = v.id
    """
)


# The earliest next run of the DAGs phase 1 looks at, after `now` (the partial index of
# the due scan; a DAG due now but at its limit is not "next").
_NEXT_DUE = Prepared(
    """
    SELECT min(next_run_after) FROM dag
    WHERE is_active AND NOT is_paused AND next_run_after IS NOT NULL
      AND broken_reason IS NULL AND next_run_after > :now
    """
)


def _loads(session: Session, specs: SpecCache, version_id: int) -> bool:
    try:
        specs.get(session, version_id)
    except DBAPIError:
        raise  # the database, not the spec: the loop's error policy applies
    except Exception:
        return False
    return True


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
