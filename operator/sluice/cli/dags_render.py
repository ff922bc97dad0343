"""`sluice dags render FILE.py|DIR ... [-o yaml|json]`: Python DAG files to manifests.

Prints one manifest per DAG and Pool the files define, ready for
`kubectl apply -f -`: a multi-document YAML stream (each document after
`---`), or with `-o json` one `kind: List` object. All or nothing: if any file
fails (an exception, a DAG the models refuse, a DAG name defined twice),
stdout gets nothing, stderr one line per problem naming the file and line,
and the exit code is 1.

The YAML is canonical: keys in the order the SDK writes them (a DAG's
settings, then its tasks, each with its name first), multi-line strings as
`|` blocks, so the same files always render the same bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from sluice.sdk.loading import render_paths

FORMATS = ("yaml", "json")


def render_command(
    paths: list[Path], output: str = "yaml", out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Print the manifests of every DAG and Pool in `paths`; 0, or 1 (nothing printed) on any
    problem, 2 for an unknown format."""
    out = out or sys.stdout
    err = err or sys.stderr
    if output not in FORMATS:
        print(f"error: --output {output!r} is not supported; use yaml or json", file=err)
        return 2
    rendered = render_paths(paths)
    if rendered.problems:
        for problem in rendered.problems:
            print(problem, file=err)
        count = len(rendered.problems)
        print(f"error: {count} problem(s) in the DAG files; nothing was rendered", file=err)
        return 1
    out.write(to_json(rendered.manifests) if output == "json" else to_yaml(rendered.manifests))
    return 0


def to_yaml(manifests: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream, one `---` per manifest."""
    return yaml.dump_all(
        manifests,
        Dumper=_ManifestDumper,
        sort_keys=False,
        explicit_start=True,
        allow_unicode=True,
        width=100,
    )


def to_json(manifests: list[dict[str, Any]]) -> str:
    """One Kubernetes List object (what `kubectl apply -f` takes for several objects)."""
    listing = {"apiVersion": "v1", "kind": "List", "items": manifests}
    return json.dumps(listing, indent=2, ensure_ascii=False) + "\n"


class _ManifestDumper(yaml.SafeDumper):
    """SafeDumper writing multi-line strings (shell scripts) as `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)
