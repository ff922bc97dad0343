"""`sluice operator`'s kopf settings: bounded watches (kopf issue #585) and JSON logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import kopf
import pytest
import structlog
from typer.testing import CliRunner

from sluice.cli import operator as operator_cli
from sluice.cli.commands import app


def test_watches_are_bounded_by_default() -> None:
    settings = kopf.OperatorSettings()
    # kopf's own defaults: unbounded, the silent hang of kopf issue #585.
    assert settings.watching.server_timeout is None
    assert settings.watching.client_timeout is None
    operator_cli.OperatorTuning().apply(settings)
    assert settings.watching.server_timeout == operator_cli.WATCH_SERVER_TIMEOUT == 300
    assert settings.watching.client_timeout == operator_cli.WATCH_CLIENT_TIMEOUT == 330
    assert settings.watching.connect_timeout == operator_cli.WATCH_CONNECT_TIMEOUT
    assert settings.peering.lifetime == 60


def test_the_server_timeout_is_sent_as_whole_seconds() -> None:
    """kopf writes `str(server_timeout)` into the watch's `timeoutSeconds`; the API server
    parses it as an integer and answers "300.0" with 400 Bad Request, failing every watch
    (a release then stopped acting on new objects in tests/k8s/test_chart_operations.py)."""
    settings = kopf.OperatorSettings()
    operator_cli.OperatorTuning().apply(settings)
    assert str(settings.watching.server_timeout) == "300"


def test_the_flags_reach_kopfs_settings() -> None:
    settings = kopf.OperatorSettings()
    tuning = operator_cli.OperatorTuning(
        peering_lifetime=20, watch_server_timeout=60, watch_client_timeout=75
    )
    assert tuning.problems() == []
    tuning.apply(settings)
    assert (settings.watching.server_timeout, settings.watching.client_timeout) == (60, 75)
    assert settings.peering.lifetime == 20


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--watch-client-timeout", "300"], "must be more than --watch-server-timeout (300)"),
        (["--watch-server-timeout", "0", "--watch-client-timeout", "9"], "at least 1 second"),
        (["--watch-server-timeout", "2.5"], "--watch-server-timeout"),
        (["--peering-lifetime", "2"], "--peering-lifetime must be at least 5 seconds"),
    ],
)
def test_bad_timeouts_are_refused_before_anything_starts(args: list[str], message: str) -> None:
    done = CliRunner().invoke(app, ["operator", "--standalone", *args])
    assert done.exit_code == 2
    assert message in done.stderr


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("root_logging")
def test_log_json_makes_every_record_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    operator_cli.configure_operator_logging("info", json=True)
    logging.getLogger("sluice.handlers.operator").info("DAG %s registered", "etl")
    logging.getLogger("sluice.handlers.operator").debug("not at info")
    structlog.get_logger("sluice.operator").info("resync", nudged=2)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    assert len(records) == 2
    assert records[0]["message"] == "DAG etl registered"
    assert records[0]["severity"] == "info"
    assert records[1]["event"] == "resync"
    assert records[1]["nudged"] == 2


@pytest.mark.usefixtures("root_logging")
def test_text_logs_and_the_level(capsys: pytest.CaptureFixture[str]) -> None:
    operator_cli.configure_operator_logging("warning", json=False)
    logging.getLogger("sluice.handlers.operator").info("quiet")
    logging.getLogger("sluice.handlers.operator").warning("loud")
    err = capsys.readouterr().err
    assert "quiet" not in err
    assert "loud" in err
    with pytest.raises(json.JSONDecodeError):
        json.loads(err.splitlines()[0])


def test_the_operator_and_the_scheduler_share_the_log_options() -> None:
    runner = CliRunner()
    for command in ("operator", "scheduler"):
        help_text = runner.invoke(app, [command, "--help"], terminal_width=200).output
        assert "--log-json" in help_text, command
        assert "--log-level" in help_text, command
