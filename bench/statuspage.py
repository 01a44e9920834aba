"""The status page at 10,000 tenants: what one refresh costs the server, and how long the page
takes to show in a real browser.

``tenantgate serve --offline`` runs on a generated config of ``tenants`` tenants. The server
side times ``GET /status`` whole and one page of it (``?offset=&limit=50``, what the page asks
for on each refresh): that time is spent on the event loop, where reviews wait meanwhile. The
browser side (Debian's Chromium through Selenium, as the tests drive it) times, from the
Python side and so including the browser's own work, the first load until the tenant list is
drawn, a page change, and a search until only the tenant searched for is listed (the search
box waits 250 ms after the last key before asking).
"""

from __future__ import annotations

import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

from bench import servers, stats
from bench.configgen import config_yaml, generate_config, tenant_name

PAGE_SIZE: Final = 50
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _timed_get(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with _DIRECT.open(url, timeout=60) as response:
        size = len(response.read())
    return (time.perf_counter() - started) * 1000, size


def _server_side(base: str, *, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, query in (("whole", ""), ("page", f"?offset=0&limit={PAGE_SIZE}")):
        _timed_get(f"{base}/status{query}")  # warm up
        samples = [_timed_get(f"{base}/status{query}") for _ in range(rounds)]
        times = [ms for ms, _ in samples]
        result[name] = {
            "median_ms": round(stats.median(times), 2),
            "max_ms": round(max(times), 2),
            "bytes": samples[-1][1],
        }
    return result


def _browser_side(base: str, *, tenants: int, rounds: int) -> dict[str, Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.integration import browser

    reason = browser.missing()
    if reason is not None:
        raise RuntimeError(reason)
    names = sorted(tenant_name(index) for index in range(tenants))

    def rows(session: Any) -> list[str]:
        found = session.execute_script(
            "return Array.from(document.querySelectorAll('#tenant-rows tr[data-tenant]'),"
            " (row) => row.dataset.tenant);"
        )
        return [str(name) for name in found]

    def until(session: Any, shown: list[str]) -> float:
        """Milliseconds until the tenant list is ``shown``."""
        started = time.perf_counter()
        WebDriverWait(session, 60, poll_frequency=0.01).until(lambda s: rows(s) == shown)
        return (time.perf_counter() - started) * 1000

    loads, pages, searches = [], [], []
    errors: list[str] = []
    with browser.chromium() as session:
        for index in range(rounds):
            started = time.perf_counter()
            session.get(f"{base}/?refresh=300")  # returns once the document has loaded
            navigated = (time.perf_counter() - started) * 1000
            loads.append(navigated + until(session, names[:PAGE_SIZE]))
            session.find_element(By.ID, "next").click()
            pages.append(until(session, names[PAGE_SIZE : 2 * PAGE_SIZE]))
            wanted = names[(index * 997) % tenants]
            session.find_element(By.ID, "search").send_keys(wanted)
            searches.append(until(session, [wanted]))
            errors.extend(browser.console_errors(session))
    return {
        "first_load_ms": round(stats.median(loads), 1),
        "next_page_ms": round(stats.median(pages), 1),
        "search_ms": round(stats.median(searches), 1),
        "rounds": rounds,
        "console_errors": errors,
    }


def measure(*, tenants: int = 10_000, quick: bool = False) -> dict[str, Any]:
    """The ``page`` section of the results."""
    rounds = 3 if quick else 10
    with tempfile.TemporaryDirectory(prefix="tenantgate-bench-page-") as tmp:
        workdir = Path(tmp)
        config = workdir / "tenantgate.yaml"
        config.write_text(config_yaml(generate_config(tenants=tenants)), encoding="utf-8")
        server = servers.start_tenantgate(config, cert_dir=workdir / "certs")
        try:
            base = f"http://127.0.0.1:{server.metrics_port}"
            status = _server_side(base, rounds=rounds * 2)
            page = _browser_side(base, tenants=tenants, rounds=rounds)
        finally:
            server.stop()
    return {"tenants": tenants, "status": status, "browser": page}


__all__ = ["PAGE_SIZE", "measure"]
