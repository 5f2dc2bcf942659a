"""A headless Chromium for checking fakeshard's pages: Debian's ``chromium`` and its
``chromedriver`` (``apt-get install chromium chromium-driver``), driven by Selenium.

Both binaries are named by path, so Selenium never fetches a browser or a driver of its own
(this machine reaches no download site).  :func:`missing` says what is absent, for a test to
skip with; :func:`browser` opens one with the console captured (:func:`console_errors`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

CHROMIUM = os.environ.get("FAKESHARD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = os.environ.get("FAKESHARD_CHROMEDRIVER") or shutil.which("chromedriver")


def missing() -> Optional[str]:
    """What a browser check lacks here (``None``: nothing)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium (pip install -e '.[browser]')"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return "Chromium and its driver (sudo apt-get install chromium chromium-driver)"
    return None


@contextmanager
def browser(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A headless Chromium (a Selenium driver) whose console messages are kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    why = missing()
    if why is not None:
        raise RuntimeError(f"no browser here: needs {why}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The console's errors (and uncaught exceptions) since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
