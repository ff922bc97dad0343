"""Metrics and probes without a database: the readiness and liveness decisions, the metric
catalogue's names and labels, the sampler's arithmetic, and the HTTP server on a real socket."""

from __future__ import annotations

import ast
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase
from typer.testing import CliRunner

# sluice.api and sluice.scheduler are imported for the registry: every module that records.
import sluice.api.buffer
import sluice.api.server
import sluice.metrics
import sluice.scheduler.loop
from sluice.cli import app
from sluice.metrics import families, health, sampler
from sluice.metrics.health import (
    LIVENESS_FACTOR,
    LoopHealth,
    Ticks,
    after_tick,
    liveness,
    readiness,
)
from sluice.metrics.server import MetricsServer
from sluice.scheduler.loop import TickReport

UNBOUNDED_LABELS = {"run_id", "task_id", "dag_id", "ti", "ti_id", "try_number", "dag_run_id"}
ROOT = Path(__file__).resolve().parents[2]


class FakeMonotonic:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the decisions ------------------------------------------------------------------------


def ticked(at: float, started: float = 900.0) -> Ticks:
    """A loop that began at `started` and whose last tick, which reached the database,
    ended at `at`."""
    return after_tick(Ticks(started=started), at, None)


REFUSED = "connect: connection to server at 10.0.0.5, port 5432 failed: Connection refused"


def test_not_ready_before_the_first_tick() -> None:
    assert readiness(Ticks(), 5.0, 60) == health.Verdict(False, "the loop has not ticked yet")


@pytest.mark.parametrize(
    ("ago", "ready"), [(0.0, True), (59.9, True), (60.0, True), (60.1, False), (93.0, False)]
)
def test_ready_while_the_last_tick_is_recent(ago: float, ready: bool) -> None:
    verdict = readiness(ticked(1000.0), 1000.0 + ago, 60)
    assert verdict.ok is ready
    assert verdict.reason == f"the loop's last tick ended {ago:.0f} s ago"


def test_a_stopped_loop_is_neither_ready_nor_live() -> None:
    assert readiness(ticked(1000.0), 1000.0, 60, loop_running=False) == health.Verdict(
        False, "the loop has stopped"
    )
    assert not liveness(ticked(1000.0), 1000.0, 60, loop_running=False).ok


def test_live_while_waiting_to_start_and_for_5_windows_after() -> None:
    assert liveness(Ticks(), 1e9, 60).ok  # waiting for the database to start
    limit = LIVENESS_FACTOR * 60
    assert liveness(Ticks(started=1000.0), 1000.0 + limit, 60).ok  # started, first tick slow
    stuck = liveness(Ticks(started=1000.0), 1000.0 + limit + 1, 60)
    assert not stuck.ok
    assert "has not ticked" in stuck.reason


def test_slow_is_not_ready_but_still_live_stuck_is_neither() -> None:
    last, stale_after = ticked(1000.0, started=0.0), 60.0
    slow = 1000.0 + 2 * stale_after  # a tick that has not ended for two windows
    assert not readiness(last, slow, stale_after).ok
    assert liveness(last, slow, stale_after).ok
    stuck = 1000.0 + LIVENESS_FACTOR * stale_after + 1
    verdict = liveness(last, stuck, stale_after)
    assert not verdict.ok
    assert verdict.reason == "the loop ended its last tick 301 s ago (limit 300 s): stuck"


def test_after_tick_counts_the_ticks_that_did_not_reach_the_database() -> None:
    ticks = ticked(1000.0)
    assert (ticks.last_ended, ticks.last_reached, ticks.unreached) == (1000.0, 1000.0, 0)
    ticks = after_tick(ticks, 1001.0, "examine: timeout")
    ticks = after_tick(ticks, 1002.0, REFUSED)
    assert ticks == Ticks(
        started=900.0,
        last_ended=1002.0,
        last_reached=1000.0,
        unreached=2,
        database_error=REFUSED,  # the latest tick's
    )
    assert after_tick(ticks, 1003.0, None) == Ticks(900.0, 1003.0, 1003.0, 0, "")


