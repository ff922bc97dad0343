"""The published headline is what its committed JSON renders.

bench/README.md's headline gives one `--render ... --markdown` command; run on the
files under bench/published/ it must print exactly the tables the section shows, and
those files must be whole runs of one commit's code (complete, from a clean tree).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from bench import run

ROOT = Path(__file__).resolve().parents[2]
BENCH_README = ROOT / "bench" / "README.md"


def _headline() -> str:
    text = BENCH_README.read_text()
    start = text.index("## The headline")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _headline_files() -> list[str]:
    found = re.search(r"^python -m bench\.run --render (.+?) --markdown", _headline(), re.M)
    assert found, "bench/README.md's headline gives no `--render ... --markdown` command"
    return found.group(1).split()


def test_the_headline_shows_exactly_the_tables_its_command_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = _headline_files()
    missing = [name for name in files if not (ROOT / name).is_file()]
    assert not missing, f"the headline renders files that are not committed: {missing}"
    assert run.main(["--render", *(str(ROOT / name) for name in files), "--markdown"]) == 0
    # The tables, and the line naming each file's command, time, machine and commit.
    out = capsys.readouterr().out.splitlines()
    printed = [line for line in out if line.startswith(("|", "`python -m bench.run --compare"))]
    shown = [
        line
        for line in _headline().splitlines()
        if line.startswith(("|", "`python -m bench.run --compare"))
    ]
    assert any(line.startswith("|") for line in printed), "the render printed no table"
    assert shown == printed


def _planned_trials(command: str) -> int:
    """The trials of each arm a `--compare` command asked for (`--trials`, else 5)."""
    found = re.search(r"--trials[ =](\d+)", command)
    return int(found.group(1)) if found else run.TRIALS["compare"]


def test_the_headline_files_are_whole_runs_of_one_clean_commit_on_one_machine() -> None:
    saved = [json.loads((ROOT / name).read_text()) for name in _headline_files()]
    assert {s["commit"] for s in saved} == {saved[0]["commit"]}, "one commit for every shape"
    assert all(s["machine"] == saved[0]["machine"] for s in saved), "one machine"
    for s in saved:
        assert s["complete"] is True, s["command"]
        assert s["dirty"] is False, s["command"]
        assert Path(s["scheduler_code"]).parts[-2:] == ("operator", "sluice"), s["command"]
        # Every planned trial is there, whatever its status: as many of each arm in each
        # scenario as the command asked for.
        arms = Counter(
            (t["side"], t["variant"], t["shape"], t["dags"], t["tasks"], t["max_tis_per_query"])
            for t in s["trials"]
        )
        assert set(arms.values()) == {_planned_trials(s["command"])}, (s["command"], arms)


def test_planned_trials_come_from_the_command() -> None:
    assert _planned_trials("python -m bench.run --compare --replicas 1 --shapes grid") == 5
    assert _planned_trials("python -m bench.run --compare --trials 3 --shapes grid") == 3
