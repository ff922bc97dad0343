"""`sluice convert AIRFLOW_DAG.py... [-o DIR] [--image IMAGE] [--partial]`.

Writes one manifest per Airflow DAG (to DIR as `<name>.yaml`, or to stdout as
YAML documents, so `kubectl apply -f <(sluice convert dag.py)` works) and
prints every finding on stderr as `FILE:LINE: DAG 'd' task 't': gap|note: ...`.
Exit status: 0 when everything converted (notes alone do not fail), 1 when
something did not (nothing is written then, unless `--partial`: then what
could be converted is written, each gap a comment in its manifest) or a file
could not be read as Python.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from sluice.convert import DEFAULT_IMAGE, Conversion, ConvertError, convert_file


def convert(
    files: list[Path] = typer.Argument(
        ..., help="Airflow DAG files (.py), or folders of them", show_default=False
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="write DIR/<dag>.yaml per DAG (default: stdout)"
    ),
    image: str = typer.Option(
        DEFAULT_IMAGE, "--image", help="the image BashOperator and EmptyOperator tasks run in"
    ),
    partial: bool = typer.Option(
        False, "--partial", help="write what converted even with gaps (each one a comment)"
    ),
) -> None:
    """Convert Airflow DAG files to Sluice manifests, reading them without running them."""
    raise typer.Exit(convert_command(files, output, image, partial))


def convert_command(files: list[Path], output: Path | None, image: str, partial: bool) -> int:
    conversions: list[Conversion] = []
    unreadable = False
    for path in _python_files(files):
        try:
            conversions.append(convert_file(path, image))
        except ConvertError as error:
            print(f"error: {error}", file=sys.stderr)
            unreadable = True
    findings = [finding for conversion in conversions for finding in conversion.all_findings]
    for finding in findings:
        print(finding.render(), file=sys.stderr)
    gaps = sum(finding.is_gap for finding in findings)
    documents = [doc for conversion in conversions for doc in conversion.documents if doc.valid]
    if gaps and not partial:
        print(
            f"{gaps} gap(s): nothing written; fix them, or pass --partial to write what "
            "converted with each gap marked",
            file=sys.stderr,
        )
        return 1
    if output is None:
        sys.stdout.write("---\n".join(document.text for document in documents))
    else:
        output.mkdir(parents=True, exist_ok=True)
        for document in documents:
            (output / f"{document.dag.name}.yaml").write_text(document.text)
    where = f" to {output}" if output else ""
    print(
        f"{len(documents)} manifest(s) written{where}; {gaps} gap(s), "
        f"{len(findings) - gaps} note(s)",
        file=sys.stderr,
    )
    return 1 if unreadable else 0


def _python_files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return found
