"""Checks pyproject.toml's runtime dependencies against what the package imports.

Fails (exit 1, one line per problem) on a third-party module that `operator/sluice`
imports but no declared dependency provides (it would arrive only through another
package, as aiohttp once came through kopf), on a declared dependency that nothing
imports (as tenacity was), and on a module of an extra (`sluice[embedded]`) imported at
a module's top level, where every `import sluice...` would need the extra. `make lint`
runs it; tests/unit/test_dependencies.py runs it and checks that it finds each kind.

Modules map to distributions through the installed packages' metadata
(importlib.metadata.packages_distributions), so run it in the project's venv.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"sluice"}
# Declared, needed, and never imported by name: each with why.
NOT_IMPORTED = {
    # SQLAlchemy loads the driver a postgresql:// URL names.
    "psycopg2-binary": "SQLAlchemy's postgresql dialect imports psycopg2",
    # zoneinfo reads IANA data from it where the system has none (slim images).
    "tzdata": "zoneinfo's time zone data where the system has none",
}
# Extras whose modules the package may import, lazily (inside a function).
LAZY_EXTRAS = {"embedded"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return normalize(match.group(1))


@dataclass
class Imports:
    """Top-level names of absolute imports: at module level, and anywhere (nested too)."""

    at_top: dict[str, list[str]] = field(default_factory=dict)
    anywhere: dict[str, list[str]] = field(default_factory=dict)


def _names(node: ast.AST) -> Iterable[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.module.split(".")[0]


def _module_level(tree: ast.Module) -> Iterable[ast.AST]:
    """Statements that run on import: the body, and inside its if/try/with blocks."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                pending.extend(getattr(node, block, []))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)


def scan(package: Path) -> Imports:
    found = Imports()
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package.parent))
        tree = ast.parse(path.read_text(), filename=where)
        for node in ast.walk(tree):
            for name in _names(node):
                found.anywhere.setdefault(name, []).append(where)
        for node in _module_level(tree):
            for name in _names(node):
                found.at_top.setdefault(name, []).append(where)
    return found


def problems(
    imports: Imports,
    dependencies: list[str],
    extras: Mapping[str, list[str]],
    distributions: Mapping[str, list[str]],
) -> list[str]:
    """What is wrong, one line each ([]: nothing). `distributions`: module -> providers."""
    declared = {requirement_name(r) for r in dependencies}
    lazy = {requirement_name(r) for extra in LAZY_EXTRAS for r in extras.get(extra, [])}
    out: list[str] = []
    used: set[str] = set()
    for module, files in sorted(imports.anywhere.items()):
        if module in FIRST_PARTY or module in sys.stdlib_module_names or module == "__future__":
            continue
        providers = {normalize(d) for d in distributions.get(module, [])}
        if not providers:
            out.append(
                f"{module} (imported in {files[0]}) is not provided by any installed package"
            )
            continue
        used |= providers
        if providers & declared:
            continue
        if providers & lazy:
            if module in imports.at_top:
                out.append(
                    f"{module} is an extra's ({', '.join(sorted(providers & lazy))}) but"
                    f" {imports.at_top[module][0]} imports it at module level: import it"
                    " inside the function that needs it"
                )
            continue
        out.append(
            f"{module} is imported ({files[0]}) but its package"
            f" ({', '.join(sorted(providers))}) is not in [project] dependencies"
        )
    for name in sorted(declared - used - set(NOT_IMPORTED)):
        out.append(f"{name} is in [project] dependencies but nothing in the package imports it")
    return out


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = problems(
        scan(ROOT / "operator" / "sluice"),
        project["dependencies"],
        project.get("optional-dependencies", {}),
        metadata.packages_distributions(),
    )
    for line in found:
        print(f"dependencies: {line}", file=sys.stderr)
    if not found:
        print(f"dependencies: the {len(project['dependencies'])} declared are the ones imported")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
