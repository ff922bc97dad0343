"""A try's output as a capped gzip stream, and back: memory stays flat whatever the size.

`GzipCapture` compresses the raw bytes as they stream past and keeps at most
`cap` of them; the rest is read and counted but not kept (a task printing
without end must not fill the store, and its pod's log must still be read to
its end to know how much was lost). A cut lands just after a line's end when
one is within the last 4 KiB before the cap, so the archive does not end
mid-line without need, and a marker line says where and how much was left out.
Only the last 4 KiB before the cap are ever held back; everything else goes
straight into the compressor, whose output is yielded as it comes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sluice.archive.store import LogStore, StoreError

# A cut looks this far back from the cap for a line's end.
LINE_WINDOW = 4096
# wbits 31: a gzip header and trailer around the deflate stream (`zcat` reads it).
_GZIP_WBITS = 31
# Reading, input is fed 64 KiB at a time and a gunzipped chunk is at most
# 256 KiB, so a small highly compressed object cannot unfold into a large
# allocation, and the reader's memory stays within a few hundred KiB.
_IN_STEP = 64 * 1024
_MAX_OUT = 256 * 1024


def cut_marker(kept: int, dropped: int) -> bytes:
    """The line appended to an archive cut at the cap."""
    return (
        f"\n[sluice] log cut at {kept} bytes (the --log-max-bytes cap); "
        f"{dropped} more bytes were not kept\n"
    ).encode()


@dataclass(frozen=True)
class Summary:
    """What a capture saw and kept; the marker line is in `compressed_bytes`, not `kept_bytes`."""

    raw_bytes: int  # read from the source, kept or not
    kept_bytes: int  # of those, archived
    compressed_bytes: int  # the gzip stream's length
    truncated: bool

    @property
    def dropped_bytes(self) -> int:
        return self.raw_bytes - self.kept_bytes


class GzipCapture:
    """Iterate over it for the gzip stream of `source` cut at `cap`; `summary` once it ends.

    It can be iterated once (the source is read as it goes).
    """

    def __init__(self, source: Iterable[bytes], *, cap: int, level: int = 6) -> None:
        if cap < 1:
            raise ValueError(f"cap must be at least 1 byte, not {cap}")
        self._source = source
        self._cap = cap
        self._level = level
        self._started = False
        self._summary: Summary | None = None

    @property
    def summary(self) -> Summary:
        if self._summary is None:
            raise RuntimeError("the capture has not been read to its end yet")
        return self._summary

    def __iter__(self) -> Iterator[bytes]:
        if self._started:
            raise RuntimeError("a capture can be read only once")
        self._started = True
        return self._chunks()

    def _chunks(self) -> Iterator[bytes]:
        compressor = zlib.compressobj(self._level, zlib.DEFLATED, _GZIP_WBITS)
        compressed = 0
        seen = 0
        # Bytes below `settled` are kept whatever follows; those between it
        # and the cap wait in `held` until the source is known to pass the cap.
        settled = max(0, self._cap - LINE_WINDOW)
        held = bytearray()
        kept: int | None = None  # set once the source passed the cap
        for chunk in self._source:
            start = seen
            seen += len(chunk)
            if kept is not None or not chunk:
                continue
            view = memoryview(chunk)
            if start < settled:
                n = min(len(view), settled - start)
                out = compressor.compress(view[:n])
                view, start = view[n:], start + n
                if out:
                    compressed += len(out)
                    yield out
            if view and start < self._cap:
                n = min(len(view), self._cap - start)
                held += view[:n]
                view, start = view[n:], start + n
            if view:
                # The source passed the cap: cut at a line's end, the cap's if the
                # first byte past it ends a line, else the last one held, if any.
                after_last_line = held.rfind(b"\n") + 1  # 0: no line's end held
                at_cap = view[0] == ord("\n") or after_last_line == 0
                cut = len(held) if at_cap else after_last_line
                kept = settled + cut
                out = compressor.compress(bytes(held[:cut]))
                held.clear()
                if out:
                    compressed += len(out)
                    yield out
        if kept is None:
            kept = seen
            tail = compressor.compress(bytes(held)) + compressor.flush()
        else:
            tail = compressor.compress(cut_marker(kept, seen - kept)) + compressor.flush()
        compressed += len(tail)
        self._summary = Summary(
            raw_bytes=seen, kept_bytes=kept, compressed_bytes=compressed, truncated=seen > kept
        )
        yield tail


def gunzip(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The bytes a gzip stream holds, as it streams; ValueError if it is not a whole one.

    Concatenated gzip members are read one after another (as `zcat` does).
    """
    decompressor = zlib.decompressobj(_GZIP_WBITS)
    members = 0
    partial = False  # the current member has had input but not its end
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            for start in range(0, len(view), _IN_STEP):
                data = view[start : start + _IN_STEP]
                while data:
                    partial = True
                    out = decompressor.decompress(data, _MAX_OUT)
                    while len(out) == _MAX_OUT and not decompressor.eof:
                        # The output was limited: go on with what the input already gave.
                        yield out
                        out = decompressor.decompress(decompressor.unconsumed_tail, _MAX_OUT)
                    if out:
                        yield out
                    if not decompressor.eof:
                        break  # the step was consumed whole
                    members += 1
                    partial = False
                    data = memoryview(decompressor.unused_data)
                    decompressor = zlib.decompressobj(_GZIP_WBITS)
    except zlib.error as exc:
        raise ValueError(f"not a gzip stream: {exc}") from exc
    if partial:
        raise ValueError("the gzip stream ends early (the object is truncated)")
    if members == 0:
        raise ValueError("the object is empty, not a gzip stream")


def write_archive(store: LogStore, key: str, source: Iterable[bytes], *, cap: int) -> Summary:
    """Gzip `source` into `store` under `key`, cut at `cap`; StoreError if the store fails."""
    capture = GzipCapture(source, cap=cap)
    store.put(key, capture)
    return capture.summary


def read_archive(store: LogStore, key: str) -> Iterator[bytes]:
    """An archive's text as it streams; ArchiveMissing or StoreError (a damaged one) otherwise."""
    chunks = store.get(key)

    def text() -> Iterator[bytes]:
        try:
            yield from gunzip(chunks)
        except ValueError as exc:
            raise StoreError(f"{store.url_of(key)} is not a whole gzip archive: {exc}") from exc

    return text()
