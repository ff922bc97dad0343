"""The web UI's pages on a real Postgres, through aiohttp's own test server (ADR 0039).

What a pipeline owner opens in the morning: the DAG list with each DAG's latest
runs as squares, and a DAG's grid (runs as columns, tasks as rows, each cell its
task instance's state, told by a letter as well as a colour). Each page costs a
fixed number of statements, however many DAGs there are.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from sluice.cli import app as cli
from sluice.spec.states import TaskState
from sluice.ui import queries
from sluice.ui.app import make_app
from tests.support import (
    T0,
    FakeClock,
    ScriptedExecutor,
    chain,
    count_queries,
    make_loop,
    manifest,
    register,
    run_until_idle,
    runs,
    trigger,
)


def _client_call(
    sessions: sessionmaker[Session], call: Callable[[TestClient[Any, Any]], Awaitable[Any]]
) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(make_app(sessions))) as client:
            return await call(client)

    return asyncio.run(go())


def _get(sessions: sessionmaker[Session], path: str) -> tuple[int, str]:
    async def call(client: TestClient[Any, Any]) -> tuple[int, str]:
        response = await client.get(path)
        return response.status, await response.text()

    result: tuple[int, str] = _client_call(sessions, call)
    return result


@pytest.fixture
def two_runs(sessions: sessionmaker[Session]) -> list[str]:
    """DAG `etl` (extract -> load), two manual runs: the first fails at load, the second
    succeeds. Returns their run ids, oldest first."""
    clock = FakeClock()
    register(sessions, manifest("etl", chain("extract", "load"), schedule=None), clock.now)
    register(sessions, manifest("other", chain("only"), schedule=None), clock.now)
    trigger(sessions, "etl", clock.now - timedelta(hours=2))
    executor = ScriptedExecutor({"load": [TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)
    executor.outcomes.clear()
    trigger(sessions, "etl", clock.now - timedelta(hours=1))
    run_until_idle(loop)

    with sessions() as session:
        return [run.run_id for run in runs(session, "etl")]


def test_the_dag_list_shows_each_dag_with_its_latest_runs(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    status, html = _get(sessions, "/")
    assert status == 200
    assert 'href="/dags/etl/grid"' in html
    assert 'href="/dags/other/grid"' in html
    row = html[html.index('id="dag-etl"') :]
    row = row[: row.index("</tr>")]
    # Newest first, a letter for each state as well as a colour.
    assert re.findall(r'title="([^"]+)">(\w)<', row) == [
        (f"{two_runs[1]}: success", "S"),
        (f"{two_runs[0]}: failed", "F"),
    ]
    status, filtered = _get(sessions, "/?name=oth")
    assert 'href="/dags/other/grid"' in filtered
    assert 'href="/dags/etl/grid"' not in filtered


def test_the_dag_list_filters_by_state(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    """paused or not, a run running, the latest run failed (etl's older run failed, its
    latest succeeded: not failed)."""
    clock = FakeClock()
    trigger(sessions, "other", clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor({"only": [TaskState.FAILED]}), clock))

    def listed(query: str) -> list[str]:
        status, html = _get(sessions, "/" + query)
        assert status == 200, html
        return re.findall(r'<tr id="dag-([\w-]+)"', html)

    assert listed("?state=failed") == ["other"]
    assert listed("?state=unpaused") == ["etl", "other"]
    assert listed("?state=paused") == []
    assert listed("?state=running") == []
    held = ScriptedExecutor()
    held.hold.add("extract")
    trigger(sessions, "etl", clock.now)
    run_until_idle(make_loop(sessions, held, clock))
    assert listed("?state=running") == ["etl"]
    assert _get(sessions, "/?state=sleepy") == (
        400,
        "state='sleepy': one of paused, unpaused, running, failed (or none)",
    )


def test_the_grid_shows_runs_by_tasks_with_each_try(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    status, html = _get(sessions, "/dags/etl/grid")
    assert status == 200
    rows = re.findall(r"<tr>\s*<th>([\w-]+)</th>", html)
    assert rows == ["extract", "load"]  # the DAG's order, upstream first
    cells = re.findall(r'title="([\w-]+) in (\S+): (\w+), try (\d+)[^"]*">(\S)<', html)
    assert cells == [
        ("extract", two_runs[0], "success", "1", "S"),
        ("extract", two_runs[1], "success", "1", "S"),
        ("load", two_runs[0], "failed", "1", "F"),
        ("load", two_runs[1], "success", "1", "S"),
    ]


def test_unknown_dags_and_bad_input_say_what_is_wrong(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    assert _get(sessions, "/dags/nope/grid") == (404, "no DAG named 'nope'")
    status, text = _get(sessions, "/dags/etl/grid?before=yesterday")
    assert (status, text) == (400, "before='yesterday' is not an ISO 8601 date-time")


def test_the_grid_pages_back_by_logical_date(sessions: sessionmaker[Session]) -> None:
    clock = FakeClock()
    register(sessions, manifest("many", chain("a"), schedule=None), clock.now)
    for hours in range(queries.GRID_RUNS + 3, 0, -1):
        trigger(sessions, "many", T0 - timedelta(hours=hours))
    _, first = _get(sessions, "/dags/many/grid")
    assert len(re.findall(r'data-task="a"', first)) == queries.GRID_RUNS  # the latest 25
    older = re.search(r'href="\?before=([^"]+)">Older runs', first)
    assert older is not None
    _, second = _get(sessions, f"/dags/many/grid?before={older.group(1)}")
    assert "Older runs" not in second
    assert len(re.findall(r'data-task="a"', second)) == 3


def test_each_page_costs_the_same_statements_whatever_the_number_of_dags(
    engine: Engine, sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    def statements(path: str) -> int:
        with count_queries(engine) as seen:
            status, _ = _get(sessions, path)
        assert status == 200
        return len(seen)

    few = statements("/")
    grid = statements("/dags/etl/grid")
    for n in range(30):
        register(sessions, manifest(f"more-{n}", chain("a"), schedule=None))
        trigger(sessions, f"more-{n}", T0)
    assert statements("/") == few <= 3
    assert statements("/dags/etl/grid") == grid <= 5


def test_sluice_ui_listens_on_loopback_only() -> None:
    result = CliRunner().invoke(
        cli, ["ui", "--host", "0.0.0.0", "--database-url", "postgresql://x"]
    )
    assert result.exit_code == 2
    assert "--host 0.0.0.0: without --auth kubernetes the UI has no login, so it listens" in (
        result.stderr
    )


def test_a_runs_page_shows_every_task_with_each_try_across_a_clear(
    engine: Engine, sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    from urllib.parse import quote

    from sluice.db.dags import SpecCache
    from sluice.db.models import DagRun
    from sluice.scheduler import clearing

    failed = two_runs[0]
    path = f"/dags/etl/runs/{quote(failed, safe='')}"
    status, grid = _get(sessions, "/dags/etl/grid")
    assert f'href="{path}"' in grid  # each run's column and cells link to its page
    status, html = _get(sessions, path)
    assert status == 200
    assert '<td id="run-state">failed</td>' in html
    tries = re.findall(r'class="task-([\w-]+)" data-try="(\d+)">.*?</span> (\w+)</td>', html, re.S)
    assert tries == [("extract", "1", "success"), ("load", "1", "failed")]

    with sessions() as session:
        run = session.query(DagRun).filter_by(dag_id="etl", run_id=failed).one()
        clearing.clear(session, SpecCache(), run, ["load"], reason="ui test", now=T0)
        session.commit()
    with count_queries(engine) as seen:
        _, cleared = _get(sessions, path)
    assert len(seen) <= 4  # the run, its tasks, their tries (and the spec, once)
    tries = re.findall(
        r'class="task-([\w-]+)" data-try="(\w+)">.*?</span> (\w+)</td>', cleared, re.S
    )
    # load's try 1 is kept with how it ended; the instance is none again, to run as try 2.
    assert tries == [("extract", "1", "success"), ("load", "1", "failed"), ("load", "next", "none")]
    assert '<td id="run-state">queued</td>' in cleared
    assert _get(sessions, "/dags/etl/runs/nope") == (404, "DAG 'etl' has no run 'nope'")


def test_a_tries_page_shows_its_output_from_its_file_then_from_the_archive(
    db_url: str, tmp_path: Any
) -> None:
    """Real task processes (the local executor): the try's page shows its output from its
    log file; once archived and the file gone, from the archive (the same reads as
    `sluice logs`); a try that never ran says why there is nothing."""
    from datetime import UTC, datetime
    from urllib.parse import quote

    from sluice.archive.store import open_store
    from sluice.executors.local import log_file
    from sluice.executors.logsources import FileLogs
    from sluice.runtime import LocalRuntime
    from sluice.scheduler import archiver

    script = 'echo "hello from $SLUICE_TASK try $SLUICE_TRY_NUMBER"; exit 3'
    dag = manifest(
        "logs",
        [{"name": "say", "args": [script]}, {"name": "after", "dependsOn": ["say"]}],
        schedule=None,
        defaults={"image": "busybox:1.36", "command": ["sh", "-c"]},
    )
    with LocalRuntime(database_url=db_url, state_dir=tmp_path / "st") as rt:
        archiver.enable(rt.engine)
        rt.register([dag])
        trigger(rt.sessions, "logs", datetime.now(UTC))
        rt.run(until=lambda: rt.is_idle(datetime.now(UTC)))
        with rt.sessions() as session:
            (run,) = runs(session, "logs")
            run_id = run.run_id
        logs = rt.state_dir / "logs"
        page = f"/dags/logs/runs/{quote(run_id, safe='')}/tasks/say/tries/1"

        def get(path: str, **kw: Any) -> tuple[int, str]:
            async def call(client: TestClient[Any, Any]) -> tuple[int, str]:
                response = await client.get(path)
                return response.status, await response.text()

            async def go() -> tuple[int, str]:
                app = make_app(rt.sessions, log_dir=logs, **kw)
                async with TestClient(TestServer(app)) as client:
                    return await call(client)

            return asyncio.run(go())

        status, html = get(page)
        assert status == 200
        assert '<pre class="log" id="log">hello from say try 1\n</pre>' in html
        assert "logs / " + run_id + " / say, try 1: failed" in html

        store_url = (tmp_path / "archive").as_uri()
        files = FileLogs(lambda r: log_file(logs, r.dag_id, r.run_id, r.task_id, r.try_number))
        assert archiver.LogArchiver(rt.engine, open_store(store_url), files).run_once() == 1
        for path in logs.rglob("*.log"):
            path.unlink()
        _, archived = get(page, log_store=store_url)
        assert '<pre class="log" id="log">hello from say try 1\n</pre>' in archived
        _, unset = get(page)  # archived, but the UI was given no --log-store
        assert "pass --log-store" in unset

        never = f"/dags/logs/runs/{quote(run_id, safe='')}/tasks/after/tries/1"
        assert get(never)[0] == 404  # `after` never ran: it has no try 1


def _actions(
    sessions: sessionmaker[Session],
    page: str,
    posts: list[tuple[str, dict[str, str], dict[str, str]]],
) -> list[tuple[int, str]]:
    """GET `page` (its CSRF cookie and token), then each POST (path, form, headers) with the
    token unless the form says `csrf`; each POST's status and Location or text."""

    async def call(client: TestClient[Any, Any]) -> list[tuple[int, str]]:
        html = await (await client.get(page)).text()
        token = re.search(r'name="csrf" value="(\w+)"', html)
        assert token is not None
        out = []
        for path, form, headers in posts:
            data = {"csrf": token.group(1), **form}
            response = await client.post(path, data=data, headers=headers, allow_redirects=False)
            out.append((response.status, response.headers.get("Location") or await response.text()))
        return out

    result: list[tuple[int, str]] = _client_call(sessions, call)
    return result


