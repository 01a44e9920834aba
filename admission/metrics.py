"""Prometheus metrics of the HTTP edge, on a registry owned by the app (never the global one).

Other components register their own metrics on :attr:`Metrics.registry` (plain
``Gauge(..., registry=metrics.registry)`` or a custom collector), and ``/metrics`` exposes them
all. Every label takes values from a small fixed set or from the config (tenant, profile and
rule names), never from request content: a pod in a namespace no tenant claims is counted under
``tenant=""``, whatever the namespace is called.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import certs
from admission.connections import ConnectionGuard
from admission.health import Readiness
from admission.version import package_version
from tenants.verdicts import AdmissionInput, Verdict

logger = logging.getLogger(__name__)

NAMESPACE: Final = "tenantgate"

# No `_created` series: they double every counter and histogram for a start time that
# process_start_time_seconds already gives, and the OpenMetrics text format is not served.
disable_created_metrics()  # type: ignore[no-untyped-call]
ENDPOINTS: Final = ("mutate", "validate")
OTHER_ENDPOINT: Final = "other"

# An admission webhook answers in milliseconds; the API server gives up after timeoutSeconds
# (at most 30 s), so the top buckets only catch pathologies.
DURATION_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


# The ``reason`` of a denial whose verdict names no cause.
OTHER_DENIAL: Final = "other"

TenantOf = Callable[[str], str | None]
"""The tenant claiming a namespace (``None``: no tenant), for the tenant label of denials."""


def endpoint_label(path: str) -> str:
    """The ``endpoint`` label for a request path: ``mutate``, ``validate`` or ``other``."""
    name = path.strip("/")
    return name if name in ENDPOINTS else OTHER_ENDPOINT


class Metrics:
    """The webhook's metrics. Create one per app (tests create many; nothing is global)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        tenant_of: TenantOf = lambda namespace: None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._tenant_of = tenant_of
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
        self.admissions = Counter(
            "admissions",
            "Pod creations decided by /mutate (dry runs excluded), by tenant, tier, profile and "
            'verdict; tenant="" for namespaces no tenant claims, tier and profile "" when denied.',
            ["tenant", "tier", "profile", "verdict"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.denials = Counter(
            "denials",
            "Pods denied by either webhook (dry runs excluded), by tenant and reason.",
            ["tenant", "reason"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.classifications = Counter(
            "classifications",
            "Pods admitted by /mutate, by the profile they got and the rule that chose it "
            '(a rule name, "(opt-in)" for the profile label, "(default)" when no rule matched).',
            ["profile", "rule"],
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.certificate_expiration = Gauge(
            "certificate_expiration_timestamp_seconds",
            "When the serving certificate new connections get expires (Unix time; 0 until one "
            "is served).",
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.build_info = Info(
            "build", "tenantgate build information.", namespace=NAMESPACE, registry=self.registry
        )
        self.build_info.info({"version": package_version()})
        # Series that exist from the start, so rates and alerts work before the first request.
        # Each review updates three series: their children are looked up once, not per review.
        self._durations = {
            endpoint: self.review_duration.labels(endpoint) for endpoint in ENDPOINTS
        }
        self._in_flight = {
            endpoint: self.in_flight_reviews.labels(endpoint) for endpoint in ENDPOINTS
        }
        self._reviews: dict[tuple[str, str, bool, bool], Counter] = {}
        self._admissions: dict[tuple[str, str, str, str], Counter] = {}
        self._denials: dict[tuple[str, str], Counter] = {}
        self._classifications: dict[tuple[str, str], Counter] = {}

    def tenant_of(self, namespace: str) -> str | None:
        """The tenant claiming ``namespace`` (``None``: no tenant)."""
        return self._tenant_of(namespace)

    def observe_review(
        self, endpoint: str, *, operation: str, allowed: bool, dry_run: bool
    ) -> None:
        key = (endpoint, operation, allowed, dry_run)
        child = self._reviews.get(key)
        if child is None:
            child = self.reviews.labels(endpoint, operation, _bool(allowed), _bool(dry_run))
            self._reviews[key] = child
        child.inc()

    def observe_decision(self, endpoint: str, request: AdmissionInput, verdict: Verdict) -> None:
        """Counts what the policy decided about a pod (nothing for dry runs and other kinds).

        Admissions and classifications are counted where they are decided, at /mutate on pod
        CREATE; denials at whichever webhook denied, UPDATEs included.
        """
        if request.dry_run or request.kind != "Pod" or request.group:
            return
        decided_here = endpoint == "mutate" and request.operation == "CREATE"
        decided_here = decided_here and not request.sub_resource
        if verdict.allowed:
            if not decided_here:
                return
            audit = verdict.audit_annotations
            profile = audit.get("profile", "")
            self._count_admission(audit.get("tenant", ""), audit.get("tier", ""), profile, True)
            if profile:
                self._count_classification(profile, _rule_label(audit.get("classified-by", "")))
            return
        tenant = self._tenant_of(request.namespace) or ""
        key = (tenant, verdict.cause or OTHER_DENIAL)
        child = self._denials.get(key)
        if child is None:
            child = self._denials[key] = self.denials.labels(*key)
        child.inc()
        if decided_here:
            self._count_admission(tenant, "", "", False)

    def _count_admission(self, tenant: str, tier: str, profile: str, allowed: bool) -> None:
        key = (tenant, tier, profile, "allowed" if allowed else "denied")
        child = self._admissions.get(key)
        if child is None:
            child = self._admissions[key] = self.admissions.labels(*key)
        child.inc()

    def _count_classification(self, profile: str, rule: str) -> None:
        key = (profile, rule)
        child = self._classifications.get(key)
        if child is None:
            child = self._classifications[key] = self.classifications.labels(*key)
        child.inc()

    def observe_certificate(self, *, not_after: datetime) -> None:
        """Records the certificate being served (at start and after each reload)."""
        self.certificate_expiration.set(not_after.timestamp())

    def watch_readiness(self, readiness: Readiness) -> None:
        """Exposes each readiness check as ``tenantgate_readiness{check}`` (1 ok, 0 failing)."""
        self.registry.register(_ReadinessCollector(readiness))

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


class _ReadinessCollector(Collector):
    """``/readyz`` as a metric: a replica is ready when all its checks are 1."""

    def __init__(self, readiness: Readiness) -> None:
        self._readiness = readiness

    def describe(self) -> Iterable[Metric]:
        return []  # the checks are only known when scraped

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            f"{NAMESPACE}_readiness",
            "Readiness checks of this replica (config, certs, cluster, ledger): 1 ok, 0 failing; "
            "/readyz answers 200 when all are 1.",
            labels=["check"],
        )
        for name, check in sorted(self._readiness.report().checks.items()):
            family.add_metric([name], 1.0 if check.ok else 0.0)
        yield family


def metrics_route(metrics: Metrics) -> Route:
    """``GET /metrics``."""

    async def exposition(request: Request) -> Response:
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(body, headers={"content-type": content_type})

    return Route("/metrics", exposition, methods=["GET"], name="metrics")


def _rule_label(classified_by: str) -> str:
    # "rule/NAME" (the pod's classified-by annotation) -> NAME; "default" -> "(default)".
    # Rule names cannot hold parentheses, so the two kinds never collide.
    kind, _, name = classified_by.partition("/")
    return name if kind == "rule" and name else f"({classified_by or 'unknown'})"


def _bool(value: bool) -> str:
    return "true" if value else "false"


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
    """The certificate reloads refused (:class:`certs.ReloadingServerContext`); when the served
    certificate expires is :attr:`Metrics.certificate_expiration`."""

    def __init__(self, source: Callable[[], certs.ReloadingServerContext | None]) -> None:
        self._source = source

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        tls = self._source()
        if tls is None:
            return
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
