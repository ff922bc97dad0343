"""Where a try's archive lives in a store: `<dag_id>/<run_id>/<task_id>/<try>.log.gz`.

Run ids carry `:` and `+` (`scheduled__2026-01-01T00:00:00+00:00`), which some
stores and tools mangle, so each part is percent-encoded outside
`[A-Za-z0-9._-]`. The encoding is reversible (`parse_key`) and unambiguous: a
`/` or `%` inside a part is encoded, so no two tries share a key, and a part of
dots only is encoded too, so no part reads as `.` or `..`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

SUFFIX = ".log.gz"


@dataclass(frozen=True)
class TryKey:
    """The identity of one task try, as a key names it."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int


def key_for(dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    """The archive key of one try; raises ValueError for an empty id or a try below 1."""
    if isinstance(try_number, bool) or not isinstance(try_number, int) or try_number < 1:
        raise ValueError(f"try_number must be an integer of at least 1, not {try_number!r}")
    parts = [
        _encode(dag_id, "dag_id"),
        _encode(run_id, "run_id"),
        _encode(task_id, "task_id"),
    ]
    return "/".join(parts) + f"/{try_number}{SUFFIX}"


def parse_key(key: str) -> TryKey:
    """The try a key names (the inverse of `key_for`); ValueError if it is not such a key."""
    parts = key.split("/")
    if len(parts) != 4 or not parts[3].endswith(SUFFIX):
        raise ValueError(f"{key!r} is not <dag_id>/<run_id>/<task_id>/<try>{SUFFIX}")
    number = parts[3].removesuffix(SUFFIX)
    if not number.isascii() or not number.isdigit() or number.startswith("0"):
        raise ValueError(f"{key!r}: the try number {number!r} is not an integer of at least 1")
    dag_id, run_id, task_id = (unquote(part, errors="strict") for part in parts[:3])
    if key_for(dag_id, run_id, task_id, int(number)) != key:
        raise ValueError(
            f"{key!r} is not a key key_for makes (an id is not encoded as it would be)"
        )
    return TryKey(dag_id, run_id, task_id, int(number))


def _encode(value: str, what: str) -> str:
    if not value:
        raise ValueError(f"{what} must not be empty")
    # quote() keeps ASCII letters, digits and `_.-~`; `~` is encoded too, to keep the set small.
    encoded = quote(value, safe="").replace("~", "%7E")
    if encoded.strip(".") == "":
        encoded = encoded.replace(".", "%2E")
    return encoded
