"""Manual runs: a user (or a DagRun object) asks for a run now, with an optional conf."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, StoredSpecError
from sluice.scheduler.runs import NewRun, insert_run, run_id_for
from sluice.spec.states import RunType


class TriggerError(ValueError):
    """A manual run that cannot be created, with the reason and the fix."""


def trigger_run(
    session: Session,
    specs: SpecCache,
    dag_id: str,
    now: datetime,
    *,
    logical_date: datetime | None = None,
    conf: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> NewRun:
    try:
        compiled = specs.current(session, dag_id)
    except LookupError:
        raise TriggerError(f"DAG {dag_id!r} is not registered; apply its manifest first") from None
    except StoredSpecError as exc:
        raise TriggerError(str(exc)) from None
    if conf is not None and not isinstance(conf, dict):
        raise TriggerError('conf must be a JSON object, e.g. \'{"key": "value"}\'')
    when = logical_date or now
    start_date = compiled.spec.start_date
    if start_date is not None and when < start_date:
        # Airflow never runs a task for a logical date before its start date: its
        # trigger refuses one before default_args' start_date, and a run it does create
        # gets no task instances. Refused here, saying which field and what to do.
        asked = (
            f"a manual run's logical date {when.isoformat()} is"
            if logical_date is not None
            else f"a manual run now ({when.isoformat()}, no logical date given) would be"
        )
        raise TriggerError(
            f"DAG {dag_id!r}: {asked} before its spec.startDate {start_date.isoformat()}; "
            "give a logical date at or after spec.startDate, or move spec.startDate earlier"
        )
    info = compiled.timetable.manual_run(when)
    run_id = run_id or run_id_for(RunType.MANUAL, info.logical_date)
    created = insert_run(
        session, compiled, run_type=RunType.MANUAL, info=info, now=now, run_id=run_id, conf=conf
    )
    if created is None:
        raise TriggerError(
            f"DAG {dag_id!r} already has a run with run_id {run_id!r} or a manual run at "
            f"{info.logical_date.isoformat()}; choose another run id or logical date"
        )
    return created
