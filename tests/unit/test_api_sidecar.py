"""The heartbeat sidecar's decisions, with scripted answers (the real server: tests/db)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sluice.api import protocol, sidecar
from sluice.api.sidecar import HeartbeatLoop, Next, Reply, next_step
from sluice.cli import app
from tests.support import record_kill_minus_one

OK = Reply(204)
NOT_RUNNING = Reply(409, {"reason": "not_running", "state": "success", "try_number": 2})


@pytest.fixture(autouse=True)
def kill_minus_one(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    return record_kill_minus_one(monkeypatch)


class Script:
    """Answers posts from a list; stops the loop when the list runs out."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.replies = list(replies)
        self.tokens: list[str] = []
        self.urls: list[str] = []
        self.waits: list[float] = []
        self.timeouts: list[float] = []
        self.loop: HeartbeatLoop | None = None

    def post(self, url: str, token: str, timeout: float) -> Reply:
        self.timeouts.append(timeout)
        self.urls.append(url)
        self.tokens.append(token)
        reply = self.replies.pop(0)
        if not self.replies and self.loop is not None:
            self.loop.stop()
        return reply

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)


def scripted(
    replies: Sequence[Reply], stops: list[str], **kwargs: float
) -> tuple[HeartbeatLoop, Script]:
    script = Script(replies)
    loop = HeartbeatLoop(
        "http://task-api:8080/",
        7,
        2,
        "token-1",
        stop_work=stops.append,
        post=script.post,
        wait=script.wait,
        **{"first_after": 0.0, **kwargs},
    )
    script.loop = loop
    return loop, script


@pytest.mark.parametrize(
    ("reply", "step"),
    [
        (Reply(204), Next.CONTINUE),
        (Reply(200), Next.CONTINUE),
        (Reply(409, {"reason": "not_running"}), Next.STOP_WORK),
        (Reply(404, {"reason": "not_found"}), Next.STOP_WORK),
        (Reply(None, error="ConnectionRefusedError"), Next.RETRY),
        (Reply(500), Next.RETRY),
        (Reply(503, {"reason": "unavailable"}), Next.RETRY),
        (Reply(429), Next.RETRY),
        (Reply(401, {"reason": "unauthorized"}), Next.COMPLAIN),
        (Reply(403, {"reason": "forbidden"}), Next.COMPLAIN),
        # Not the task API's refusal (a proxy, a wrong URL): never a reason to kill the task.
        (Reply(404), Next.COMPLAIN),
        (Reply(409, {"reason": "conflict"}), Next.COMPLAIN),
        (Reply(400), Next.COMPLAIN),
    ],
)
def test_what_each_answer_means(reply: Reply, step: Next) -> None:
    assert next_step(reply) is step


def test_it_posts_to_its_try_every_interval() -> None:
    stops: list[str] = []
    loop, script = scripted([OK, OK, OK], stops, interval=10.0)
    loop.run()
    assert script.urls == ["http://task-api:8080/v1/tries/7/2/heartbeat"] * 3
    assert loop.accepted == 3
    assert all(9.0 < w <= 10.0 for w in script.waits)
    assert stops == []


def test_connection_errors_and_5xx_back_off_and_never_end_it() -> None:
    stops: list[str] = []
    failures = [Reply(None, error="refused"), Reply(503), Reply(502), Reply(500), Reply(500)]
    replies = [*failures, Reply(500), OK, Reply(None, error="reset"), OK]
    loop, script = scripted(replies, stops, interval=5.0, first_retry=1.0)
    loop.run()
    retries = script.waits[:6]
    # Doubling from 1 s (jittered down by at most half), capped at the interval.
    for attempt, wait in enumerate(retries):
        ceiling = min(5.0, 2.0**attempt)
        assert ceiling / 2 <= wait <= ceiling
    # After a success the backoff starts again from the first retry.
    assert 0.5 <= script.waits[7] <= 1.0
    assert loop.accepted == 2
    assert stops == []


