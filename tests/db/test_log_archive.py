"""Task logs outlive their pods (issue 30): the outbox trigger, the archiver, `sluice logs`.

Real Postgres, real task processes (the local executor), a real store (a
directory through the same library as S3; tests/unit/test_archive_s3.py runs
the store against a real S3 server). The Kubernetes source is covered by
tests/unit/test_archive_sources.py and the k8s tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from sluice.archive.compress import read_archive
from sluice.archive.keys import key_for
from sluice.archive.store import LogStore, StoreError, open_store
from sluice.cli import app
from sluice.executors.local import log_file
from sluice.executors.logsources import FileLogs, LogGone, Opened, TryRef
from sluice.runtime import LocalRuntime
from sluice.scheduler import archiver as worker
from tests.support import manifest, trigger

T0 = datetime(2026, 12, 1, tzinfo=UTC)
SCRIPT = 'for i in 1 2 3; do echo "line $i of $SLUICE_TASK try $SLUICE_TRY_NUMBER"; done; {end}'


def _dag(name: str) -> Any:
    tasks = [
        {"name": "ok", "args": [SCRIPT.format(end="true")]},
        {"name": "bad", "args": [SCRIPT.format(end="echo boom >&2; exit 3")], "retries": 1,
         "retryDelay": "0s"},
    ]  # fmt: skip
    return manifest(name, tasks, defaults={"image": "busybox:1.36", "command": ["sh", "-c"]})


@pytest.fixture
def runtime(db_url: str, tmp_path: Path) -> Iterator[LocalRuntime]:
    with LocalRuntime(database_url=db_url, state_dir=tmp_path / "state") as rt:
        yield rt


def _run(rt: LocalRuntime, dag: str) -> str:
    rt.register([_dag(dag)])
    run_pk = trigger(rt.sessions, dag, datetime.now(UTC))
    rt.run(until=lambda: rt.is_idle(datetime.now(UTC)))
    with rt.sessions() as session:
        return str(
            session.execute(
                text("SELECT run_id FROM dag_run WHERE id = :id"), {"id": run_pk}
            ).scalar_one()
        )


def _files(rt: LocalRuntime) -> FileLogs:
    logs = rt.state_dir / "logs"
    return FileLogs(lambda r: log_file(logs, r.dag_id, r.run_id, r.task_id, r.try_number))


def _rows(rt: LocalRuntime, query: str) -> list[Any]:
    with rt.engine.connect() as conn:
        return list(conn.execute(text(query)).all())


def test_only_started_tries_that_end_get_an_outbox_row_once_an_archiver_runs(
    runtime: LocalRuntime,
) -> None:
    _run(runtime, "before")  # no archiver yet: nothing is written
    assert _rows(runtime, "SELECT * FROM log_outbox") == []
    worker.enable(runtime.engine)
    run = _run(runtime, "after")
    rows = _rows(
        runtime,
        "SELECT ti.task_id, o.try_number FROM log_outbox o"
        " JOIN task_instance ti ON ti.id = o.task_instance_id ORDER BY 1, 2",
    )
    assert rows == [("bad", 1), ("bad", 2), ("ok", 1)], run
    # A try that ends without having started (requeued from queued) has no log to keep.
    with runtime.engine.begin() as conn:
        conn.execute(text(
            "UPDATE task_try SET end_date = NULL, external_id = NULL"
            " WHERE try_number = 2 AND task_instance_id IN"
            " (SELECT id FROM task_instance WHERE task_id = 'bad' AND dag_id = 'after')"
        ))  # fmt: skip
        conn.execute(text("UPDATE task_try SET end_date = now() WHERE end_date IS NULL"))
    assert len(_rows(runtime, "SELECT * FROM log_outbox")) == 3


def _archiver(rt: LocalRuntime, store: LogStore, **kwargs: Any) -> worker.LogArchiver:
    return worker.LogArchiver(rt.engine, store, _files(rt), **kwargs)


def test_each_ended_try_is_archived_once_and_read_back_after_its_file_is_gone(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    worker.enable(runtime.engine)
    run = _run(runtime, "etl")
    store = open_store((tmp_path / "archive").as_uri())
    archiver = _archiver(runtime, store)
    assert archiver.run_once() == 3
    assert archiver.run_once() == 0
    assert _rows(runtime, "SELECT * FROM log_outbox") == []
    logs = _rows(
        runtime,
        "SELECT ti.task_id, l.try_number, l.state, l.location, l.raw_bytes, l.truncated,"
        " l.source FROM task_log l JOIN task_instance ti ON ti.id = l.task_instance_id"
        " ORDER BY 1, 2",
    )
    assert [(r[0], r[1], r[2], r[5]) for r in logs] == [
        ("bad", 1, "archived", False),
        ("bad", 2, "archived", False),
        ("ok", 1, "archived", False),
    ]
    assert all(r[3].endswith(".log.gz") and r[4] > 0 for r in logs), logs
    # The local files go; the archive stays, and `sluice logs` reads it.
    for path in (runtime.state_dir / "logs").rglob("*.log"):
        path.unlink()
    key = key_for("etl", run, "bad", 2)
    text_ = b"".join(read_archive(store, key)).decode()
    assert "line 3 of bad try 2" in text_
    assert "boom" in text_
    code, out, err = _logs(runtime, "etl", run, "bad", store_url=(tmp_path / "archive").as_uri())
    assert code == 0, err
    assert out == text_
    assert err.startswith("== etl / " + run + " / bad, try 2: failed")


def test_a_try_whose_file_is_gone_is_lost_with_the_reason(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    worker.enable(runtime.engine)
    run = _run(runtime, "gone")
    for path in (runtime.state_dir / "logs").rglob("*.log"):
        path.unlink()
    _archiver(runtime, open_store((tmp_path / "a").as_uri())).run_once()
    states = {r[0] for r in _rows(runtime, "SELECT state FROM task_log")}
    assert states == {"lost"}
    code, _, err = _logs(runtime, "gone", run, "ok", store_url=(tmp_path / "a").as_uri())
    assert code == 1
    assert "was lost: its log file" in err
    assert "is not there" in err


class DownStore:
    """A store whose puts fail while `down` (what the S3 client raises, wrapped)."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner
        self.down = True

    def put(self, key: str, chunks: Any) -> None:
        if self.down:
            for _ in chunks:  # the upload reads some of the stream before it fails
                break
            raise StoreError("connection refused")
        self.inner.put(key, chunks)

    def url_of(self, key: str) -> str:
        return self.inner.url_of(key)


