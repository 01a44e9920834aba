"""Tests for admission.metrics: the webhook's own registry and the /metrics route."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Gauge
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from admission.health import Check, Readiness
from admission.metrics import Metrics, endpoint_label, metrics_route
from tenants.verdicts import DENIAL_CAUSES, AdmissionInput, Verdict


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def get_metrics(metrics: Metrics, *, accept: str | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=Starlette(routes=[metrics_route(metrics)]))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            headers = {"accept": accept} if accept else {}
            return await client.get("/metrics", headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("path", "label"),
    [("/mutate", "mutate"), ("/validate", "validate"), ("/", "other"), ("/mutate/x", "other")],
)
def test_endpoint_label(path: str, label: str) -> None:
    assert endpoint_label(path) == label


def test_each_instance_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()  # would raise "Duplicated timeseries" on a shared one

    first.observe_review("mutate", operation="CREATE", allowed=True, dry_run=False)

    assert first.registry is not second.registry
    assert first.registry is not REGISTRY
    labels = {"endpoint": "mutate", "operation": "CREATE", "allowed": "true", "dry_run": "false"}
    assert sample(first, "tenantgate_admission_reviews_total", **labels) == 1
    assert sample(second, "tenantgate_admission_reviews_total", **labels) is None


def test_uses_a_given_registry() -> None:
    registry = CollectorRegistry()

    assert Metrics(registry=registry).registry is registry


def test_reviews_are_counted_by_labels() -> None:
    metrics = Metrics()

    metrics.observe_review("validate", operation="UPDATE", allowed=False, dry_run=True)
    metrics.observe_review("validate", operation="UPDATE", allowed=False, dry_run=True)

    labels = {"endpoint": "validate", "operation": "UPDATE", "allowed": "false", "dry_run": "true"}
    assert sample(metrics, "tenantgate_admission_reviews_total", **labels) == 2


def test_durations_are_observed() -> None:
    metrics = Metrics()

    metrics.observe_duration("mutate", 0.003)

    assert sample(metrics, "tenantgate_admission_review_duration_seconds_count", endpoint="mutate")
    assert (
        sample(
            metrics,
            "tenantgate_admission_review_duration_seconds_bucket",
            endpoint="mutate",
            le="0.005",
        )
        == 1
    )
    assert (
        sample(
            metrics,
            "tenantgate_admission_review_duration_seconds_bucket",
            endpoint="mutate",
            le="0.0025",
        )
        == 0
    )


def test_http_errors_are_counted_by_code_and_reason() -> None:
    metrics = Metrics()

    metrics.count_http_error("other", code=413, reason="body_too_large")

    assert (
        sample(
            metrics,
            "tenantgate_http_errors_total",
            endpoint="other",
            code="413",
            reason="body_too_large",
        )
        == 1
    )


def test_in_flight_tracks_the_enclosed_block() -> None:
    metrics = Metrics()

    with metrics.in_flight("mutate"):
        assert sample(metrics, "tenantgate_admission_reviews_in_flight", endpoint="mutate") == 1

    assert sample(metrics, "tenantgate_admission_reviews_in_flight", endpoint="mutate") == 0


def test_series_exist_before_the_first_request() -> None:
    metrics = Metrics()

    for endpoint in ("mutate", "validate"):
        assert sample(metrics, "tenantgate_admission_reviews_in_flight", endpoint=endpoint) == 0
        assert (
            sample(metrics, "tenantgate_admission_review_duration_seconds_count", endpoint=endpoint)
            == 0
        )


def test_build_info() -> None:
    families = {
        f.name: f for f in text_string_to_metric_families(Metrics().render(None)[0].decode())
    }

    (build,) = families["tenantgate_build_info"].samples
    assert build.value == 1
    assert build.labels["version"]


def test_extra_metrics_share_the_registry() -> None:
    metrics = Metrics()
    usage = Gauge("tenantgate_ledger_usage", "Usage.", ["tenant"], registry=metrics.registry)
    usage.labels("team-a").set(3)

    body, _ = metrics.render(None)

    assert b'tenantgate_ledger_usage{tenant="team-a"} 3.0' in body


def test_route_serves_prometheus_text() -> None:
    metrics = Metrics()
    metrics.observe_review("mutate", operation="CREATE", allowed=True, dry_run=False)

    response = get_metrics(metrics)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert {
        "tenantgate_admission_reviews",
        "tenantgate_admission_review_duration_seconds",
        "tenantgate_admission_reviews_in_flight",
        "tenantgate_http_errors",
        "tenantgate_build_info",
    } <= families.keys()


def test_route_negotiates_openmetrics() -> None:
    response = get_metrics(Metrics(), accept="application/openmetrics-text; version=1.0.0")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith(OPENMETRICS)
    assert response.text.endswith("# EOF\n")


# --------------------------------------------------------------------------- decisions


def pod_request(
    namespace: str = "team-a",
    *,
    operation: str = "CREATE",
    dry_run: bool = False,
    kind: str = "Pod",
    sub_resource: str = "",
) -> AdmissionInput:
    return AdmissionInput(
        uid="u",
        operation=operation,
        namespace=namespace,
        name="p",
        object={},
        kind=kind,
        sub_resource=sub_resource,
        dry_run=dry_run,
    )


ADMITTED = Verdict(
    allowed=True,
    audit_annotations={
        "tenant": "team-a",
        "tier": "burst",
        "profile": "web-frontend",
        "classified-by": "rule/web",
        "reservation": "r-1",
    },
)


def test_an_admission_is_counted_with_its_tenant_tier_profile_and_rule() -> None:
    metrics = Metrics()

    metrics.observe_decision("mutate", pod_request(), ADMITTED)
    metrics.observe_decision("mutate", pod_request(), ADMITTED)

    labels = {"tenant": "team-a", "tier": "burst", "profile": "web-frontend"}
    assert sample(metrics, "tenantgate_admissions_total", **labels, verdict="allowed") == 2
    assert (
        sample(metrics, "tenantgate_classifications_total", profile="web-frontend", rule="web") == 2
    )


@pytest.mark.parametrize(
    ("classified_by", "rule"),
    [("rule/batch-jobs", "batch-jobs"), ("default", "(default)"), ("opt-in", "(opt-in)")],
)
def test_the_rule_label_names_the_rule_or_how_the_profile_was_chosen(
    classified_by: str, rule: str
) -> None:
    metrics = Metrics()
    verdict = Verdict(
        allowed=True,
        audit_annotations={
            "tenant": "t",
            "tier": "guaranteed",
            "profile": "p",
            "classified-by": classified_by,
        },
    )

    metrics.observe_decision("mutate", pod_request(), verdict)

    assert sample(metrics, "tenantgate_classifications_total", profile="p", rule=rule) == 1


def test_a_denial_is_counted_by_tenant_and_cause() -> None:
    metrics = Metrics(tenant_of={"team-a": "team-a"}.get)

    over = Verdict.deny("exceeded tenant quota", cause="over_quota")
    metrics.observe_decision("mutate", pod_request(), over)
    metrics.observe_decision("validate", pod_request(), over)
    metrics.observe_decision("validate", pod_request(), Verdict.deny("?"))

    assert sample(metrics, "tenantgate_denials_total", tenant="team-a", reason="over_quota") == 2
    assert sample(metrics, "tenantgate_denials_total", tenant="team-a", reason="other") == 1
    # Only /mutate decides an admission: the pod denied by /validate is no second admission.
    denied = {"tenant": "team-a", "tier": "", "profile": "", "verdict": "denied"}
    assert sample(metrics, "tenantgate_admissions_total", **denied) == 1


def test_namespaces_no_tenant_claims_share_one_label_value() -> None:
    """A pod cannot invent label values: every unclaimed namespace counts under tenant=""."""
    metrics = Metrics(tenant_of={"team-a": "team-a"}.get)
    unclaimed = Verdict.deny("not claimed", cause="unclaimed_namespace")

    for number in range(50):
        namespace = f"random-{number}"
        metrics.observe_decision("mutate", pod_request(namespace), Verdict.allow())
        metrics.observe_decision("validate", pod_request(namespace), unclaimed)

    families = {f.name: f for f in text_string_to_metric_families(metrics.render(None)[0].decode())}
    seen = {
        (name, key, value)
        for name in ("tenantgate_admissions", "tenantgate_denials")
        for s in families[name].samples
        for key, value in s.labels.items()
    }
    assert {value for _, key, value in seen if key == "tenant"} == {""}
    assert (
        sample(metrics, "tenantgate_denials_total", tenant="", reason="unclaimed_namespace") == 50
    )
    allowed = {"tenant": "", "tier": "", "profile": "", "verdict": "allowed"}
    assert sample(metrics, "tenantgate_admissions_total", **allowed) == 50


@pytest.mark.parametrize(
    "request_",
    [
        pod_request(dry_run=True),
        pod_request(kind="Deployment"),
        pod_request(operation="UPDATE"),
        pod_request(sub_resource="resize", operation="UPDATE"),
    ],
)
def test_dry_runs_other_kinds_and_updates_are_no_admissions(request_: AdmissionInput) -> None:
    metrics = Metrics()

    metrics.observe_decision("mutate", request_, ADMITTED)
    metrics.observe_decision("validate", request_, ADMITTED)

    families = {f.name: f for f in text_string_to_metric_families(metrics.render(None)[0].decode())}
    assert families["tenantgate_admissions"].samples == []
    assert families["tenantgate_classifications"].samples == []


def test_update_denials_are_counted_but_dry_run_denials_are_not() -> None:
    metrics = Metrics(tenant_of=lambda namespace: "team-a")
    managed = Verdict.deny("label is managed", cause="managed_metadata")

    metrics.observe_decision("validate", pod_request(operation="UPDATE"), managed)
    metrics.observe_decision("validate", pod_request(operation="UPDATE", dry_run=True), managed)

    labels = {"tenant": "team-a", "reason": "managed_metadata"}
    assert sample(metrics, "tenantgate_denials_total", **labels) == 1


def test_every_denial_cause_is_a_reason_label_value() -> None:
    metrics = Metrics()
    for cause in DENIAL_CAUSES:
        metrics.observe_decision("validate", pod_request(), Verdict.deny("no", cause=cause))

    for cause in DENIAL_CAUSES:
        assert sample(metrics, "tenantgate_denials_total", tenant="", reason=cause) == 1


# --------------------------------------------------------------------------- readiness, certificate


def test_readiness_checks_are_exposed_one_series_each() -> None:
    metrics, readiness = Metrics(), Readiness()
    metrics.watch_readiness(readiness)
    readiness.mark_ok("config", "loaded")

    assert sample(metrics, "tenantgate_readiness", check="config") == 1
    assert sample(metrics, "tenantgate_readiness", check="certs") == 0  # pending
    readiness.mark_ok("certs")
    readiness.add_probe("cluster", lambda: Check(ok=False, detail="not synced"))
    assert sample(metrics, "tenantgate_readiness", check="certs") == 1
    assert sample(metrics, "tenantgate_readiness", check="cluster") == 0


def test_the_served_certificate_expiry_is_a_timestamp() -> None:
    metrics = Metrics()
    assert sample(metrics, "tenantgate_certificate_expiration_timestamp_seconds") == 0

    metrics.observe_certificate(not_after=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC))

    expected = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert sample(metrics, "tenantgate_certificate_expiration_timestamp_seconds") == expected


def test_no_family_exposes_created_series() -> None:
    metrics = Metrics()
    metrics.observe_review("mutate", operation="CREATE", allowed=True, dry_run=False)
    metrics.observe_duration("validate", 0.01)

    text = get_metrics(metrics).text

    created = sorted(
        family.name
        for family in text_string_to_metric_families(text)
        if family.name.endswith("_created")
    )
    assert created == []
    assert "_created" not in text
