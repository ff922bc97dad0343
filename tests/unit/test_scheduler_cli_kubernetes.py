"""`sluice scheduler --executor kubernetes`: every bad setting exits 2 naming the option
and the fix, before anything connects to a database or a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sluice.cli import app
from sluice.cli import kubernetes as k8s
from sluice.executors.kubernetes import KubernetesSettings

URL = "postgresql://nobody@127.0.0.1:1/none"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["scheduler", "--database-url", URL, "--executor", "kubernetes", *args],
        env={
            "SLUICE_TASK_API_KEYS": "",
            "SLUICE_TASK_API_KEYS_FILE": "",
            "SLUICE_JOB_NAMESPACE": "",
            **(env or {}),
        },
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
        (["--job-namespace", "Team_A"], "--job-namespace 'Team_A' is not a namespace name"),
        (["--job-ttl", "79"], "--job-ttl must be at least 80 seconds (got 79)"),
        (["--log-store", "ftp://logs"], "--log-store: 'ftp://logs': the scheme is 'ftp'"),
        (["--log-store", "s3://b?endpoint=http://s3:9000&colour=blue"], "'colour'"),
        (
            ["--log-store", "file:///tmp/sluice-logs", "--log-max-bytes", "10"],
            "--log-max-bytes must be at least 1024 (got 10)",
        ),
        (
            ["--job-ttl", "59", "--scheduler-dead-after", "20", "--zombie-check-interval", "1"],
            "--job-ttl must be at least 60 seconds (got 59)",
        ),
        (
            ["--job-ttl", "300", "--scheduler-dead-after", "200"],
            "--job-ttl must be at least 420 seconds (got 300): a replica that adopts a dead"
            " one's finished try reads its outcome from its Job",
        ),
        (
            ["--task-api-url", "http://sluice-task-api:8080"],
            "task pods run in their DAG's namespace, where 'sluice-task-api' does not resolve;"
            " name the Service's namespace (http://sluice-task-api.NAMESPACE.svc:PORT), or pin"
            " every Job with --job-namespace",
        ),
    ],
)
def test_bad_settings_name_the_option(args: list[str], message: str, kubeconfig: Path) -> None:
    code, err = run("--namespace", "work", "--kubeconfig", str(kubeconfig), *args)
    assert code == 2, err
    assert message in err


def test_a_bad_listen_address_and_missing_keys_are_named(kubeconfig: Path) -> None:
    base = [
        *("--namespace", "work", "--kubeconfig", str(kubeconfig)),
        *("--task-api-url", "http://a.work.svc:1"),
    ]
    code, err = run(*base, "--task-api-listen", "nowhere")
    assert code == 2
    assert "--task-api-listen 'nowhere' must be HOST:PORT" in err
    code, err = run(*base)
    assert code == 2
    assert err.startswith("error: --task-api-keys-file: ")
    assert "SLUICE_TASK_API_KEYS" in err


def test_jobs_run_in_each_dags_namespace_unless_job_namespace_pins_them(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: Path
) -> None:
    made: list[KubernetesSettings] = []

    def make_executor(settings: KubernetesSettings, signer: object) -> None:
        made.append(settings)
        raise typer.Exit(3)  # no cluster: what the executor would be made with is enough

    monkeypatch.setattr(k8s, "make_executor", make_executor)
    base = ["--namespace", "work", "--kubeconfig", str(kubeconfig)]
    assert run(*base)[0] == 3
    assert run(*base, "--job-namespace", "jobs")[0] == 3
    assert run(*base, env={"SLUICE_JOB_NAMESPACE": "batch"})[0] == 3
    # A bare Service name is fine when every Job runs in one namespace (the Service's).
    keys = {"SLUICE_TASK_API_KEYS": "k" * 48}
    pinned = ("--job-namespace", "work", "--task-api-url", "http://api:1")
    assert run(*base, *pinned, env=keys)[0] == 3
    assert run(*base, "--task-api-url", "http://[fd00::1]:1", env=keys)[0] == 3
    assert run(*base, "--job-ttl", "86400")[0] == 3
    assert [s.ttl_seconds_after_finished for s in made] == [3600] * 5 + [86400]
    made.pop()
    assert [(s.namespace, s.job_namespace) for s in made] == [
        ("work", None),
        ("work", "jobs"),
        ("work", "batch"),
        ("work", "work"),
        ("work", None),
    ]


def test_a_negative_dagrun_history_limit_is_refused_naming_the_option() -> None:
    code, err = run("--namespace", "sluice", "--dagrun-history-limit", "-1")
    assert code == 2
    said = " ".join(err.replace("│", " ").split())  # rich boxes and wraps the message
    assert "'--dagrun-history-limit'" in said
    assert "greater than or equal to 0" in said
