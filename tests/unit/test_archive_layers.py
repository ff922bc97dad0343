"""The layer rule for `sluice.archive` (docs/architecture.md): it imports nothing of Sluice's
but itself, so the worker, the CLI and `sluice standalone` can all use it."""

from __future__ import annotations

import ast
from pathlib import Path

import sluice.archive

ARCHIVE = Path(sluice.archive.__file__).parent


def test_archive_imports_only_itself_of_sluice() -> None:
    modules = sorted(ARCHIVE.glob("*.py"))
    assert len(modules) >= 4
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name == "sluice" or name.startswith("sluice."):
                    assert name.startswith("sluice.archive"), f"{module.name} imports {name}"
