"""Retention by age of archived task logs (issue 30, `--log-retention-days`).

Real Postgres, real tries (the local executor), archived by the real archiver
into a directory store (the store's delete is tested on S3 too:
tests/unit/test_archive_store.py, test_archive_s3.py). A try "ends long ago" by
moving its `end_date` and `archived_at` back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from sluice.archive.keys import key_for
from sluice.archive.store import LogStore, StoreError, open_store
from sluice.cli import app
from sluice.runtime import LocalRuntime
from sluice.scheduler import archiver as worker
from sluice.scheduler.retention import LogRetention
from tests.db.test_log_archive import _files, _logs, _rows, _run


@pytest.fixture
def runtime(db_url: str, tmp_path: Path) -> Iterator[LocalRuntime]:
    with LocalRuntime(database_url=db_url, state_dir=tmp_path / "state") as rt:
        yield rt


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return (tmp_path / "archive").as_uri()


def _archived(rt: LocalRuntime, store: LogStore, *dags: str) -> dict[str, str]:
    """Run each DAG (tasks ok, bad with two tries) and archive every try; dag -> run id."""
    worker.enable(rt.engine)
    runs = {dag: _run(rt, dag) for dag in dags}
    archiver = worker.LogArchiver(rt.engine, store, _files(rt))
    while archiver.run_once():
        pass
    assert len(_rows(rt, "SELECT * FROM task_log")) >= 3 * len(dags)
    return runs


def _ended_days_ago(rt: LocalRuntime, days: float, dag: str, task: str | None = None) -> None:
    with rt.engine.begin() as conn:
        tries = conn.execute(
            text(
                "UPDATE task_try tt SET end_date = now() - make_interval(secs => :s)"
                " FROM task_instance ti WHERE ti.id = tt.task_instance_id AND ti.dag_id = :dag"
                " AND (CAST(:task AS text) IS NULL OR ti.task_id = :task)"
                " RETURNING tt.task_instance_id, tt.try_number"
            ),
            {"s": days * 86400, "dag": dag, "task": task},
        ).all()
        for ti, number in tries:  # archived a minute after it ended
            conn.execute(
                text(
                    "UPDATE task_log SET archived_at = tt.end_date + interval '1 minute'"
                    " FROM task_try tt WHERE tt.task_instance_id = task_log.task_instance_id"
                    " AND tt.try_number = task_log.try_number"
                    " AND task_log.task_instance_id = :ti AND task_log.try_number = :try"
                ),
                {"ti": ti, "try": number},
            )


def _states(rt: LocalRuntime) -> list[tuple[str, str, int, str]]:
    return [
        (r[0], r[1], r[2], r[3])
        for r in _rows(
            rt,
            "SELECT ti.dag_id, ti.task_id, l.try_number, l.state FROM task_log l"
            " JOIN task_instance ti ON ti.id = l.task_instance_id ORDER BY 1, 2, 3",
        )
    ]


def test_archives_of_tries_ended_longer_ago_than_the_retention_are_deleted_and_marked(
    runtime: LocalRuntime, store_url: str
) -> None:
    store = open_store(store_url)
    runs = _archived(runtime, store, "etl")
    run = runs["etl"]
    _ended_days_ago(runtime, 31, "etl", "bad")  # both tries of bad
    _ended_days_ago(runtime, 29, "etl", "ok")
    now = datetime.now(UTC)
    retention = LogRetention(runtime.engine, store, 30, clock=lambda: now)
    assert retention.expire_once() == 2
    assert retention.expire_once() == 0
    assert _states(runtime) == [
        ("etl", "bad", 1, "expired"),
        ("etl", "bad", 2, "expired"),
        ("etl", "ok", 1, "archived"),
    ]
    assert not store.exists(key_for("etl", run, "bad", 1))
    assert not store.exists(key_for("etl", run, "bad", 2))
    assert store.exists(key_for("etl", run, "ok", 1))
    # The row stays, with when and why; where it was and how big are kept too.
    kept = _rows(
        runtime,
        "SELECT l.expired_at, l.reason, l.location, l.raw_bytes FROM task_log l"
        " JOIN task_instance ti ON ti.id = l.task_instance_id WHERE ti.task_id = 'bad'",
    )
    assert all(
        r[0] == now and r[1] == "--log-retention-days 30" and r[2].endswith(".log.gz") and r[3]
        for r in kept
    ), kept

    # `sluice logs` says when the log was deleted, how long after its try ended, and why.
    ended = (now - timedelta(days=31)).date().isoformat()
    code, out, err = _logs(runtime, "etl", run, "bad", store_url=store_url)
    assert code == 1
    assert out == ""
    assert (
        f"the log of try 2 of etl / {run} / bad was deleted from the log store on"
        f" {now.date().isoformat()}, 31 days after the try ended on {ended}"
        " (the scheduler's --log-retention-days 30)" in " ".join(err.split())
    ), err
    code, _, err = _logs(runtime, "etl", run, "bad", "--try", "1", store_url=store_url)
    assert code == 1
    assert "the log of try 1 of etl" in err
    code, out, err = _logs(runtime, "etl", run, "ok", store_url=store_url)
    assert code == 0, err
    assert "line 3 of ok try 1" in out

    # A day later, ok's try is past the retention too.
    later = now + timedelta(days=1, minutes=2)
    assert LogRetention(runtime.engine, store, 30, clock=lambda: later).expire_once() == 1
    assert {s[3] for s in _states(runtime)} == {"expired"}


def test_lost_logs_and_tries_within_the_retention_are_left_alone(
    runtime: LocalRuntime, store_url: str
) -> None:
    store = open_store(store_url)
    _archived(runtime, store, "recent")
    worker.enable(runtime.engine)
    _run(runtime, "lost")
    for path in (runtime.state_dir / "logs" / "lost").rglob("*.log"):
        path.unlink()
    worker.LogArchiver(runtime.engine, store, _files(runtime)).run_once()
    _ended_days_ago(runtime, 400, "lost")
    _ended_days_ago(runtime, 6.9, "recent")
    assert LogRetention(runtime.engine, store, 7).expire_once() == 0
    assert {(s[0], s[3]) for s in _states(runtime)} == {("lost", "lost"), ("recent", "archived")}


def test_batches_are_bounded_and_an_object_already_gone_counts_as_deleted(
    runtime: LocalRuntime, store_url: str
) -> None:
    store = open_store(store_url)
    runs = _archived(runtime, store, "old")
    _ended_days_ago(runtime, 10, "old")
    store.delete(key_for("old", runs["old"], "bad", 1))  # deleted by hand, or by a lost batch
    retention = LogRetention(runtime.engine, store, 1, batch=2)
    assert retention.expire_once() == 2
    assert retention.expire_once() == 1
    assert retention.expire_once() == 0
    assert {s[3] for s in _states(runtime)} == {"expired"}


class FailingStore:
    """A store whose deletes fail (the S3 server away)."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner

    def delete_many(self, keys: Sequence[str]) -> None:
        raise StoreError("could not delete: connection refused")


