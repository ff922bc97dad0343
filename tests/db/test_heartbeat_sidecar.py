"""`sluice heartbeat` against the real task API and Postgres: it keeps a running try
alive, and stops the pod's work once the try is no longer the running one.

The stop action is never the real one here: `kill(-1)` would signal every
process of the user running the tests. An autouse guard records it instead.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from sluice.api import protocol
from sluice.api.server import TaskApi
from sluice.api.sidecar import HeartbeatLoop
from sluice.api.tokens import TrySigner
from sluice.cli import app
from tests.db.test_task_api import heartbeat_at, running_tasks
from tests.support import record_kill_minus_one

KEY = b"sidecar-test-key-0123456789abcdef012345"


@pytest.fixture(autouse=True)
def kill_minus_one(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    return record_kill_minus_one(monkeypatch)


@pytest.fixture
def signer() -> TrySigner:
    return TrySigner([KEY])


@pytest.fixture
def api(engine: Engine, signer: TrySigner) -> Iterator[TaskApi]:
    with TaskApi(engine, signer, "127.0.0.1", 0, flush_interval=0.02) as server:
        yield server


def eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def finish(sessions: sessionmaker[Session], ti: int) -> None:
    with sessions() as session:
        session.execute(text("UPDATE task_instance SET state = 'success' WHERE id = :i"), {"i": ti})
        session.commit()


def test_the_loop_heartbeats_then_stops_the_work_when_fenced(
    api: TaskApi, signer: TrySigner, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    stopped: list[str] = []
    loop = HeartbeatLoop(
        api.url, ti, 1, signer.issue(ti, 1, 600), stop_work=stopped.append, interval=0.05
    )
    runner = threading.Thread(target=loop.run)
    runner.start()
    try:
        eventually(lambda: loop.accepted >= 3)
        first = heartbeat_at(sessions, ti)
        assert first is not None
        eventually(lambda: (heartbeat_at(sessions, ti) or first) > first)
        assert stopped == []
        finish(sessions, ti)
        eventually(lambda: bool(stopped))
        assert stopped == [
            f"try 1 of task instance {ti} is not running (the task instance is success at try 1)"
        ]
        time.sleep(0.2)
        assert runner.is_alive()  # idles rather than exits
    finally:
        loop.stop()
        runner.join(5)
    assert not runner.is_alive()


def _sigterm_when(check: Callable[[], bool]) -> threading.Thread:
    """SIGTERM this process once `check()` holds (the command under test handles it)."""
    pid = os.getpid()

    def wait_then_signal() -> None:
        deadline = time.monotonic() + 20
        while not check() and time.monotonic() < deadline:
            time.sleep(0.02)
        if callable(signal.getsignal(signal.SIGTERM)):  # the command's handler, not pytest's end
            os.kill(pid, signal.SIGTERM)

    thread = threading.Thread(target=wait_then_signal, daemon=True)
    thread.start()
    return thread


def test_sluice_heartbeat_stops_the_work_on_409_and_exits_0_on_sigterm(
    api: TaskApi,
    signer: TrySigner,
    sessions: sessionmaker[Session],
    kill_minus_one: list[tuple[int, int]],
    tmp_path: Path,
) -> None:
    (ti,) = running_tasks(sessions, 1)
    token_file = tmp_path / "token"
    token_file.write_text(signer.issue(ti, 1, 600) + "\n")
    env = {protocol.URL_ENV: api.url, protocol.TI_ID_ENV: str(ti), protocol.TRY_NUMBER_ENV: "1"}

    def beat_then_finish() -> bool:
        if heartbeat_at(sessions, ti) is None:
            return False
        finish(sessions, ti)
        return True

    finisher = threading.Thread(target=lambda: eventually(beat_then_finish), daemon=True)
    finisher.start()
    killer = _sigterm_when(lambda: bool(kill_minus_one))
    result = CliRunner().invoke(
        app,
        ["heartbeat", "--token-file", str(token_file), "--interval", "0.05"],
        env=env,
        catch_exceptions=False,
    )
    killer.join(5)
    assert result.exit_code == 0, result.output
    assert kill_minus_one == [(-1, signal.SIGTERM)]
    assert "stopping the pod's work" in result.output


def test_sluice_heartbeat_reads_the_token_from_the_environment(
    api: TaskApi, signer: TrySigner, sessions: sessionmaker[Session]
) -> None:
    (ti,) = running_tasks(sessions, 1)
    env = {
        protocol.URL_ENV: api.url,
        protocol.TI_ID_ENV: str(ti),
        protocol.TRY_NUMBER_ENV: "1",
        protocol.TOKEN_ENV: signer.issue(ti, 1, 600),
    }
    killer = _sigterm_when(lambda: heartbeat_at(sessions, ti) is not None)
    result = CliRunner().invoke(app, ["heartbeat", "--interval", "0.05"], env=env)
    killer.join(5)
    assert result.exit_code == 0, result.output
    assert heartbeat_at(sessions, ti) is not None
