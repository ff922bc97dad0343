"""The capped gzip stream of a try's output, and reading it back (pure: no store)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import pytest

from sluice.archive.compress import LINE_WINDOW, GzipCapture, Summary, cut_marker, gunzip
from tests import logtext


def capture(data: bytes, *, cap: int, chunk: int = 1000) -> tuple[bytes, Summary]:
    chunks = GzipCapture((data[i : i + chunk] for i in range(0, len(data), chunk)), cap=cap)
    compressed = b"".join(chunks)
    return compressed, chunks.summary


def test_the_marker_line() -> None:
    assert cut_marker(10, 5) == (
        b"\n[sluice] log cut at 10 bytes (the --log-max-bytes cap); 5 more bytes were not kept\n"
    )


@pytest.mark.parametrize("size", [0, 1, 999, 100_000])
def test_output_within_the_cap_is_kept_whole_as_standard_gzip(size: int) -> None:
    data = b"".join(logtext.lines(size, chunk=100)) if size else b""
    compressed, summary = capture(data, cap=100_000)
    assert gzip.decompress(compressed) == data  # what zcat reads
    assert summary == Summary(
        raw_bytes=size, kept_bytes=size, compressed_bytes=len(compressed), truncated=False
    )


def test_output_of_exactly_the_cap_is_not_cut() -> None:
    data = b"x" * 10_000
    compressed, summary = capture(data, cap=10_000)
    assert gzip.decompress(compressed) == data
    assert not summary.truncated


def test_a_cut_lands_after_the_last_line_end_within_4_kib_before_the_cap() -> None:
    cap = 20_000
    line_end = cap - LINE_WINDOW + 10  # the only newline in the window
    data = b"a" * line_end + b"\n" + b"b" * (cap + 5_000 - line_end - 1)
    compressed, summary = capture(data, cap=cap, chunk=777)
    kept = line_end + 1
    assert gzip.decompress(compressed) == data[:kept] + cut_marker(kept, len(data) - kept)
    assert summary == Summary(
        raw_bytes=len(data), kept_bytes=kept, compressed_bytes=len(compressed), truncated=True
    )
    assert summary.dropped_bytes == len(data) - kept


def test_a_cut_is_at_the_cap_when_no_line_ends_within_4_kib_before_it() -> None:
    cap = 20_000
    data = b"a" * (cap - LINE_WINDOW - 10) + b"\n" + b"b" * 30_000  # newline before the window
    compressed, summary = capture(data, cap=cap)
    assert gzip.decompress(compressed) == data[:cap] + cut_marker(cap, len(data) - cap)
    assert summary.kept_bytes == cap


def test_a_cut_is_at_the_cap_when_the_first_byte_past_it_ends_a_line() -> None:
    cap = 20_000
    data = b"a" * (cap - 100) + b"\n" + b"b" * 99 + b"\n" + b"c" * 50
    assert data[cap : cap + 1] == b"\n"
    compressed, summary = capture(data, cap=cap)
    assert gzip.decompress(compressed) == data[:cap] + cut_marker(cap, len(data) - cap)
    assert summary.kept_bytes == cap


def test_a_cap_smaller_than_the_line_window() -> None:
    data = b"one\ntwo\nthree\nfour\n"
    compressed, summary = capture(data, cap=10, chunk=3)
    assert gzip.decompress(compressed) == b"one\ntwo\n" + cut_marker(8, len(data) - 8)
    assert summary.kept_bytes == 8


@pytest.mark.parametrize("chunk", [1, 7, 4096, 4097, 65_536, 10**6])
def test_how_the_source_is_chunked_changes_nothing(chunk: int) -> None:
    data = b"".join(logtext.lines(300_000))
    reference, reference_summary = capture(data, cap=123_457, chunk=len(data))
    compressed, summary = capture(data, cap=123_457, chunk=chunk)
    assert gzip.decompress(compressed) == gzip.decompress(reference)
    assert summary.kept_bytes == reference_summary.kept_bytes
    assert summary.raw_bytes == len(data)


def test_the_rest_of_the_source_is_read_to_its_end_and_counted() -> None:
    read = []

    def source() -> Iterator[bytes]:
        for i in range(100):
            read.append(i)
            yield b"line\n" * 200

    chunks = GzipCapture(source(), cap=5_000)
    compressed = b"".join(chunks)
    assert read == list(range(100))
    assert chunks.summary.raw_bytes == 100_000
    assert chunks.summary.kept_bytes == 5_000
    assert gzip.decompress(compressed).endswith(cut_marker(5_000, 95_000))


def test_the_output_streams_before_the_source_ends() -> None:
    def source() -> Iterator[bytes]:
        yield from logtext.noise(2 * logtext.MiB)
        raise AssertionError("the first compressed chunk should have come before this")

    first = next(iter(GzipCapture(source(), cap=10 * logtext.MiB)))
    assert first.startswith(b"\x1f\x8b")  # the gzip header


def test_the_summary_waits_for_the_end_and_a_capture_is_read_once() -> None:
    chunks = GzipCapture(logtext.noise(logtext.MiB), cap=10 * logtext.MiB)
    with pytest.raises(RuntimeError, match="not been read to its end"):
        _ = chunks.summary
    stream = iter(chunks)
    next(stream)
    with pytest.raises(RuntimeError, match="not been read to its end"):
        _ = chunks.summary
    list(stream)
    assert chunks.summary.raw_bytes == logtext.MiB
    with pytest.raises(RuntimeError, match="only once"):
        iter(chunks)


def test_a_cap_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 byte, not 0"):
        GzipCapture([], cap=0)


def test_gunzip_streams_in_bounded_chunks_and_reads_concatenated_members() -> None:
    zeros = gzip.compress(b"\0" * (10 * logtext.MiB), compresslevel=9)
    assert len(zeros) < 20_000
    sizes = [len(out) for out in gunzip([zeros[i : i + 5] for i in range(0, len(zeros), 5)])]
    assert sum(sizes) == 10 * logtext.MiB
    assert max(sizes) <= 256 * 1024
    two = gzip.compress(b"first\n") + gzip.compress(b"second\n")
    assert b"".join(gunzip([two])) == b"first\nsecond\n"


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        ([gzip.compress(b"hello")[:-4]], "ends early"),
        ([gzip.compress(b"hello") + gzip.compress(b"x")[:5]], "ends early"),
        ([], "empty"),
        ([b""], "empty"),
        ([b"plain text"], "not a gzip stream"),
        ([zlib.compress(b"zlib, not gzip")], "not a gzip stream"),
    ],
)
def test_gunzip_refuses_what_is_not_a_whole_gzip_stream(chunks: list[bytes], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        list(gunzip(chunks))
