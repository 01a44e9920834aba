"""The status page in a real browser, against a real tenantgate with a populated ledger and queue.

tenantgate runs as in the other integration tests (the real control plane and its admission
chain); the page is loaded in Debian's headless Chromium (``tests/integration/browser.py``).
Every test also checks that the console stayed free of errors: a Content-Security-Policy
violation, a failed request or a script error would be one.

``TENANTGATE_SCREENSHOTS=DIR`` saves the views the README and docs/operations.md show.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

import certs
from bench.configgen import config_yaml, generate_config, tenant_name
from certs.files import read_certificates
from tests.integration import browser
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import (
    Tenantgate,
    create_namespace,
    eventually,
    http_json,
    offline_tenantgate,
    pod,
)

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=browser.missing() or "")

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
reservationTTLSeconds: 3600
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed: {cpu: "4", memory: 8Gi}
      burst: {ratio: 1.5}
  team-q:
    namespaces: [team-q]
    quota: {guaranteed: {cpu: "2"}}
    overQuota: queue
    queue:
      aging: {intervalSeconds: 1, step: 1, maxBoost: 100000}
"""
WAIT = 30.0
# What team-a's five pods of 1 cpu and 1Gi book: the ledger counts pods too (no limit on them).
CHARGED = {
    "guaranteed": {"cpu": "4", "memory": "4Gi", "pods": "4"},
    "burst": {"cpu": "1", "memory": "1Gi", "pods": "1"},
}
SCREENSHOTS = os.environ.get("TENANTGATE_SCREENSHOTS")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


def served_certificate(cert_dir: Path) -> certs.CertificateInfo:
    chain = read_certificates(certs.MaterialPaths(cert_dir).tls_cert)
    return certs.CertificateInfo.of(chain[0])


@pytest.fixture
def tenantgate(start_tenantgate: StartTenantgate, core: Any, cert_dir: Path) -> Tenantgate:
    started = start_tenantgate()
    for namespace in ("team-a", "team-q"):
        create_namespace(core, {"metadata": {"name": namespace}})
    return started


@pytest.fixture
def page() -> Iterator[Chrome]:
    with browser.chromium() as session:
        yield session


# --------------------------------------------------------------------------- helpers


def wait_for(session: WebDriver, check: Callable[[WebDriver], Any], what: str) -> Any:
    """Wait until the page, refreshing itself, shows ``check`` (a falsy answer: not yet)."""
    return WebDriverWait(session, WAIT, poll_frequency=0.1).until(check, f"the page to show {what}")


def open_page(session: WebDriver, base: str, fragment: str = "") -> None:
    session.get(f"{base}/?refresh=1{'#' + fragment if fragment else ''}")
    wait_for(
        session,
        lambda s: s.find_element(By.TAG_NAME, "body").get_attribute("data-generated-at"),
        "its first answer",
    )


# Each read is one script, run between two of the page's refreshes: elements the page has
# replaced since are never touched.


def texts(session: WebDriver, selector: str) -> list[str]:
    found = session.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), (node) => node.innerText);",
        selector,
    )
    return [str(item) for item in found]


def text(session: WebDriver, selector: str) -> str:
    found = texts(session, selector)
    assert found, f"nothing on the page matches {selector}"
    return found[0]


def fraction(session: WebDriver, part: str, whole: str) -> float:
    """The width of the first ``part`` as a share of the first ``whole``'s, as laid out."""
    share = session.execute_script(
        "const width = (s) => document.querySelector(s).getBoundingClientRect().width;"
        "return width(arguments[0]) / width(arguments[1]);",
        part,
        whole,
    )
    return float(share)


