"""Generated task output for the archive tests: any size, made as it is read, reproducible.

`lines(total)` is text that compresses well, as most logs do; `noise(total)`
is base64 of pseudo-random bytes, which gzip shrinks by only a quarter, so a
big one makes a compressed object of several multipart parts.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import random
from collections.abc import Iterable, Iterator

MiB = 1024 * 1024
CHUNK = 64 * 1024


# A page of log lines; `lines` numbers the pages (rendering each line would be slow).
_PAGE = b"".join(b"INFO task step %d done, %d rows\n" % (i % 97, i * 7) for i in range(1000))


def lines(total: int, *, chunk: int = CHUNK) -> Iterator[bytes]:
    """`total` bytes of log lines, in chunks of `chunk` bytes (a line may span two)."""
    return _chunked(
        (b"page %08d\n" % page + _PAGE for page in itertools.count()),
        total,
        chunk,
    )


def noise(total: int, *, seed: int = 7, chunk: int = CHUNK) -> Iterator[bytes]:
    """`total` bytes of base64 lines of pseudo-random bytes (76 characters and a newline)."""
    rng = random.Random(seed)
    return _chunked(
        (base64.b64encode(rng.randbytes(57)) + b"\n" for _ in itertools.count()),
        total,
        chunk,
    )


def digest(chunks: Iterable[bytes]) -> tuple[int, str]:
    """Length and SHA-256 of a stream, read as it comes."""
    hasher = hashlib.sha256()
    length = 0
    for chunk in chunks:
        hasher.update(chunk)
        length += len(chunk)
    return length, hasher.hexdigest()


def prefix(chunks: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The first `size` bytes of a stream."""
    left = size
    for chunk in chunks:
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk)


def _chunked(pieces: Iterator[bytes], total: int, chunk: int) -> Iterator[bytes]:
    buffer = bytearray()
    made = 0
    for piece in pieces:
        buffer += piece
        while len(buffer) >= chunk and made < total:
            out = bytes(buffer[: min(chunk, total - made)])
            del buffer[: len(out)]
            made += len(out)
            yield out
        if made >= total:
            return
