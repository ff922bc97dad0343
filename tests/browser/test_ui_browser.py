"""The UI in a real browser (headless Chromium): what a pipeline owner does first.

`sluice ui` runs as a real process on the test's database. In the browser: the DAG
list shows `etl` with its failed run; its grid shows the failed task; on the run's
page the task is cleared with the UI's button (the code `sluice tasks clear` runs),
and once a replica has rerun it, the open page shows try 2 green by itself; try 1's
log page opens from it. On a cluster (scripted reviews), a viewer signs in and their
clear is refused.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from sluice.spec.states import TaskState
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    manifest,
    register,
    run_until_idle,
    trigger,
)

SLUICE = [str(Path(sys.executable).parent / "sluice")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def ui(db_url: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [*SLUICE, "ui", "--port", str(port), "--database-url", db_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _until(what: str, check: Any, timeout: float = 20) -> Any:
    """`check()` once it is true. The page replaces its <main> every few seconds (it
    follows the runs), so an element found a moment ago may be gone: look again."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
        except StaleElementReferenceException as exc:
            found, last = None, exc
        except WebDriverException as exc:
            # Chromium's words for an element whose page was replaced under it
            # (a navigation between find and read): the same as a stale element.
            if "does not belong to the document" not in str(exc):
                raise
            found, last = None, exc
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"not seen within {timeout:.0f} s: {what} (last error: {last})")


def test_a_failed_task_is_seen_cleared_and_turns_green(
    browser: Any, ui: str, db_url: str, sessions: sessionmaker[Session]
) -> None:
    from selenium.webdriver.common.by import By

    clock = FakeClock()
    register(sessions, manifest("etl", chain("extract", "load"), schedule=None), clock.now)
    trigger(sessions, "etl", clock.now)
    executor = ScriptedExecutor({"load": [TaskState.FAILED]})
    loop = make_loop(sessions, executor, clock)
    run_until_idle(loop)

    browser.get(ui)
    runs = _until(
        "etl's runs", lambda: browser.find_elements(By.CSS_SELECTOR, "#dag-etl .runs .cell")
    )
    assert [cell.text for cell in runs] == ["F"]
    _until("etl's grid", lambda: browser.find_element(By.LINK_TEXT, "etl").click() or True)
    _until("etl's grid", lambda: browser.find_element(By.TAG_NAME, "h1").text == "etl")

    def load_cell() -> Any:
        return browser.find_element(By.CSS_SELECTOR, '.cell[data-task="load"]')

    failed = ("F", "cell state-failed")
    _until("load failed", lambda: (load_cell().text, load_cell().get_attribute("class")) == failed)

    # The run's page: load's try 1 failed. Clear it there, with the UI's own button.
    _until("the run's page", lambda: load_cell().click() or True)

    def clear_load() -> bool:
        rows = browser.find_elements(By.CSS_SELECTOR, 'tr.task-load[data-try="1"]')
        if not rows:
            return False  # the run's page is still loading
        (row,) = rows
        assert row.find_elements(By.TAG_NAME, "td")[1].text == "F failed"
        row.find_element(By.CSS_SELECTOR, 'button[value="clear"]').click()
        return True

    _until("load's clear button", clear_load)
    _until(
        "load waiting to run again",
        lambda: browser.find_elements(By.CSS_SELECTOR, 'tr.task-load[data-try="next"]'),
    )
    run_until_idle(loop)  # load's try 2 succeeds
    # The page, left open, follows the run: no reload.
    _until(
        "load's try 2 succeeded",
        lambda: (
            [
                (row.get_attribute("data-try"), row.find_elements(By.TAG_NAME, "td")[1].text)
                for row in browser.find_elements(By.CSS_SELECTOR, "tr.task-load[data-try]")
            ]
            == [("1", "F failed"), ("2", "S success")]
        ),
    )
    # Try 1's log: its page names the try and why it ended (the scripted executor
    # writes no output, which the page says).
    _until(
        "try 1's log",
        lambda: (
            browser.find_element(By.CSS_SELECTOR, 'tr.task-load[data-try="1"] a.log-link').click()
            or True
        ),
    )
    _until("try 1's page", lambda: browser.find_element(By.TAG_NAME, "h1").text == "F load, try 1")
    assert "no output to show" in browser.find_element(By.ID, "log").text
    _until("back to the grid", lambda: browser.find_element(By.LINK_TEXT, "etl").click() or True)
    green = "cell state-success"
    _until("load green in the grid", lambda: load_cell().get_attribute("class") == green)


