"""A real browser for the UI's tests: Debian's headless Chromium, driven by Selenium.

Without `chromium` and `chromedriver` (`make browser` installs Debian's) the tests that
need them skip, saying so, unless SLUICE_REQUIRE_BROWSER=1, where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

MISSING = "no chromium and chromedriver on PATH: `make browser` installs Debian's"


@pytest.fixture
def browser() -> Iterator[object]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        if os.environ.get("SLUICE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{MISSING} (SLUICE_REQUIRE_BROWSER=1 requires them)")
        pytest.skip(MISSING)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,900")  # a laptop's screen
    session = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield session
    finally:
        session.quit()
