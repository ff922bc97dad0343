"""`sluice dags validate|render|test|trigger|list|pause|unpause`: check, render from Python,
try out, start, list and pause DAGs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from sluice.cli.common import (
    DatabaseUrl,
    Output,
    StateDir,
    check_output,
    database_or_state_dir,
    load_manifests,
    parse_datetime,
    print_document,
    require_database,
    require_embedded_postgres,
)
from sluice.cli.dags_render import render_command
from sluice.cli.dags_validate import validate_command
from sluice.cli.errors import fail
from sluice.config import ConfigError, require_database_url
from sluice.db.dags import DagNameTaken, SpecCache, clear_schedule, set_paused
from sluice.db.engine import make_engine, session_factory
from sluice.logs import configure_logging
from sluice.runtime import LocalRuntime
from sluice.scheduler.loop import utcnow
from sluice.scheduler.triggers import TriggerError, trigger_run
from sluice.spec.models import DagManifest
from sluice.spec.states import TERMINAL_RUN_STATES, RunState
from sluice.summaries import (
    as_json,
    broken_lines,
    dags_as_json,
    dags_table,
    read_dags,
    read_runs,
    runs_table,
    task_detail_lines,
    tasks_table,
)

app = typer.Typer(
    help="Check, try out, trigger, list and pause DAGs, and show their runs.", no_args_is_help=True
)


_CONF_HELP = "run conf as a JSON object; its keys override the DAG's params"


def _conf(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        conf = json.loads(value)
    except json.JSONDecodeError as exc:
        fail(f"--conf is not valid JSON ({exc.msg} at column {exc.colno})")
    if not isinstance(conf, dict):
        fail('--conf must be a JSON object, e.g. \'{"key": "value"}\'')
    return conf


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="YAML files ('-' for stdin)")],
) -> None:
    """Validate DAG manifests: one line per problem, exit 1 if any."""
    raise typer.Exit(validate_command(files))


@app.command()
def render(
    paths: Annotated[
        list[Path], typer.Argument(help="Python DAG files, or folders of them (*.py)")
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
) -> None:
    """Print the manifests of the DAGs and Pools that Python files define (sluice.sdk), for
    `kubectl apply -f -`; nothing is printed if any file has a problem (exit 1)."""
    raise typer.Exit(render_command(paths, output))


def _pick(manifests: list[DagManifest], dag: str | None, file: Path) -> DagManifest:
    names = [m.metadata.name for m in manifests]
    if dag is not None:
        for m in manifests:
            if m.metadata.name == dag:
                return m
        fail(f"no DAG named {dag!r} in {file}; it has: {', '.join(names) or 'none'}")
    if len(manifests) != 1:
        fail(f"{file} has {len(manifests)} DAGs ({', '.join(names)}); choose one with --dag")
    return manifests[0]


@app.command("test")
def dag_test(
    file: Annotated[Path, typer.Argument(help="a DAG manifest (YAML)")],
    dag: Annotated[str | None, typer.Option(help="which DAG, if the file has several")] = None,
    logical_date: Annotated[
        str | None, typer.Option(help="ISO 8601 logical date (default: now)")
    ] = None,
    conf: Annotated[str | None, typer.Option(help=_CONF_HELP)] = None,
    output: Output = "table",
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="run against this Postgres instead of a throwaway embedded one "
            "(SLUICE_DATABASE_URL is deliberately not read: this command changes the DAG)",
        ),
    ] = None,
) -> None:
    """Run one DAG run to completion locally; exit 0 if it succeeded, 1 if it failed."""
    check_output(output)
    configure_logging("warning")
    manifest = _pick(load_manifests([file]), dag, file)
    when = parse_datetime(logical_date, "--logical-date") if logical_date else None
    run_conf = _conf(conf)
    if database_url is None:
        require_embedded_postgres()
    with LocalRuntime(database_url=database_url) as runtime:
        try:
            runtime.register([manifest])
        except DagNameTaken as exc:
            fail(str(exc))
        with runtime.sessions() as session:
            clear_schedule(session, manifest.metadata.name)
            try:
                run = trigger_run(
                    session,
                    SpecCache(),
                    manifest.metadata.name,
                    utcnow(),
                    logical_date=when,
                    conf=run_conf,
                )
            except TriggerError as exc:
                fail(str(exc))
            session.commit()

        def finished() -> bool:
            with runtime.sessions() as s:
                return read_runs(s, [run.id])[0].state in TERMINAL_RUN_STATES

        runtime.run(finished)
        with runtime.sessions() as session:
            (summary,) = read_runs(session, [run.id])
    if output != "table":
        print_document(as_json([summary]), output)
    else:
        Console().print(tasks_table(summary))
    raise typer.Exit(0 if summary.state == RunState.SUCCESS else 1)


@app.command()
def trigger(
    dag: Annotated[str, typer.Argument(help="DAG name")],
    conf: Annotated[str | None, typer.Option(help=_CONF_HELP)] = None,
    logical_date: Annotated[str | None, typer.Option(help="ISO 8601 (default: now)")] = None,
    run_id: Annotated[str | None, typer.Option(help="run id (default: manual__DATE)")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a manual run; the scheduler replicas pick it up."""
    try:
        url = require_database_url(database_url)
    except ConfigError as exc:
        fail(str(exc))
    when = parse_datetime(logical_date, "--logical-date") if logical_date else None
    engine = make_engine(url)
    with session_factory(engine)() as session:
        try:
            new = trigger_run(
                session,
                SpecCache(),
                dag,
                utcnow(),
                logical_date=when,
                conf=_conf(conf),
                run_id=run_id,
            )
        except TriggerError as exc:
            fail(str(exc))
        session.commit()
    engine.dispose()
    print(f"created run {new.run_id}", file=sys.stdout)


