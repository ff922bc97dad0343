"""The layer rule for `sluice.api` (docs/architecture.md): it may use `db` and `spec`,
never the scheduler or the executors, and the sidecar's modules need no database."""

from __future__ import annotations

import ast
from pathlib import Path

import sluice.api

API = Path(sluice.api.__file__).parent
ALLOWED = ("sluice.api", "sluice.db", "sluice.spec", "sluice.logs", "sluice.metrics.families")
# What `sluice heartbeat` loads in a task pod: nothing that reaches for Postgres.
SIDECAR = ("sidecar.py", "tokens.py", "protocol.py")


def _sluice_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            # `from sluice.metrics import families` imports sluice.metrics.families
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "sluice" or name.startswith("sluice.")}


def test_api_imports_only_db_spec_and_itself() -> None:
    modules = sorted(API.glob("*.py"))
    assert len(modules) >= 7
    for module in modules:
        for name in _sluice_imports(module):
            assert name.startswith(ALLOWED), f"{module.name} imports {name}"


def test_the_sidecar_modules_import_no_database_code() -> None:
    for name in SIDECAR:
        imports = _sluice_imports(API / name)
        assert not {i for i in imports if i.startswith("sluice.db")}, name
        assert "sqlalchemy" not in (API / name).read_text(), name
