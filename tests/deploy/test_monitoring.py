"""The monitoring component: alert rules (promtool), runbook links, and that every PromQL
expression of the rules and the dashboard names only series a real server exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testcluster import Cluster
from tests.livemetrics import exposed_series, live_exposition

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "webhooks" / "components" / "monitoring"
RULES = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "tenantgate-dashboard.json"
RULE_TESTS = Path(__file__).parent / "monitoring" / "alerts.test.yaml"
RUNBOOK = REPO / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/tenantgate/tenantgate/blob/main/docs/runbook.md#"
# Series that Prometheus makes itself, not the server: the scrape's own health.
PROMETHEUS_SERIES = {"up"}

PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
PROMQL_KEYWORDS |= {"group_left", "group_right", "inf", "nan"}


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    return groups


def alerting_rules() -> Iterator[dict[str, Any]]:
    for group in rule_groups():
        yield from (rule for rule in group["rules"] if "alert" in rule)


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
            assert query is not None, variable
            yield f"variable {variable['name']}", query.group(1)


def metric_names(expression: str) -> set[str]:
    """The series names a PromQL expression selects (functions, keywords, labels left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, subqueries
    text = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text
    )  # label lists
    text = re.sub(r"\$\w+", "", text)  # dashboard variables
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def test_metric_names_are_found_in_expressions() -> None:
    expression = (
        'histogram_quantile(0.99, sum by (le, endpoint) (rate(a_bucket{x="y"}[5m])))'
        ' > 2.5 and on (pod) b - time() < 14 * 86400 or absent(up{job="j"} == 1)'
    )
    assert metric_names(expression) == {"a_bucket", "b", "up"}


# --------------------------------------------------------------------------- promtool


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            "promtool is not installed, so the alert rules are not unit-tested here "
            "(Debian/Ubuntu: apt-get install prometheus; `make install` does it as root)"
        )
    return found


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_promtool_accepts_the_rules_and_their_templates(tmp_path: Path) -> None:
    rules = tmp_path / "tenantgate.rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False))

    result = run([promtool(), "check", "rules", str(rules)], tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_of_every_alert(tmp_path: Path) -> None:
    groups = rule_groups()
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)  # see the header of alerts.test.yaml
    (tmp_path / "tenantgate.rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)

    result = run([promtool(), "test", "rules", RULE_TESTS.name], tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_unit_test() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    quiet = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if not case.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in alerting_rules()}
    assert alerts - fired == set(), "alerts no test makes fire"
    # Every alert also has series that must not fire it, except the certificate one whose
    # test shows a 15-day and a not-yet-served certificate staying quiet in the same case.
    assert alerts - quiet == {"TenantgateCertificateExpiresSoon"}


# --------------------------------------------------------------------------- runbook


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """Anchor -> body of each ``## `` section of docs/runbook.md."""
    sections: dict[str, str] = {}
    parts = re.split(r"^## (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        sections[github_anchor(heading)] = body
    return sections


def test_every_alert_links_its_runbook_section() -> None:
    sections = runbook_sections()
    for rule in alerting_rules():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK_URL), url
        anchor = url.removeprefix(RUNBOOK_URL)
        assert anchor == rule["alert"].lower(), f"{rule['alert']}: link its own section"
        assert anchor in sections, f"docs/runbook.md has no section for {rule['alert']}"
        body = sections[anchor]
        assert "What to do" in body, f"runbook {rule['alert']}: say what to do"


def test_every_alert_section_of_the_runbook_is_an_alert() -> None:
    alerts = {rule["alert"].lower() for rule in alerting_rules()}
    documented = {anchor for anchor in runbook_sections() if anchor.startswith("tenantgate")}
    assert documented == alerts


# --------------------------------------------------------------------------- exposed series


def test_every_expression_names_only_series_the_server_exposes(
    kube: Cluster, kube_cert_dir: Path
) -> None:
    exposed = exposed_series(live_exposition(kube, kube_cert_dir)) | PROMETHEUS_SERIES
    expressions = [(f"alert {r['alert']}", str(r["expr"])) for r in alerting_rules()]
    expressions += list(dashboard_expressions())
    unknown = {
        (where, name)
        for where, expression in expressions
        for name in metric_names(expression)
        if name not in exposed
    }
    assert unknown == set()
    assert len(expressions) > 30


def test_the_dashboard_is_shipped_as_the_component_configmap() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [DASHBOARD.name]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    titles = {panel["title"] for panel in dashboard["panels"]}
    for wanted in ("Admissions by verdict", "Denials by reason", "Review latency", "Pods queued"):
        assert wanted in titles


def test_the_up_series_selects_the_job_the_servicemonitor_makes() -> None:
    """The Prometheus Operator names a ServiceMonitor's job after the Service it scrapes."""
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    service = yaml.safe_load((REPO / "deploy" / "webhooks" / "service.yaml").read_text())
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["honorLabels"] is True, "tenantgate's own endpoint label must keep its name"
    jobs = {
        job
        for rule in alerting_rules()
        for job in re.findall(r'\bup\{job="([^"]+)"', str(rule["expr"]))
    }
    assert jobs == {service["metadata"]["name"]}
