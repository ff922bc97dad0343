"""The layer rule for `sluice.sdk` (docs/architecture.md): it uses `spec` and the Pool rules in
`handlers.objects`, and importing it loads none of the operator's I/O libraries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sluice.sdk
from tests.unit.test_api_layers import _sluice_imports

SDK = Path(sluice.sdk.__file__).parent
ALLOWED = ("sluice.sdk", "sluice.spec", "sluice.handlers.objects")


def test_sdk_imports_only_spec_the_pool_rules_and_itself() -> None:
    modules = sorted(SDK.glob("*.py"))
    assert len(modules) >= 8
    for module in modules:
        for name in _sluice_imports(module):
            assert name.startswith(ALLOWED), f"{module.name} imports {name}"


def test_importing_the_sdk_loads_no_io_library() -> None:
    heavy = ("kopf", "sqlalchemy", "kubernetes", "kubernetes_asyncio", "aiohttp", "typer")
    code = (
        "import sys, sluice.sdk, sluice.sdk.loading\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
