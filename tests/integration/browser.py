"""A real browser for the status page: Debian's Chromium, driven through its chromedriver.

``scripts/install-tools.sh`` (run by ``make install``) installs both with apt; nothing here
downloads a browser or a driver (the driver's path is given, so Selenium Manager never runs).
Without them, :func:`missing` says why and the tests that need a browser are skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"


def missing() -> str | None:
    """Why no browser can run here, or ``None`` when one can."""
    absent = [name for name in (CHROMIUM, CHROMEDRIVER) if shutil.which(name) is None]
    if not absent:
        return None
    return (
        f"{' and '.join(absent)} not installed (scripts/install-tools.sh installs the Debian "
        "packages chromium and chromium-driver as root)"
    )


@contextmanager
def chromium(*, width: int = 1280, height: int = 900) -> Iterator[webdriver.Chrome]:
    """A headless Chromium that keeps its console messages and talks to nobody but the page."""
    browser, driver = shutil.which(CHROMIUM), shutil.which(CHROMEDRIVER)
    if browser is None or driver is None:
        raise RuntimeError(missing())
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    try:
        yield session
    finally:
        session.quit()


def console_errors(session: webdriver.Chrome) -> list[str]:
    """The console's errors since the last call (a CSP violation is one, and so is a 404)."""
    entries: list[dict[str, Any]] = session.get_log("browser")  # type: ignore[no-untyped-call]
    return [str(entry["message"]) for entry in entries if entry.get("level") == "SEVERE"]


__all__ = ["chromium", "console_errors", "missing"]
