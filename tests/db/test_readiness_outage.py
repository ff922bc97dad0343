"""Readiness through a database outage, on real Postgres: a tick that cannot connect runs
no phase and does not count for readiness; `sluice scheduler`'s `/readyz` turns 503
within the stale window once its own Postgres is stopped, says why, and turns 200 again
when it is back, while `/healthz` stays 200 throughout (ADR 0020)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.embedded import EmbeddedPostgres, start_embedded_postgres
from sluice.db.engine import make_engine, normalize_url, session_factory
from sluice.db.migrate import upgrade
from sluice.metrics.health import LoopHealth
from sluice.scheduler import (
    housekeeping,
    phase_critical,
    phase_examine,
    phase_handover,
    phase_housekeeping,
    phase_runs,
)
from sluice.scheduler.loop import SchedulerLoop
from tests.db.test_metrics_on_postgres import FakeMonotonic, get, value
from tests.hosting import free_port
from tests.support import FakeClock, ScriptedExecutor, chain, manifest, register, trigger

ROOT = Path(__file__).resolve().parents[2]
SLUICE = Path(sys.executable).parent / "sluice"


def test_a_tick_that_cannot_connect_runs_no_phase_and_does_not_count_for_readiness(
    sessions: sessionmaker[Session], engine: Engine
) -> None:
    clock = FakeClock()
    register(sessions, manifest("outage", chain("a", "b")), clock.now)
    trigger(sessions, "outage", clock.now)
    monotonic = FakeMonotonic()
    health = LoopHealth(monotonic)
    executor = ScriptedExecutor()
    loop = SchedulerLoop(sessions, executor, clock=clock, sleep=clock.sleep, health=health)
    assert loop.tick().database_unreached is None
    assert health.readiness(60).ok

    # Postgres is gone: a socket directory with no server in it refuses at once.
    gone = make_engine(f"postgresql://sluice@/sluice?host={tempfile.mkdtemp()}")
    attempts: list[object] = []
    event.listen(gone, "do_connect", lambda *args: attempts.append(args))
    loop.sessions = session_factory(gone)
    errors_before = value("sluice_loop_errors_total", phase="connect")
    try:
        report = loop.tick()
        assert len(attempts) == 1  # the tick's own connection; no phase tried one of its own
        assert report.errors == [report.database_unreached]
        assert re.fullmatch(
            r"connect: \(psycopg2\.OperationalError\) connection to server on socket .* failed:"
            r" No such file or directory",
            report.database_unreached or "",
        ), report.database_unreached
        assert value("sluice_loop_errors_total", phase="connect") == errors_before + 1
        assert not report.busy  # the loop sleeps a tick interval before it tries again
        monotonic.now += 30
        loop.tick()
        verdict = health.readiness(60)
        assert verdict.ok  # the last tick that reached the database ended 30 s ago
        assert verdict.reason.startswith(
            "the loop's last 2 ticks could not use the database (the last that could ended"
            " 30 s ago): connect: (psycopg2.OperationalError) connection to server on socket"
        )
        monotonic.now += 31
        loop.tick()
        assert not health.readiness(60).ok
        assert health.liveness(60).ok
    finally:
        gone.dispose()

    # It is back: the next tick works again, and the run goes on where it was.
    loop.sessions = sessions
    monotonic.now += 1
    report = loop.tick()
    assert report.database_unreached is None
    assert health.readiness(60).reason == "the loop's last tick ended 0 s ago"


def test_a_tick_whose_every_phase_fails_does_not_count_for_readiness(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tick's connection was had, then every transaction failed: no work was done."""
    clock = FakeClock()
    health = LoopHealth(FakeMonotonic())
    loop = SchedulerLoop(
        sessions, ScriptedExecutor(), clock=clock, sleep=clock.sleep, health=health
    )
    loop.tick()

    def broken(session: Session, *args: object, **kwargs: object) -> object:
        raise RuntimeError("database gone mid-tick")

    for module, phase in (
        (phase_runs, "create_and_start_runs"),
        (phase_examine, "examine_running_runs"),
        (phase_critical, "queue_schedulable_task_instances"),
        (phase_handover, "claim_task_starts"),
        (phase_handover, "apply_task_events"),
        (phase_housekeeping, "apply_task_events"),  # the stale sweep's
    ):
        monkeypatch.setattr(module, phase, broken)
    monkeypatch.setattr(housekeeping, "heartbeat_tries", broken)  # executor_events, no reports
    report = loop.tick()
    assert report.errors
    assert not report.database_answered
    assert report.database_unreached == report.errors[0]
    assert health.ticks.unreached == 1
    assert health.ticks.database_error.endswith("database gone mid-tick")


