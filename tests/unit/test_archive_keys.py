"""Archive keys: `<dag_id>/<run_id>/<task_id>/<try>.log.gz`, each part path-safe and reversible."""

from __future__ import annotations

import pytest

from sluice.archive.keys import TryKey, key_for, parse_key


def test_a_scheduled_run_s_key_encodes_its_colons_and_plus() -> None:
    key = key_for("etl", "scheduled__2026-01-01T00:00:00+00:00", "load", 2)
    assert key == "etl/scheduled__2026-01-01T00%3A00%3A00%2B00%3A00/load/2.log.gz"


def test_safe_characters_are_left_as_they_are() -> None:
    assert key_for("a-b_c.D9", "manual__x", "t", 1) == "a-b_c.D9/manual__x/t/1.log.gz"


@pytest.mark.parametrize(
    ("dag_id", "run_id", "task_id"),
    [
        ("etl", "scheduled__2026-01-01T00:00:00+00:00", "load"),
        ("d/with/slashes", "r%41 with %", "t~tilde"),  # %41 must not read back as "A"
        ("..", ".", "..."),
        ("ünïcode", "run id with spaces", "tab\tand\nnewline"),
        ("a", "b?c#d&e=f", "'quotes\"and\\"),
    ],
)
def test_parse_key_gives_back_what_key_for_encoded(dag_id: str, run_id: str, task_id: str) -> None:
    key = key_for(dag_id, run_id, task_id, 12)
    dag_part, run_part, task_part, name = key.split("/")
    for part in (dag_part, run_part, task_part):
        assert set(part) <= set(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-%"
        )
        assert part.strip(".") != "", part  # never `.` or `..`
    assert name == "12.log.gz"
    assert parse_key(key) == TryKey(dag_id, run_id, task_id, 12)


def test_ids_that_differ_only_in_what_is_encoded_get_different_keys() -> None:
    keys = {
        key_for("a/b", "r", "t", 1),
        key_for("a%2Fb", "r", "t", 1),
        key_for("a", "b/r", "t", 1),
        key_for("a", "r", "t", 1),
        key_for(".", "r", "t", 1),
        key_for("%2E", "r", "t", 1),
    }
    assert len(keys) == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "r", "t", 1), "dag_id must not be empty"),
        (("d", "", "t", 1), "run_id must not be empty"),
        (("d", "r", "", 1), "task_id must not be empty"),
        (("d", "r", "t", 0), "try_number must be an integer of at least 1, not 0"),
        (("d", "r", "t", True), "not True"),
        (("d", "r", "t", "1"), "not '1'"),
    ],
)
def test_key_for_refuses_what_names_no_try(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        key_for(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "key",
    [
        "d/r/t/1.log",  # no .gz
        "d/r/1.log.gz",  # a part missing
        "d/r/t/x/1.log.gz",  # a part too many
        "d/r/t/0.log.gz",
        "d/r/t/01.log.gz",  # key_for never writes a leading zero
        "d/r/t/-1.log.gz",
        "d/r:x/t/1.log.gz",  # ':' would have been encoded
        "d/r%3a/t/1.log.gz",  # key_for writes %3A
    ],
)
def test_parse_key_refuses_keys_key_for_does_not_make(key: str) -> None:
    with pytest.raises(ValueError, match="not"):
        parse_key(key)
