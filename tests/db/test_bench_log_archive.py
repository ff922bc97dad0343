"""The log-archiving benchmark does not rot: a tiny run, every log archived, the sizes adding up.

No timing is asserted; `make bench-logs` prints the figures.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from bench import log_archive
from bench.logtext import log_text

LOGS = 20
SIZE = 64 * 1024


def test_generated_logs_are_lines_of_the_size_asked_that_gzip_plausibly() -> None:
    data = log_text(7, SIZE)
    assert len(data) == SIZE
    assert data.endswith(b"\n")
    assert data == log_text(7, SIZE)  # the same bytes for every trial
    assert data != log_text(8, SIZE)
    lines = data.decode().splitlines()
    assert lines[0].startswith("2026-12-01T02:00:07")
    assert len({line.split("] ", 1)[-1][:12] for line in lines}) > 5  # some variety
    ratio = len(data) / len(zlib.compress(data, 6))
    assert 3 < ratio < 10, ratio


@pytest.mark.db
def test_a_tiny_run_archives_every_log_once_with_sizes_that_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_archive, "RESULTS", tmp_path / "results")
    out = tmp_path / "logs.json"
    argv = ["--logs", str(LOGS), "--size", str(SIZE), "--trials", "1", "--backends", "file",
            "--archivers", "1,2", "--json", str(out)]  # fmt: skip
    assert log_archive.main(argv) == 0
    saved = json.loads(out.read_text())
    assert saved["content"]["logs"] == LOGS
    assert saved["content"]["size"] == SIZE
    assert 3 < saved["content"]["gzip_ratio_first_log"] < 10
    assert [t["arm"] for t in saved["trials"]] == ["file x1", "file x2"]
    for trial in saved["trials"]:
        assert trial["ok"], trial["errors"]
        assert trial["archived"] == LOGS
        assert trial["raw_bytes"] == LOGS * SIZE
        assert trial["stored_bytes"] == trial["stored_on_disk"] > 0
        assert trial["ratio"] == pytest.approx(trial["raw_bytes"] / trial["stored_bytes"])
        assert len(trial["children"]) == trial["archivers"]
        assert sum(c["taken"] for c in trial["children"]) == LOGS
        assert all(c["exit"] == 0 for c in trial["children"])
        assert trial["wall_s"] > 0
        assert trial["cpu_ms_per_log"] > 0
        assert trial["peak_rss_mib"] >= trial["rss_ready_mib"] > 0
        assert trial["rss_added_mib"] >= 0
    assert [r["arm"] for r in saved["summary"]] == ["file x1", "file x2"]
    assert all(r["ok"] == r["trials"] == 1 for r in saved["summary"])
    assert saved["commit"]
    assert saved["machine"]["cores"] >= 1