# -- the command, with a Postgres of its own that the test stops and starts -----------------


class StoppablePostgres:
    """An embedded Postgres of this test's own, stopped and started as a whole server."""

    def __init__(self, postgres: EmbeddedPostgres) -> None:
        self.postgres = postgres
        self.url = normalize_url(postgres.url)

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        server = self.postgres._server
        pg_ctl(
            ["-w", "-m", "fast", "stop"],
            pgdata=self.postgres.data_dir,
            user=server.system_user,  # type: ignore[attr-defined]
            timeout=60,
        )

    def start(self) -> None:
        server = self.postgres._server
        server.ensure_postgres_running()  # type: ignore[attr-defined]
        url = normalize_url(server.get_uri("postgres"))  # type: ignore[attr-defined]
        assert url == self.url, "the restarted server listens elsewhere"


@pytest.fixture
def own_postgres() -> Iterator[StoppablePostgres]:
    # Not under pytest's tmp_path, whose long path would not fit a Unix socket's.
    base = Path(tempfile.mkdtemp(prefix="sluice-outage-"))
    postgres = start_embedded_postgres(base / "data", keep_data=False)
    try:
        upgrade(normalize_url(postgres.url))
        yield StoppablePostgres(postgres)
    finally:
        postgres.stop()
        shutil.rmtree(base, ignore_errors=True)


def _poll(what: str, check: Callable[[], bool], deadline: float) -> float:
    """Seconds until `check()` held; fails after `deadline` seconds."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < deadline, f"still waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def test_readyz_turns_503_when_postgres_stops_and_200_when_it_is_back(
    own_postgres: StoppablePostgres, tmp_path: Path
) -> None:
    stale_after = 4.0
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_DATABASE_URL"}
    # A file, not a pipe: every failed tick logs its traceback, and a full pipe would
    # stop the replica's loop in the middle of the outage.
    stderr = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        [
            *(str(SLUICE), "scheduler", "--database-url", own_postgres.url, "--executor", "noop"),
            *("--metrics-host", "127.0.0.1", "--metrics-port", str(port)),
            *("--tick-interval", "0.5", "--health-stale-after", str(stale_after)),
            *("--log-dir", str(tmp_path / "logs")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env=env,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"

    def answers(path: str, status: int) -> bool:
        try:
            return get(url + path)[0] == status
        except OSError:
            return False  # not listening yet

    try:
        _poll("/readyz 200 at start", lambda: answers("/readyz", 200), 60)

        own_postgres.stop()
        unready_after = _poll("/readyz 503", lambda: answers("/readyz", 503), 60)
        status, reason = get(url + "/readyz")
        # Ready until the window after the last tick that reached the database ends (it
        # ended before the stop), and not much after: ticks go on failing at once.
        assert unready_after <= stale_after + 3.0, unready_after
        assert status == 503
        assert re.fullmatch(
            r"the loop's last \d+ ticks could not use the database \(the last that could ended"
            r" \d+ s ago\): connect: \(psycopg2\.OperationalError\) connection to server on"
            r" socket .* failed: No such file or directory\n",
            reason,
        ), reason
        assert get(url + "/healthz")[0] == 200  # a restart would not bring it back
        time.sleep(stale_after)  # an outage longer than the window: still live, still unready
        assert get(url + "/healthz")[0] == 200
        assert get(url + "/readyz")[0] == 503
        assert proc.poll() is None

        own_postgres.start()
        ready_after = _poll("/readyz 200 again", lambda: answers("/readyz", 200), 60)
        assert ready_after <= 10.0, ready_after
        assert re.fullmatch(r"the loop's last tick ended [01] s ago\n", get(url + "/readyz")[1])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stderr.close()
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-5000:]
