"""Task output for the log-archiving benchmark: timestamped lines that compress as real ones do.

A task's log is mostly lines of a few dozen shapes (a batch read, an HTTP
request, a progress line, a retry, a heartbeat), each with its own numbers,
ids and paths, and now and then a multi-line traceback; deterministic from a
seed, so every trial and arm archives the same bytes. Gzip (level 6) keeps
about a fifth to a quarter of it; the benchmark prints the ratio it measured.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

DESCRIPTION = (
    "timestamped log lines (ISO time, level, logger, one of 8 message shapes with numbers, "
    "hex request ids, paths and durations; a 6-line traceback about every 400 lines), "
    "deterministic per log"
)

_T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
_LEVELS = ["INFO"] * 14 + ["DEBUG"] * 4 + ["WARNING"] * 2 + ["ERROR"]
_LOGGERS = [
    "etl.extract",
    "etl.transform",
    "etl.load",
    "http.client",
    "db.pool",
    "task.runner",
    "metrics",
    "storage.s3",
]
_TABLES = ["events", "orders", "customers", "sessions", "clicks", "invoices", "payments"]
_METHODS = ["GET", "GET", "GET", "POST", "PUT", "DELETE"]
_STATUSES = [200] * 20 + [201, 204, 304, 404, 429, 500, 503]
_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/pipeline/steps.py", line {a}, in run_step\n'
    "    result = step.execute(batch, retries={r})\n"
    '  File "/app/pipeline/io.py", line {b}, in execute\n'
    "    raise ConnectionError(f'read timed out after {{timeout}}s')\n"
    "ConnectionError: read timed out after {t:.1f}s (batch {n}, {rows} rows pending)\n"
)


def _message(rng: random.Random, n: int) -> str:
    shape = rng.randrange(8)
    if shape == 0:
        rows = rng.randrange(1, 50_000)
        ms = rng.uniform(1, 900)
        return (
            f"batch {n}: read {rows} rows from s3://raw/{rng.choice(_TABLES)}/2026/12/"
            f"{rng.randrange(1, 31):02d}/part-{rng.randrange(10_000):05d}.parquet in {ms:.1f} ms "
            f"({rows / ms * 1000:.1f} rows/s)"
        )
    if shape == 1:
        return (
            f"request id={rng.getrandbits(64):016x} method={rng.choice(_METHODS)}"
            f" path=/api/v1/{rng.choice(_TABLES)}/{rng.randrange(10**7)}"
            f" status={rng.choice(_STATUSES)} duration_ms={rng.uniform(0.3, 2500):.2f}"
            f" bytes={rng.randrange(120, 250_000)}"
        )
    if shape == 2:
        total = 1_000_000
        done = min(total, n * 97 + rng.randrange(97))
        return (
            f"progress {done}/{total} ({done / total * 100:.2f}%) eta {rng.randrange(3600)}s"
            f" rate={rng.uniform(50, 5000):.1f}/s"
        )
    if shape == 3:
        return (
            f"wrote {rng.randrange(1, 100_000)} rows to {rng.choice(_TABLES)}"
            f" (partition dt=2026-12-{rng.randrange(1, 31):02d}), {rng.randrange(10**9)} bytes,"
            f" {rng.randrange(1, 64)} files"
        )
    if shape == 4:
        return (
            f"heartbeat: rss={rng.randrange(80, 4000)} MiB cpu={rng.uniform(0, 200):.1f}%"
            f" open_fds={rng.randrange(10, 900)} threads={rng.randrange(4, 64)}"
        )
    if shape == 5:
        return (
            f"retrying connection to db-{rng.randrange(8)}.internal:5432"
            f" (attempt {rng.randrange(1, 6)} of 5): timeout after {rng.uniform(0.1, 30):.2f}s"
        )
    if shape == 6:
        return (
            f"cache {'hit' if rng.random() < 0.8 else 'miss'}"
            f" key=user:{rng.randrange(10**6)}:profile ttl={rng.randrange(3600)}s"
            f" size={rng.randrange(64, 65536)}"
        )
    return (
        f"transform {rng.choice(_TABLES)}: {rng.randrange(10**6)} in,"
        f" {rng.randrange(10**6)} out, {rng.randrange(100)} dropped"
        f" (null key), checksum={rng.getrandbits(32):08x}"
    )


def log_text(seed: int, size: int) -> bytes:
    """`size` bytes of a task's output (the last line cut to fit, ending in a newline)."""
    rng = random.Random(seed)
    at = _T0 + timedelta(seconds=seed)
    parts: list[str] = []
    length = 0
    n = 0
    while length < size:
        at += timedelta(microseconds=rng.randrange(50, 20_000))
        n += 1
        line = (
            f"{at.isoformat(timespec='microseconds')} {rng.choice(_LEVELS):<7}"
            f" [{rng.choice(_LOGGERS)}] {_message(rng, n)}\n"
        )
        if rng.randrange(400) == 0:
            line += _TRACEBACK.format(
                a=rng.randrange(40, 400),
                r=rng.randrange(1, 6),
                b=rng.randrange(40, 400),
                t=rng.uniform(1, 60),
                n=n,
                rows=rng.randrange(10**5),
            )
        parts.append(line)
        length += len(line)
    data = "".join(parts).encode()[:size]
    return data[:-1] + b"\n" if data else data