def test_a_tick_that_used_no_database_proves_nothing_about_it() -> None:
    """With a waker most ticks of a quiet replica open no transaction: they move
    last_ended (liveness) but neither end nor extend an outage."""
    ticks = after_tick(ticked(1000.0), 1001.0, REFUSED)
    idle = after_tick(ticks, 1002.0, None, used_database=False)
    assert idle == replace(ticks, last_ended=1002.0)
    assert not readiness(idle, 1070.0, 60.0).ok  # still unready once the window passes
    healthy = after_tick(ticked(1000.0), 1050.0, None, used_database=False)
    assert (healthy.last_reached, healthy.unreached) == (1000.0, 0)
    assert readiness(healthy, 1050.0, 60.0).ok


def test_ticks_that_cannot_use_the_database_end_readiness_after_the_window_not_liveness() -> None:
    """A refused connection fails a tick at once: ticks go on ending every second, but
    readiness counts only the ones that reached the database."""
    stale_after = 60.0
    ticks = ticked(1000.0)
    for second in range(1, 61):
        ticks = after_tick(ticks, 1000.0 + second, REFUSED)
    within = readiness(ticks, 1060.0, stale_after)
    assert within == health.Verdict(
        True,
        "the loop's last 60 ticks could not use the database (the last that could ended"
        f" 60 s ago): {REFUSED}",
    )
    ticks = after_tick(ticks, 1061.0, REFUSED)
    after = readiness(ticks, 1061.0, stale_after)
    assert after == health.Verdict(
        False,
        "the loop's last 61 ticks could not use the database (the last that could ended"
        f" 61 s ago): {REFUSED}",
    )
    # Ticks still end: the replica is live for as long as the outage lasts.
    for second in range(62, 3600):
        ticks = after_tick(ticks, 1000.0 + second, REFUSED)
    assert liveness(ticks, 4600.0, stale_after) == health.Verdict(
        True, "the loop's last tick ended 1 s ago"
    )
    assert not readiness(ticks, 4600.0, stale_after).ok
    # The database is back: the next tick that reaches it makes the replica ready again.
    ticks = after_tick(ticks, 4601.0, None)
    assert readiness(ticks, 4601.0, stale_after) == health.Verdict(
        True, "the loop's last tick ended 0 s ago"
    )


def test_one_failed_tick_is_not_an_outage_and_a_loop_that_never_reached_it_is_not_ready() -> None:
    ticks = after_tick(ticked(1000.0), 1001.0, REFUSED)
    assert readiness(ticks, 1001.0, 60) == health.Verdict(
        True,
        f"the loop's last tick could not use the database (the last that could ended 1 s ago):"
        f" {REFUSED}",
    )
    # The database went away between registering and the first tick.
    never = after_tick(Ticks(started=1000.0), 1000.5, REFUSED)
    assert readiness(never, 1000.5, 60) == health.Verdict(
        False, f"the loop's only tick could not use the database: {REFUSED}"
    )
    never = after_tick(after_tick(never, 1001.5, REFUSED), 1002.5, REFUSED)
    assert readiness(never, 1002.5, 60) == health.Verdict(
        False, f"none of the loop's 3 ticks could use the database: {REFUSED}"
    )
    assert liveness(never, 1002.5, 60).ok


def test_a_tick_reached_the_database_unless_every_transaction_failed() -> None:
    report = TickReport()
    assert report.database_unreached is None  # no transaction, no failure
    report.database_error = "examine: boom"
    assert report.database_unreached == "examine: boom"  # every one it tried failed
    report.database_answered = True
    assert report.database_unreached is None  # one got an answer: the tick did work


def test_loop_health_follows_ticks_on_its_clock() -> None:
    clock = FakeMonotonic()
    loop = LoopHealth(clock)
    assert loop.liveness(60).ok
    assert loop.readiness(60).reason == "the loop has not ticked yet"
    loop.tick_started()
    clock.now += 1
    loop.tick_ended()
    assert loop.readiness(60).ok
    clock.now += 93
    assert loop.readiness(60) == health.Verdict(False, "the loop's last tick ended 93 s ago")
    assert loop.liveness(60).ok
    loop.tick_ended(database_error=REFUSED)
    assert loop.readiness(60).reason.startswith("the loop's last tick could not use the database")
    assert not loop.readiness(60).ok
    assert loop.liveness(60).ok
    loop.stopped()
    assert not loop.readiness(60).ok
    assert not loop.liveness(60).ok


