"""Tests for admission.metrics: the webhook's own registry and the /metrics route."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Gauge
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from admission.metrics import Metrics, endpoint_label, metrics_route


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