def test_unauthorized_and_forbidden_keep_trying_at_the_interval() -> None:
    stops: list[str] = []
    loop, script = scripted(
        [
            Reply(401, {"reason": "unauthorized"}),
            Reply(403, {"reason": "forbidden"}),
            Reply(404),
            OK,
        ],
        stops,
        interval=10.0,
    )
    loop.run()
    assert len(script.urls) == 4
    assert stops == []
    assert loop.accepted == 1


def test_a_refreshed_token_is_used_from_the_next_heartbeat() -> None:
    stops: list[str] = []
    loop, script = scripted([OK, Reply(204, refreshed_token="token-2"), OK, OK], stops)
    loop.run()
    assert script.tokens == ["token-1", "token-1", "token-2", "token-2"]
    assert loop.token == "token-2"


def test_not_running_stops_the_work_once_then_idles_until_stopped() -> None:
    stops: list[str] = []
    script = Script([OK, NOT_RUNNING, OK])
    loop = HeartbeatLoop(
        "http://task-api", 7, 2, "t", stop_work=stops.append, post=script.post, wait=script.wait
    )
    runner = threading.Thread(target=loop.run)
    runner.start()
    runner.join(0.5)
    assert runner.is_alive()  # idling, not exited: a native sidecar would be restarted
    assert len(script.urls) == 2  # and no more heartbeats
    assert stops == [
        "try 2 of task instance 7 is not running (the task instance is success at try 2)"
    ]
    loop.stop()
    runner.join(5)
    assert not runner.is_alive()


def test_not_found_stops_the_work() -> None:
    stops: list[str] = []
    loop, _ = scripted([Reply(404, {"reason": "not_found"})], stops)
    loop.run()  # the script stops the loop with its last answer, so the idle wait returns
    assert stops == ["task instance 7 no longer exists"]


def test_stop_work_signals_every_process_it_may(
    kill_minus_one: list[tuple[int, int]],
) -> None:
    sidecar.terminate_pod_processes("try 2 is not running")
    assert kill_minus_one == [(-1, signal.SIGTERM)]


def test_post_heartbeat_reports_no_answer_instead_of_raising() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        reply = sidecar.post_heartbeat(f"http://127.0.0.1:{port}/v1/tries/1/1/heartbeat", "t", 2)
    assert reply.status is None
    assert reply.error is not None
    assert reply.error.startswith("ConnectionRefusedError")


def test_sluice_heartbeat_names_what_is_missing(tmp_path: Path) -> None:
    runner = CliRunner()
    full = {
        protocol.URL_ENV: "http://task-api",
        protocol.TI_ID_ENV: "1",
        protocol.TRY_NUMBER_ENV: "1",
        protocol.TOKEN_ENV: "t",
    }
    for missing in full:
        env: dict[str, str | None] = {**full, missing: None}
        result = runner.invoke(app, ["heartbeat"], env=env)
        assert result.exit_code == 2
        assert missing in result.output
    result = runner.invoke(
        app, ["heartbeat", "--token-file", str(tmp_path / "absent")], env={**full}
    )
    assert result.exit_code == 2
    assert "cannot read --token-file" in result.output
    result = runner.invoke(app, ["heartbeat", "--interval", "0"], env={**full})
    assert result.exit_code == 2
    assert "--interval" in result.output


def test_the_interval_comes_from_the_pod_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The executor sets SLUICE_HEARTBEAT_INTERVAL on the sidecar; once it was ignored and
    # every pod heartbeat at the 10 s default whatever the scheduler was told.
    seen: list[float] = []

    class Loop:
        stopped = True

        def __init__(self, *args: object, interval: float, **kwargs: object) -> None:
            seen.append(interval)

        def run(self) -> None:
            pass

    monkeypatch.setattr(sidecar, "HeartbeatLoop", Loop)
    env = {
        protocol.URL_ENV: "http://task-api",
        protocol.TI_ID_ENV: "1",
        protocol.TRY_NUMBER_ENV: "1",
        protocol.TOKEN_ENV: "t",
        protocol.INTERVAL_ENV: "2.5",
    }
    result = CliRunner().invoke(app, ["heartbeat"], env=env)
    assert result.exit_code == 0, result.output
    assert seen == [2.5]