def test_storage_down_delays_archives_which_catch_up_when_it_is_back(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    worker.enable(runtime.engine)
    _run(runtime, "burst")
    store = DownStore(open_store((tmp_path / "a").as_uri()))
    now = [datetime.now(UTC)]
    archiver = worker.LogArchiver(
        runtime.engine,
        store,
        _files(runtime),
        clock=lambda: now[0],  # type: ignore[arg-type]
    )
    assert archiver.run_once() == 3
    waiting = _rows(runtime, "SELECT attempts, last_error, not_before FROM log_outbox")
    assert len(waiting) == 3
    assert all(r[0] == 1 and "connection refused" in r[1] and r[2] > now[0] for r in waiting)
    assert archiver.run_once() == 0  # backing off
    assert _rows(runtime, "SELECT * FROM task_log") == []
    store.down = False
    now[0] += timedelta(seconds=worker.MAX_BACKOFF)
    assert archiver.run_once() == 3
    assert {r[0] for r in _rows(runtime, "SELECT state FROM task_log")} == {"archived"}


def test_racing_archivers_take_each_try_once_and_a_dead_ones_lease_ends(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    worker.enable(runtime.engine)
    for i in range(4):
        _run(runtime, f"race-{i}")
    store = open_store((tmp_path / "a").as_uri())
    archivers = [_archiver(runtime, store, batch=2) for _ in range(3)]
    taken: list[list[int]] = [[] for _ in archivers]
    barrier = threading.Barrier(len(archivers))

    def drain(i: int) -> None:
        barrier.wait()
        while rows := archivers[i].take():
            for row in rows:
                taken[i].append(row.outbox_id)
                assert row.ref is not None
                archivers[i].record(row, archivers[i].archive(row.ref))

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(archivers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ids = [i for each in taken for i in each]
    assert len(ids) == 12
    assert len(set(ids)) == 12  # no row taken twice
    assert len(_rows(runtime, "SELECT * FROM task_log WHERE state = 'archived'")) == 12

    # A replica that took a row and died: the row comes back when its lease ends.
    _run(runtime, "late")
    now = [datetime.now(UTC)]
    dead = _archiver(runtime, store, clock=lambda: now[0])
    assert len(dead.take()) == 3  # ... and never records them
    other = _archiver(runtime, store, clock=lambda: now[0])
    assert other.run_once() == 0
    now[0] += timedelta(seconds=worker.LEASE_SECONDS + 1)
    assert other.run_once() == 3
    assert len(_rows(runtime, "SELECT * FROM task_log")) == 15


def _logs(
    rt: LocalRuntime, dag: str, run: str, task: str, *args: str, store_url: str | None = None
) -> tuple[int, str, str]:
    argv = ["logs", dag, "--run", run, "--task", task, "--database-url", rt.database_url,
            "--log-dir", str(rt.state_dir / "logs"), *args]  # fmt: skip
    if store_url:
        argv += ["--log-store", store_url]
    result = CliRunner().invoke(app, argv)
    return result.exit_code, result.stdout, result.stderr


def test_sluice_logs_reads_a_local_tries_file_with_tail_and_names_what_is_missing(
    runtime: LocalRuntime,
) -> None:
    run = _run(runtime, "local")  # no archiver: `sluice standalone`'s case
    code, out, err = _logs(runtime, "local", run, "ok")
    assert code == 0, err
    assert out.splitlines() == [f"line {i} of ok try 1" for i in (1, 2, 3)]
    assert "local / " in err
    assert "try 1: success" in err
    code, out, _ = _logs(runtime, "local", run, "bad", "--try", "1", "--tail", "2")
    assert code == 0
    assert out.splitlines() == ["line 3 of bad try 1", "boom"]
    for argv, message in [
        (("nope", run, "ok"), "DAG 'nope' has no run"),
        (("local", "no-such-run", "ok"), "DAG 'local' has no run 'no-such-run'"),
        (("local", run, "nope"), f"run {run!r} of DAG 'local' has no task 'nope'"),
        (("local", run, "ok", "--try", "2"), "has no try 2 (its tries: 1 to 1)"),
    ]:
        code, _, err = _logs(runtime, *argv)
        assert code == 1, argv
        assert message in err, err


def test_a_running_tries_log_is_followed_until_it_ends(tmp_path: Path) -> None:
    """A source that is read while it grows stops once the try has ended."""
    path = tmp_path / "grows.log"
    path.write_bytes(b"first\n")
    ended = threading.Event()
    ref = TryRef(1, 1, "d", "r", "t", "local:x:try:1:1")
    files = FileLogs(lambda r: path, running=lambda r: not ended.is_set(), poll=0.05)
    opened = files.open(ref, follow=True)
    got: list[bytes] = []

    def read() -> None:
        got.extend(opened.chunks)

    reader = threading.Thread(target=read)
    reader.start()
    with path.open("ab") as out:
        out.write(b"second\n")
        out.flush()
        time.sleep(0.3)  # read while it grows
        out.write(b"last\n")
    ended.set()
    reader.join(10)
    assert not reader.is_alive()
    assert b"".join(got) == b"first\nsecond\nlast\n"
    with pytest.raises(LogGone):
        FileLogs(lambda r: tmp_path / "none.log").open(ref)
    assert isinstance(files.open(ref, tail=1), Opened)


def test_sluice_logs_reads_a_standalone_run_from_its_state_dir(tmp_path: Path) -> None:
    """`sluice standalone --state-dir S` keeps its database and logs; `sluice logs
    --state-dir S` reads them back after it has exited."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "solo.yaml").write_text(
        "apiVersion: sluice.io/v1alpha1\nkind: DAG\nmetadata: {name: solo}\n"
        "spec:\n  schedule: '@daily'\n  startDate: '2026-12-01T00:00:00Z'\n"
        "  endDate: '2026-12-01T00:00:00Z'\n  catchup: true\n"
        "  tasks:\n  - {name: say, image: busybox:1.36, command: [sh, -c],"
        " args: ['echo hello from solo']}\n"
    )
    state = tmp_path / "state"
    ran = CliRunner().invoke(
        app, ["standalone", str(dags), "--until-idle", "--state-dir", str(state)]
    )
    assert ran.exit_code == 0, ran.output
    run = "scheduled__2026-12-01T00:00:00+00:00"
    result = CliRunner().invoke(
        app, ["logs", "solo", "--run", run, "--task", "say", "--state-dir", str(state)],
        env={"SLUICE_DATABASE_URL": ""},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == "hello from solo\n"
    assert "file " in result.stderr
    missing = CliRunner().invoke(
        app, ["logs", "solo", "--run", run, "--task", "say", "--state-dir", str(tmp_path)]
    )
    assert missing.exit_code == 2
    assert "no `sluice standalone --state-dir` database there" in missing.stderr


def test_the_pod_a_try_ended_in_is_recorded_and_handed_to_the_log_source(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    """The Job executor reports the pod and node of a try that ended (`TaskEvent.pod`);
    `task_try` keeps them (migration 0018) and the archiver gives them to the source,
    which then reads that pod's log by name, without a LIST (issue 30's API budget)."""
    from sluice.db.dags import SpecCache
    from sluice.executors.base import TaskEvent
    from sluice.scheduler.results import apply_task_events
    from sluice.spec.states import TaskState
    from tests.support import FakeClock, ScriptedExecutor, chain, make_loop, register
    from tests.support import run_until_idle as idle

    clock = FakeClock()
    register(runtime.sessions, manifest("pods", chain("a")), clock.now)
    trigger(runtime.sessions, "pods", clock.now)
    executor = ScriptedExecutor()
    executor.hold.add("a")
    idle(make_loop(runtime.sessions, executor, clock))
    worker.enable(runtime.engine)
    ((ti, number),) = list(executor.running)
    with runtime.sessions() as session:
        event = TaskEvent(ti, number, TaskState.SUCCESS, 0, pod="team-a/pods-a-1-x", node="n2")
        assert apply_task_events(session, [event], SpecCache(), clock.now)
        session.commit()
    assert _rows(runtime, "SELECT pod, node FROM task_try") == [("team-a/pods-a-1-x", "n2")]

    given: list[TryRef] = []

    class Recording:
        def open(self, ref: TryRef, *, follow: bool = False, tail: int | None = None) -> Opened:
            given.append(ref)
            raise LogGone("recorded")

    store = open_store((tmp_path / "archive").as_uri())
    assert worker.LogArchiver(runtime.engine, store, Recording()).run_once() == 1
    assert [(ref.pod, ref.node) for ref in given] == [("team-a/pods-a-1-x", "n2")]
