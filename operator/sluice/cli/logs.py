"""`sluice logs`: a try's output, from the log archive once it is there, else from its pod or
its local log file (live with --follow)."""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

import typer

from sluice.archive.compress import read_archive
from sluice.archive.keys import key_for
from sluice.archive.store import StoreError, open_store
from sluice.cli.common import (
    DatabaseUrl,
    LogStoreUrl,
    StateDir,
    database_or_state_dir,
    require_database,
)
from sluice.cli.errors import fail
from sluice.db.engine import make_engine, session_factory
from sluice.executors.local import log_file
from sluice.executors.logsources import (
    FileLogs,
    LogGone,
    LogSource,
    LogUnavailable,
    PodLogs,
    TryRef,
)
from sluice.trylogs import TryLog, TryNotFound, expiry_note, find_try

# How often `--follow` looks again for a try's output that is not there yet.
FOLLOW_WAIT = 1.0


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
        chunks, where = _output(found, follow, tail, log_store, log_dir, kubeconfig, running)
        print(found.header(where), file=sys.stderr)
        _write(chunks)
    finally:
        engine.dispose()


def _output(
    found: TryLog,
    follow: bool,
    tail: int | None,
    log_store: str | None,
    log_dir: Path,
    kubeconfig: Path | None,
    running: object,
) -> tuple[Iterable[bytes], dict[str, str] | None]:
    """The try's output, and where it is being read from (None: the archive)."""
    ref = found.ref
    which = f"try {ref.try_number} of {ref.dag_id} / {ref.run_id} / {ref.task_id}"
    if found.log_state == "lost":
        fail(f"the log of {which} was lost: {found.log_reason}", code=1)
    if found.log_state == "expired":
        fail(expiry_note(which, found), code=1)
    if found.log_state == "archived":
        if not log_store:
            fail(
                f"the log of {which} is archived at {found.location}; pass --log-store (or set"
                " SLUICE_LOG_STORE) and the store's credentials to read it",
                code=1,
            )
        try:
            store = open_store(log_store)
        except (ValueError, StoreError) as exc:
            fail(f"--log-store: {exc}")
        key = key_for(ref.dag_id, ref.run_id, ref.task_id, ref.try_number)
        try:
            return _last_lines(read_archive(store, key), tail), None
        except StoreError as exc:
            fail(f"cannot read the log of {which} from {found.location}: {exc}", code=1)
    if ref.external_id is None:
        fail(f"{which} has not started ({found.state}): no output yet", code=1)
    source: LogSource
    if ref.external_id.startswith("local:"):
        source = FileLogs(
            lambda r: log_file(log_dir, r.dag_id, r.run_id, r.task_id, r.try_number),
            running=running,  # type: ignore[arg-type]
        )
    else:
        from kubernetes import client

        from sluice.executors.kubernetes.executor import client_factory

        try:
            api = client_factory(str(kubeconfig) if kubeconfig else None)()
        except Exception as exc:
            fail(f"cannot reach the cluster to read {which}'s pod: {exc}", code=1)
        source = PodLogs(client.CoreV1Api(api))
    following = follow and found.running
    while True:
        try:
            opened = source.open(ref, follow=following, tail=tail)
            return opened.chunks, opened.where
        except (LogGone, LogUnavailable) as exc:
            # Following a try whose container has not started yet (its image being
            # pulled, its sidecar starting): wait for it, as long as the try runs.
            if following and running(ref):  # type: ignore[operator]
                time.sleep(FOLLOW_WAIT)
                continue
            if isinstance(exc, LogUnavailable):
                fail(f"cannot read the log of {which} now: {exc}; try again", code=1)
            why = "it ended, its log is not archived (yet)" if found.end else "it runs"
            fail(f"cannot read the log of {which}: {why}, and {exc}", code=1)


def _last_lines(chunks: Iterator[bytes], tail: int | None) -> Iterable[bytes]:
    if tail is None:
        return chunks
    lines: collections.deque[bytes] = collections.deque(maxlen=tail)
    partial = b""
    for chunk in chunks:
        parts = (partial + chunk).split(b"\n")
        partial = parts.pop()
        lines.extend(part + b"\n" for part in parts)
    if partial:
        lines.append(partial)
    return list(lines)


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
