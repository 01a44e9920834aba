"""Prometheus metrics of the HTTP edge, on a registry owned by the app (never the global one).

Other components register their own metrics on :attr:`Metrics.registry` (plain
``Gauge(..., registry=metrics.registry)`` or a custom collector), and ``/metrics`` exposes them
all. Every label takes values from a small fixed set, never from request content.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import certs
from admission.connections import ConnectionGuard

logger = logging.getLogger(__name__)

NAMESPACE: Final = "tenantgate"
ENDPOINTS: Final = ("mutate", "validate")
OTHER_ENDPOINT: Final = "other"

# An admission webhook answers in milliseconds; the API server gives up after timeoutSeconds
# (at most 30 s), so the top buckets only catch pathologies.
DURATION_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


def endpoint_label(path: str) -> str:
    """The ``endpoint`` label for a request path: ``mutate``, ``validate`` or ``other``."""
    name = path.strip("/")
    return name if name in ENDPOINTS else OTHER_ENDPOINT


class Metrics:
    """The webhook's metrics. Create one per app (tests create many; nothing is global)."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.reviews = Counter(
            "admission_reviews",
            "AdmissionReviews answered, by endpoint, operation, verdict and dry run.",
            ["endpoint", "operation", "allowed", "dry_run"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.review_duration = Histogram(
            "admission_review_duration_seconds",
            "Time from receiving an admission request to answering it (any status).",
            ["endpoint"],
            namespace=NAMESPACE,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.in_flight_reviews = Gauge(
            "admission_reviews_in_flight",
            "Admission requests being answered right now.",
            ["endpoint"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.http_errors = Counter(
            "http_errors",
            "Requests answered with an HTTP error (4xx malformed request, 5xx internal error).",
            ["endpoint", "code", "reason"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.build_info = Info(
            "build", "tenantgate build information.", namespace=NAMESPACE, registry=self.registry
        )
        self.build_info.info({"version": _package_version()})
        # Series that exist from the start, so rates and alerts work before the first request.
        # Each review updates three series: their children are looked up once, not per review.
        self._durations = {
            endpoint: self.review_duration.labels(endpoint) for endpoint in ENDPOINTS
        }
        self._in_flight = {
            endpoint: self.in_flight_reviews.labels(endpoint) for endpoint in ENDPOINTS
        }
        self._reviews: dict[tuple[str, str, bool, bool], Counter] = {}

    def observe_review(
        self, endpoint: str, *, operation: str, allowed: bool, dry_run: bool
    ) -> None:
        key = (endpoint, operation, allowed, dry_run)
        child = self._reviews.get(key)
        if child is None:
            child = self.reviews.labels(endpoint, operation, _bool(allowed), _bool(dry_run))
            self._reviews[key] = child
        child.inc()

    def observe_duration(self, endpoint: str, seconds: float) -> None:
        child = self._durations.get(endpoint)
        (child if child is not None else self.review_duration.labels(endpoint)).observe(seconds)

    def count_http_error(self, endpoint: str, *, code: int, reason: str) -> None:
        self.http_errors.labels(endpoint, str(code), reason).inc()

    def in_flight(self, endpoint: str) -> AbstractContextManager[None]:
        """Counts the enclosed block in the in-flight gauge."""
        child = self._in_flight.get(endpoint)
        gauge = child if child is not None else self.in_flight_reviews.labels(endpoint)
        tracker: AbstractContextManager[None] = gauge.track_inprogress()
        return tracker

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition (Prometheus text or OpenMetrics, per ``Accept``) and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


def metrics_route(metrics: Metrics) -> Route:
    """``GET /metrics``."""

    async def exposition(request: Request) -> Response:
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(body, headers={"content-type": content_type})

    return Route("/metrics", exposition, methods=["GET"], name="metrics")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _package_version() -> str:
    try:
        return version("tenantgate")
    except PackageNotFoundError:
        return "unknown"


class ConnectionCollector(Collector):
    """The webhook's open connections, and those it closed by reason (see
    :mod:`admission.connections`)."""

    def __init__(self, guard: Callable[[], ConnectionGuard | None]) -> None:
        self._guard = guard

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        guard = self._guard()
        if guard is None:
            return
        opened = GaugeMetricFamily(
            f"{NAMESPACE}_connections_open", "Webhook connections open (TLS handshake done)."
        )
        opened.add_metric([], guard.open_connections)
        yield opened
        closed = CounterMetricFamily(
            f"{NAMESPACE}_connections_closed",
            "Webhook connections the server closed: header_timeout (a request head too slow), "
            "idle_timeout, evicted (the longest idle, past max_connections), over_capacity "
            "(refused: max_connections, none idle), drained (idle at shutdown).",
            labels=["reason"],
        )
        for reason, count in sorted(guard.closed.items()):
            closed.add_metric([reason], count)
        yield closed


class CertificateCollector(Collector):
    """The certificate served, and the reloads refused (:class:`certs.ReloadingServerContext`)."""

    def __init__(self, source: Callable[[], certs.ReloadingServerContext | None]) -> None:
        self._source = source

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        tls = self._source()
        if tls is None:
            return
        expiry = GaugeMetricFamily(
            f"{NAMESPACE}_certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires (Unix time).",
        )
        expiry.add_metric([], tls.certificate.not_after.timestamp())
        yield expiry
        stale = GaugeMetricFamily(
            f"{NAMESPACE}_certificate_stale",
            "1 when the certificate files were refused and the last good certificate is served.",
        )
        stale.add_metric([], 1.0 if tls.stale else 0.0)
        yield stale
        failures = CounterMetricFamily(
            f"{NAMESPACE}_certificate_reload_failures",
            "Certificate files refused, by reason: unreadable, key_mismatch, not_yet_valid, "
            "expired, untrusted (not signed by the CA clients trust), wrong_names.",
            labels=["reason"],
        )
        for reason, count in sorted(tls.rejections.items()):
            failures.add_metric([reason], count)
        yield failures