def test_a_store_that_fails_leaves_every_log_archived_until_it_is_back(
    runtime: LocalRuntime, store_url: str
) -> None:
    store = open_store(store_url)
    _archived(runtime, store, "down")
    _ended_days_ago(runtime, 10, "down")
    failing = LogRetention(runtime.engine, FailingStore(store), 1)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="connection refused"):
        failing.expire_once()
    assert {s[3] for s in _states(runtime)} == {"archived"}
    assert LogRetention(runtime.engine, store, 1).expire_once() == 3


class HeldStore:
    """Records the keys each delete got; the first delete waits until released, holding its
    transaction (and its rows' locks) open meanwhile."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner
        self.deleted: list[list[str]] = []
        self.inside = threading.Event()
        self.release = threading.Event()

    def delete_many(self, keys: Sequence[str]) -> None:
        self.deleted.append(list(keys))
        if len(self.deleted) == 1:
            self.inside.set()
            assert self.release.wait(30)
        self.inner.delete_many(keys)


def test_racing_replicas_expire_each_log_once_and_never_wait_on_each_other(
    runtime: LocalRuntime, store_url: str
) -> None:
    store = open_store(store_url)
    _archived(runtime, store, "race-a", "race-b")  # six tries
    _ended_days_ago(runtime, 40, "race-a")
    _ended_days_ago(runtime, 40, "race-b")
    held = HeldStore(store)
    first = LogRetention(runtime.engine, held, 30, batch=4)  # type: ignore[arg-type]
    second = LogRetention(runtime.engine, held, 30, batch=10)  # type: ignore[arg-type]
    counts: list[int] = []
    thread = threading.Thread(target=lambda: counts.append(first.expire_once()))
    thread.start()
    assert held.inside.wait(30)
    # The first holds four rows mid-delete: the second takes the other two, at once.
    assert second.expire_once() == 2
    held.release.set()
    thread.join(30)
    assert counts == [4]
    keys = [key for batch in held.deleted for key in batch]
    assert len(keys) == 6
    assert len(set(keys)) == 6  # no object deleted by both
    assert {s[3] for s in _states(runtime)} == {"expired"}
    assert second.expire_once() == 0

    # Many replicas at once, without a pause: each log is still expired exactly once.
    _archived(runtime, store, "race-c", "race-d", "race-e")  # nine more
    for dag in ("race-c", "race-d", "race-e"):
        _ended_days_ago(runtime, 40, dag)
    counted = HeldStore(store)
    counted.release.set()
    replicas = [LogRetention(runtime.engine, counted, 30, batch=2) for _ in range(3)]  # type: ignore[arg-type]
    barrier = threading.Barrier(len(replicas))
    done: list[int] = []

    def drain(replica: LogRetention) -> None:
        barrier.wait()
        while n := replica.expire_once():
            done.append(n)

    threads = [threading.Thread(target=drain, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    keys = [key for batch in counted.deleted for key in batch]
    assert sum(done) == 9
    assert sorted(keys) == sorted(set(keys))
    assert len(keys) == 9
    assert {s[3] for s in _states(runtime)} == {"expired"}


class CountingRetention:
    """Stands in for LogRetention in the archiver's thread: how often it is asked."""

    batch = 5

    def __init__(self, results: list[int | Exception]) -> None:
        self.results = results
        self.calls = 0

    def expire_once(self) -> int:
        self.calls += 1
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def test_the_archiver_thread_expires_at_once_then_once_per_interval_or_again_after_a_full_batch(
    runtime: LocalRuntime, store_url: str
) -> None:
    now = [datetime(2026, 12, 1, tzinfo=UTC)]
    retention = CountingRetention([1, 5, 0, StoreError("down"), 0])
    archiver = worker.LogArchiver(
        runtime.engine,
        open_store(store_url),
        _files(runtime),
        clock=lambda: now[0],
        retention=retention,  # type: ignore[arg-type]
        retention_interval=300,
    )
    assert archiver.step() is False  # at start: one batch, not full
    assert retention.calls == 1
    now[0] += timedelta(seconds=299)
    assert archiver.step() is False  # not again before the interval
    assert retention.calls == 1
    now[0] += timedelta(seconds=1)
    assert archiver.step() is True  # a full batch: more may wait ...
    assert archiver.step() is False  # ... so the next turn takes another at once
    assert retention.calls == 3
    now[0] += timedelta(seconds=300)
    assert archiver.step() is False  # a failure waits for the next period
    assert archiver.step() is False
    assert retention.calls == 4
    now[0] += timedelta(seconds=300)
    archiver.step()
    assert retention.calls == 5


def test_the_scheduler_refuses_a_negative_retention_and_one_without_a_store(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLUICE_LOG_STORE", raising=False)
    for args, message in [
        (
            ["--log-store", "file:///tmp/sluice-logs", "--log-retention-days", "-1"],
            "--log-retention-days must be 0 (keep every log) or more (got -1)",
        ),
        (
            ["--log-retention-days", "30"],
            "--log-retention-days deletes archived logs: it needs --log-store",
        ),
    ]:
        result = CliRunner().invoke(
            app,
            ["scheduler", "--database-url", db_url, "--executor", "noop", *args],
        )
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.stderr.split()), result.stderr


def test_retention_refuses_zero_days() -> None:
    with pytest.raises(ValueError, match="0 keeps every log"):
        LogRetention(None, None, 0)  # type: ignore[arg-type]