def test_a_loop_whose_thread_is_gone_is_not_live() -> None:
    loop = LoopHealth(FakeMonotonic())
    thread = threading.Thread(target=lambda: (loop.tick_started(), loop.tick_ended()))
    thread.start()
    thread.join()
    assert not loop.liveness(60).ok
    assert loop.liveness(60).reason == "the loop has stopped"


# -- the catalogue ------------------------------------------------------------------------


def _catalogue() -> list[MetricWrapperBase]:
    return [m for m in vars(families).values() if isinstance(m, MetricWrapperBase)]


def test_every_metric_is_named_sluice_and_has_no_unbounded_label() -> None:
    metrics = _catalogue()
    assert len(metrics) >= 19
    for metric in metrics:
        assert metric._name.startswith("sluice_"), metric._name
        assert not set(metric._labelnames) & UNBOUNDED_LABELS, metric._name
        labels = {"phase", "state", "pool", "outcome", "kind"}
        assert set(metric._labelnames) <= labels, metric._name


def test_the_registry_holds_no_other_metric_and_no_unbounded_label() -> None:
    """What /metrics serves: Sluice's families, prometheus_client's process and Python
    collectors, nothing else; and no sample carries an id as a label."""
    families.LOOP_ERRORS.labels("examine")  # a labelled family with a child
    for family in REGISTRY.collect():
        assert family.name.startswith(("sluice_", "process_", "python_")), family.name
        for sample in family.samples:
            assert not set(sample.labels) & UNBOUNDED_LABELS, sample


