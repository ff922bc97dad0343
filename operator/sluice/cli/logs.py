"""`sluice logs`: a try's output, from the log archive once it is there, else from its pod or
its local log file (live with --follow)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from sluice.archive.store import StoreError
from sluice.cli.common import (
    DatabaseUrl,
    LogStoreUrl,
    StateDir,
    database_or_state_dir,
    require_database,
)
from sluice.cli.errors import fail
from sluice.db.engine import make_engine, session_factory
from sluice.executors.logsources import (
    TryRef,
)
from sluice.trylogs import LogNotReadable, TryNotFound, find_try, read_output


def logs(
    dag: Annotated[str, typer.Argument(help="DAG name")],
    run: Annotated[str, typer.Option("--run", help="the run id (`sluice dags runs DAG`)")],
    task: Annotated[str, typer.Option("--task", help="the task id")],
    try_number: Annotated[
        int | None, typer.Option("--try", help="which try (default: the latest)")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="while the try runs, stream its output")
    ] = False,
    tail: Annotated[int | None, typer.Option(help="only the last N lines")] = None,
    database_url: DatabaseUrl = None,
    log_store: LogStoreUrl = None,
    log_dir: Annotated[
        Path, typer.Option(help="the local executor's log directory (its --log-dir)")
    ] = Path("sluice-logs"),
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="to read a running try's pod (default: in-cluster, else $KUBECONFIG)"),
    ] = None,
    state_dir: StateDir = None,
) -> None:
    """A try's stdout and stderr, after a one-line header (on stderr: which try, its Job or
    pod, node, start, end, state). An ended try's log comes from the log archive, whether or
    not its pod still exists; a running try's from its pod (or local log file), live with
    --follow. Exits 1, saying why, when the try does not exist or its log was lost, or deleted
    after the scheduler's --log-retention-days."""
    if tail is not None and tail < 0:
        fail(f"--tail must be 0 or more (got {tail})")
    if state_dir is not None:
        log_dir = state_dir / "logs"
    with database_or_state_dir(database_url, state_dir) as url:
        _show(dag, run, task, try_number, follow, tail, url, log_store, log_dir,
              kubeconfig)  # fmt: skip


def _show(
    dag: str,
    run: str,
    task: str,
    try_number: int | None,
    follow: bool,
    tail: int | None,
    database_url: str | None,
    log_store: str | None,
    log_dir: Path,
    kubeconfig: Path | None,
) -> None:
    engine = make_engine(require_database(database_url))
    sessions = session_factory(engine)
    try:
        with sessions() as session:
            found = find_try(session, dag, run, task, try_number)
    except TryNotFound as exc:
        engine.dispose()
        fail(str(exc), code=1)

    def running(ref: TryRef) -> bool:
        with sessions() as session:
            return find_try(session, ref.dag_id, ref.run_id, ref.task_id, ref.try_number).running

    try:
        try:
            chunks, where = read_output(
                found,
                follow=follow,
                tail=tail,
                log_store=log_store,
                log_dir=log_dir,
                kubeconfig=kubeconfig,
                running=running,
            )
        except LogNotReadable as exc:
            fail(str(exc), code=exc.code)
        print(found.header(where), file=sys.stderr)
        _write(chunks)
    finally:
        engine.dispose()


def _write(chunks: Iterable[bytes]) -> None:
    out = sys.stdout.buffer
    try:
        for chunk in chunks:
            out.write(chunk)
            out.flush()
    except BrokenPipeError:  # `sluice logs ... | head`
        sys.stderr.close()
    except (StoreError, OSError) as exc:
        fail(f"reading the log broke off: {exc}", code=1)
