"""hack/kind-runc, the kind engine's OCI runtime here: it takes CAP_SYS_RESOURCE and the
rlimits out of a container's spec (what this machine cannot grant), then runs runc with
the arguments it was given, unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WRAPPER = Path(__file__).resolve().parents[2] / "hack" / "kind-runc"
CAPS = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"]


def _process() -> dict[str, object]:
    return {
        "args": ["/sbin/init"],
        "capabilities": {kind: list(CAPS) for kind in ("bounding", "effective", "permitted")},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}],
    }


def _run(tmp_path: Path, *args: str) -> list[str]:
    fake = tmp_path / "runc"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = dict(os.environ, SLUICE_KIND_RUNC=str(fake))
    out = subprocess.run(
        [sys.executable, str(WRAPPER), *args], env=env, capture_output=True, text=True, check=True
    )
    passed: list[str] = json.loads(out.stdout)
    return passed


def test_create_strips_the_bundles_spec_and_passes_every_argument(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": _process()}))
    args = ["--root", "/run/x", "--log", "l.json", "create", "--bundle", str(bundle), "c1"]
    assert _run(tmp_path, *args) == args
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["ociVersion"] == "1.0.2"
    assert spec["process"]["capabilities"] == {
        kind: ["CAP_CHOWN", "CAP_SYS_ADMIN"] for kind in ("bounding", "effective", "permitted")
    }
    assert "rlimits" not in spec["process"]


def test_exec_strips_the_process_file(tmp_path: Path) -> None:
    process = tmp_path / "process.json"
    process.write_text(json.dumps(_process()))
    args = ["exec", "--process", str(process), "--detach", "c1"]
    assert _run(tmp_path, *args) == args
    stripped = json.loads(process.read_text())
    assert "CAP_SYS_RESOURCE" not in stripped["capabilities"]["effective"]
    assert "rlimits" not in stripped


def test_other_commands_pass_through(tmp_path: Path) -> None:
    assert _run(tmp_path, "--root", "/run/x", "state", "c1") == ["--root", "/run/x", "state", "c1"]
