"""The store's contract, the same on a local directory and on a real S3-compatible server.

Each test runs against `file://` and against versitygw (tests/s3server.py; skipped
without it unless SLUICE_REQUIRE_S3=1). What only S3 has (a server that goes
away, credentials, where objects land) is in test_archive_s3.py.
"""

from __future__ import annotations

import gzip
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.archive.compress import cut_marker, read_archive, write_archive
from sluice.archive.keys import key_for
from sluice.archive.store import PART_SIZE, ArchiveMissing, LogStore, StoreError, open_store
from tests import logtext
from tests.s3server import S3Place

MiB = logtext.MiB
KEY = key_for("etl", "scheduled__2026-01-01T00:00:00+00:00", "load", 1)


@pytest.fixture(params=["file", "s3"])
def log_store(request: pytest.FixtureRequest, tmp_path: Path) -> LogStore:
    if request.param == "file":
        return open_store(f"file://{tmp_path}/archives")
    place: S3Place = request.getfixturevalue("s3")
    return open_store(place.url)


def _failing(data: Iterator[bytes], after: int) -> Iterator[bytes]:
    yield from logtext.prefix(data, after)
    raise ConnectionResetError("the pod's log stream broke")


def test_an_archive_reads_back_as_it_was_written(log_store: LogStore) -> None:
    data = b"".join(logtext.lines(300_000)) + b"no newline at the end"
    summary = write_archive(
        log_store, KEY, [data[i : i + 4096] for i in range(0, len(data), 4096)], cap=MiB
    )
    assert b"".join(read_archive(log_store, KEY)) == data
    assert summary.kept_bytes == len(data)
    assert not summary.truncated
    stored = b"".join(log_store.get(KEY))
    assert len(stored) == summary.compressed_bytes
    assert gzip.decompress(stored) == data
    assert log_store.exists(KEY)


def test_put_streams_chunks_and_get_streams_them_back(log_store: LogStore) -> None:
    # More than a multipart part (5 MiB), in uneven chunks.
    data = b"".join(logtext.noise(7 * MiB + 123))
    sizes = [1, 4095, 65_536, 3 * MiB, 10]
    chunks: list[bytes] = []
    at = 0
    while at < len(data):
        size = sizes[len(chunks) % len(sizes)]
        chunks.append(data[at : at + size])
        at += size
    log_store.put("raw/object", iter(chunks))
    got = list(log_store.get("raw/object"))
    assert len(got) > 1  # streamed, not one buffer
    assert b"".join(got) == data


def test_a_put_replaces_the_object_and_an_empty_put_stores_an_empty_object(
    log_store: LogStore,
) -> None:
    log_store.put(KEY, [b"first"])
    log_store.put(KEY, [b"second", b""])
    assert b"".join(log_store.get(KEY)) == b"second"
    log_store.put("empty", [])
    assert log_store.exists("empty")
    assert b"".join(log_store.get("empty")) == b""


def test_a_missing_archive(log_store: LogStore) -> None:
    missing = key_for("etl", "manual__x", "load", 3)
    assert not log_store.exists(missing)
    with pytest.raises(ArchiveMissing, match=f"no archive at {log_store.url_of(missing)}"):
        log_store.get(missing)
    with pytest.raises(ArchiveMissing):
        read_archive(log_store, missing)
    log_store.delete(missing)  # not an error


def test_delete_removes_and_deleting_twice_is_fine(log_store: LogStore) -> None:
    other = key_for("etl", "manual__x", "load", 2)
    log_store.put(KEY, [b"a"])
    log_store.put(other, [b"b"])
    log_store.delete(KEY)
    assert not log_store.exists(KEY)
    assert log_store.exists(other)
    log_store.delete(KEY)
    with pytest.raises(ArchiveMissing):
        log_store.get(KEY)


def test_delete_many_removes_every_object_and_missing_ones_are_not_an_error(
    log_store: LogStore,
) -> None:
    keys = [key_for("etl", "manual__x", "load", n) for n in (1, 2, 3, 4)]
    kept = key_for("etl", "manual__x", "load", 5)
    for key in [*keys[:3], kept]:  # keys[3] was never written (or deleted before)
        log_store.put(key, [key.encode()])
    log_store.delete_many([keys[3], *keys])  # the missing one first
    assert [log_store.exists(key) for key in keys] == [False] * 4
    assert b"".join(log_store.get(kept)) == kept.encode()
    log_store.delete_many(keys)  # all gone already: deleting again is fine
    log_store.delete_many([])


@pytest.mark.parametrize("after", [1000, 6 * MiB], ids=["buffered", "multipart"])
def test_a_failing_source_stores_nothing_and_its_error_is_the_caller_s(
    log_store: LogStore, after: int
) -> None:
    log_store.put(KEY, [b"the earlier object"])
    with pytest.raises(ConnectionResetError, match="log stream broke"):
        log_store.put(KEY, _failing(logtext.noise(10 * MiB), after))
    with pytest.raises(ConnectionResetError):
        log_store.put("new/key", _failing(logtext.noise(10 * MiB), after))
    assert b"".join(log_store.get(KEY)) == b"the earlier object"
    assert not log_store.exists("new/key")


def test_a_damaged_archive_is_a_store_error_naming_it(log_store: LogStore) -> None:
    log_store.put(KEY, [gzip.compress(b"some text\n")[:-6]])
    with pytest.raises(StoreError, match=f"{log_store.url_of(KEY)} is not a whole gzip archive"):
        b"".join(read_archive(log_store, KEY))


def test_50_mib_of_output_is_cut_at_the_cap_in_flat_memory(log_store: LogStore) -> None:
    # Kept: 24 MiB, about 18 MiB gzipped: several multipart parts on S3.
    total, cap = 50 * MiB, 24 * MiB
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        summary = write_archive(log_store, KEY, logtext.noise(total), cap=cap)
        written_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        read = logtext.digest(read_archive(log_store, KEY))
        read_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary.raw_bytes == total
    assert summary.truncated
    assert cap - 4096 < summary.kept_bytes <= cap
    marker = cut_marker(summary.kept_bytes, total - summary.kept_bytes)
    expected = [*logtext.prefix(logtext.noise(total), summary.kept_bytes), marker]
    assert expected[-2].endswith(b"\n")  # cut at a line's end
    assert read == logtext.digest(expected)
    # A write holds one part's chunks until the part is sent (obstore keeps the
    # bytes objects it was given, so tracemalloc sees them), and little else: far
    # below the 24 MiB kept or the object's size. A read holds a few chunks.
    assert summary.compressed_bytes > 3 * PART_SIZE
    assert written_peak < PART_SIZE + 3 * MiB, written_peak
    assert read_peak < 2 * MiB, read_peak


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/./b", "a/../b", "..", "a/"])
def test_keys_must_be_relative_paths(tmp_path: Path, key: str) -> None:
    store = open_store(f"file://{tmp_path}")
    with pytest.raises(ValueError, match="not a relative key"):
        store.put(key, [b"x"])
    with pytest.raises(ValueError, match="not a relative key"):
        store.get(key)
    assert os.listdir(tmp_path) == []
