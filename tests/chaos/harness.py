"""The chaos harness: Postgres, N scheduler replicas, and faults on a seeded schedule.

Replicas run `tests.chaos.replica` (`sluice scheduler` with fault hooks the
harness arms through files). They are split into two groups: the last replica
runs in a PID namespace of its own (`unshare --pid --fork --mount-proc`), the
others share the machine's, so the other group's executors cannot see its
tries, nor it theirs: "nobody can vouch for it" happens whenever one of them
dies or stops. (Killing the isolated replica, its namespace's init, kills its
tries with it, as losing a machine would.)

Faults, dealt from a shuffled deck so that even a short run sees each kind:

- `kill_replica`: SIGKILL (restarted after 2-5 s, as a pod would be);
- `pause_replica`: SIGSTOP for 7-10 s (past the dead-replica threshold), then SIGCONT;
- `long_pause_replica`: SIGSTOP for 20-25 s, past a local try's lease (12 s
  here): its tries that nobody adopted stop themselves;
- `postgres_restart`: `pg_ctl restart -m fast`;
- `kill_task`: SIGKILL of a task process that just started, from outside;
- `die_between_claim_and_start`: the replica's next `executor.start()` starts
  the first half of its batch and the process exits at once, between the claim's
  commit and the start of the rest (restarted after 1-3 s);
- `executor_raises_on_start`: its next `executor.start()` starts the first half
  of its batch, then raises;
- `terminate_backend`: `pg_terminate_backend` of a replica's connection,
  chosen among those in a transaction when there is one;
- `skew_clock`: one replica's clock 30 s ahead or behind for 15-25 s;
- `break_spec`: the stored spec of `chaos-fragile`'s current version made
  unloadable (a schema version from the future) for 10-15 s, then restored and
  the manifest applied again; meanwhile one replica is restarted gracefully
  (SIGTERM, then started again), so that at least one replica must read the
  spec (the others have it cached) and the graceful stop hands its tries over
  under faults.

Every fault is recorded with its time. A sampler thread reads pool occupancy
and each DAG's active tasks from the database every 0.25 s while faults run
and while the run settles. A replica that exits without being told to (while
faults run, while the run settles, or with a non-zero code on SIGTERM) is
recorded too. The checker (checker.py) then reads the task event log, the
replicas' logs, the samples and the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, sync_dag
from sluice.db.embedded import EmbeddedPostgres, start_embedded_postgres
from sluice.db.engine import normalize_url
from sluice.db.migrate import upgrade
from sluice.db.models import DagRun, TaskInstance
from sluice.scheduler import clearing
from sluice.spec.validation import parse_dag_manifest
from tests.chaos import workload

REPO = Path(__file__).resolve().parents[2]
# Thresholds small enough that faults bite within a short run.
REPLICA_ARGS = [
    "--executor", "local",
    "--tick-interval", "0.2",
    "--heartbeat-interval", "1",
    "--scheduler-dead-after", "5",
    "--zombie-threshold", "5",
    "--zombie-check-interval", "2",
    "--no-migrate",
    "--log-json",
    "--log-level", "info",
]  # fmt: skip
SKEW_SECONDS = 30.0
SAMPLE_EVERY = 0.25

FAULT_KINDS = [
    "kill_replica",
    "pause_replica",
    "long_pause_replica",
    "postgres_restart",
    "kill_task",
    "kill_task",
    "die_between_claim_and_start",
    "executor_raises_on_start",
    "terminate_backend",
    "skew_clock",
    "break_spec",
    "clear_tasks",
]


@dataclass
class Fault:
    at: float
    kind: str
    target: str
    detail: str = ""


@dataclass
class Replica:
    index: int
    isolated: bool  # in a PID namespace of its own
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None  # the scheduler's own pid (unshare's child when isolated)
    restarts: int = 0
    stopped_until: float | None = None
    down_until: float | None = None
    skewed_until: float | None = None
    terminated_at: float | None = None  # SIGTERM sent: a graceful restart under way


@dataclass
class Limit:
    """What the sampler saw of one limit (a pool's slots, a DAG's maxActiveTasks)."""

    kind: str
    name: str
    limit: int
    max_seen: int = 0
    samples: int = 0
    at_limit: int = 0


@dataclass
class Samples:
    limits: dict[tuple[str, str], Limit] = field(default_factory=dict)
    over: list[str] = field(default_factory=list)  # samples above a limit
    taken: int = 0
    failed: int = 0


_SAMPLE = text(
    """
    SELECT 'pool' AS kind, p.name, p.slots AS lim, COALESCE(sum(ti.pool_slots), 0) AS used
    FROM slot_pool p LEFT JOIN task_instance ti
      ON ti.pool = p.name AND ti.state IN ('queued', 'running')
    GROUP BY p.name, p.slots
    UNION ALL
    SELECT 'maxActiveTasks', d.dag_id, d.max_active_tasks, count(ti.id)
    FROM dag d LEFT JOIN task_instance ti
      ON ti.dag_id = d.dag_id AND ti.state IN ('queued', 'running')
    GROUP BY d.dag_id, d.max_active_tasks
    """
)


class Sampler(threading.Thread):
    """Reads every pool's occupancy and every DAG's active tasks in one statement (one
    snapshot) every SAMPLE_EVERY seconds, until stopped; survives Postgres restarts."""

    def __init__(self, url: str, started_at: datetime) -> None:
        super().__init__(name="chaos-sampler", daemon=True)
        self.engine = create_engine(
            url, pool_pre_ping=True, connect_args={"application_name": "chaos-sampler"}
        )
        self.started_at = started_at
        self.samples = Samples()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(SAMPLE_EVERY):
            try:
                with self.engine.connect() as conn:
                    rows = conn.execute(_SAMPLE).all()
            except Exception:
                self.samples.failed += 1
                continue
            self._record(rows)

    def _record(self, rows: list[Any]) -> None:
        t = (datetime.now(UTC) - self.started_at).total_seconds()
        self.samples.taken += 1
        for row in rows:
            key = (row.kind, row.name)
            seen = self.samples.limits.setdefault(key, Limit(row.kind, row.name, row.lim))
            seen.limit = row.lim
            seen.samples += 1
            seen.max_seen = max(seen.max_seen, row.used)
            if row.used >= row.lim:
                seen.at_limit += 1
            if row.used > row.lim:
                self.samples.over.append(
                    f"{row.kind} {row.name}: {row.used} in use, limit {row.lim}, at t={t:.2f}s"
                )

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
        self.engine.dispose()


@dataclass
class ChaosRun:
    workdir: Path
    replicas: int
    fault_seconds: float
    seed: int
    settle_seconds: float = 120.0
    faults: list[Fault] = field(default_factory=list)
    # Replicas that exited without being told to, or not cleanly when told to stop.
    exits: list[str] = field(default_factory=list)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    faults_ended_at: datetime | None = None
    settled_at: datetime | None = None
    postgres: EmbeddedPostgres | None = None
    sampler: Sampler | None = None

    @property
    def event_log(self) -> Path:
        return self.workdir / "events.jsonl"

    def replica_log(self, index: int) -> Path:
        return self.workdir / f"replica-{index}.log"

    def control(self, replica: Replica, suffix: str) -> Path:
        return self.workdir / f"replica-{replica.index}.{suffix}"

    @property
    def url(self) -> str:
        assert self.postgres is not None
        return normalize_url(self.postgres.url)

    @property
    def dags_dir(self) -> Path:
        return self.workdir / "dags"

    # -- setup ------------------------------------------------------------------------

    def start(self) -> None:
        _can_unshare()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.postgres = start_embedded_postgres(self.workdir / "pgdata", keep_data=False)
        upgrade(self.url)
        self._engine = create_engine(
            self.url, pool_pre_ping=True, connect_args={"application_name": "chaos-harness"}
        )
        with self._engine.begin() as conn:
            conn.execute(
                text("INSERT INTO slot_pool (name, slots, description) VALUES (:n, :s, '')"),
                {"n": workload.POOL, "s": workload.POOL_SLOTS},
            )
        window = timedelta(seconds=self.fault_seconds)
        workload.write_dags(
            self.dags_dir, workload.manifests(self.started_at, window, self.event_log)
        )
        self.event_log.touch()
        self._own_pid_ns = os.readlink("/proc/self/ns/pid")
        self._replicas = [Replica(i, isolated=i == self.replicas - 1) for i in range(self.replicas)]
        self._deck: list[str] = []
        self._armed: dict[tuple[int, str], Fault] = {}
        self._broken_until: float | None = None
        self.sampler = Sampler(self.url, self.started_at)
        self.sampler.start()
        for replica in self._replicas:
            self._launch(replica)
        # The faults start once replica 0 has synced the DAGs (so that they are all there).
        expected = len(list(yaml.safe_load_all((self.dags_dir / "chaos.yaml").read_text())))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with self._engine.connect() as conn:
                if conn.execute(text("SELECT count(*) FROM dag")).scalar_one() >= expected:
                    return
            time.sleep(0.2)
        raise RuntimeError("replica 0 did not sync the DAGs within 120 s")

    def _launch(self, replica: Replica) -> None:
        args = [
            sys.executable,
            "-m",
            "tests.chaos.replica",
            "--database-url",
            self.url,
            "--log-dir",
            str(self.workdir / "logs"),
            *REPLICA_ARGS,
        ]
        if replica.index == 0:  # its arguments, at every start, as a pod's would be
            args += ["--dags", str(self.dags_dir)]
        if replica.isolated:
            args = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", *args]
        env = {**os.environ, "CHAOS_CONTROL": str(self.workdir / f"replica-{replica.index}")}
        log = self.replica_log(replica.index).open("ab")
        replica.process = subprocess.Popen(args, stdout=log, stderr=log, cwd=REPO, env=env)
        log.close()
        replica.pid = self._scheduler_pid(replica.process) if replica.isolated else None
        replica.pid = replica.pid or replica.process.pid
        replica.down_until = None

    @staticmethod
    def _scheduler_pid(unshare: subprocess.Popen[bytes]) -> int | None:
        """The forked child of `unshare --fork` (pid 1 of its namespace), as we see it."""
        children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                found = children.read_text().split()
                if found:
                    return int(found[0])
            if unshare.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def _handles_sigterm(self, replica: Replica) -> bool:
        """Has the replica installed its SIGTERM handler yet? (A Python process still
        importing is ended by SIGTERM's default action: nothing it could hand over yet.)"""
        try:
            status = Path(f"/proc/{replica.pid}/status").read_text()
        except OSError:
            return False
        caught = [ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")]
        return bool(caught) and bool(int(caught[0], 16) & (1 << (signal.SIGTERM - 1)))

    def _signal(self, replica: Replica, sig: signal.Signals) -> None:
        assert replica.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(replica.pid, sig)

    # -- faults -----------------------------------------------------------------------

    def inject_faults(self) -> None:
        rng = random.Random(self.seed)
        end = time.monotonic() + self.fault_seconds
        next_fault = time.monotonic() + rng.uniform(3, 5)
        while time.monotonic() < end:
            self._tend(time.monotonic())
            if time.monotonic() >= next_fault:
                self._one_fault(rng)
                next_fault = time.monotonic() + rng.uniform(3, 6)
            time.sleep(0.1)
        # Undo every lasting fault before settling.
        for (index, suffix), fault in list(self._armed.items()):
            if self._disarm(self._replicas[index], suffix):
                fault.detail = "never fired (disarmed when the faults stopped)"
        self._tend(time.monotonic())
        for replica in self._replicas:
            while replica.terminated_at is not None:
                self._restarted(replica, time.monotonic())
                time.sleep(0.1)
            if replica.stopped_until is not None:
                self._cont(replica)
            if replica.skewed_until is not None:
                self._unskew(replica)
            if replica.down_until is not None:
                self._launch(replica)
        if self._broken_until is not None:
            self._restore_spec()
        self.faults_ended_at = datetime.now(UTC)

    def _tend(self, now: float) -> None:
        for replica in self._replicas:
            if replica.stopped_until is not None and now >= replica.stopped_until:
                self._cont(replica)
            if replica.skewed_until is not None and now >= replica.skewed_until:
                self._unskew(replica)
            if replica.down_until is not None and now >= replica.down_until:
                replica.restarts += 1
                self._launch(replica)
            if replica.terminated_at is not None:
                self._restarted(replica, now)
            elif replica.process is not None and replica.down_until is None:
                code = replica.process.poll()
                if code is not None:
                    self._exited(replica, code, now, "while faults ran")
            for suffix in ("raise-at-start",):
                fault = self._armed.get((replica.index, suffix))
                if fault is not None and not self.control(replica, suffix).exists():
                    del self._armed[(replica.index, suffix)]
                    fault.detail = f"fired at {self._t():.1f}s"
        if self._broken_until is not None and now >= self._broken_until:
            self._restore_spec()

    def _restarted(self, replica: Replica, now: float) -> None:
        """A graceful restart: started again once it exited (0, within 20 s, or recorded)."""
        assert replica.process is not None
        assert replica.terminated_at is not None
        code = replica.process.poll()
        if code is None and now - replica.terminated_at <= 20:
            return
        if code is None:
            self._signal(replica, signal.SIGKILL)
            replica.process.wait()
            self.exits.append(f"replica {replica.index} did not stop within 20 s of SIGTERM")
        elif code != 0:
            self.exits.append(f"replica {replica.index} exited with {code} on SIGTERM")
        replica.terminated_at = None
        replica.restarts += 1
        self._launch(replica)

    def _exited(self, replica: Replica, code: int, now: float, when: str) -> None:
        """A replica's process ended: by an armed fault, or by itself (a violation)."""
        died = self.control(replica, "died-at-start")
        fault = self._armed.pop((replica.index, "die-at-start"), None)
        if died.exists():
            record = json.loads(died.read_text())
            died.unlink()
            if fault is not None:
                fault.detail = (
                    f"fired at {self._t():.1f}s: claimed {len(record['claimed'])} tries, "
                    f"started {len(record['started'])}, exit {code}"
                )
            replica.down_until = now + 1 + (replica.index % 3)
            return
        self.exits.append(f"replica {replica.index} exited with {code} {when} at {self._t():.1f}s")
        replica.down_until = now + 1

    def _one_fault(self, rng: random.Random) -> None:
        if not self._deck:
            self._deck = list(FAULT_KINDS)
            rng.shuffle(self._deck)
        kind = self._deck.pop()
        up = [
            r
            for r in self._replicas
            if r.down_until is None and r.stopped_until is None and r.terminated_at is None
        ]
        stops = (
            "kill_replica",
            "pause_replica",
            "long_pause_replica",
            "die_between_claim_and_start",
        )
        if kind in stops and len(up) < 2:
            kind = "kill_task"  # always leave one replica running
        handler = getattr(self, f"_fault_{kind}")
        fault = handler(rng, up)
        if fault is not None:
            self.faults.append(fault)

    def _fault_kill_replica(self, rng: random.Random, up: list[Replica]) -> Fault:
        replica = rng.choice(up)
        assert replica.process is not None
        self._signal(replica, signal.SIGKILL)
        replica.process.wait()
        replica.down_until = time.monotonic() + rng.uniform(2, 5)
        return Fault(self._t(), "kill_replica", self._name(replica))

    def _fault_pause_replica(self, rng: random.Random, up: list[Replica]) -> Fault:
        replica = rng.choice(up)
        self._signal(replica, signal.SIGSTOP)
        seconds = rng.uniform(7, 10)  # > dead-after 5s
        replica.stopped_until = time.monotonic() + seconds
        return Fault(self._t(), "pause_replica", self._name(replica), f"{seconds:.1f}s")

    def _fault_long_pause_replica(self, rng: random.Random, up: list[Replica]) -> Fault:
        replica = rng.choice(up)
        self._signal(replica, signal.SIGSTOP)
        seconds = rng.uniform(20, 25)
        replica.stopped_until = time.monotonic() + seconds
        return Fault(self._t(), "long_pause_replica", self._name(replica), f"{seconds:.1f}s")

    def _fault_postgres_restart(self, rng: random.Random, up: list[Replica]) -> Fault:
        self._restart_postgres()
        return Fault(self._t(), "postgres_restart", "postgres")

    def _fault_kill_task(self, rng: random.Random, up: list[Replica]) -> Fault | None:
        found = self._running_task(rng)
        if found is None:
            return None
        pid, what = found
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return Fault(self._t(), "kill_task", f"pid {pid}", what)

    def _fault_die_between_claim_and_start(self, rng: random.Random, up: list[Replica]) -> Fault:
        return self._arm(rng.choice(up), "die-at-start", "die_between_claim_and_start")

    def _fault_executor_raises_on_start(self, rng: random.Random, up: list[Replica]) -> Fault:
        return self._arm(rng.choice(up), "raise-at-start", "executor_raises_on_start")

    def _arm(self, replica: Replica, suffix: str, kind: str) -> Fault:
        fault = Fault(self._t(), kind, self._name(replica), "armed")
        if (replica.index, suffix) in self._armed:
            fault.detail = "already armed"
            return fault
        self.control(replica, suffix).touch()
        self._armed[(replica.index, suffix)] = fault
        return fault

    def _disarm(self, replica: Replica, suffix: str) -> bool:
        self._armed.pop((replica.index, suffix), None)
        try:
            self.control(replica, suffix).unlink()
        except FileNotFoundError:
            return False
        return True

    def _fault_terminate_backend(self, rng: random.Random, up: list[Replica]) -> Fault | None:
        """A replica's connection killed, mid-transaction if one is found within 2 s."""
        deadline = time.monotonic() + 2
        rows: list[Any] = []
        try:
            with self._engine.connect() as conn:
                while True:
                    rows = conn.execute(_BACKENDS).all()
                    busy = [r for r in rows if r.xact_start is not None]
                    if busy or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                chosen = rng.choice(busy or rows) if rows else None
                if chosen is None:
                    return None
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": chosen.pid})
        except Exception as exc:
            return Fault(self._t(), "terminate_backend", "none", f"failed: {exc}")
        where = "in a transaction" if chosen.xact_start is not None else "idle"
        query = " ".join(str(chosen.query).split())[:60]
        return Fault(self._t(), "terminate_backend", f"backend {chosen.pid}", f"{where}: {query}")

    def _fault_skew_clock(self, rng: random.Random, up: list[Replica]) -> Fault | None:
        candidates = [r for r in self._replicas if r.skewed_until is None]
        if not candidates:
            return None
        replica = rng.choice(candidates)
        skew = rng.choice((SKEW_SECONDS, -SKEW_SECONDS))
        seconds = rng.uniform(15, 25)
        self.control(replica, "skew").write_text(f"{skew:g}")
        replica.skewed_until = time.monotonic() + seconds
        return Fault(self._t(), "skew_clock", self._name(replica), f"{skew:+g}s for {seconds:.0f}s")

    def _unskew(self, replica: Replica) -> None:
        self.control(replica, "skew").unlink(missing_ok=True)
        replica.skewed_until = None

    def _fault_clear_tasks(self, rng: random.Random, up: list[Replica]) -> Fault | None:
        """`sluice tasks clear` of a task with its downstream, as a user reruns one: a task
        running now, if one is found (Airflow's RESTARTING: stopped, then run again), else
        any task of any run (an ended run is queued again)."""
        found = self._running_task(rng)
        with Session(self._engine) as session:
            if found is not None:
                _, what = found
                dag, rest = what.split("/", 1)
                task = rest.split(" try ")[0]
                run = session.execute(
                    select(DagRun)
                    .join(TaskInstance, TaskInstance.dag_run_id == DagRun.id)
                    .where(
                        TaskInstance.dag_id == dag,
                        TaskInstance.task_id == task,
                        TaskInstance.state == "running",
                    )
                    .limit(1)
                ).scalar_one_or_none()
            else:
                run = None
            if run is None:
                runs = (
                    session.execute(select(DagRun).where(DagRun.dag_id != workload.FRAGILE))
                    .scalars()
                    .all()
                )
                if not runs:
                    return None
                run = rng.choice(list(runs))
                task = rng.choice(
                    session.execute(
                        select(TaskInstance.task_id).where(TaskInstance.dag_run_id == run.id)
                    )
                    .scalars()
                    .all()
                )
            what = f"{run.dag_id}/{run.run_id}/{task}"
            try:
                outcome = clearing.clear(
                    session, SpecCache(), run, [task], downstream=True,
                    reason="cleared by the chaos run", now=datetime.now(UTC),
                )  # fmt: skip
                session.commit()
            except Exception as exc:
                return Fault(self._t(), "clear_tasks", what, f"failed: {exc}")
        was = ", ".join(f"{c.task_id} {c.was}" for c in outcome.cleared)
        return Fault(self._t(), "clear_tasks", what, f"{was}; run {outcome.run_state}")

    def _fault_break_spec(self, rng: random.Random, up: list[Replica]) -> Fault | None:
        if self._broken_until is not None:
            return None
        with self._engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE dag_version SET spec_schema_version = 999 WHERE id ="
                    " (SELECT current_version_id FROM dag WHERE dag_id = :d)"
                ),
                {"d": workload.FRAGILE},
            )
        seconds = rng.uniform(10, 15)
        self._broken_until = time.monotonic() + seconds
        restarted = ""
        # A cold cache must read the broken spec; one replica keeps running. Only a replica
        # that handles SIGTERM by now (not one still starting) is restarted gracefully.
        ready = [r for r in up if self._handles_sigterm(r)]
        if len(up) >= 2 and ready:
            replica = rng.choice(ready)
            self._signal(replica, signal.SIGTERM)
            replica.terminated_at = time.monotonic()
            restarted = f"; {self._name(replica)} restarted (SIGTERM)"
        return Fault(self._t(), "break_spec", workload.FRAGILE, f"for {seconds:.0f}s{restarted}")

    def _restore_spec(self) -> None:
        """The row back as it was, then the manifest applied again (clears the broken mark)."""
        from sluice.spec.upgrades import SPEC_SCHEMA_VERSION

        docs = yaml.safe_load_all((self.dags_dir / "chaos.yaml").read_text())
        (doc,) = [d for d in docs if d["metadata"]["name"] == workload.FRAGILE]
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    text(
                        "UPDATE dag_version SET spec_schema_version = :v"
                        " WHERE dag_id = :d AND spec_schema_version = 999"
                    ),
                    {"d": workload.FRAGILE, "v": SPEC_SCHEMA_VERSION},
                )
            from sqlalchemy.orm import Session

            with Session(self._engine) as session:
                sync_dag(session, parse_dag_manifest(doc), datetime.now(UTC))
                session.commit()
        except Exception:
            return  # Postgres restarting: the next tend tries again
        self._broken_until = None

    def _cont(self, replica: Replica) -> None:
        self._signal(replica, signal.SIGCONT)
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

    def _running_task(self, rng: random.Random) -> tuple[int, str] | None:
        """A task process that started less than a second ago: (pid as we see it, what)."""
        started: dict[tuple[int, str], dict[str, Any]] = {}
        for line in self.event_log.read_text().splitlines()[-400:]:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            key = (event["pid"], event.get("ns", self._own_pid_ns))
            if event["event"] == "end":
                started.pop(key, None)
            else:
                started[key] = event
        fresh = [(k, e) for k, e in started.items() if time.time() - e["t"] < 1.0]
        rng.shuffle(fresh)
        for (pid, ns), event in fresh:
            ours = self._our_pid(pid, ns)
            if ours is not None:
                return ours, f"{event['dag']}/{event['task']} try {event['try']}"
        return None

    def _our_pid(self, pid: int, ns: str) -> int | None:
        """The pid, in our namespace, of the task that logged `pid` in namespace `ns`;
        only a process of this run's workload (its environment names our event log)."""
        if ns == self._own_pid_ns:
            candidates = [pid]
        else:
            candidates = []
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "pid") != ns:
                        continue
                    status = (entry / "status").read_text()
                    nspid = [ln for ln in status.splitlines() if ln.startswith("NSpid:")]
                    if nspid and nspid[0].split()[-1] == str(pid):
                        candidates.append(int(entry.name))
        marker = f"CHAOS_LOG={self.event_log}".encode()
        for candidate in candidates:
            with contextlib.suppress(OSError):
                if marker in Path(f"/proc/{candidate}/environ").read_bytes().split(b"\0"):
                    return candidate
        return None

    def _name(self, replica: Replica) -> str:
        return f"replica {replica.index}" + (" (own PID namespace)" if replica.isolated else "")

    def _t(self) -> float:
        return (datetime.now(UTC) - self.started_at).total_seconds()

    # -- settling ---------------------------------------------------------------------

    def settle(self) -> bool:
        """Wait until every run is terminal (True) or the bound passes (False).

        A replica that exits meanwhile is recorded (it was not told to) and
        started again, so that the run can still settle.
        """
        deadline = time.monotonic() + self.settle_seconds
        while time.monotonic() < deadline:
            now = time.monotonic()
            for replica in self._replicas:
                if replica.down_until is not None and now >= replica.down_until:
                    self._launch(replica)
                elif replica.process is not None and replica.down_until is None:
                    code = replica.process.poll()
                    if code is not None:
                        self._exited(replica, code, now, "while the run settled")
            try:
                with self._engine.connect() as conn:
                    active = conn.execute(
                        text("SELECT count(*) FROM dag_run WHERE state IN ('queued', 'running')")
                    ).scalar_one()
                    due = conn.execute(
                        text("SELECT count(*) FROM dag WHERE next_run_after <= now()")
                    ).scalar_one()
            except Exception:
                active = due = -1
            if active == 0 and due == 0:
                self.settled_at = datetime.now(UTC)
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        """SIGTERM every replica; one that does not exit 0 within 20 s is recorded.

        A replica still starting (no SIGTERM handler yet) gets up to 60 s to get there."""
        if self.sampler is not None:
            self.sampler.stop()
        running = []
        for replica in getattr(self, "_replicas", []):
            if replica.process is None or replica.process.poll() is not None:
                continue
            if replica.stopped_until is not None:
                self._signal(replica, signal.SIGCONT)
            deadline = time.monotonic() + 60
            while not self._handles_sigterm(replica) and time.monotonic() < deadline:
                if replica.process.poll() is not None:
                    break
                time.sleep(0.1)
            self._signal(replica, signal.SIGTERM)
            running.append(replica)
        for replica in running:
            assert replica.process is not None
            try:
                code = replica.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._signal(replica, signal.SIGKILL)
                replica.process.wait()
                self.exits.append(f"replica {replica.index} did not stop within 20 s of SIGTERM")
                continue
            if code != 0:
                self.exits.append(f"replica {replica.index} exited with {code} on SIGTERM")

    def close(self) -> None:
        if getattr(self, "_engine", None) is not None:
            self._engine.dispose()
        if self.postgres is not None:
            self.postgres.stop()


def _can_unshare() -> None:
    """The isolated replica needs a PID namespace of its own (root, or a user namespace)."""
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise SystemExit(
            "the chaos harness runs one replica in a PID namespace of its own, and "
            f"`unshare --pid --fork --mount-proc` fails here: {probe.stderr.strip()} "
            "(run it as root)"
        )


_BACKENDS = text(
    """
    SELECT pid, xact_start, state, query FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND pid <> pg_backend_pid() AND application_name NOT LIKE 'chaos-%'
    """
)