def test_actions_clear_mark_pause_and_trigger_through_the_cli_s_code(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    from urllib.parse import quote, unquote

    from sluice.db.models import Dag, DagRun, TaskInstance

    failed = two_runs[0]
    run_page = f"/dags/etl/runs/{quote(failed, safe='')}"
    results = _actions(
        sessions,
        run_page,
        [
            (f"{run_page}/tasks/load", {"action": "clear"}, {}),
            ("/dags/etl/pause", {"paused": "true"}, {}),
            ("/dags/etl/trigger", {"conf": '{"k": 1}'}, {}),
        ],
    )
    assert (results[0][0], unquote(results[0][1])) == (303, unquote(run_page))
    assert results[1] == (303, "/dags/etl/grid")
    assert results[2][0] == 303
    assert results[2][1].startswith("/dags/etl/runs/manual__")
    with sessions() as session:
        run = session.query(DagRun).filter_by(dag_id="etl", run_id=failed).one()
        load = session.query(TaskInstance).filter_by(dag_run_id=run.id, task_id="load").one()
        assert (run.state, load.state, load.max_tries) == ("queued", "none", 1)
        assert session.get_one(Dag, "etl").is_paused
        newest = session.query(DagRun).filter_by(dag_id="etl").order_by(DagRun.id.desc()).first()
        assert newest is not None
        assert newest.conf == {"k": 1}

    marked = _actions(sessions, run_page, [(f"{run_page}/tasks/load", {"action": "success"}, {})])
    assert [(status, unquote(where)) for status, where in marked] == [(303, unquote(run_page))]
    with sessions() as session:
        load = session.query(TaskInstance).filter_by(dag_run_id=run.id, task_id="load").one()
        assert load.state == "success"


def test_actions_without_the_pages_token_or_from_another_site_are_refused(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    from urllib.parse import quote

    from sluice.db.models import Dag

    run_page = f"/dags/etl/runs/{quote(two_runs[0], safe='')}"
    refused = _actions(
        sessions,
        run_page,
        [
            ("/dags/etl/pause", {"paused": "true", "csrf": "forged"}, {}),
            ("/dags/etl/pause", {"paused": "true"}, {"Origin": "https://evil.example"}),
            (f"{run_page}/tasks/nope", {"action": "clear"}, {}),
            ("/dags/etl/trigger", {"conf": "{not json"}, {}),
            (f"{run_page}/tasks/load", {"action": "explode"}, {}),
        ],
    )
    assert [status for status, _ in refused] == [403, 403, 400, 400, 400]
    assert "CSRF token" in refused[0][1]
    assert "another site" in refused[1][1]
    assert "refused: --task 'nope': DAG 'etl' has no such task" in refused[2][1]
    assert "conf is not JSON" in refused[3][1]
    assert "one of clear, success, failed" in refused[4][1]
    with sessions() as session:
        assert not session.get_one(Dag, "etl").is_paused


def test_the_pools_and_backfills_pages(sessions: sessionmaker[Session]) -> None:
    """A pool with a try running in it, and a backfill of two dates, one ended."""
    from sqlalchemy import insert

    from sluice.db.dags import SpecCache, clear_schedule
    from sluice.db.models import SlotPool
    from sluice.scheduler.backfill import create_backfill

    clock = FakeClock()
    with sessions.begin() as session:
        session.execute(insert(SlotPool).values(name="tight", slots=2, description=""))
    daily = {"schedule": "@daily", "startDate": "2026-11-01T00:00:00Z", "catchup": False}
    register(sessions, manifest("bf", chain("a", pool="tight"), **daily), clock.now)
    with sessions.begin() as session:
        clear_schedule(session, "bf")
        create_backfill(
            session, SpecCache(), "bf", T0 - timedelta(days=2), T0 - timedelta(days=1), T0,
            max_active_runs=1,
        )  # fmt: skip
    executor = ScriptedExecutor()
    executor.hold.add("a")
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)  # the first date's `a` runs, held (the backfill's limit is 1)
    status, pools = _get(sessions, "/pools")
    assert status == 200
    row = re.search(r'id="pool-tight">(.*?)</tr>', pools)
    assert row is not None
    assert re.findall(r"<td>([\w-]+)</td>", row.group(1)) == ["tight", "2", "1", "0", "1"]
    status, backfills = _get(sessions, "/backfills")
    assert status == 200
    assert '<td class="progress">0/2</td>' in backfills
    assert "sluice backfill" in backfills
    executor.hold.clear()
    run_until_idle(loop)
    assert '<td class="progress">2/2</td>' in _get(sessions, "/backfills")[1]


def test_sluice_standalone_serves_the_ui_beside_its_scheduler(db_url: str, tmp_path: Any) -> None:
    """`sluice standalone DIR --ui-port 0` prints the UI's address; the UI shows its DAGs
    while the scheduler runs; SIGTERM stops both."""
    import signal
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sluice = Path(sys.executable).parent / "sluice"
    proc = subprocess.Popen(
        [str(sluice), "standalone", str(root / "examples" / "hello.yaml"), "--ui-port", "0",
         "--database-url", db_url, "--state-dir", str(tmp_path / "st")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "standalone exited"
            found = re.search(r"Sluice UI: (http://127\.0\.0\.1:\d+/)", line)
            url = found.group(1) if found else None
        assert url is not None
        with urllib.request.urlopen(url, timeout=10) as response:
            html = response.read().decode()
        assert 'href="/dags/hello/grid"' in html
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_the_graph_page_carries_the_tasks_edges_and_a_runs_states(
    sessions: sessionmaker[Session], two_runs: list[str]
) -> None:
    import json

    status, html = _get(sessions, "/dags/etl/graph")
    assert status == 200
    found = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', html)
    assert found is not None
    data = json.loads(found.group(1))
    # The latest run colours it by default: both tasks succeeded.
    assert data["nodes"] == [
        {"id": "extract", "state": "success", "trigger_rule": "all_success"},
        {"id": "load", "state": "success", "trigger_rule": "all_success"},
    ]
    assert data["edges"] == [["extract", "load"]]
    from urllib.parse import quote

    _, first = _get(sessions, f"/dags/etl/graph?run={quote(two_runs[0], safe='')}")
    found = re.search(r'id="graph-data">(.*?)</script>', first)
    assert found is not None
    assert [n["state"] for n in json.loads(found.group(1))["nodes"]] == ["success", "failed"]
    assert _get(sessions, "/dags/nope/graph") == (404, "no DAG named 'nope'")


def test_a_run_is_marked_or_cancelled_as_its_dagrun_object_would_be(
    sessions: sessionmaker[Session],
) -> None:
    """Run actions run the kubectl path's code (`handlers.store`): a mark ends the run in
    that state with its unfinished tasks (a running one failed); a cancel fails it and
    skips them (as deleting the DagRun object does); an ended run refuses a mark."""
    from urllib.parse import quote

    from sluice.db.models import DagRun, TaskInstance

    clock = FakeClock()
    register(sessions, manifest("long", chain("a", "b"), schedule=None), clock.now)
    for hours in (2, 1):
        trigger(sessions, "long", clock.now - timedelta(hours=hours))
    executor = ScriptedExecutor()
    executor.hold.add("a")
    run_until_idle(make_loop(sessions, executor, clock))
    with sessions() as session:
        marked, cancelled = (run.run_id for run in runs(session, "long"))
    pages = [f"/dags/long/runs/{quote(run, safe='')}" for run in (marked, cancelled)]
    results = _actions(
        sessions,
        pages[0],
        [
            (pages[0], {"action": "failed"}, {}),
            (pages[1], {"action": "cancel"}, {}),
            (pages[0], {"action": "success"}, {}),
            (pages[1], {"action": "explode"}, {}),
        ],
    )
    assert [status for status, _ in results] == [303, 303, 400, 400]
    assert "already ended as failed" in results[2][1]
    assert "one of success, failed, cancel" in results[3][1]
    with sessions() as session:
        states = {
            run.run_id: (
                run.state,
                sorted(
                    (ti.task_id, ti.state)
                    for ti in session.query(TaskInstance).filter_by(dag_run_id=run.id)
                ),
            )
            for run in session.query(DagRun).filter_by(dag_id="long")
        }
    assert states == {
        marked: ("failed", [("a", "failed"), ("b", "skipped")]),
        cancelled: ("failed", [("a", "skipped"), ("b", "skipped")]),
    }
