"""`sluice dags validate FILE...`: check DAG manifests before they are applied.

The same validation the operator runs when a DAG object arrives, available
offline so CI and editors can catch a bad manifest before `kubectl apply`.
Output is one line per issue, `FILE: DAG/NAME: field.path: message`, so it is
easy to grep and to turn into editor annotations; stdout carries only issues.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from sluice.spec.validation import SpecError, load_dag_documents

STDIN = Path("-")


def validate_command(
    files: list[Path], out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Validate every DAG document in `files` ('-' reads stdin); 0 if all are valid, else 1."""
    out = out or sys.stdout
    err = err or sys.stderr
    valid = invalid = 0
    for path in files:
        text = _read(path, out)
        if text is None:
            invalid += 1
            continue
        results = load_dag_documents(text)
        if not results:
            _report(out, path, None, "<file>", "no DAG documents found")
            invalid += 1
        for result in results:
            if isinstance(result, SpecError):
                invalid += 1
                for issue in result.issues:
                    _report(out, path, result.dag_name, issue.path, issue.message)
            else:
                valid += 1
    print(f"{valid} valid, {invalid} invalid DAG document(s)", file=err)
    return 1 if invalid else 0


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


def _report(out: TextIO, path: Path, dag_name: str | None, field: str, message: str) -> None:
    print(f"{path}: DAG/{dag_name or '?'}: {field}: {message}", file=out)
