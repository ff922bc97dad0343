"""Backfill: the scheduler's own machinery over a given list of logical dates.

A backfill records its range and its own maxActiveRuns, then creates one
`backfill` run per cron tick in `[start, end]` (both inclusive) whose data
interval has ended by `now` and that has no run yet (as Airflow 3's backfill:
an interval still under way, or in the future, is listed as skipped). A date
that has a run is skipped, unless its run has ended and the backfill reprocesses
it (`Reprocess`, Airflow 3's `--reprocess-behavior`): `failed` takes a run that
failed, `completed` one that failed or succeeded. Such a run is cleared: with
`failed` its failed and upstream_failed tasks, with `completed` all its tasks,
go back to `none` with a fresh set of retries, and the run is queued again under
the backfill. A run still queued or running is never taken. Replicas then
schedule these runs like any other; `start_queued_runs` holds them to the
backfill's limit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, StoredSpecError
from sluice.db.models import Backfill, DagRun
from sluice.scheduler import clearing
from sluice.scheduler.runs import RunRequest, insert_runs
from sluice.scheduler.transitions import lock_runs
from sluice.spec.states import (
    TERMINAL_RUN_STATES,
    Reprocess,
    RunState,
    RunType,
)
from sluice.spec.timetables import CronTimetable


class BackfillError(ValueError):
    """A backfill that cannot be created, with the reason and the fix."""


@dataclass
class BackfillPlan:
    backfill_id: int
    created: list[str] = field(default_factory=list)
    rerun: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def run_count(self) -> int:
        return len(self.created) + len(self.rerun)


def create_backfill(
    session: Session,
    specs: SpecCache,
    dag_id: str,
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    max_active_runs: int | None = None,
    reprocess: Reprocess = Reprocess.NONE,
) -> BackfillPlan:
    try:
        compiled = specs.current(session, dag_id)
    except LookupError:
        raise BackfillError(f"DAG {dag_id!r} is not registered; apply its manifest first") from None
    except StoredSpecError as exc:
        raise BackfillError(str(exc)) from None
    if not isinstance(compiled.timetable, CronTimetable):
        raise BackfillError(
            f"DAG {dag_id!r} has schedule {compiled.spec.schedule!r}; backfill needs a cron "
            "schedule to know its logical dates (use a manual run instead)"
        )
    if start.tzinfo is None or end.tzinfo is None:
        raise BackfillError("--start and --end need a timezone, e.g. 2026-11-01T00:00:00Z")
    if start > end:
        raise BackfillError(f"--start {start.isoformat()} is after --end {end.isoformat()}")
    if max_active_runs is not None and max_active_runs < 1:
        raise BackfillError("--max-active-runs must be at least 1")
    ticks = compiled.timetable.runs_between(start, end)
    if not ticks:
        raise BackfillError(
            f"schedule {compiled.spec.schedule!r} has no logical dates between "
            f"{start.isoformat()} and {end.isoformat()}"
        )
    infos = [info for info in ticks if info.data_interval_end <= now]
    if not infos:
        raise BackfillError(
            f"no data interval between {start.isoformat()} and {end.isoformat()} has ended "
            f"yet (the first ends at {ticks[0].data_interval_end.isoformat()}); a backfill "
            "runs intervals that have ended: give an earlier --end"
        )
    backfill = Backfill(
        dag_id=dag_id,
        from_date=start,
        to_date=end,
        max_active_runs=max_active_runs or compiled.spec.max_active_runs,
        rerun_failed=reprocess == Reprocess.FAILED,
        reprocess=reprocess.value,
        created_at=now,
    )
    session.add(backfill)
    session.flush()
    plan = BackfillPlan(backfill.id)
    plan.skipped.extend(
        (
            info.logical_date.isoformat(),
            f"its data interval has not ended (it ends at {info.data_interval_end.isoformat()})",
        )
        for info in ticks[len(infos) :]
    )
    existing: dict[datetime, list[Any]] = defaultdict(list)
    for row in session.execute(
        select(DagRun.id, DagRun.logical_date, DagRun.state, DagRun.run_id).where(
            DagRun.dag_id == dag_id,
            DagRun.logical_date.in_([info.logical_date for info in infos]),
        )
    ):
        existing[row.logical_date].append(row)
    requests: list[RunRequest] = []
    for info in infos:
        prior = existing.get(info.logical_date, [])
        if not prior:
            requests.append(RunRequest(compiled, RunType.BACKFILL, info, backfill_id=backfill.id))
        elif all(reprocesses(reprocess, run.state) for run in prior):
            for run in prior:
                _reprocess(session, specs, run.id, reprocess, backfill.id, now)
                plan.rerun.append(run.run_id)
        else:
            why = ", ".join(f"run {run.run_id} exists ({run.state})" for run in prior)
            plan.skipped.append((info.logical_date.isoformat(), why))
    for request, new in zip(requests, insert_runs(session, requests, now), strict=True):
        if new is None:  # created by a concurrent backfill since the read above
            raise BackfillError(
                f"a run at {request.info.logical_date.isoformat()} appeared while this backfill"
                " was being created; run the backfill again (it skips existing runs)"
            )
        plan.created.append(new.run_id)
    return plan


def reprocesses(reprocess: Reprocess, state: str) -> bool:
    """Whether a backfill with this choice runs again a date whose run is in `state`."""
    match reprocess:
        case Reprocess.NONE:
            return False
        case Reprocess.FAILED:
            return state == RunState.FAILED
        case Reprocess.COMPLETED:
            return state in TERMINAL_RUN_STATES


def _reprocess(
    session: Session,
    specs: SpecCache,
    run_id: int,
    reprocess: Reprocess,
    backfill_id: int,
    now: datetime,
) -> None:
    """Clear an ended run as the backfill's choice says (`failed`: its failed and
    upstream_failed tasks, Airflow 2.10.5's --rerun-failed-tasks; `completed`: every task)
    and queue it again under the backfill."""
    lock_runs(session, [run_id])
    run = session.get_one(DagRun, run_id)
    clearing.reopen(session, run, backfill_id=backfill_id)  # then the clear finds it queued
    clearing.clear(
        session,
        specs,
        run,
        only_failed=reprocess == Reprocess.FAILED,
        reason=f"cleared by backfill {backfill_id} (--reprocess {reprocess.value})",
        now=now,
    )