def screenshot(session: WebDriver, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        session.save_screenshot(str(Path(SCREENSHOTS) / f"status-page-{name}.png"))


def create(core: Any, namespace: str, name: str, *, cpu: str = "1", memory: str = "1Gi") -> Any:
    core.create_namespaced_pod(namespace, pod(name, cpu=cpu, memory=memory))
    return core.read_namespaced_pod(name, namespace)


def gated(stored: Any) -> bool:
    return any(gate.name == "tenantgate.io/quota" for gate in stored.spec.scheduling_gates or [])


def queue_rows(tenantgate: Tenantgate, tenant: str) -> list[dict[str, Any]]:
    code, document = http_json(f"{tenantgate.metrics_url}/queue?tenant={tenant}")
    assert code == 200, document
    rows: list[dict[str, Any]] = document["tenants"][tenant]["pods"]
    return rows


# --------------------------------------------------------------------------- the tests


def test_the_bars_show_the_ledgers_numbers_and_denials_show_their_message(
    tenantgate: Tenantgate, core: Any, page: Chrome
) -> None:
    # 4 cpu on the guarantee, then 1 on burst; a pod of 8 cpu goes over the 6 cpu ceiling.
    tiers = [
        create(core, "team-a", f"web-{i}").metadata.labels["tenantgate.io/tier"] for i in range(5)
    ]
    assert tiers == ["guaranteed"] * 4 + ["burst"]
    with pytest.raises(ApiException) as denied:
        create(core, "team-a", "huge", cpu="8")
    assert "exceeded tenant quota: team-a" in str(denied.value.body)
    eventually(lambda: tenantgate.used("team-a") == CHARGED, "team-a's pods charged")

    open_page(page, tenantgate.metrics_url, "q=team-a")

    assert texts(page, "#tenant-rows tr[data-tenant] button") == ["team-a"]
    row = '#tenant-rows tr[data-tenant="team-a"]'
    parts = ("used-guaranteed", "used-burst", "guarantee", "ceiling")
    figures = {
        resource: [text(page, f'{row} .bar[data-resource="{resource}"] .{part}') for part in parts]
        for resource in texts(page, f"{row} .bar .resource")
    }
    assert figures == {"cpu": ["4", "1", "4", "6"], "memory": ["4Gi", "1Gi", "8Gi", "12Gi"]}
    # The ceiling (6 cpu) is the bar's whole length: 4/6 on guaranteed, 1/6 on burst.
    cpu = f'{row} .bar[data-resource="cpu"]'
    on_guaranteed = fraction(page, f"{cpu} .segment.used-guaranteed", f"{cpu} .track")
    on_burst = fraction(page, f"{cpu} .segment.used-burst", f"{cpu} .track")
    assert on_guaranteed == pytest.approx(4 / 6, abs=0.01)
    assert on_burst == pytest.approx(1 / 6, abs=0.01)
    assert text(page, f"{row} .pods") == "5"
    assert text(page, f"{row} .pending") == "0"

    denial = texts(page, "#denial-rows tr:first-child td")
    assert denial[1:4] == ["team-a", "team-a/huge", "over_quota"]
    assert denial[4].startswith("exceeded tenant quota: team-a")
    assert page.find_element(By.ID, "cohorts-section").is_displayed() is False  # none in /status
    screenshot(page, "tenants")
    assert browser.console_errors(page) == []


def test_a_queued_pod_is_shown_at_its_position_and_a_release_updates_the_page(
    tenantgate: Tenantgate, core: Any, page: Chrome
) -> None:
    for name in ("run-0", "run-1"):
        assert not gated(create(core, "team-q", name))
    for name in ("wait-0", "wait-1", "wait-2"):
        assert gated(create(core, "team-q", name))
    eventually(lambda: len(queue_rows(tenantgate, "team-q")) == 3, "3 pods in team-q's queue")

    open_page(page, tenantgate.metrics_url, "tenant=team-q")
    page.execute_script("window.loadedOnce = true;")  # gone if the page reloads

    wait_for(page, lambda s: len(texts(s, "#queue-rows tr[data-pod]")) == 3, "3 queued pods")
    assert texts(page, "#queue-rows .position") == ["1", "2", "3"]
    assert texts(page, "#queue-rows .pod") == ["team-q/wait-0", "team-q/wait-1", "team-q/wait-2"]
    assert texts(page, "#queue-rows .request") == ["cpu=1,memory=1Gi,pods=1"] * 3
    for shown in texts(page, "#queue-rows .priority"):
        # Effective priority = the pod's own (tenant-guaranteed's 1000) + its aging boost.
        match = re.fullmatch(r"(\d+)(?: \((\d+) \+ (\d+) aging\))?", shown)
        assert match is not None, shown
        effective, own, boost = match.groups()
        assert int(effective) == (int(own) + int(boost) if own else 1000)
        assert own in (None, "1000")
    assert text(page, '#tenant-rows tr[data-tenant="team-q"] .pending') == "3"

    core.delete_namespaced_pod("run-0", "team-q", grace_period_seconds=0)

    wait_for(
        page,
        lambda s: texts(s, "#queue-rows .pod") == ["team-q/wait-1", "team-q/wait-2"],
        "wait-0 released and the line moved up",
    )
    assert texts(page, "#queue-rows .position") == ["1", "2"]
    wait_for(page, lambda s: "team-q/wait-0" in texts(s, "#release-rows td"), "the release")
    cells = texts(page, "#release-rows tr:first-child td")
    assert cells[5].startswith("released onto tenant team-q's guaranteed room after waiting")
    assert text(page, '#tenant-rows tr[data-tenant="team-q"] .pending') == "2"
    assert page.execute_script("return window.loadedOnce === true;") is True
    screenshot(page, "queue")
    assert browser.console_errors(page) == []


def test_the_replica_shows_its_role_certificate_config_and_readiness(
    tenantgate: Tenantgate, page: Chrome, cert_dir: Path
) -> None:
    status = tenantgate.status()
    not_after = status["certificate"]["notAfter"]
    assert not_after == served_certificate(cert_dir).not_after.timestamp()

    open_page(page, tenantgate.metrics_url)

    assert text(page, "#role") == "leader"
    assert text(page, "#ready") == "ready"
    facts = dict(
        zip(
            texts(page, "#replica-facts dt"),
            texts(page, "#replica-facts dd"),
            strict=True,
        )
    )
    assert facts["Role"].startswith("leader (no leader election")
    expires = served_certificate(cert_dir).not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert facts["Serving certificate"].startswith(f"expires {expires} (in ")
    assert facts["Config"].endswith("tenantgate.yaml (watched)")
    assert facts["Tenants"] == "2"
    assert facts["Ledger synced"] == "yes"
    checks = {
        name: texts(page, f'#check-rows tr[data-check="{name}"] td')
        for name in texts(page, "#check-rows tr td:first-child")
    }
    assert set(checks) == set(status["readiness"]["checks"])
    assert checks["config"][1] == "ok"
    assert checks["certs"][2] == status["readiness"]["checks"]["certs"]["detail"]
    page.execute_script("window.scrollTo(0, document.body.scrollHeight);")
    screenshot(page, "replica")
    assert browser.console_errors(page) == []


# What the browser gets from /status, rewritten before the page sees it: the page is shown
# documents the server cannot produce yet (cohorts) or would never produce (hostile text).
REWRITE_STATUS = """
const realFetch = window.fetch;
window.fetch = async (url, options) => {
  const response = await realFetch(url, options);
  if (!String(url).startsWith("/status")) return response;
  const status = await response.json();
  %s
  return new Response(JSON.stringify(status), {status: response.status});
};
"""


def rewrite_status(page: Chrome, statement: str) -> None:
    """Run the JavaScript ``statement`` on each ``/status`` document (``status``) the page gets."""
    page.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": REWRITE_STATUS % statement}
    )


