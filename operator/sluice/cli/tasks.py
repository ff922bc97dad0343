"""`sluice tasks clear|mark`: run tasks of a run again, or set their state, as Airflow's
"Clear" and "Mark success/failed" do (`scheduler.clearing`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session, sessionmaker

from sluice.cli.common import DatabaseUrl, StateDir, database_or_state_dir
from sluice.cli.errors import fail
from sluice.db.dags import SpecCache
from sluice.db.engine import make_engine, session_factory
from sluice.scheduler import clearing
from sluice.scheduler.clearing import ActionError, Change, Outcome
from sluice.scheduler.loop import utcnow
from sluice.scheduler.past import wake_next_runs
from sluice.spec.states import TaskState

app = typer.Typer(help="Clear (run again) or mark tasks of a run.", no_args_is_help=True)

Run = Annotated[str, typer.Option("--run", help="the run id (`sluice dags runs DAG` lists them)")]
Tasks = Annotated[
    list[str] | None, typer.Option("--task", "-t", help="a task of the DAG (repeat for more)")
]
Downstream = Annotated[
    bool, typer.Option("--downstream", "-d", help="and every task after them, transitively")
]
Upstream = Annotated[
    bool, typer.Option("--upstream", "-u", help="and every task before them, transitively")
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print what would change, change nothing")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="do not ask before changing anything")]

# The work of one command in one transaction: (session, dry run) -> what changed.
_Action = Callable[[Session, bool], Outcome]


@app.command()
def clear(
    dag: Annotated[str, typer.Argument(help="DAG name")],
    run: Run,
    task: Tasks = None,
    downstream: Downstream = False,
    upstream: Upstream = False,
    only_failed: Annotated[
        bool, typer.Option("--only-failed", "-f", help="only failed and upstream_failed tasks")
    ] = False,
    dry_run: DryRun = False,
    yes: Yes = False,
    database_url: DatabaseUrl = None,
    state_dir: StateDir = None,
) -> None:
    """Run tasks of a run again (all of them without --task): each goes back to no state
    with its retries again, try numbers counting on; a running try is stopped first; an
    ended run is queued again."""

    def action(session: Session, dry: bool) -> Outcome:
        found = clearing.find_run(session, dag, run)
        return clearing.clear(
            session,
            SpecCache(),
            found,
            task,
            upstream=upstream,
            downstream=downstream,
            only_failed=only_failed,
            reason="cleared by `sluice tasks clear`",
            now=utcnow(),
            dry_run=dry,
        )

    _run(database_url, state_dir, action, "clear", dry_run=dry_run, yes=yes, wake=False)


@app.command()
def mark(
    dag: Annotated[str, typer.Argument(help="DAG name")],
    state: Annotated[str, typer.Argument(help="success or failed")],
    run: Run,
    task: Tasks = None,
    downstream: Downstream = False,
    upstream: Upstream = False,
    dry_run: DryRun = False,
    yes: Yes = False,
    database_url: DatabaseUrl = None,
    state_dir: StateDir = None,
) -> None:
    """Set tasks of a run to success or failed (a running try is stopped); then, as
    Airflow does, the failed tasks downstream of them run again."""
    if state not in (TaskState.SUCCESS, TaskState.FAILED):
        fail(f"STATE {state!r}: a task can be marked success or failed", code=1)
    if not task:
        fail("--task: name at least one task to mark, e.g. --task extract", code=1)
    target = TaskState(state)

    def action(session: Session, dry: bool) -> Outcome:
        found = clearing.find_run(session, dag, run)
        return clearing.mark(
            session,
            SpecCache(),
            found,
            task,
            target,
            upstream=upstream,
            downstream=downstream,
            reason=f"marked {state} by `sluice tasks mark`",
            now=utcnow(),
            dry_run=dry,
        )

    _run(database_url, state_dir, action, "mark", dry_run=dry_run, yes=yes, wake=True)


def _run(
    database_url: str | None,
    state_dir: Path | None,
    action: _Action,
    verb: str,
    *,
    dry_run: bool,
    yes: bool,
    wake: bool,
) -> None:
    """Print what the action would change; ask (on a terminal, without --yes); do it."""
    with database_or_state_dir(database_url, state_dir) as url:
        _act(url, action, verb, dry_run=dry_run, yes=yes, wake=wake)


def _act(url: str, action: _Action, verb: str, *, dry_run: bool, yes: bool, wake: bool) -> None:
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        planned = _attempt(sessions, action, dry=True)
        console = Console()
        if not planned.cleared and not planned.marked:
            print(f"nothing to {verb} in run {planned.run_id}: no task instance matches")
            return
        console.print(_table(planned, title=f"run {planned.run_id} ({planned.run_state_before})"))
        if dry_run:
            print("dry run: nothing changed")
            return
        if not yes and sys.stdin.isatty() and not typer.confirm(f"{verb.capitalize()} these?"):
            fail(f"cancelled: nothing to {verb} was changed", code=1)
        done = _attempt(sessions, action, dry=False)
        if wake and done.marked:
            # A task marked success or failed may be what the next run's dependsOnPast
            # tasks wait for (past.py): woken in a transaction of its own, as the loop does.
            with sessions() as session:
                wake_next_runs(session, [done.run_pk])
                session.commit()
        print(_summary(done))
    finally:
        engine.dispose()


def _attempt(sessions: sessionmaker[Session], action: _Action, *, dry: bool) -> Outcome:
    with sessions() as session:
        try:
            outcome = action(session, dry)
        except ActionError as exc:
            fail(str(exc), code=1)
        if dry:
            session.rollback()
        else:
            session.commit()
        return outcome


def _table(outcome: Outcome, *, title: str) -> Table:
    table = Table(title=title)
    for column in ("TASK", "NOW", "TRY", "BECOMES"):
        table.add_column(column)

    def add(change: Change, becomes: str) -> None:
        table.add_row(change.task_id, change.was, str(change.try_number), becomes)

    for change in outcome.marked:
        add(change, outcome.marked_as or "-")
    for change in outcome.cleared:
        add(change, "restarting" if change.was == TaskState.RUNNING else "none (cleared)")
    return table


def _summary(outcome: Outcome) -> str:
    parts = []
    if outcome.marked:
        parts.append(f"marked {len(outcome.marked)} task instance(s) {outcome.marked_as}")
    if outcome.cleared:
        parts.append(f"cleared {len(outcome.cleared)}")
    return f"run {outcome.run_id}: {', '.join(parts)}; the run is {outcome.run_state}"