def test_the_graph_is_laid_out_and_coloured_by_the_run(
    browser: Any, ui: str, sessions: sessionmaker[Session]
) -> None:
    """dagre (vendored by `make ui-assets`) lays out a diamond left to right: every task a
    box coloured by the latest run's state, every dependency an edge."""
    from selenium.webdriver.common.by import By

    clock = FakeClock()
    tasks = [
        {"name": "start"},
        {"name": "left", "dependsOn": ["start"]},
        {"name": "right", "dependsOn": ["start"]},
        {"name": "join", "dependsOn": ["left", "right"], "triggerRule": "all_done"},
    ]
    register(sessions, manifest("diamond", tasks, schedule=None), clock.now)
    trigger(sessions, "diamond", clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor({"left": [TaskState.FAILED]}), clock))

    browser.get(f"{ui}/dags/diamond/graph")
    boxes = _until(
        "the laid-out graph", lambda: browser.find_elements(By.CSS_SELECTOR, "#graph g.task")
    )
    states = {box.get_attribute("data-task"): box.get_attribute("class") for box in boxes}
    assert states == {
        "start": "task state-success",
        "left": "task state-failed",
        "right": "task state-success",
        "join": "task state-success",
    }
    edges = browser.find_elements(By.CSS_SELECTOR, "#graph path.edge")
    assert sorted(e.get_attribute("data-edge") for e in edges) == [
        "left>join", "right>join", "start>left", "start>right",
    ]  # fmt: skip
    # Left to right: start before left and right, which come before join.
    x = {box.get_attribute("data-task"): box.rect["x"] for box in boxes}
    assert x["start"] < x["left"] == x["right"] < x["join"]
    assert "all_done" in next(b for b in boxes if b.get_attribute("data-task") == "join").text
    # The page refreshes every 5 s: the graph is drawn again each time, not lost.
    time.sleep(6)
    redrawn = _until(
        "the graph after a refresh",
        lambda: browser.find_elements(By.CSS_SELECTOR, "#graph g.task"),
    )
    assert len(redrawn) == 4


def test_on_a_cluster_a_viewer_signs_in_and_their_clear_is_refused(
    browser: Any, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The UI with `--auth kubernetes`, the cluster's answers scripted (the real reviews:
    tests/k8s/test_ui_cluster.py): the browser is sent to the login page, the viewer's
    token signs in, and their clear comes back refused by the API server (403)."""
    from selenium.webdriver.common.by import By

    from sluice.ui import cluster_actions
    from sluice.ui.server import UiServer
    from tests.db.test_ui_access import BOB, FakeAccess, FakeObjects, _dag

    written: list[Any] = []
    monkeypatch.setattr(cluster_actions, "_objects", lambda user: FakeObjects(user, written))
    clock = FakeClock()
    register(sessions, _dag("etl", "team-a"), clock.now)
    trigger(sessions, "etl", clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor({"load": [TaskState.FAILED]}), clock))

    server = UiServer(sessions, host="127.0.0.1", port=0, log_dir=tmp_path, access=FakeAccess())
    with server:
        browser.get(server.url + "dags/etl/grid")
        _until("the login page", lambda: browser.find_element(By.TAG_NAME, "h1").text == "Sign in")
        browser.find_element(By.ID, "token").send_keys(BOB.token)
        browser.find_element(By.CSS_SELECTOR, "form.login button").click()
        _until("etl's grid", lambda: browser.find_element(By.TAG_NAME, "h1").text == "etl")
        assert browser.find_element(By.ID, "user").text == "bob"
        _until(
            "the run's page",
            lambda: (
                browser.find_element(By.CSS_SELECTOR, '.cell[data-task="load"]').click() or True
            ),
        )

        def clear_load() -> bool:
            rows = browser.find_elements(By.CSS_SELECTOR, 'tr.task-load[data-try="1"]')
            if not rows:
                return False
            rows[0].find_element(By.CSS_SELECTOR, 'button[value="clear"]').click()
            return True

        _until("load's clear button", clear_load)
        _until(
            "the refusal",
            lambda: (
                "refused by the Kubernetes API server: Forbidden"
                in browser.find_element(By.TAG_NAME, "body").text
            ),
        )
    assert written == []
