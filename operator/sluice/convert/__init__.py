"""`sluice convert`: Airflow DAG files to Sluice DAG manifests, read without running them.

The file is parsed with `ast` and followed statically (`reading`): no Airflow
install is needed and no line of the file runs. Each DAG found becomes a
manifest (`dags`, `tasks`, `templates`), written as YAML with what could not
be converted as comments (`emit`); `findings` says what a gap and a note are.
ADR 0042 says why the converter reads rather than imports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from sluice.convert import emit
from sluice.convert.dags import ConvertedDag, DagConverter
from sluice.convert.findings import ConvertError, Finding
from sluice.convert.reading import FileReader

DEFAULT_IMAGE = "busybox:1.36"

__all__ = [
    "DEFAULT_IMAGE",
    "Conversion",
    "ConvertError",
    "Finding",
    "convert_file",
    "convert_source",
]


@dataclass
class Document:
    """One DAG's manifest: its Sluice name, its YAML text, and what was said about it."""

    dag: ConvertedDag
    text: str
    findings: list[Finding]
    valid: bool


@dataclass
class Conversion:
    path: str
    documents: list[Document] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # the file's own (no DAG)

    @property
    def all_findings(self) -> list[Finding]:
        found = list(self.findings)
        for document in self.documents:
            found.extend(document.findings)
        return sorted(found, key=lambda f: (f.line, f.kind != "gap"))

    @property
    def gaps(self) -> list[Finding]:
        return [finding for finding in self.all_findings if finding.is_gap]


def convert_file(path: Path, image: str = DEFAULT_IMAGE) -> Conversion:
    """Convert the DAG file at `path`; raise ConvertError if it cannot be read as Python."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConvertError(f"{path}: no such file; give the path of an Airflow DAG file") from None
    except IsADirectoryError:
        raise ConvertError(f"{path}: is a directory; give the .py files in it") from None
    except UnicodeDecodeError as error:
        raise ConvertError(
            f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from None
    except OSError as error:
        raise ConvertError(f"{path}: cannot read: {error.strerror or error}") from None
    return convert_source(text, str(path), image)


def convert_source(text: str, path: str, image: str = DEFAULT_IMAGE) -> Conversion:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        raise ConvertError(
            f"{path}:{error.lineno}:{error.offset}: invalid Python: {error.msg}; fix the syntax "
            "(Airflow could not import this file either)"
        ) from None
    reader = FileReader(path, tree)
    reader.read()
    conversion = Conversion(path, findings=list(reader.findings))
    if not reader.dags:
        conversion.findings.append(
            Finding(
                "gap",
                path,
                1,
                "no DAG found: the converter reads DAG(...), `with DAG(...)` and "
                "@dag functions called in the file",
            )
        )
    names: dict[str, str] = {}
    for dag in reader.dags:
        converter = DagConverter(dag, path, image)
        converted = converter.convert()
        if converted is None:
            conversion.findings.extend(converter.findings)
            continue
        if converted.name in names:
            converted.findings.append(
                Finding(
                    "gap",
                    path,
                    converted.line,
                    f"DAGs {names[converted.name]!r} and "
                    f"{converted.dag_id!r} both become {converted.name!r}; rename one of them",
                    converted.dag_id,
                )
            )
        names[converted.name] = converted.dag_id
        text_out = emit.document(converted)
        invalid = emit.validation_gaps(converted, text_out)
        converted.findings.extend(invalid)
        if invalid:
            text_out = emit.document(converted)
        conversion.documents.append(
            Document(converted, text_out, converted.all_findings, valid=not invalid)
        )
    return conversion