# A /status with a cohort tree, in the shape admission/status.py serves (tests of the cohorts
# themselves run the real thing): the page draws it from the document alone.
COHORTS = {
    "research": {
        "cohorts": ["research"],
        "members": ["team-a", "team-q"],
        "capacity": {"cpu": "16"},
        "free": {"cpu": "13"},
        "borrowed": {"team-a": {"cpu": "3"}, "team-q": {}},
        "lent": {"team-a": {}, "team-q": {"cpu": "3"}},
        "shares": {"team-a": 0.1875, "team-q": 0.0},
        "fairShares": {"team-a": 1.0, "team-q": 0.0},
    }
}


def test_cohorts_are_drawn_from_status_when_it_has_them(
    tenantgate: Tenantgate, page: Chrome
) -> None:
    assert "cohorts" not in tenantgate.status()
    rewrite_status(page, f"status.cohorts = {json.dumps(COHORTS)};")

    open_page(page, tenantgate.metrics_url)

    section = page.find_element(By.ID, "cohorts-section")
    assert section.is_displayed()
    assert texts(page, "#cohorts h3") == ["research"]
    assert "Tenants: team-a, team-q" in texts(page, "#cohorts p")
    assert texts(page, ".cohort-room th") == ["Resource", "capacity", "free to lend"]
    assert texts(page, '#cohorts tr[data-resource="cpu"] td') == ["cpu", "16", "13"]
    assert texts(page, '#cohorts tr[data-member="team-a"] td') == [
        "team-a",
        "cpu 3",
        "-",
        "0.19",
        "1.00",
    ]
    assert texts(page, '#cohorts tr[data-member="team-q"] td') == [
        "team-q",
        "-",
        "cpu 3",
        "0.00",
        "0.00",
    ]
    assert browser.console_errors(page) == []


