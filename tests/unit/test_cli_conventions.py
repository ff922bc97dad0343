"""What every `sluice` command follows: help on every option, one version, completion,
-o yaml beside -o json, and the exit codes of docs/cli.md."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import sluice
from sluice.api import sidecar
from sluice.cli import common
from sluice.cli.commands import app

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "operator" / "sluice" / "cli"


def commands(command: Any = None, path: str = "sluice") -> Iterator[tuple[str, Any]]:
    """Every command as typer builds it (its own click's commands and groups)."""
    command = command or typer.main.get_command(app)
    yield path, command
    if hasattr(command, "commands"):  # a group
        for name, sub in command.commands.items():
            yield from commands(sub, f"{path} {name}")


def test_the_walk_finds_every_command() -> None:
    found = {path for path, _ in commands()}
    assert {"sluice dags runs", "sluice tasks clear", "sluice operator", "sluice db upgrade"} <= (
        found
    )
    assert len(found) >= 20


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{path} {param.name}"
        for path, command in commands()
        for param in command.params
        if not (getattr(param, "help", None) or "").strip()
    ]
    assert missing == []


def test_the_heartbeat_sidecars_own_options_have_help() -> None:
    # `sluice heartbeat` parses its options without typer (it starts in every task pod).
    actions = [a for a in sidecar._parser()._actions if a.option_strings]
    assert len(actions) >= 8
    assert [a.option_strings for a in actions if not (a.help or "").strip()] == []


def test_the_walk_would_find_a_flag_without_help() -> None:
    probe = typer.Typer()

    @probe.command()
    def bare(flag: bool = typer.Option(False, "--flag")) -> None:
        """A command."""

    command = typer.main.get_command(probe)
    assert [p.name for p in command.params if not getattr(p, "help", None)] == ["flag"]


def test_version_is_pyprojects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0
    assert done.stdout == f"sluice {project['version']}\n"
    assert sluice.__version__ == project["version"]
    chart = (ROOT / "charts" / "sluice" / "Chart.yaml").read_text()
    assert f'appVersion: "{project["version"]}"' in chart


def test_completion_completes_commands_and_options() -> None:
    runner = CliRunner()

    def complete(words: str) -> list[str]:
        done = runner.invoke(
            app,
            [],
            prog_name="sluice",
            env={
                "_SLUICE_COMPLETE": "complete_bash",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split()) - 1),
            },
        )
        assert done.exit_code == 0, done.output
        return done.stdout.split()

    assert complete("sluice da") == ["dags"]
    assert "--output" in complete("sluice dags runs --ou")
    # The script for a named shell (docs/cli.md). Not `--show-completion bash`: typer takes
    # that option as a flag and detects the calling shell (under make's sh: "Shell sh not
    # supported", exit 1).
    script = runner.invoke(app, [], prog_name="sluice", env={"_SLUICE_COMPLETE": "source_bash"})
    assert script.exit_code == 0, script.output
    assert "_SLUICE_COMPLETE=complete_bash" in script.stdout


def test_every_output_option_offers_table_json_and_yaml() -> None:
    with_output = {
        path: next(p for p in command.params if p.name == "output")
        for path, command in commands()
        if any(p.name == "output" for p in command.params)
    }
    assert set(with_output) == {
        "sluice standalone",
        "sluice dags test",
        "sluice dags list",
        "sluice dags runs",
        "sluice dags render",  # a manifest: yaml or json, no table
        "sluice convert",  # -o DIR, where the manifests are written (issue 34)
    }
    for path, param in with_output.items():
        assert "-o" in param.opts, path
        if path != "sluice convert":
            assert "yaml" in (getattr(param, "help", None) or ""), path
    assert common.OUTPUT_FORMATS == ("table", "json", "yaml")


def test_yaml_and_json_print_the_same_document(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import yaml

    document = {"runs": [{"dag": "a", "state": "success", "tasks": [], "reason": None}]}
    common.print_document(document, "json")
    as_json = json.loads(capsys.readouterr().out)
    common.print_document(document, "yaml")
    assert yaml.safe_load(capsys.readouterr().out) == as_json == document


# ---- exit codes ------------------------------------------------------------------------


def documented_exit_codes() -> set[int]:
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text.split("## Exit codes", 1)[1]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}


def _literal(node: ast.expr | None, default: int) -> int:
    if node is None:
        return default
    assert isinstance(node, ast.Constant), ast.dump(node)
    assert isinstance(node.value, int), ast.dump(node)
    return node.value


def written_exit_codes(tree: ast.AST) -> set[int]:
    """Every exit code a module writes: fail(..., code=N) (default 2), typer.Exit(N)
    (default 0), sys.exit(N) and argparse's exit(N) with literals."""
    codes: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = (
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        )
        if name == "fail":
            code = next((k.value for k in node.keywords if k.arg == "code"), None)
            if code is None and len(node.args) > 1:
                code = node.args[1]
            if isinstance(code, ast.Attribute):  # fail(str(exc), code=exc.code)
                continue
            codes.add(_literal(code, 2))
        elif name in ("Exit", "exit") and (not node.args or isinstance(node.args[0], ast.Constant)):
            codes.add(_literal(node.args[0] if node.args else None, 0))
    return codes


def test_the_exit_code_table_covers_every_code_written() -> None:
    written: set[int] = set()
    for path in [*CLI.glob("*.py"), ROOT / "operator" / "sluice" / "api" / "sidecar.py"]:
        written |= written_exit_codes(ast.parse(path.read_text()))
    # sluice logs passes on LogNotReadable's code, 1 or 2 (sluice.trylogs).
    trylogs = ast.parse((ROOT / "operator" / "sluice" / "trylogs.py").read_text())
    written |= {
        n.value
        for call in ast.walk(trylogs)
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "LogNotReadable"
        for k in call.keywords
        if k.arg == "code" and isinstance(n := k.value, ast.Constant)
    }
    assert written == {0, 1, 2}
    assert documented_exit_codes() == written | {1}  # 1 also: an uncaught exception


def test_the_scan_sees_a_new_exit_code() -> None:
    tree = ast.parse("fail('x')\nfail('y', code=3)\nraise typer.Exit(4)\nraise typer.Exit()")
    assert written_exit_codes(tree) == {0, 2, 3, 4}
