"""`sluice dags validate FILE...`: check DAG manifests before they are applied.

The same validation the operator runs when a DAG object arrives, available
offline so CI and editors can catch a bad manifest before `kubectl apply`.
Output is one line per issue, `FILE: DAG/NAME: field.path: message`, so it is
easy to grep and to turn into editor annotations; stdout carries only issues.
A Pool document in the stream (as `sluice dags render` prints beside the DAGs
that use it) is checked by the Pool rules (`handlers.objects.pool_issues`) and
reported as `Pool/NAME`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from sluice.handlers.objects import pool_issues
from sluice.spec.errors import SpecIssue
from sluice.spec.models import API_VERSION, DagManifest
from sluice.spec.validation import SpecError, load_documents, parse_dag_manifest

STDIN = Path("-")


def validate_command(
    files: list[Path], out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Validate every DAG document in `files` ('-' reads stdin); 0 if all are valid, else 1."""
    out = out or sys.stdout
    err = err or sys.stderr
    counts = {"DAG": [0, 0], "Pool": [0, 0]}  # kind -> [valid, invalid]
    for path in files:
        text = _read(path, out)
        if text is None:
            counts["DAG"][1] += 1
            continue
        results = load_documents(text, _parse)
        if not results:
            _report(out, path, None, "<file>", "no DAG documents found")
            counts["DAG"][1] += 1
        for result in results:
            kind = "Pool" if isinstance(result, PoolDocument | PoolError) else "DAG"
            if isinstance(result, SpecError):
                counts[kind][1] += 1
                for issue in result.issues:
                    _report(out, path, result.dag_name, issue.path, issue.message, kind)
            else:
                counts[kind][0] += 1
    (valid, invalid), (pools_valid, pools_invalid) = counts["DAG"], counts["Pool"]
    summary = f"{valid} valid, {invalid} invalid DAG document(s)"
    if pools_valid or pools_invalid:
        summary += f"; {pools_valid} valid, {pools_invalid} invalid Pool document(s)"
    print(summary, file=err)
    return 1 if invalid or pools_invalid else 0


class PoolDocument(str):
    """A valid Pool document (its name)."""


class PoolError(SpecError):
    """A Pool document's issues; `dag_name` holds the Pool's name."""


def _parse(doc: object) -> DagManifest | PoolDocument:
    if not (isinstance(doc, Mapping) and doc.get("kind") == "Pool"):
        return parse_dag_manifest(doc)
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    name = name if isinstance(name, str) else None
    issues = pool_issues(doc)
    if doc.get("apiVersion") != API_VERSION:
        issues.insert(0, SpecIssue("apiVersion", f"must be {API_VERSION!r}"))
    if issues:
        raise PoolError(issues, name)
    return PoolDocument(name or "")


def _read(path: Path, out: TextIO) -> str | None:
    try:
        if path == STDIN:
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        _report(out, path, None, "<file>", "file not found")
    except IsADirectoryError:
        _report(out, path, None, "<file>", "is a directory; pass the YAML files in it")
    except UnicodeDecodeError:
        _report(out, path, None, "<file>", "not UTF-8 text")
    except OSError as exc:
        _report(out, path, None, "<file>", f"cannot read: {exc.strerror or exc}")
    return None


def _report(
    out: TextIO, path: Path, name: str | None, field: str, message: str, kind: str = "DAG"
) -> None:
    print(f"{path}: {kind}/{name or '?'}: {field}: {message}", file=out)