HOSTILE = '<img src=x onerror="window.injected = true"><script>window.injected = true</script>'


def test_text_from_status_is_shown_as_text_never_run_as_html(
    tenantgate: Tenantgate, page: Chrome
) -> None:
    tenant = {
        "guaranteed": {HOSTILE: "1"},
        "ceiling": {HOSTILE: "2"},
        "used": {"guaranteed": {HOSTILE: "1"}, "burst": {}},
        "pods": 1,
    }
    denial = {
        "at": 0,
        "tenant": HOSTILE,
        "pod": HOSTILE,
        "reason": HOSTILE,
        "message": HOSTILE,
    }
    rewrite_status(
        page,
        f"status.tenants[{json.dumps(HOSTILE)}] = {json.dumps(tenant)};"
        f"status.recent.denials.unshift({json.dumps(denial)});",
    )

    open_page(page, tenantgate.metrics_url)

    assert HOSTILE in texts(page, "#tenant-rows button")
    assert texts(page, "#tenant-rows .bar .resource").count(HOSTILE) == 1
    assert texts(page, "#denial-rows tr:first-child td")[1:] == [HOSTILE] * 4
    assert page.execute_script("return window.injected === undefined;") is True
    assert (
        page.execute_script("return document.querySelectorAll('main img, main script').length;")
        == 0
    )
    assert browser.console_errors(page) == []


def test_ten_thousand_tenants_are_searchable_and_paged_without_console_errors(
    tmp_path: Path, cert_dir: Path, page: Chrome
) -> None:
    config = tmp_path / "large.yaml"
    config.write_text(config_yaml(generate_config(tenants=10_000)))
    with offline_tenantgate(config, cert_dir) as tenantgate:
        open_page(page, tenantgate.metrics_url)

        assert len(texts(page, "#tenant-rows tr[data-tenant]")) == 50
        assert text(page, "#page-info") == "1 to 50 of 10,000 · page 1 of 200"
        names = sorted(tenant_name(i) for i in range(10_000))
        assert texts(page, "#tenant-rows tr[data-tenant] button") == names[:50]

        page.find_element(By.ID, "next").click()
        wait_for(page, lambda s: text(s, "#page-info").startswith("51 to 100 "), "page 2")
        assert texts(page, "#tenant-rows tr[data-tenant] button") == names[50:100]

        wanted = names[7_777]
        page.find_element(By.ID, "search").send_keys(wanted)
        wait_for(
            page, lambda s: texts(s, "#tenant-rows tr[data-tenant] button") == [wanted], wanted
        )
        assert text(page, "#page-info") == "1 to 1 of 1 (of 10,000 tenants) · page 1 of 1"

        page.get(f"{tenantgate.metrics_url}/#page=199")
        wait_for(
            page, lambda s: text(s, "#page-info").startswith("9,951 to 10,000 "), "the last page"
        )
        assert texts(page, "#tenant-rows tr[data-tenant] button") == names[-50:]
        assert browser.console_errors(page) == []
