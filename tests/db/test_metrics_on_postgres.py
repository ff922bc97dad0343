"""Metrics and probes of a real loop on real Postgres: what moves as the loop ticks, what
the sampler reads, and `/readyz` turning 503 once ticks stop (on an injected clock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import SlotPool
from sluice.metrics.families import PHASES
from sluice.metrics.health import LoopHealth
from sluice.metrics.sampler import Sampler
from sluice.metrics.server import MetricsServer
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop
from sluice.status import store
from tests.hosting import free_port
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)

ROOT = Path(__file__).resolve().parents[2]
SLUICE = Path(sys.executable).parent / "sluice"


class FakeMonotonic:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def hourly(sessions: sessionmaker[Session], clock: FakeClock) -> None:
    register(
        sessions,
        manifest("metered", chain("a", "b"), schedule="@hourly", startDate="2026-11-30T23:00:00Z"),
        clock.now,
    )


def test_ticks_move_the_metrics_and_readiness_ends_when_they_stop(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock(T0 + timedelta(minutes=30))
    hourly(sessions, clock)
    monotonic = FakeMonotonic()
    health = LoopHealth(monotonic)
    loop = SchedulerLoop(
        sessions,
        ScriptedExecutor(),
        SchedulerConfig(),
        clock=clock,
        sleep=clock.sleep,
        health=health,
    )
    phases = {
        phase: value("sluice_loop_phase_duration_seconds_count", phase=phase) for phase in PHASES
    }
    ticks_before = value("sluice_loop_tick_duration_seconds_count")
    sections = value("sluice_critical_section_duration_seconds_count")
    created = value("sluice_runs_created_total")

    with MetricsServer(health, host="127.0.0.1", port=0, stale_after=60) as server:
        assert get(f"{server.url}/readyz") == (503, "the loop has not ticked yet\n")
        assert get(f"{server.url}/healthz")[0] == 200

        ticks = run_until_idle(loop)  # the run is created, a and b run, the run succeeds
        assert ticks >= 3
        assert value("sluice_loop_tick_duration_seconds_count") - ticks_before == ticks
        for phase in PHASES:
            moved = value("sluice_loop_phase_duration_seconds_count", phase=phase) - phases[phase]
            # Phase 1 runs only when something may have changed; the others every tick.
            assert 1 <= moved <= ticks if phase == "runs" else moved == ticks, phase
        assert value("sluice_critical_section_duration_seconds_count") - sections == ticks
        assert value("sluice_runs_created_total") - created == 1
        assert get(f"{server.url}/readyz") == (200, "the loop's last tick ended 0 s ago\n")
        status, body = get(f"{server.url}/metrics")
        assert status == 200
        assert 'sluice_loop_phase_duration_seconds_count{phase="examine"}' in body
        assert "sluice_runs_created_total" in body

        # The loop stalls: no tick ends while time goes on.
        monotonic.now += 61
        assert get(f"{server.url}/readyz") == (503, "the loop's last tick ended 61 s ago\n")
        assert get(f"{server.url}/healthz")[0] == 200  # slow is not stuck
        monotonic.now += 4 * 60
        status, reason = get(f"{server.url}/healthz")
        assert (status, reason) == (
            503,
            "the loop ended its last tick 301 s ago (limit 300 s): stuck\n",
        )

        # It ticks again: ready and live again.
        loop.tick()
        assert get(f"{server.url}/readyz")[0] == 200
        assert get(f"{server.url}/healthz")[0] == 200


def test_a_loop_that_stopped_running_is_not_ready(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock(T0 + timedelta(minutes=30))
    hourly(sessions, clock)
    health = LoopHealth(FakeMonotonic())
    loop = SchedulerLoop(
        sessions,
        ScriptedExecutor(),
        SchedulerConfig(),
        clock=clock,
        sleep=clock.sleep,
        health=health,
    )
    ticks = iter(range(3))
    with MetricsServer(health, host="127.0.0.1", port=0, stale_after=60) as server:
        loop.run(lambda: next(ticks, None) is None)  # three ticks, then asked to stop
        assert health.ticks.last_ended is not None
        assert get(f"{server.url}/readyz") == (503, "the loop has stopped\n")
        assert get(f"{server.url}/healthz") == (503, "the loop has stopped\n")


def test_the_sampler_reads_states_pools_and_the_status_outbox(
    sessions: sessionmaker[Session],
) -> None:
    clock = FakeClock()
    with sessions() as session:
        session.add(SlotPool(name="tiny", slots=1))
        store.enable(session)  # the triggers fill the status outbox, as under a publisher
        session.commit()
    tasks = [{"name": "a", "pool": "tiny"}, {"name": "b", "pool": "tiny"}]
    register(sessions, manifest("narrow", tasks, schedule=None), clock.now)
    trigger(sessions, "narrow", clock.now)
    executor = ScriptedExecutor()
    executor.hold.update({"a", "b"})
    loop = make_loop(sessions, executor, clock)
    loop.tick()  # the run starts, a and b are scheduled, one of them takes tiny's slot
    loop.tick()
    assert len(executor.running) == 1

    sample = Sampler(sessions).sample()
    assert sample.task_instances == {"scheduled": 1, "queued": 0, "running": 1}
    assert sample.open_slots == {"default": 128, "tiny": 0}
    assert sample.starving == 1
    assert sample.outbox_rows > 0
    assert value("sluice_task_instances", state="running") == 1
    assert value("sluice_pool_open_slots", pool="tiny") == 0
    assert value("sluice_tasks_starving") == 1
    assert value("sluice_status_outbox_rows") == sample.outbox_rows

    with sessions() as session:
        session.execute(text("UPDATE status_outbox SET created_at = created_at - interval '90 s'"))
        session.commit()
    assert Sampler(sessions).sample().outbox_oldest_seconds >= 90
    assert value("sluice_status_outbox_oldest_age_seconds") >= 90


def _until(what: str, check: object, deadline: float = 60.0) -> None:
    """Poll `check()` until true (a generous deadline for a loaded machine, not a timing)."""
    assert callable(check)
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"still waiting for {what}"
        time.sleep(0.2)


def test_sluice_scheduler_serves_the_probes_and_metrics(db_url: str, tmp_path: Path) -> None:
    """The command wires it together: the loop's ticks, the sampler, the three paths."""
    (tmp_path / "metered.yaml").write_text(
        "apiVersion: sluice.io/v1alpha1\nkind: DAG\nmetadata: {name: metered}\n"
        "spec: {schedule: null, defaults: {image: busybox:1.36}, tasks: [{name: a}]}\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_DATABASE_URL"}
    proc = subprocess.Popen(
        [
            *(str(SLUICE), "scheduler", "--database-url", db_url, "--executor", "noop"),
            *("--dags", str(tmp_path), "--metrics-host", "127.0.0.1"),
            *("--metrics-port", str(port), "--log-dir", str(tmp_path / "logs")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def answers(path: str, status: int) -> bool:
            try:
                return get(url + path)[0] == status
            except OSError:
                return False  # not listening yet

        _until("/readyz 200", lambda: answers("/readyz", 200))
        assert get(url + "/healthz")[0] == 200
        _until(
            "the sampler's first sample",
            lambda: 'sluice_pool_open_slots{pool="default"} 128.0' in get(url + "/metrics")[1],
        )
        body = get(url + "/metrics")[1]
        assert "sluice_loop_tick_duration_seconds_count" in body
        assert 'sluice_task_instances{state="running"}' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "metrics and probes listening" in stderr