def test_the_sidecar_starts_without_the_rest_of_the_cli() -> None:
    # It runs in every task pod: SQLAlchemy, the Kubernetes client and the DAG models
    # would triple its memory (its container's limit is 96 MiB), and typer and structlog
    # (with rich, which both load) cost about 0.7 s of CPU to import, in every pod. The
    # HTTP client waits for the first post, which most tries end before.
    code = (
        "import sys\n"
        "sys.argv = ['sluice', 'heartbeat', '--help']\n"
        "from sluice.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'sqlalchemy', 'kubernetes', 'sluice.spec.models', 'kopf', 'typer', 'click',\n"
        "         'structlog', 'rich', 'jwt', 'pydantic', 'urllib.request', 'http.client'}\n"
        "print('heavy:', sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: sluice heartbeat" in out
    assert "heavy: []" in out, out


def test_the_sidecar_logs_one_line_per_event(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `kubectl logs -c sluice-heartbeat` shows: one JSON object per event.
    env = {
        protocol.URL_ENV: "http://task-api",
        protocol.TI_ID_ENV: "7",
        protocol.TRY_NUMBER_ENV: "2",
        protocol.TOKEN_ENV: "t",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def serve(loop: HeartbeatLoop) -> int:
        loop._post = lambda *args: NOT_RUNNING
        loop.first_after = 0.0
        runner = threading.Thread(target=loop.run)
        runner.start()
        while loop.stop_reason is None and runner.is_alive():
            runner.join(0.01)
        loop.stop()  # it idles after stopping the work
        runner.join(5)
        return 0

    monkeypatch.setattr(sidecar, "_serve", serve)
    assert sidecar.main(["--log-json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == [
        "heartbeating",
        "the scheduler no longer runs this try: stopping the pod's work",
        "sending SIGTERM to every process of the pod",
    ]
    assert lines[0]["url"] == "http://task-api/v1/tries/7/2/heartbeat"
    assert lines[0]["level"] == "info"
    assert lines[1]["level"] == "error"
    assert "the task instance is success at try 2" in lines[1]["reason"]
    assert {"timestamp", "interval"} <= set(lines[0])


def test_the_first_heartbeat_comes_one_interval_after_the_start() -> None:
    # The claim that started the try was its first heartbeat: a try shorter than the
    # interval never posts, and a longer one posts once per interval from its start.
    stops: list[str] = []
    loop, script = scripted([OK, OK], stops, interval=10.0, first_after=None)
    loop.run()
    assert script.waits[0] == 10.0
    assert len(script.urls) == 2


def test_a_sidecar_stopped_before_its_first_heartbeat_never_posts() -> None:
    stops: list[str] = []
    script = Script([OK])
    loop = HeartbeatLoop(
        "http://task-api:8080/", 7, 2, "t", stop_work=stops.append, post=script.post
    )
    runner = threading.Thread(target=loop.run)
    runner.start()
    loop.stop()  # SIGTERM: the task ended
    runner.join(5)
    assert not runner.is_alive()
    assert script.urls == []


def test_a_post_waits_for_its_answer_at_most_the_interval() -> None:
    """A replica that hangs while Ready (frozen, SIGSTOPped) holds a heartbeat back for one
    interval, then the post goes again on a new connection, which the Service may send to
    another replica: with the 10 s default timeout and a 2 s interval, two posts in a row
    to the frozen replica were 20 s of silence, a healthy pod killed (the cluster chaos
    run, seed 536402448)."""
    stops: list[str] = []
    loop, script = scripted([Reply(None, error="TimeoutError"), Reply(204)], stops,
                            interval=2.0, timeout=10.0)  # fmt: skip
    loop.run()
    assert script.timeouts == [2.0, 2.0]
    loop, script = scripted([Reply(204)], stops, interval=0.2, timeout=10.0)
    loop.run()
    assert script.timeouts == [1.0]  # never less than a second
    loop, script = scripted([Reply(204)], stops, interval=30.0, timeout=10.0)
    loop.run()
    assert script.timeouts == [10.0]  # and never more than --timeout
