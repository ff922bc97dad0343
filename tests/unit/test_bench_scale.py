"""The scale benchmark's results JSON carries its provenance like every other mode's
(issue 36): commit, dirty state, versions and machine. No database: the payload only."""

from __future__ import annotations

from bench.run import measured_on, provenance
from bench.scale import scale_payload


def test_the_scale_json_records_commit_dirty_state_versions_and_machine() -> None:
    levels = [{"level": "probe only", "ticks": 3}]
    payload = scale_payload(
        "20261206T000000Z", provenance(None, {}), levels, dags=10, runs=2, tasks=3
    )
    assert payload["mode"] == "scale"
    assert payload["levels"] == levels
    assert len(payload["commit"]) == 40 or payload["commit"] == "unknown"
    assert isinstance(payload["dirty"], bool)
    assert set(payload["machine"]) == {"cpu", "cores", "memory", "kernel"}
    assert payload["versions"]["python"]
    assert payload["knobs"] == {"max_tis_per_query": 512, "dags": 10, "runs": 2, "tasks": 3}
    assert measured_on(payload).startswith("20261206T000000Z, ")
