"""`sluice dags validate`: exit codes and the one-line-per-issue format."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.cli.dags_validate import validate_command
from tests.manifests import BAD, GOOD


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_valid_files_print_nothing_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, "good.yaml", GOOD)
    assert validate_command([good]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "1 valid, 0 invalid" in captured.err


def test_each_issue_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.yaml", GOOD)
    bad = write(tmp_path, "bad.yaml", BAD)
    assert validate_command([good, bad]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{bad}: DAG/bad: spec.tasks[0].dependsOn[0]: dependency 'z' not defined; tasks are: a, b",
        f"{bad}: DAG/bad: spec.tasks[1].retries: must be at least 0, got -1",
    ]


def test_multi_document_file_reports_only_the_bad_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = write(tmp_path, "both.yaml", GOOD + "---\n" + BAD + "---\n[1, 2]\n")
    assert validate_command([both]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{both}: DAG/bad: spec.tasks[") for line in lines[:2])
    assert lines[2].startswith(f"{both}: DAG/?: <document 3>: expected a DAG object")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "<file>: no DAG documents found"),
        ("a: [1\n", "<document 1>: invalid YAML at line 2"),
    ],
)
def test_files_without_a_usable_dag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = write(tmp_path, "x.yaml", text)
    assert validate_command([path]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{path}: DAG/?: {expected}")


def test_missing_file_is_an_error_and_the_others_are_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    good = write(tmp_path, "good.yaml", GOOD)
    assert validate_command([missing, good, tmp_path]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f"{missing}: DAG/?: <file>: file not found",
        f"{tmp_path}: DAG/?: <file>: is a directory; pass the YAML files in it",
    ]
    assert "1 valid, 2 invalid" in captured.err


def test_stdin_is_read_for_a_dash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(BAD))
    assert validate_command([Path("-")]) == 1
    assert capsys.readouterr().out.startswith("-: DAG/bad: ")


def test_the_shipped_examples_pass() -> None:
    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
    assert examples
    assert validate_command(examples) == 0


def test_a_cron_that_never_fires_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    never = write(tmp_path, "never.yaml", GOOD.replace('"@hourly"', '"0 0 30 2 *"'))
    assert validate_command([never]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{never}: DAG/good: spec.schedule: cron expression '0 0 30 2 *' never")
