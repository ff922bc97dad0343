"""Find a try and what became of its log, and read its output: `sluice logs` and the UI."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from sluice.archive.compress import read_archive
from sluice.archive.keys import key_for
from sluice.archive.store import StoreError, open_store
from sluice.executors.local import log_file
from sluice.executors.logsources import (
    FileLogs,
    LogGone,
    LogSource,
    LogUnavailable,
    PodLogs,
    TryRef,
    try_location,
)

# How often `follow` looks again for a try's output that is not there yet.
FOLLOW_WAIT = 1.0

_FIND = text(
    """
    SELECT ti.id AS ti_id, ti.try_number AS latest, ti.state AS ti_state, r.id AS run_pk,
           ti.external_id AS latest_external_id
    FROM task_instance ti JOIN dag_run r ON r.id = ti.dag_run_id
    WHERE r.dag_id = :dag AND r.run_id = :run AND ti.task_id = :task
    """
)
_TRY = text(
    """
    SELECT tt.state, tt.start_date, tt.end_date, tt.external_id AS executor, tt.reason,
           l.state AS log_state, l.location, l.source, l.node, l.reason AS log_reason,
           l.truncated, l.raw_bytes, l.expired_at
    FROM task_try tt
    LEFT JOIN task_log l
      ON l.task_instance_id = tt.task_instance_id AND l.try_number = tt.try_number
    WHERE tt.task_instance_id = :ti AND tt.try_number = :try
    """
)


class LogNotReadable(Exception):
    """A try's output cannot be read, and why; `code` is the exit status `sluice logs` gives
    (2 for a bad --log-store, 1 otherwise)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class TryNotFound(LookupError):
    """No such DAG, run, task or try: the message says which, and how to list them."""


@dataclass(frozen=True)
class TryLog:
    ref: TryRef
    state: str
    start: datetime | None
    end: datetime | None
    reason: str | None
    log_state: str | None  # "archived", "lost", "expired", or None: not archived (yet)
    location: str | None
    source: str | None
    node: str | None
    log_reason: str | None
    truncated: bool
    raw_bytes: int | None
    expired_at: datetime | None = None  # when retention deleted the archive

    @property
    def running(self) -> bool:
        return self.end is None and self.ref.external_id is not None

    def header(self, where: dict[str, str] | None = None) -> str:
        """One line: which try, where it ran (as archived, else as read now: `where`),
        when, how it ended."""
        ref = self.ref
        parts = [f"{ref.dag_id} / {ref.run_id} / {ref.task_id}, try {ref.try_number}: {self.state}"]
        if ref.external_id and "/" in ref.external_id:
            parts.append(f"Job {ref.external_id}")
        where = where or {}
        source = self.source or where.get("pod") or where.get("file")
        if source:
            kind = "file" if (ref.external_id or "").startswith("local:") else "pod"
            parts.append(f"{kind} {source}")
        node = self.node or where.get("node")
        if node:
            parts.append(f"node {node}")
        parts.append(f"started {_when(self.start)}")
        parts.append(f"ended {_when(self.end)}" if self.end else "running")
        return "== " + " · ".join(parts)


def expiry_note(which: str, log: TryLog) -> str:
    """Why an expired log cannot be read: when it was deleted, how long after its try ended,
    and under which setting (the row's reason)."""
    deleted = log.expired_at
    if deleted is None or log.end is None:  # not written by this release's retention
        return f"the log of {which} was deleted ({log.log_reason or 'retention'})"
    days = (deleted - log.end).days
    after = f"{days} day{'' if days == 1 else 's'}"
    return (
        f"the log of {which} was deleted from the log store on {deleted:%Y-%m-%d},"
        f" {after} after the try ended on {log.end:%Y-%m-%d}"
        f" (the scheduler's {log.log_reason})"
    )


