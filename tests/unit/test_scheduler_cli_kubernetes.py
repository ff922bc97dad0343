"""`sluice scheduler --executor kubernetes`: every bad setting exits 2 naming the option
and the fix, before anything connects to a database or a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sluice.cli import app

URL = "postgresql://nobody@127.0.0.1:1/none"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["scheduler", "--database-url", URL, "--executor", "kubernetes", *args],
        env={"SLUICE_TASK_API_KEYS": "", "SLUICE_TASK_API_KEYS_FILE": "", **(env or {})},
    )
    return result.exit_code, result.stderr


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    return path


def test_the_namespace_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_NAMESPACE", raising=False)
    code, err = run()
    assert code == 2
    assert "--executor kubernetes needs --namespace (or SLUICE_NAMESPACE)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pod-start-timeout", "0"], "--pod-start-timeout must be more than 0 seconds"),
        (["--task-image-pull-policy", "Sometimes"], "is not one of Always, IfNotPresent, Never"),
        (["--task-api-url", "api:8793"], "must start with http:// or https://"),
        (
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig /nonexistent/kubeconfig does not exist",
        ),
        (["--heartbeat-kill-threshold", "1"], "--heartbeat-kill-threshold (1.0s) must be longer"),
    ],
)
def test_bad_settings_name_the_option(args: list[str], message: str, kubeconfig: Path) -> None:
    code, err = run("--namespace", "work", "--kubeconfig", str(kubeconfig), *args)
    assert code == 2, err
    assert message in err


def test_a_bad_listen_address_and_missing_keys_are_named(kubeconfig: Path) -> None:
    base = ["--namespace", "work", "--kubeconfig", str(kubeconfig), "--task-api-url", "http://a:1"]
    code, err = run(*base, "--task-api-listen", "nowhere")
    assert code == 2
    assert "--task-api-listen 'nowhere' must be HOST:PORT" in err
    code, err = run(*base)
    assert code == 2
    assert err.startswith("error: --task-api-keys-file: ")
    assert "SLUICE_TASK_API_KEYS" in err
