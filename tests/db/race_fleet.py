"""Replicas racing in separate processes, and the replay of what they ran (the race tests).

`RaceFleet` starts `race_worker` processes on one database and stops them; `replay`
reads the tries' start/end log they wrote and checks invariant 1 on it: no try
started twice, every start ended, and the tries of one task instance never
overlapped, their numbers only going up.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Key = tuple[int, int]  # (task instance, try)


@dataclass
class RaceFleet:
    db_url: str
    tmp_path: Path
    replicas: int
    # Tries each critical-section batch (of 4) claims for its replica; the rest wait on
    # the outbox for any replica's dispatcher (ADR 0047).
    dispatch_batch: int = 4
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.tmp_path / "tries.jsonl"

    @property
    def stop_file(self) -> Path:
        return self.tmp_path / "stop"

    def start(self) -> None:
        argv = [self.db_url, str(self.log_path), str(self.stop_file), str(self.dispatch_batch)]
        self.workers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.db.race_worker", *argv],
                stderr=(self.tmp_path / f"worker-{i}.log").open("w"),
            )
            for i in range(self.replicas)
        ]

    def assert_alive(self) -> None:
        assert all(w.poll() is None for w in self.workers), "a scheduler replica crashed"

    def stop(self) -> None:
        self.stop_file.touch()
        for worker in self.workers:
            worker.wait(timeout=30)

    def phase_errors(self) -> list[str]:
        return [
            line
            for i in range(self.replicas)
            for line in (self.tmp_path / f"worker-{i}.log").read_text().splitlines()
            if "phase failed" in line
        ]


@dataclass
class Replay:
    starts: dict[Key, list[dict[str, Any]]]
    ends: dict[Key, dict[str, Any]]


def replay(log_path: Path) -> Replay:
    """Read the workers' log and assert invariant 1 on it (see the module)."""
    starts: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[Key, dict[str, Any]] = {}
    for line in log_path.read_text().splitlines():
        record = json.loads(line)
        key = (record["ti"], record["try"])
        if record["event"] == "start":
            starts[key].append(record)
        else:
            ends[key] = record
    twice = {key: [s["pid"] for s in v] for key, v in starts.items() if len(v) > 1}
    assert not twice, f"tries started more than once: {twice}"
    assert set(starts) == set(ends)
    by_ti: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for (ti, try_number), (start,) in starts.items():
        by_ti[ti].append((try_number, start["t"], ends[(ti, try_number)]["t"]))
    for ti, tries in by_ti.items():
        tries.sort()
        for (_, _, prev_end), (number, next_start, _) in itertools.pairwise(tries):
            assert next_start >= prev_end, f"try {number} of task instance {ti} overlapped"
    return Replay(dict(starts), ends)
