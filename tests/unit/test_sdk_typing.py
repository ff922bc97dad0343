"""sluice.sdk under `mypy --strict`, as its users run it: the examples are clean, mistakes are not.

sluice is checked as an installed package would be (`follow_imports = silent`:
its types are used, its own errors are not the user's).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import sluice

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"

MISTAKES = """\
from sluice.sdk import DAG

dag = DAG("bad", defaults={"image": "busybox"})
a = dag.task("a", retires=2)
b = dag.task("b", trigger_rule="al_success")
c = dag.task("c", retries="2")
a >> "b"
dag.task("d", env=["A=1"])
DAG("e", catchup="no")
dag.group("g", pool_slot=2)
DAG("f", params={"at": object(), "ok": [1, {"k": None}]})
"""
# line -> the error code mypy must report there
EXPECTED = {
    4: "call-arg",
    5: "arg-type",
    6: "arg-type",
    7: "type-var",
    8: "arg-type",
    9: "arg-type",
    10: "call-arg",
    11: "dict-item",
}


def run_mypy(tmp_path: Path, *files: Path) -> list[tuple[str, int, str]]:
    config = tmp_path / "mypy.ini"
    config.write_text(
        "[mypy]\nstrict = True\n"
        f"mypy_path = {Path(sluice.__file__).resolve().parents[1]}\n"
        "[mypy-sluice.*]\nfollow_imports = silent\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    errors = re.findall(r"^(.+?):(\d+): error: .*\[([a-z-]+)\]$", result.stdout, re.MULTILINE)
    assert result.returncode == (1 if errors else 0), result.stdout + result.stderr
    return [(Path(file).name, int(line), code) for file, line, code in errors]


def test_examples_are_clean_and_mistakes_are_caught(tmp_path: Path) -> None:
    user_file = tmp_path / "mistakes.py"
    user_file.write_text(MISTAKES)
    examples = sorted(EXAMPLES.glob("*.py"))
    assert len(examples) == 3
    errors = run_mypy(tmp_path, *examples, user_file)
    assert {line: code for _, line, code in errors} == EXPECTED, errors
    assert {file for file, _, _ in errors} == {"mistakes.py"}
