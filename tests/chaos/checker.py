"""The offline checker: replays the task event log, the replicas' logs and the database.

Each invariant of docs/architecture.md that a chaos run can observe is a
function returning its violations (human-readable strings); zero everywhere is
a pass.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from sluice.db.dags import spec_from_json
from sluice.spec.timetables import timetable_for
from tests.chaos import workload


@dataclass
class Attempt:
    dag: str
    run: str
    task: str
    try_number: int
    pid: int
    start: float
    last: float
    ended: bool
    starts: int = 1


def read_attempts(event_log: Path) -> list[Attempt]:
    attempts: dict[tuple[str, str, str, int], Attempt] = {}
    for line in event_log.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill mid-write
        key = (e["dag"], e["run"], e["task"], int(e["try"]))
        if e["event"] == "start":
            if key in attempts:
                attempts[key].starts += 1
                continue
            attempts[key] = Attempt(*key, e["pid"], e["t"], e["t"], False)
        elif key in attempts:
            attempts[key].last = max(attempts[key].last, e["t"])
            attempts[key].ended = attempts[key].ended or e["event"] == "end"
    return list(attempts.values())


class Checker:
    def __init__(
        self,
        url: str,
        event_log: Path,
        replica_logs: list[Path],
        settled: bool,
        started_at: datetime,
        checked_at: datetime,
    ) -> None:
        self.attempts = read_attempts(event_log)
        self.replica_logs = replica_logs
        self.settled = settled
        self.started_at = started_at
        self.checked_at = checked_at
        engine = create_engine(url)
        with engine.connect() as conn:
            self.runs = [
                dict(r._mapping)
                for r in conn.execute(
                    text(
                        "SELECT r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, v.spec, "
                        "v.spec_schema_version "
                        "FROM dag_run r JOIN dag_version v ON v.id = r.dag_version_id"
                    )
                )
            ]
            self.tries = [
                dict(r._mapping)
                for r in conn.execute(
                    text(
                        "SELECT t.task_instance_id, t.try_number, t.state, i.reason, i.evidence "
                        "FROM task_try t JOIN task_instance i ON i.id = t.task_instance_id"
                    )
                )
            ]
            self.unfinished = conn.execute(
                text(
                    "SELECT count(*) FROM task_instance WHERE state NOT IN "
                    "('success', 'failed', 'skipped', 'upstream_failed')"
                )
            ).scalar_one()
            self.zombies = [
                dict(r._mapping)
                for r in conn.execute(
                    text(
                        "SELECT id, reason, evidence FROM task_instance WHERE reason LIKE 'zombie%'"
                    )
                )
            ]
        engine.dispose()

    # -- invariants -------------------------------------------------------------------

    def one_start_per_try(self) -> list[str]:
        return [
            f"{a.dag}/{a.run}/{a.task} try {a.try_number} started {a.starts} times"
            for a in self.attempts
            if a.starts > 1
        ]

    def no_overlapping_tries(self) -> list[str]:
        by_task: dict[tuple[str, str, str], list[Attempt]] = defaultdict(list)
        for a in self.attempts:
            by_task[(a.dag, a.run, a.task)].append(a)
        bad = []
        for key, tries in by_task.items():
            tries.sort(key=lambda a: a.start)
            for prev, nxt in itertools.pairwise(tries):
                if nxt.start < prev.last:
                    bad.append(
                        f"{'/'.join(key)}: try {nxt.try_number} started "
                        f"{prev.last - nxt.start:.2f}s before try {prev.try_number} "
                        "was last seen alive"
                    )
        return bad

    def try_numbers_increase(self) -> list[str]:
        by_task: dict[tuple[str, str, str], list[Attempt]] = defaultdict(list)
        for a in self.attempts:
            by_task[(a.dag, a.run, a.task)].append(a)
        bad = []
        for key, tries in by_task.items():
            numbers = [a.try_number for a in sorted(tries, key=lambda a: a.start)]
            if numbers != sorted(set(numbers)):
                bad.append(f"{'/'.join(key)}: tries started in order {numbers}")
        return bad

    def pool_within_slots(self) -> list[str]:
        weights = {f"work-{i}": (2 if i == 0 else 1) for i in range(4)} | {"load": 1}
        edges: list[tuple[float, int, str]] = []
        for a in self.attempts:
            if a.task in weights:
                edges += [(a.start, weights[a.task], a.task), (a.last, -weights[a.task], a.task)]
        used = 0
        bad = []
        for t, delta, task in sorted(edges, key=lambda e: (e[0], e[1])):
            used += delta
            if used > workload.POOL_SLOTS:
                bad.append(f"pool {workload.POOL} held {used} slots at t={t:.2f} ({task})")
        return bad

    def runs_terminal_after_faults(self) -> list[str]:
        bad = [] if self.settled else ["runs still active when the settle bound passed"]
        if self.unfinished:
            bad.append(f"{self.unfinished} task instance(s) not in a terminal state")
        return bad

    def runs_match_schedule(self) -> list[str]:
        bad = []
        by_dag: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for run in self.runs:
            if run["run_type"] == "scheduled":
                by_dag[run["dag_id"]].append(run)
        for dag, runs in by_dag.items():
            spec = spec_from_json(runs[0]["spec"], runs[0]["spec_schema_version"])
            timetable = timetable_for(spec.schedule, spec.timezone)
            assert spec.start_date is not None
            until = min(spec.end_date or self.checked_at, self.checked_at)
            expected = [
                i.logical_date
                for i in timetable.runs_between(spec.start_date, until)
                if i.run_after <= self.checked_at
            ]
            actual = [r["logical_date"].astimezone(UTC) for r in runs]
            dupes = [d for d, n in Counter(actual).items() if n > 1]
            missing = sorted(set(expected) - set(actual))
            extra = sorted(set(actual) - set(expected))
            bad += [f"{dag}: duplicate run at {d.isoformat()}" for d in dupes]
            bad += [f"{dag}: missing run at {d.isoformat()}" for d in missing]
            bad += [f"{dag}: unscheduled run at {d.isoformat()}" for d in extra]
        return bad

    def one_alert_per_failed_try(self) -> list[str]:
        alerts: Counter[tuple[int, int]] = Counter()
        for path in self.replica_logs:
            for line in path.read_text(errors="replace").splitlines():
                if "alert: task try failed" not in line:
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                alerts[(int(e["ti_id"]), int(e["try_number"]))] += 1
        failed = {
            (t["task_instance_id"], t["try_number"]) for t in self.tries if t["state"] == "failed"
        }
        bad = [
            f"task instance {k[0]} try {k[1]}: {alerts[k]} alerts"
            for k in sorted(failed)
            if alerts[k] != 1
        ]
        bad += [
            f"alert for task instance {k[0]} try {k[1]}, which did not fail"
            for k in alerts
            if k not in failed
        ]
        return bad

    def zombies_have_evidence(self) -> list[str]:
        return [
            f"task instance {z['id']} failed as a zombie without evidence"
            for z in self.zombies
            if not z["evidence"]
        ]

    def all(self) -> dict[str, list[str]]:
        checks: dict[str, Callable[[], list[str]]] = {
            "1. one start per (run, task, try)": self.one_start_per_try,
            "1. tries of a task never overlap": self.no_overlapping_tries,
            "1. try numbers only increase": self.try_numbers_increase,
            "2. pool occupancy within slots": self.pool_within_slots,
            "3. every run terminal after faults stop": self.runs_terminal_after_faults,
            "4. runs created equal the schedule": self.runs_match_schedule,
            "7. zombies carry evidence": self.zombies_have_evidence,
            "8. one alert per failed try": self.one_alert_per_failed_try,
        }
        return {name: check() for name, check in checks.items()}
