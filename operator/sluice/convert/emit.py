"""Manifests as YAML text, with every finding as a comment where it applies.

The document says where it came from and lists the DAG's findings at the
top; each task's findings stand above it. The text is then read back with
`load_dag_documents`, the same function `sluice dags validate` uses, so a
manifest the converter writes is one the operator accepts; one that is not
(a name too long for a Job, a cycle) is reported as a gap instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from sluice.convert.dags import ConvertedDag
from sluice.convert.findings import Finding
from sluice.spec.errors import SpecError
from sluice.spec.validation import load_dag_documents


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts) as literal blocks; lists indented under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and all(line == line.rstrip() for line in value.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def dump(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 20)


def comments(findings: Iterable[Finding], indent: str = "") -> list[str]:
    ordered = sorted(findings, key=lambda f: (f.line, f.kind != "gap"))
    return [f"{indent}# {f.kind.upper()} line {f.line}: {f.message}" for f in ordered]


def document(dag: ConvertedDag) -> str:
    """The manifest's YAML text, findings as comments."""
    manifest = dag.manifest
    spec = {key: value for key, value in manifest["spec"].items() if key != "tasks"}
    head = {**manifest, "spec": spec}
    lines = [
        f"# Converted by `sluice convert` from {dag.path} "
        f"(Airflow DAG {dag.dag_id!r}, line {dag.line})."
    ]
    lines.extend(comments(dag.findings))
    lines.append(dump(head).rstrip("\n"))
    lines.append("  tasks:")
    for entry in manifest["spec"]["tasks"]:
        lines.extend(comments(dag.task_findings.get(entry["name"], []), "    "))
        item = dump([entry]).rstrip("\n")
        lines.extend("    " + line if line else line for line in item.splitlines())
    return "\n".join(lines) + "\n"


def validation_gaps(dag: ConvertedDag, text: str) -> list[Finding]:
    """Why the written manifest would be refused (as gaps), or []."""
    results = load_dag_documents(text)
    if len(results) != 1:
        return [
            Finding(
                "gap",
                dag.path,
                dag.line,
                "the manifest did not read back as one DAG document",
                dag.dag_id,
            )
        ]
    result = results[0]
    if not isinstance(result, SpecError):
        return []
    return [
        Finding(
            "gap",
            dag.path,
            dag.line,
            f"the manifest is not valid: {issue.path}: {issue.message}",
            dag.dag_id,
        )
        for issue in result.issues
    ]
