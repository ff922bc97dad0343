"""`make screenshots`: each view of the web UI, rendered to PNG from the examples' runs.

The examples run once under the local executor (an embedded Postgres in a temporary
state directory, as `sluice standalone --until-idle` runs them); the UI is served
beside them and Debian's headless Chromium (Selenium) saves each page, at a laptop's
window size, to docs/screenshots/, which the README shows.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from sqlalchemy import text

from sluice.cli.common import load_manifests
from sluice.runtime import LocalRuntime
from sluice.scheduler.config import SchedulerConfig
from sluice.ui.server import UiServer

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
DAG = "etl-retries"


def _browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,800")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sluice-screenshots-") as tmp:
        state = Path(tmp) / "st"
        with LocalRuntime(state_dir=state, config=SchedulerConfig(tick_interval=0.2)) as rt:
            rt.register(load_manifests([ROOT / "examples"]))
            rt.run(until=lambda: rt.is_idle(datetime.now(UTC)))
            with rt.engine.connect() as conn:
                run_id = conn.execute(
                    text("SELECT run_id FROM dag_run WHERE dag_id = :d ORDER BY id LIMIT 1"),
                    {"d": DAG},
                ).scalar_one()
            run = quote(run_id, safe="")
            pages = {
                "dags": "/",
                "grid": f"/dags/{DAG}/grid",
                "graph": f"/dags/{DAG}/graph",
                "run": f"/dags/{DAG}/runs/{run}",
                "try": f"/dags/{DAG}/runs/{run}/tasks/extract/tries/1",
                "pools": "/pools",
            }
            with UiServer(rt.sessions, host="127.0.0.1", port=0, log_dir=state / "logs") as ui:
                browser = _browser()
                try:
                    for name, path in pages.items():
                        browser.get(ui.url.rstrip("/") + path)
                        time.sleep(1)  # the graph lays itself out in the browser
                        target = OUT / f"{name}.png"
                        browser.save_screenshot(str(target))
                        print(f"screenshots: {target.relative_to(ROOT)}")
                finally:
                    browser.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