def _database(database_url: str | None) -> str:
    return require_database(database_url)


@app.command("list")
def list_dags(output: Output = "table", database_url: DatabaseUrl = None) -> None:
    """List the registered DAGs: version, schedule, paused, next run, and whether they are
    broken (their current version cannot be loaded, so no runs are created) and why."""
    check_output(output)
    engine = make_engine(_database(database_url))
    with session_factory(engine)() as session:
        dags = read_dags(session)
    engine.dispose()
    if output != "table":
        print_document(dags_as_json(dags), output)
        return
    Console().print(dags_table(dags))
    for line in broken_lines(dags):
        print(line)


@app.command()
def runs(
    dag: Annotated[str, typer.Argument(help="DAG name")],
    run: Annotated[
        str | None, typer.Option("--run", help="one run id: its tasks, Jobs and reasons")
    ] = None,
    last: Annotated[int, typer.Option(help="how many of the latest runs")] = 10,
    output: Output = "table",
    database_url: DatabaseUrl = None,
    state_dir: StateDir = None,
) -> None:
    """A DAG's latest runs; with --run, that run's tasks with every try (across clears), its
    Job and the reason it failed, was skipped or retried (with --output json, the zombie
    evidence too)."""
    check_output(output)
    if last < 1:
        fail(f"--last must be at least 1 (got {last})")
    with database_or_state_dir(database_url, state_dir) as url:
        engine = make_engine(url)
        with session_factory(engine)() as session:
            found = read_runs(session, dag_id=dag, run_id=run, limit=None if run else last)
        engine.dispose()
    if run is not None and not found:
        fail(f"DAG {dag!r} has no run {run!r}; list its runs with `sluice dags runs {dag}`")
    if output != "table":
        print_document(as_json(found), output)
        return
    console = Console()
    if run is not None:
        console.print(tasks_table(found[0]))
        for line in task_detail_lines(found[0]):
            print(line)
        return
    console.print(runs_table(found))


@app.command()
def pause(
    dag: Annotated[str, typer.Argument(help="DAG name")], database_url: DatabaseUrl = None
) -> None:
    """Pause a DAG: no new runs, and its running runs are not advanced. Applying the same
    manifest again keeps it paused; a change of the manifest's `paused` value overrides it
    (ADR 0011)."""
    _set_paused(dag, True, database_url)


@app.command()
def unpause(
    dag: Annotated[str, typer.Argument(help="DAG name")], database_url: DatabaseUrl = None
) -> None:
    """Unpause a DAG; it stays unpaused when the same manifest is applied again."""
    _set_paused(dag, False, database_url)


def _set_paused(dag: str, paused: bool, database_url: str | None) -> None:
    engine = make_engine(_database(database_url))
    with session_factory(engine)() as session:
        found = set_paused(session, dag, paused)
        session.commit()
    engine.dispose()
    if not found:
        fail(f"DAG {dag!r} is not registered; apply its manifest first")
    print(f"DAG {dag!r} is {'paused' if paused else 'unpaused'}")
