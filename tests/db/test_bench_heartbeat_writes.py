"""`python -m bench.heartbeat_writes` does not rot: a tiny run of both arms, counts only."""

from __future__ import annotations

import pytest
from bench.heartbeat_writes import ARMS, parse, run


@pytest.mark.db
def test_both_arms_heartbeat_every_running_try_and_only_the_index_stops_hot_updates() -> None:
    args = parse(["--instances", "300", "--running", "40", "--rounds", "3", "--trials", "1"])
    args.sweeps = 2
    rows = {row["arm"]: row for row in run(args)}
    assert set(rows) == set(ARMS)
    for row in rows.values():
        assert row["heartbeats"] == row["updates"] == 3 * 40
        assert row["wal_bytes_per_beat"] > 0
    # Heap-only updates need the heartbeat out of every index (migration 0021).
    assert rows["indexed"]["hot_pct"] == 0
    assert rows["as migrated"]["hot_pct"] > 50


def test_more_running_tries_than_instances_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--instances", "10", "--running", "20"])