def test_every_metric_is_in_the_architecture_table() -> None:
    """docs/architecture.md's table (named from the README) lists exactly the catalogue."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Metrics and probes", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(sluice_\w+)", section, re.MULTILINE))
    exported = set()
    for metric in _catalogue():
        suffix = "_total" if metric._type == "counter" else ""
        exported.add(metric._name + suffix)
    assert listed == exported
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert '`docs/architecture.md`, "Metrics and probes"' in readme


def _sluice_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("sluice")}


def test_families_and_health_import_nothing_of_sluice() -> None:
    """Any layer may record a metric or a tick: these two modules must sit below them all."""
    package = Path(sluice.metrics.__file__).parent
    assert _sluice_imports(package / "families.py") == set()
    assert _sluice_imports(package / "health.py") == set()


# -- the sampler's arithmetic ------------------------------------------------------------


def test_a_sample_counts_states_open_slots_and_starving_tasks() -> None:
    rows = [
        ("tasks", "default", "running", 3, 3.0),
        ("tasks", "default", "queued", 1, 1.0),
        ("tasks", "default", "scheduled", 2, 2.0),
        ("tasks", "tiny", "running", 1, 2.0),  # two slots
        ("tasks", "tiny", "scheduled", 4, 4.0),
        ("tasks", "gone", "scheduled", 5, 5.0),  # a pool that does not exist
        ("pool", "default", None, 128, None),
        ("pool", "tiny", None, 2, None),
        ("pool", "idle", None, 8, None),
        ("outbox", None, None, 7, 12.5),
    ]
    found = sampler.summarize(rows)
    assert found.task_instances == {"scheduled": 11, "queued": 1, "running": 4}
    assert found.open_slots == {"default": 124, "tiny": 0, "idle": 8}
    assert found.starving == 4 + 5
    assert (found.outbox_rows, found.outbox_oldest_seconds) == (7, 12.5)


def test_an_empty_database_samples_zeros() -> None:
    found = sampler.summarize(
        [("pool", "default", None, 128, None), ("outbox", None, None, 0, None)]
    )
    assert found.task_instances == {"scheduled": 0, "queued": 0, "running": 0}
    assert found.open_slots == {"default": 128}
    assert (found.starving, found.outbox_rows, found.outbox_oldest_seconds) == (0, 0, 0.0)


def test_a_deleted_pool_loses_its_series() -> None:
    both = sampler.Sample({}, {"a": 1, "b": 2}, 0, 0, 0.0)
    shown = sampler.publish(both, set())
    assert REGISTRY.get_sample_value("sluice_pool_open_slots", {"pool": "b"}) == 2
    sampler.publish(sampler.Sample({}, {"a": 1}, 0, 0, 0.0), shown)
    assert REGISTRY.get_sample_value("sluice_pool_open_slots", {"pool": "b"}) is None


# -- the server ---------------------------------------------------------------------------


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, FakeMonotonic]]:
    clock = FakeMonotonic()
    with MetricsServer(LoopHealth(clock), host="127.0.0.1", port=0, stale_after=60) as server:
        yield server, clock


def test_the_server_answers_the_three_paths_on_port_0(
    served: tuple[MetricsServer, FakeMonotonic],
) -> None:
    server, clock = served
    assert server.port > 0
    status, body = get(f"{server.url}/metrics")
    assert status == 200
    assert "# TYPE sluice_loop_phase_duration_seconds histogram" in body
    assert "sluice_critical_section_busy_total" in body
    assert not re.search(r"^sluice_\w+_created[ {]", body, re.MULTILINE)  # turned off
    assert get(f"{server.url}/readyz") == (503, "the loop has not ticked yet\n")
    assert get(f"{server.url}/healthz") == (200, "the loop has not started yet\n")

    server.health.tick_started()
    server.health.tick_ended()
    assert get(f"{server.url}/readyz") == (200, "the loop's last tick ended 0 s ago\n")
    clock.now += 93
    assert get(f"{server.url}/readyz") == (503, "the loop's last tick ended 93 s ago\n")
    assert get(f"{server.url}/healthz")[0] == 200
    clock.now += 5 * 60
    assert get(f"{server.url}/healthz")[0] == 503


def test_readyz_says_why_ticks_did_not_count(
    served: tuple[MetricsServer, FakeMonotonic],
) -> None:
    server, clock = served
    server.health.tick_started()
    server.health.tick_ended()
    for _ in range(12):
        clock.now += 6
        server.health.tick_ended(database_error=REFUSED)
    assert get(f"{server.url}/readyz") == (
        503,
        "the loop's last 12 ticks could not use the database (the last that could ended"
        f" 72 s ago): {REFUSED}\n",
    )
    assert get(f"{server.url}/healthz") == (200, "the loop's last tick ended 0 s ago\n")


def test_other_paths_and_methods_are_refused(served: tuple[MetricsServer, FakeMonotonic]) -> None:
    server, _ = served
    assert get(f"{server.url}/")[0] == 404
    request = urllib.request.Request(f"{server.url}/readyz", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    refused.value.close()
    assert refused.value.code == 405


def test_a_port_in_use_fails_start(served: tuple[MetricsServer, FakeMonotonic]) -> None:
    server, _ = served
    other = MetricsServer(LoopHealth(), host="127.0.0.1", port=server.port, stale_after=60)
    with pytest.raises(OSError, match="in use"):
        other.start()


# -- the command line ---------------------------------------------------------------------


def test_the_scheduler_lists_the_flags() -> None:
    result = CliRunner().invoke(app, ["scheduler", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.exception
    for flag in ("--metrics-port", "--metrics-host", "--health-stale-after", "--log-store"):
        assert flag in result.output
    shown = CliRunner().invoke(app, ["logs", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.exception
    assert "s3://BUCKET/PREFIX" in shown.output


def test_the_stale_window_must_outlast_an_idle_tick() -> None:
    args = ["--database-url", "postgresql://x@localhost/x", "--executor", "noop"]
    result = CliRunner().invoke(
        app, ["scheduler", *args, "--tick-interval", "5", "--health-stale-after", "5"]
    )
    assert result.exit_code == 2
    assert "--health-stale-after (5.0s) must be longer than --tick-interval" in result.output


def test_the_operator_serves_kopf_s_liveness_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf

    seen: dict[str, object] = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(kwargs))
    result = CliRunner().invoke(app, ["operator", "--standalone", "--health-port", "8080"])
    assert result.exit_code == 0, result.output
    assert seen["liveness_endpoint"] == "http://0.0.0.0:8080/healthz"

    seen.clear()
    result = CliRunner().invoke(app, ["operator", "--standalone"])
    assert result.exit_code == 0, result.output
    assert seen["liveness_endpoint"] is None
