"""The web UI's pages at scale (issue 32): `python -m bench.ui` (`make bench-ui`).

On a fresh database of the scale benchmark's kind (bench/scale.py's DAGs, registered
through `sync_dag`): 10,000 DAGs with 3 runs each (inserted in one statement, as
history), and one DAG of 200 independent tasks with 25 manual runs (through the
trigger path: 5,000 task instances). Each page is then fetched `--requests` times
through aiohttp's test client, in-process on loopback: the DAG list (its first 500
DAGs, each with its latest runs), the big DAG's grid (25 runs x 200 tasks), its
graph and one run's page. Per page: the time from request to the last byte (median,
p95, max) and the statements it ran (from SQLAlchemy's cursor events). Nothing is
asserted: the figures are printed and saved to bench/results/ui-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from rich.console import Console
from rich.table import Table
from sqlalchemy import event, text

from bench.common import RESULTS, Knobs, Postgres, git
from bench.metrics import percentile
from bench.scale import _manual_manifest, _register
from bench.shapes import Workload
from bench.sluice_side import TEMPLATE, prepare_template
from sluice.db.dags import SpecCache
from sluice.db.engine import make_engine, session_factory
from sluice.logs import configure_logging
from sluice.scheduler.triggers import trigger_run
from sluice.ui.app import make_app

BIG = "grid-200"

# History for every small DAG: `runs` ended runs each, in one statement.
_HISTORY = text(
    """
    INSERT INTO dag_run (dag_id, run_id, run_type, state, dag_version_id, logical_date,
                         data_interval_start, data_interval_end, conf, created_at,
                         tasks_total, tasks_done)
    SELECT d.dag_id, 'manual__' || n, 'manual', 'success', d.current_version_id,
           :base + n * interval '1 hour', :base + n * interval '1 hour',
           :base + n * interval '1 hour', '{}', now(), 1, 1
    FROM dag d CROSS JOIN generate_series(1, :runs) AS n
    WHERE d.dag_id LIKE 'small-%'
    """
)


def _populate(url: str, dags: int, runs: int) -> str:
    """The database; returns a run id of the big DAG."""
    knobs = Knobs()
    sessions = session_factory(make_engine(url))
    small = Workload("no_structure", dags, 1)
    _register(sessions, [_manual_manifest(small, f"small-{i}", knobs) for i in range(dags)])
    _register(sessions, [_manual_manifest(Workload("no_structure", 1, 200), BIG, knobs, 32)])
    base = datetime(2025, 1, 1, tzinfo=UTC)
    with sessions() as session:
        session.execute(_HISTORY, {"base": base, "runs": runs})
        specs = SpecCache()
        last = None
        for i in range(25):
            last = trigger_run(session, specs, BIG, base, logical_date=base.replace(day=1 + i))
        session.commit()
    assert last is not None
    return last.run_id


def _measure(url: str, paths: dict[str, str], requests: int) -> dict[str, Any]:
    engine = make_engine(url)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with TestClient(TestServer(make_app(session_factory(engine)))) as client:
            for name, path in paths.items():
                await (await client.get(path)).read()  # warm: the spec cache, the pool
                times, counts = [], []
                for _ in range(requests):
                    statements.clear()
                    started = time.perf_counter()
                    response = await client.get(path)
                    body = await response.read()
                    times.append((time.perf_counter() - started) * 1000)
                    counts.append(len(statements))
                    assert response.status == 200, (path, response.status)
                out[name] = {
                    "path": path,
                    "bytes": len(body),
                    "ms_median": round(statistics.median(times), 1),
                    "ms_p95": round(percentile(times, 95), 1),
                    "ms_max": round(max(times), 1),
                    "statements": sorted(set(counts)),
                }
        return out

    try:
        return asyncio.run(go())
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ui")
    parser.add_argument("--dags", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3, help="history runs per small DAG")
    parser.add_argument("--requests", type=int, default=20, help="per page")
    opts = parser.parse_args(argv)
    configure_logging("warning")
    console = Console()
    pg = Postgres()
    try:
        prepare_template(pg, Knobs())
        url = pg.create("sluice_bench_ui", TEMPLATE)
        started = time.monotonic()
        run_id = _populate(url, opts.dags, opts.runs)
        setup_s = round(time.monotonic() - started, 1)
        paths = {
            f"DAG list ({opts.dags:,} DAGs, first 500 shown)": "/",
            "grid (25 runs x 200 tasks)": f"/dags/{BIG}/grid",
            "graph (200 tasks)": f"/dags/{BIG}/graph",
            "run (200 tasks)": f"/dags/{BIG}/runs/{run_id}",
        }
        pages = _measure(url, paths, opts.requests)
    finally:
        pg.stop()
    table = Table(title=f"UI pages: server time per page, {opts.requests} requests each")
    for column in ("page", "median ms", "p95 ms", "max ms", "statements", "bytes"):
        table.add_column(column)
    for name, r in pages.items():
        table.add_row(
            name,
            str(r["ms_median"]),
            str(r["ms_p95"]),
            str(r["ms_max"]),
            ", ".join(map(str, r["statements"])),
            f"{r['bytes']:,}",
        )
    console.print(table)
    saved = {
        "command": "python -m bench.ui " + " ".join(argv or []),
        "commit": git("rev-parse", "--short", "HEAD"),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "setup_s": setup_s,
        "pages": pages,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"ui-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(saved, indent=2) + "\n")
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