def _when(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


def find_try(session: Session, dag: str, run: str, task: str, try_number: int | None) -> TryLog:
    """The try (the latest when `try_number` is None), or TryNotFound saying what is not."""
    found = session.execute(_FIND, {"dag": dag, "run": run, "task": task}).first()
    if found is None:
        runs = session.execute(
            text("SELECT count(*) FROM dag_run WHERE dag_id = :dag AND run_id = :run"),
            {"dag": dag, "run": run},
        ).scalar_one()
        if not runs:
            raise TryNotFound(
                f"DAG {dag!r} has no run {run!r}; list its runs with `sluice dags runs {dag}`"
            )
        raise TryNotFound(
            f"run {run!r} of DAG {dag!r} has no task {task!r}; its tasks: "
            f"`sluice dags runs {dag} --run {run}`"
        )
    number = found.latest if try_number is None else try_number
    if number < 1 or number > found.latest:
        raise TryNotFound(
            f"task {task!r} of run {run!r} has no try {number}"
            + (f" (its tries: 1 to {found.latest})" if found.latest else " (it has not started)")
        )
    row = session.execute(_TRY, {"ti": found.ti_id, "try": number}).first()
    if row is None:
        raise TryNotFound(
            f"task {task!r} of run {run!r} has no try {number} (state {found.ti_state})"
        )
    where = try_location(
        row.executor, found.latest_external_id, (found.ti_id, number, dag, run, task)
    )
    ref = TryRef(found.ti_id, number, dag, run, task, where)
    return TryLog(
        ref=ref,
        state=row.state,
        start=row.start_date,
        end=row.end_date,
        reason=row.reason,
        log_state=row.log_state,
        location=row.location,
        source=row.source,
        node=row.node,
        log_reason=row.log_reason,
        truncated=bool(row.truncated),
        raw_bytes=row.raw_bytes,
        expired_at=row.expired_at,
    )


def read_output(
    found: TryLog,
    *,
    follow: bool = False,
    tail: int | None = None,
    log_store: str | None,
    log_dir: Path,
    kubeconfig: Path | None = None,
    running: Callable[[TryRef], bool] | None = None,
    api: Any = None,
) -> tuple[Iterable[bytes], dict[str, str] | None]:
    """The try's output, and where it is being read from (None: the archive): the archive
    once it is there, else its pod (through `api` when given: the UI's user's client) or
    local file (live with `follow`, while `running` says it runs). Raises LogNotReadable
    saying why not (`sluice logs`, the UI)."""
    if running is None:
        running = lambda ref: False  # noqa: E731
    ref = found.ref
    which = f"try {ref.try_number} of {ref.dag_id} / {ref.run_id} / {ref.task_id}"
    if found.log_state == "lost":
        raise LogNotReadable(f"the log of {which} was lost: {found.log_reason}")
    if found.log_state == "expired":
        raise LogNotReadable(expiry_note(which, found))
    if found.log_state == "archived":
        if not log_store:
            raise LogNotReadable(
                f"the log of {which} is archived at {found.location}; pass --log-store (or set"
                " SLUICE_LOG_STORE) and the store's credentials to read it"
            )
        try:
            store = open_store(log_store)
        except (ValueError, StoreError) as exc:
            raise LogNotReadable(f"--log-store: {exc}", code=2) from exc
        key = key_for(ref.dag_id, ref.run_id, ref.task_id, ref.try_number)
        try:
            return _last_lines(read_archive(store, key), tail), None
        except StoreError as exc:
            raise LogNotReadable(
                f"cannot read the log of {which} from {found.location}: {exc}"
            ) from exc
    if ref.external_id is None:
        raise LogNotReadable(f"{which} has not started ({found.state}): no output yet")
    source: LogSource
    if ref.external_id.startswith("local:"):
        source = FileLogs(
            lambda r: log_file(log_dir, r.dag_id, r.run_id, r.task_id, r.try_number),
            running=running,
        )
    else:
        from kubernetes import client

        from sluice.executors.kubernetes.executor import client_factory

        try:
            if api is None:
                api = client_factory(str(kubeconfig) if kubeconfig else None)()
        except Exception as exc:
            raise LogNotReadable(f"cannot reach the cluster to read {which}'s pod: {exc}") from exc
        source = PodLogs(client.CoreV1Api(api))
    following = follow and found.running
    while True:
        try:
            opened = source.open(ref, follow=following, tail=tail)
            return opened.chunks, opened.where
        except (LogGone, LogUnavailable) as exc:
            # Following a try whose container has not started yet (its image being
            # pulled, its sidecar starting): wait for it, as long as the try runs.
            if following and running(ref):
                time.sleep(FOLLOW_WAIT)
                continue
            if isinstance(exc, LogUnavailable):
                raise LogNotReadable(
                    f"cannot read the log of {which} now: {exc}; try again"
                ) from exc
            why = "it ended, its log is not archived (yet)" if found.end else "it runs"
            raise LogNotReadable(f"cannot read the log of {which}: {why}, and {exc}") from exc


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
