"""`sluice backfill DAG --start --end`: runs for past logical dates, scheduled by the replicas."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from sqlalchemy import select

from sluice.cli.common import DatabaseUrl, parse_datetime
from sluice.cli.errors import fail
from sluice.config import ConfigError, require_database_url
from sluice.db.dags import SpecCache
from sluice.db.engine import make_engine, session_factory
from sluice.db.models import DagRun
from sluice.scheduler.backfill import BackfillError, create_backfill
from sluice.scheduler.loop import utcnow
from sluice.spec.states import ACTIVE_RUN_STATES, Reprocess


def backfill(
    dag: Annotated[str, typer.Argument(help="DAG name")],
    start: Annotated[str, typer.Option("--start", help="first logical date (ISO 8601)")],
    end: Annotated[str, typer.Option("--end", help="last logical date, inclusive (ISO 8601)")],
    max_active_runs: Annotated[
        int | None, typer.Option(help="runs of this backfill at once (default: the DAG's)")
    ] = None,
    reprocess: Annotated[
        Reprocess,
        typer.Option(
            help="a date whose run has ended: keep it (none), run it again if it failed "
            "(failed: its failed tasks), or whatever its end (completed: all its tasks)",
            case_sensitive=False,
        ),
    ] = Reprocess.NONE,
    rerun_failed: Annotated[bool, typer.Option(help="the same as --reprocess failed")] = False,
    wait: Annotated[bool, typer.Option(help="wait until every backfill run has ended")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a backfill: a run per schedule tick from --start to --end (inclusive) without one."""
    try:
        url = require_database_url(database_url)
    except ConfigError as exc:
        fail(str(exc))
    if rerun_failed:
        if reprocess not in (Reprocess.NONE, Reprocess.FAILED):
            fail(f"--rerun-failed is --reprocess failed; it contradicts --reprocess {reprocess}")
        reprocess = Reprocess.FAILED
    start_at = parse_datetime(start, "--start")
    end_at = parse_datetime(end, "--end")
    engine = make_engine(url)
    sessions = session_factory(engine)
    with sessions() as session:
        try:
            plan = create_backfill(
                session,
                SpecCache(),
                dag,
                start_at,
                end_at,
                utcnow(),
                max_active_runs=max_active_runs,
                reprocess=reprocess,
            )
        except BackfillError as exc:
            fail(str(exc))
        session.commit()
    typer.echo(
        f"backfill {plan.backfill_id}: {len(plan.created)} new run(s), "
        f"{len(plan.rerun)} rerun, {len(plan.skipped)} skipped"
    )
    for date, why in plan.skipped:
        typer.echo(f"  skipped {date}: {why}")
    while wait:
        with sessions() as session:
            active = session.execute(
                select(DagRun.id).where(
                    DagRun.backfill_id == plan.backfill_id, DagRun.state.in_(ACTIVE_RUN_STATES)
                )
            ).first()
        if active is None:
            break
        time.sleep(1)
    engine.dispose()
