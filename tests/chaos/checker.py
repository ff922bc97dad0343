"""The offline checker: replays the task event log, the replicas' logs, the database samples
taken while the faults ran, and the database itself.

Each invariant of docs/architecture.md that a chaos run can observe is a
function returning its violations (human-readable strings); zero everywhere is
a pass. Limits (pool slots, `maxActiveTasks`) are read from the database, never
assumed: the weights and limits come from the task instances, `slot_pool` and
`dag` rows, and occupancy is checked twice, from the sampler's snapshots and
from the task processes' own lifetimes.
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
from tests.chaos.harness import Samples

# A zombie verdict is made on what the executor saw before it was committed and logged
# (with this machine's clock, as the task processes log theirs): a process seen alive
# after that was not gone. No slack.
VERDICT_SLACK = 0.0
EVIDENCE_KEYS = ("last_heartbeat", "threshold_seconds", "executor_says", "verdict", "detected_at")


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


def _epoch(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Checker:
    def __init__(
        self,
        url: str,
        event_log: Path,
        replica_logs: list[Path],
        settled: bool,
        started_at: datetime,
        checked_at: datetime,
        samples: Samples | None = None,
        exits: list[str] | None = None,
    ) -> None:
        self.attempts = read_attempts(event_log)
        self.replica_logs = replica_logs
        self.settled = settled
        self.started_at = started_at
        self.checked_at = checked_at
        self.samples = samples or Samples()
        self.exits = exits or []
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
                        "SELECT t.task_instance_id, t.try_number, t.state, t.reason, t.evidence,"
                        " i.dag_id, r.run_id, i.task_id, t.scheduler_job_id, t.start_date,"
                        " t.end_date "
                        "FROM task_try t JOIN task_instance i ON i.id = t.task_instance_id"
                        " JOIN dag_run r ON r.id = i.dag_run_id"
                    )
                )
            ]
            self.weights = {
                (row.dag_id, row.run_id, row.task_id): (row.pool, row.pool_slots)
                for row in conn.execute(
                    text(
                        "SELECT i.dag_id, r.run_id, i.task_id, i.pool, i.pool_slots"
                        " FROM task_instance i JOIN dag_run r ON r.id = i.dag_run_id"
                    )
                )
            }
            self.pool_slots = dict(conn.execute(text("SELECT name, slots FROM slot_pool")).all())
            self.max_active_tasks = dict(
                conn.execute(text("SELECT dag_id, max_active_tasks FROM dag")).all()
            )
            self.unfinished = conn.execute(
                text(
                    "SELECT count(*) FROM task_instance WHERE state NOT IN "
                    "('success', 'failed', 'skipped', 'upstream_failed')"
                )
            ).scalar_one()
            self.ended_unloadable = conn.execute(
                text(
                    "SELECT count(*) FROM task_instance"
                    " WHERE reason LIKE 'the run''s DAG version cannot be loaded%'"
                )
            ).scalar_one()
        engine.dispose()
        self.marked_broken = sum(
            1
            for path in replica_logs
            for line in path.read_text(errors="replace").splitlines()
            if '"event": "DAG marked broken' in line
        )
        self.zombies = [t for t in self.tries if (t["reason"] or "").startswith("zombie")]
        self._logs = [
            e for path in replica_logs for e in self._json_lines(path) if "event" in e and "ti" in e
        ]

    @staticmethod
    def _json_lines(path: Path) -> list[dict[str, Any]]:
        found = []
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
        return found

    # -- invariant 1 ------------------------------------------------------------------

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

    # -- invariant 2 ------------------------------------------------------------------

    def limits_in_samples(self) -> list[str]:
        """Every database snapshot taken while the faults ran and the run settled."""
        bad = list(self.samples.over)
        if self.samples.taken == 0:
            bad.append("no database sample was taken")
        return bad

    def _process_peaks(self, group: Callable[[Attempt], tuple[str, int] | None]) -> dict[str, Any]:
        """Sweep the task processes' lifetimes: for each group, its peak and when."""
        edges: list[tuple[float, int, str]] = []
        for a in self.attempts:
            found = group(a)
            if found is not None:
                name, weight = found
                edges += [(a.start, weight, name), (a.last, -weight, name)]
        used: Counter[str] = Counter()
        peaks: dict[str, Any] = {}
        # Ends before starts at the same instant: a try that ends as another starts.
        for t, delta, name in sorted(edges, key=lambda e: (e[0], e[1])):
            used[name] += delta
            if used[name] > peaks.get(name, (0, 0.0))[0]:
                peaks[name] = (used[name], t)
        return peaks

    def process_pool_peaks(self) -> dict[str, Any]:
        def pool_of(a: Attempt) -> tuple[str, int] | None:
            found = self.weights.get((a.dag, a.run, a.task))
            return None if found is None else (found[0], found[1])

        return self._process_peaks(pool_of)

    def process_dag_peaks(self) -> dict[str, Any]:
        return self._process_peaks(lambda a: (a.dag, 1))

    def pools_within_slots_by_process(self) -> list[str]:
        bad = []
        for pool, (peak, t) in self.process_pool_peaks().items():
            slots = self.pool_slots.get(pool)
            if slots is not None and peak > slots:
                bad.append(f"pool {pool}: task processes held {peak} of {slots} slots at {t:.2f}")
        return bad

    def dags_within_max_active_tasks_by_process(self) -> list[str]:
        bad = []
        for dag, (peak, t) in self.process_dag_peaks().items():
            limit = self.max_active_tasks.get(dag)
            if limit is not None and peak > limit:
                bad.append(
                    f"{dag}: {peak} task processes at once, maxActiveTasks {limit} ({t:.2f})"
                )
        return bad

    # -- invariants 3, 4, 6 -----------------------------------------------------------

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
            try:
                spec = spec_from_json(runs[0]["spec"], runs[0]["spec_schema_version"])
            except ValueError as exc:
                bad.append(f"{dag}: its stored spec does not load after the run: {exc}")
                continue
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

    def no_replica_exits(self) -> list[str]:
        return list(self.exits)

    # -- invariant 7 ------------------------------------------------------------------

    def zombie_verdicts_have_evidence(self) -> list[str]:
        """Every zombie verdict, retried or not, from the try's own history row."""
        bad = []
        for z in self.zombies:
            who = f"task instance {z['task_instance_id']} try {z['try_number']}"
            evidence = z["evidence"]
            if not evidence:
                bad.append(f"{who}: a zombie verdict without evidence")
                continue
            missing = [k for k in EVIDENCE_KEYS if evidence.get(k) in (None, "")]
            if missing:
                bad.append(f"{who}: evidence lacks {', '.join(missing)}")
                continue
            says = evidence["executor_says"]
            if says not in ("gone", "unknown", "alive"):
                bad.append(f"{who}: the executor said {says!r}, which is no verdict")
            if says == "alive" and "kill_after_seconds" not in evidence:
                bad.append(f"{who}: a zombie the executor saw alive, with no kill threshold")
            stale = _epoch(evidence["detected_at"]) - _epoch(evidence["last_heartbeat"])
            if stale < float(evidence["threshold_seconds"]):
                bad.append(
                    f"{who}: declared after {stale:.1f}s without a heartbeat, under the "
                    f"{evidence['threshold_seconds']}s threshold"
                )
        return bad

    def zombie_processes_had_stopped(self) -> list[str]:
        """A zombie is a try nobody can vouch for: its process must have stopped by the
        verdict (as the replica that made it logged it), whatever the executor saw."""
        logged: dict[tuple[int, int], float] = {}
        for e in self._logs:
            if e["event"] == "zombie task":
                key = (int(e["ti"]), int(e["try_number"]))
                logged[key] = min(logged.get(key, float("inf")), _epoch(e["timestamp"]))
        attempts = {(a.dag, a.run, a.task, a.try_number): a for a in self.attempts}
        bad = []
        for z in self.zombies:
            evidence = z["evidence"] or {}
            if evidence.get("executor_says") == "alive":
                continue  # killed after the verdict, by design (kill threshold)
            key = (z["task_instance_id"], z["try_number"])
            verdict = logged.get(key)
            if verdict is None and evidence.get("detected_at"):
                verdict = _epoch(evidence["detected_at"])
            attempt = attempts.get((z["dag_id"], z["run_id"], z["task_id"], z["try_number"]))
            if attempt is None or verdict is None:
                continue  # never started (claimed, then its replica died), or no record
            if attempt.last > verdict + VERDICT_SLACK:
                bad.append(
                    f"{z['dag_id']}/{z['run_id']}/{z['task_id']} try {z['try_number']}: "
                    f"a zombie ({evidence.get('executor_says')}: {evidence.get('verdict')}) "
                    f"whose process was seen alive {attempt.last - verdict:.1f}s after the verdict"
                )
        return bad

    # -- invariant 8 ------------------------------------------------------------------

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
        # A try a clear ended (`clearing`: its row says so) did not fail: no alert is owed.
        failed = {
            (t["task_instance_id"], t["try_number"])
            for t in self.tries
            if t["state"] == "failed" and not str(t.get("reason") or "").startswith("cleared")
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

    def all(self) -> dict[str, list[str]]:
        checks: dict[str, Callable[[], list[str]]] = {
            "1. one start per (run, task, try)": self.one_start_per_try,
            "1. tries of a task never overlap": self.no_overlapping_tries,
            "1. try numbers only increase": self.try_numbers_increase,
            "2. pools and maxActiveTasks in every database sample": self.limits_in_samples,
            "2. pool slots held by task processes": self.pools_within_slots_by_process,
            "2. maxActiveTasks: task processes per DAG": (
                self.dags_within_max_active_tasks_by_process
            ),
            "3. every run terminal after faults stop": self.runs_terminal_after_faults,
            "4. runs created equal the schedule": self.runs_match_schedule,
            "6. no replica exits by itself (faults, settle, stop)": self.no_replica_exits,
            "7. every zombie verdict has its evidence (task_try)": (
                self.zombie_verdicts_have_evidence
            ),
            "7. no zombie verdict on a live process": self.zombie_processes_had_stopped,
            "8. one alert per failed try": self.one_alert_per_failed_try,
        }
        return {name: check() for name, check in checks.items()}

    def paths(self) -> dict[str, int]:
        """How often each recovery path ran: what the faults actually exercised."""
        reasons = [t["reason"] or "" for t in self.tries]
        says = Counter((z["evidence"] or {}).get("executor_says") for z in self.zombies)
        return {
            "adopted from a dead or paused replica": sum(
                1 for e in self._logs if e["event"] == "adopted try"
            ),
            "reported from its result file (ended unwatched)": sum(
                "ended while its scheduler" in r for r in reasons
            ),
            "stopped itself (lease expired)": sum("lease expired" in r for r in reasons),
            "zombie: process gone": says["gone"],
            "zombie: nobody could see it (unknown)": says["unknown"],
            "failed: the executor raised on start": sum(
                r.startswith("the executor could not start the try") for r in reasons
            ),
            "failed at the claim: its spec could not be loaded": sum(
                r.startswith("the task's spec could not be loaded") for r in reasons
            ),
            "DAG marked broken (spec unloadable), no runs created": self.marked_broken,
            "task skipped: its run's version could not be loaded": self.ended_unloadable,
        }

    def limits(self) -> list[dict[str, Any]]:
        """How close the run came to each limit the workload is built to reach."""
        pools = self.process_pool_peaks()
        dags = self.process_dag_peaks()
        rows = []
        for (kind, name), seen in sorted(self.samples.limits.items()):
            peak = pools.get(name) if kind == "pool" else dags.get(name)
            if seen.max_seen == 0 and peak is None:
                continue
            rows.append(
                {
                    "limit": f"{kind} {name}",
                    "value": seen.limit,
                    "max_db": seen.max_seen,
                    "max_processes": peak[0] if peak else 0,
                    "at_limit": seen.at_limit / seen.samples if seen.samples else 0.0,
                }
            )
        return rows
