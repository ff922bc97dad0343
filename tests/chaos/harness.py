"""The chaos harness: Postgres, N scheduler replicas, and faults on a seeded schedule.

Faults: `kill -9` of a replica (restarted after a delay, as a pod would be),
SIGSTOP/SIGCONT pauses longer than the scheduler-dead threshold, a Postgres
restart, and task processes killed from outside. Every fault is recorded with
its time; the checker (checker.py) then reads the task event log, the
replicas' logs and the database.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, text

from sluice.db.embedded import EmbeddedPostgres, start_embedded_postgres
from sluice.db.engine import normalize_url
from sluice.db.migrate import upgrade
from tests.chaos import workload

SLUICE = Path(sys.executable).parent / "sluice"
# Thresholds small enough that faults bite within a short run.
REPLICA_ARGS = [
    "--executor", "local",
    "--tick-interval", "0.2",
    "--heartbeat-interval", "1",
    "--scheduler-dead-after", "5",
    "--zombie-threshold", "5",
    "--no-migrate",
    "--log-json",
    "--log-level", "info",
]  # fmt: skip


@dataclass
class Fault:
    at: float
    kind: str
    target: str


@dataclass
class Replica:
    index: int
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    stopped_until: float | None = None
    down_until: float | None = None


@dataclass
class ChaosRun:
    workdir: Path
    replicas: int
    fault_seconds: float
    seed: int
    settle_seconds: float = 120.0
    faults: list[Fault] = field(default_factory=list)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    faults_ended_at: datetime | None = None
    settled_at: datetime | None = None
    postgres: EmbeddedPostgres | None = None

    @property
    def event_log(self) -> Path:
        return self.workdir / "events.jsonl"

    def replica_log(self, index: int) -> Path:
        return self.workdir / f"replica-{index}.log"

    @property
    def url(self) -> str:
        assert self.postgres is not None
        return normalize_url(self.postgres.url)

    # -- setup ------------------------------------------------------------------------

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.postgres = start_embedded_postgres(self.workdir / "pgdata", keep_data=False)
        upgrade(self.url)
        engine = create_engine(self.url)
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO slot_pool (name, slots, description) VALUES (:n, :s, '')"),
                {"n": workload.POOL, "s": workload.POOL_SLOTS},
            )
        engine.dispose()
        window = timedelta(seconds=self.fault_seconds)
        workload.write_dags(
            self.workdir / "dags", workload.manifests(self.started_at, window, self.event_log)
        )
        self.event_log.touch()
        self._replicas = [Replica(i) for i in range(self.replicas)]
        self._deck: list[str] = []
        for replica in self._replicas:
            self._launch(replica, sync_dags=replica.index == 0)

    def _launch(self, replica: Replica, *, sync_dags: bool = False) -> None:
        args = [
            str(SLUICE),
            "scheduler",
            "--database-url",
            self.url,
            "--log-dir",
            str(self.workdir / "logs"),
            *REPLICA_ARGS,
        ]
        if sync_dags:
            args += ["--dags", str(self.workdir / "dags")]
        log = self.replica_log(replica.index).open("ab")
        replica.process = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=False)
        replica.down_until = None

    # -- faults -----------------------------------------------------------------------

    def inject_faults(self) -> None:
        rng = random.Random(self.seed)
        end = time.monotonic() + self.fault_seconds
        next_fault = time.monotonic() + rng.uniform(4, 8)
        while time.monotonic() < end:
            self._tend(time.monotonic())
            if time.monotonic() >= next_fault:
                self._one_fault(rng)
                next_fault = time.monotonic() + rng.uniform(5, 10)
            time.sleep(0.1)
        # Let every paused replica go and every killed one come back before settling.
        for replica in self._replicas:
            if replica.stopped_until is not None:
                self._cont(replica)
            if replica.down_until is not None:
                self._launch(replica)
        self.faults_ended_at = datetime.now(UTC)

    def _tend(self, now: float) -> None:
        for replica in self._replicas:
            if replica.stopped_until is not None and now >= replica.stopped_until:
                self._cont(replica)
            if replica.down_until is not None and now >= replica.down_until:
                replica.restarts += 1
                self._launch(replica)
            if replica.process is not None and replica.down_until is None:
                code = replica.process.poll()
                if code is not None:  # crashed by itself: restart, and record it
                    self.faults.append(
                        Fault(self._t(), "replica exited", f"{replica.index}:{code}")
                    )
                    replica.down_until = now + 1

    def _one_fault(self, rng: random.Random) -> None:
        # A shuffled deck, so even a short run sees every kind of fault.
        if not self._deck:
            self._deck = [
                "kill_replica",
                "pause_replica",
                "postgres_restart",
                "kill_task",
                "kill_task",
            ]
            rng.shuffle(self._deck)
        kind = self._deck.pop()
        up = [r for r in self._replicas if r.down_until is None and r.stopped_until is None]
        if kind in ("kill_replica", "pause_replica") and len(up) < 2:
            kind = "kill_task"  # always leave one replica running
        if kind == "kill_replica":
            replica = rng.choice(up)
            assert replica.process is not None
            replica.process.send_signal(signal.SIGKILL)
            replica.process.wait()
            replica.down_until = time.monotonic() + rng.uniform(2, 5)
            self.faults.append(Fault(self._t(), kind, f"replica {replica.index}"))
        elif kind == "pause_replica":
            replica = rng.choice(up)
            assert replica.process is not None
            replica.process.send_signal(signal.SIGSTOP)
            replica.stopped_until = time.monotonic() + rng.uniform(7, 10)  # > dead-after 5s
            self.faults.append(Fault(self._t(), kind, f"replica {replica.index}"))
        elif kind == "postgres_restart":
            self._restart_postgres()
            self.faults.append(Fault(self._t(), kind, "postgres"))
        else:
            pid = self._running_task_pid(rng)
            if pid is None:
                return
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.faults.append(Fault(self._t(), kind, f"task pid {pid}"))

    def _cont(self, replica: Replica) -> None:
        assert replica.process is not None
        replica.process.send_signal(signal.SIGCONT)
        replica.stopped_until = None

    def _restart_postgres(self) -> None:
        from embedded_postgres._commands import pg_ctl

        assert self.postgres is not None
        server = self.postgres._server
        pg_ctl(
            ["-w", "-m", "fast", "restart"],
            pgdata=self.postgres.data_dir,
            user=server.system_user,
            timeout=60,
        )  # type: ignore[attr-defined]

    def _running_task_pid(self, rng: random.Random) -> int | None:
        started: dict[int, float] = {}
        for line in self.event_log.read_text().splitlines()[-400:]:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event["event"] == "end":
                started.pop(event["pid"], None)
            else:
                started[event["pid"]] = event["t"]
        fresh = [pid for pid, t in started.items() if time.time() - t < 1.0]
        return rng.choice(fresh) if fresh else None

    def _t(self) -> float:
        return (datetime.now(UTC) - self.started_at).total_seconds()

    # -- settling ---------------------------------------------------------------------

    def settle(self) -> bool:
        """Wait until every run is terminal (True) or the bound passes (False)."""
        engine = create_engine(self.url, pool_pre_ping=True)
        deadline = time.monotonic() + self.settle_seconds
        try:
            while time.monotonic() < deadline:
                for replica in self._replicas:
                    if replica.process is not None and replica.process.poll() is not None:
                        self._launch(replica)
                with engine.connect() as conn:
                    active = conn.execute(
                        text("SELECT count(*) FROM dag_run WHERE state IN ('queued', 'running')")
                    ).scalar_one()
                    due = conn.execute(
                        text("SELECT count(*) FROM dag WHERE next_run_after <= now()")
                    ).scalar_one()
                if active == 0 and due == 0:
                    self.settled_at = datetime.now(UTC)
                    return True
                time.sleep(0.5)
            return False
        finally:
            engine.dispose()

    def stop(self) -> None:
        for replica in getattr(self, "_replicas", []):
            if replica.process is None or replica.process.poll() is not None:
                continue
            if replica.stopped_until is not None:
                replica.process.send_signal(signal.SIGCONT)
            replica.process.send_signal(signal.SIGTERM)
        for replica in getattr(self, "_replicas", []):
            if replica.process is not None:
                try:
                    replica.process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    replica.process.kill()
                    replica.process.wait()

    def close(self) -> None:
        if self.postgres is not None:
            self.postgres.stop()
