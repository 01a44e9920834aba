"""What the ledger says right now: the ``/status`` JSON and the matching Prometheus metrics.

``GET /status`` (metrics port) answers::

    {"tenants": {NAME: {"guaranteed": {RES: QTY}, "ceiling": {RES: QTY},
                        "used": {"guaranteed": {RES: QTY}, "burst": {RES: QTY}},
                        "reservations": N, "holds": N, "pods": N,
                        "queue": {"pending": N, "oldestWaitSeconds": S, "first": [...]},
                        "queued": [{"id", "priority", "queuedAt", ...}]}},
     "synced": bool, "mode": "kubeconfig" | "in-cluster" | "offline", "cluster": URL | null,
     "config": {...}, "identity": {"user": USER, "source": "SelfSubjectReview" | "settings",
                                   "problem": TEXT | null},
     "pods": N, "lastRecount": UNIX | null, "generatedAt": UNIX,
     "queue": {"leading": bool, "releasing": N, "givenUp": {...},
               "releasedUnschedulable": {...}},
     "recent": {"limit": N, "denials": [...], "releases": [...]},
     "certificate": {"notAfter": UNIX, "notBefore": UNIX, "serial": HEX} | null,
     "replica": {"role": "leader" | "follower", "election": bool, "holder": ..., "identity": ...},
     "readiness": {"ready": bool, "checks": {NAME: {"ok": bool, "detail": TEXT}}},
     "version": TEXT}

The last five keys are there when the runtime provides them (``tenantgate serve`` does):
``recent`` is :class:`tenants.recent.RecentDecisions` (the latest denials and releases, messages
only), ``certificate`` the serving certificate new connections get.

``GET /status?q=TEXT&offset=N&limit=N`` answers only the tenants whose name contains ``TEXT``
(any case), ``limit`` of them from ``offset`` in name order, and adds
``"page": {"matched": N, "total": N, "offset": N, "limit": N}``: the status page asks for one
page at a time, so that a refresh with 10,000 tenants builds 50 of them, not 10,000.

With cohorts configured, the document also has::

     "cohorts": {ROOT: {"cohorts": [...], "members": [...], "capacity": {RES: QTY},
                        "free": {RES: QTY}, "borrowed": {TENANT: {RES: QTY}},
                        "lent": {TENANT: {RES: QTY}}, "shares": {TENANT: S},
                        "fairShares": {TENANT: S}}}}

``cohorts`` (only with cohorts configured) has one entry per cohort tree, named by its root:
its lendable capacity, the room free to lend now, what each member borrows past its guarantee
and lends of its unused guarantee, and each member's share and fair share (fractions).

``queue`` per tenant is what the controller's queue holds (only the replica holding the
controller Lease watches pods); ``queued`` the ledger's queued entries, which every replica
shares, so that ``tenantgate review --usage`` tells a pod's position. ``GET /queue[?tenant=]``
lists every queued pod with its position, effective priority, request and time waited.

Quantities are canonical Kubernetes strings, keys sorted. ``tenantgate usage`` renders it, and
``tenants.ledger.ledger_from_usage`` reads it back (so CI can ask whether a pod would still fit
at today's usage). :class:`StatusCollector` exposes the same numbers (in base units) plus the
controller's counters to Prometheus; both are read on the event-loop thread, where the ledger
changes, so one answer is one consistent snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from classifier.quantities import Quantity
from tenants.cohorts.view import PoolView, pool_views
from tenants.config import Policy
from tenants.controller import ControllerStats
from tenants.ledger import TenantLedger, ledger_to_json

logger = logging.getLogger(__name__)

_NANO = 10**9


@dataclass(frozen=True, slots=True)
class StatusSources:
    """Where the status reads from; every callable is cheap and called on the event loop."""

    policy: Callable[[], Policy]
    ledgers: Callable[[], Mapping[str, TenantLedger]]
    synced: Callable[[], bool]
    mode: str
    cluster: str | None = None
    stats: Callable[[], ControllerStats | None] = lambda: None
    pods: Callable[[], int | None] = lambda: None
    config: Callable[[], Mapping[str, Any]] = dict
    identity: Callable[[], Mapping[str, Any]] = dict
    queue: Callable[[str, float], Mapping[str, Any]] | None = None  # per tenant summary
    releases: Callable[[], Mapping[str, Any]] = dict
    queue_listing: Callable[[float, str | None], Mapping[str, Any]] | None = None
    clock: Callable[[], float] = time.time
    recent: Callable[[], Mapping[str, Any]] | None = None
    certificate: Callable[[], Mapping[str, Any] | None] | None = None
    replica: Callable[[], Mapping[str, Any]] | None = None
    readiness: Callable[[], Mapping[str, Any]] | None = None
    version: str | None = None


MAX_LIMIT: Final = 1000


@dataclass(frozen=True, slots=True)
class TenantSelection:
    """Which tenants one ``/status`` answer holds: names containing ``text``, one page."""

    text: str = ""
    offset: int = 0
    limit: int = MAX_LIMIT

    def select(self, names: Iterable[str]) -> tuple[list[str], int]:
        """The names of the page, in order, and how many matched in all."""
        needle = self.text.casefold()
        matched = [name for name in names if needle in name.casefold()] if needle else list(names)
        return matched[self.offset : self.offset + self.limit], len(matched)


class BadSelection(ValueError):
    """A ``/status`` query that cannot be answered (the message says why)."""


def tenant_selection(params: Mapping[str, str]) -> TenantSelection | None:
    """The selection ``q``, ``offset`` and ``limit`` ask for; ``None`` when none is given."""
    if not any(key in params for key in ("q", "offset", "limit")):
        return None
    numbers: dict[str, int] = {}
    for key, default, top in (("offset", 0, None), ("limit", MAX_LIMIT, MAX_LIMIT)):
        text = params.get(key)
        if text is None or text == "":
            numbers[key] = default
            continue
        if not text.isdigit():
            raise BadSelection(f"{key} must be a whole number, got {text[:20]!r}")
        value = int(text)
        if top is not None and not 1 <= value <= top:
            raise BadSelection(f"{key} must be between 1 and {top}, got {value}")
        numbers[key] = value
    return TenantSelection(params.get("q", "")[:253], numbers["offset"], numbers["limit"])


def _quantities(amount: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(amount[name]) for name in sorted(amount)}


def _holds(ledger: TenantLedger) -> int:
    """How many of the tenant's bookings are holds: booked by /mutate, not yet validated."""
    return sum(1 for reservation in ledger.reservations.values() if reservation.held)


def _pools(policy: Policy, ledgers: Mapping[str, TenantLedger]) -> list[PoolView]:
    if not policy.cohorts:
        return []
    totals = {name: ledger.total() for name, ledger in ledgers.items()}
    waiting = {name for name, ledger in ledgers.items() if ledger.queued}
    return pool_views(policy.cohorts, totals, waiting)


def _cohorts_document(pools: Iterable[PoolView]) -> dict[str, Any]:
    return {
        view.cohort: {
            "cohorts": list(view.cohorts),
            "members": list(view.members),
            "capacity": _quantities(view.capacity),
            "free": _quantities(view.free),
            "borrowed": {m: _quantities(view.borrowed[m]) for m in view.members},
            "lent": {m: _quantities(view.lent[m]) for m in view.members},
            "shares": {m: round(float(view.shares[m]), 4) for m in view.members},
            "fairShares": {m: round(float(view.fair_shares[m]), 4) for m in view.members},
        }
        for view in pools
    }


def status_document(
    sources: StatusSources, *, now: float | None = None, selection: TenantSelection | None = None
) -> dict[str, Any]:
    """The ``/status`` document (see the module docstring)."""
    policy = sources.policy()
    ledgers = sources.ledgers()
    moment = sources.clock() if now is None else now
    names = sorted(policy.tenants)
    page: dict[str, int] | None = None
    if selection is not None:
        names, matched = selection.select(names)
        page = {
            "matched": matched,
            "total": len(policy.tenants),
            "offset": selection.offset,
            "limit": selection.limit,
        }
    tenants: dict[str, Any] = {}
    for name in names:
        quota = policy.tenants[name].quota
        ledger = ledgers.get(name) or TenantLedger(name)
        tenants[name] = {
            "guaranteed": _quantities(quota.guaranteed),
            "ceiling": _quantities(quota.ceiling),
            "used": {
                "guaranteed": _quantities(ledger.guaranteed),
                "burst": _quantities(ledger.burst),
            },
            "reservations": len(ledger.reservations),
            "holds": _holds(ledger),
            "pods": len(ledger.charges),
        }
        if sources.queue is not None:
            tenants[name]["queue"] = dict(sources.queue(name, moment))
        if ledger.queued:
            tenants[name]["queued"] = ledger_to_json(ledger, charges=False)["queued"]
    stats = sources.stats()
    document: dict[str, Any] = {
        "tenants": tenants,
        "synced": sources.synced(),
        "mode": sources.mode,
        "cluster": sources.cluster,
        "config": dict(sources.config()),
        "identity": dict(sources.identity()),
        "pods": sources.pods(),
        "lastRecount": stats.last_recount_at if stats is not None else None,
        "generatedAt": moment,
        "queue": dict(sources.releases()),
    }
    if page is not None:
        document["page"] = page
    pools = _pools(policy, ledgers)
    if pools:
        document["cohorts"] = _cohorts_document(pools)
    document.update(_replica_facts(sources))
    return document


def _replica_facts(sources: StatusSources) -> dict[str, Any]:
    """The keys only a running server has: recent decisions, certificate, role, readiness."""
    facts: dict[str, Any] = {}
    if sources.recent is not None:
        facts["recent"] = dict(sources.recent())
    if sources.certificate is not None:
        certificate = sources.certificate()
        facts["certificate"] = dict(certificate) if certificate is not None else None
    if sources.replica is not None:
        facts["replica"] = dict(sources.replica())
    if sources.readiness is not None:
        facts["readiness"] = dict(sources.readiness())
    if sources.version is not None:
        facts["version"] = sources.version
    return facts


def status_route(sources: StatusSources) -> Route:
    """``GET /status[?q=TEXT&offset=N&limit=N]``."""

    async def status(request: Request) -> Response:
        try:
            selection = tenant_selection(request.query_params)
        except BadSelection as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(status_document(sources, selection=selection))

    return Route("/status", status, methods=["GET"], name="status")


def queue_route(sources: StatusSources) -> Route:
    """``GET /queue[?tenant=NAME]``: every queued pod, first in line first."""

    async def queue(request: Request) -> Response:
        tenant = request.query_params.get("tenant") or None
        if tenant is not None and tenant not in sources.policy().tenants:
            return JSONResponse({"error": f"unknown tenant {tenant}"}, status_code=404)
        listing = sources.queue_listing
        now = sources.clock()
        document = dict(listing(now, tenant)) if listing is not None else {"tenants": {}}
        document["leading"] = bool(sources.releases().get("leading", False))
        return JSONResponse(document)

    return Route("/queue", queue, methods=["GET"], name="queue")


def _base_units(quantity: Quantity) -> float:
    # Prometheus samples are floats; only the exposition edge converts.
    return quantity.nanos / _NANO


class StatusCollector(Collector):
    """Per-tenant quota and usage gauges, and the ledger controller's counters."""

    def __init__(
        self,
        sources: StatusSources,
        *,
        watch_restarts: Callable[[], Mapping[tuple[str, str], int]] = dict,
        config_reload_failures: Callable[[], int] = lambda: 0,
        config_ok: Callable[[], bool] = lambda: True,
    ) -> None:
        self._sources = sources
        self._watch_restarts = watch_restarts
        self._config_reload_failures = config_reload_failures
        self._config_ok = config_ok

    def describe(self) -> Iterable[Metric]:
        # Nothing up front: the tenants are only known when scraped.
        return []

    def collect(self) -> Iterable[Metric]:
        policy = self._sources.policy()
        ledgers = self._sources.ledgers()
        guaranteed = GaugeMetricFamily(
            "tenantgate_tenant_guaranteed",
            "A tenant's guaranteed share, per resource (base units).",
            labels=["tenant", "resource"],
        )
        ceiling = GaugeMetricFamily(
            "tenantgate_tenant_ceiling",
            "A tenant's burst ceiling, per resource (base units).",
            labels=["tenant", "resource"],
        )
        used = GaugeMetricFamily(
            "tenantgate_tenant_used",
            "Usage booked in the ledger, per tenant, tier and resource (base units).",
            labels=["tenant", "tier", "resource"],
        )
        reservations = GaugeMetricFamily(
            "tenantgate_tenant_reservations",
            "Reservations booked at admission and not yet confirmed by a stored pod.",
            labels=["tenant"],
        )
        holds = GaugeMetricFamily(
            "tenantgate_tenant_holds",
            "Of the reservations, those booked by /mutate and not yet validated (holds).",
            labels=["tenant"],
        )
        pods = GaugeMetricFamily(
            "tenantgate_tenant_pods", "Stored pods charged to the tenant.", labels=["tenant"]
        )
        for name in sorted(policy.tenants):
            quota = policy.tenants[name].quota
            ledger = ledgers.get(name) or TenantLedger(name)
            for resource, amount in sorted(quota.guaranteed.items()):
                guaranteed.add_metric([name, resource], _base_units(amount))
            for resource, amount in sorted(quota.ceiling.items()):
                ceiling.add_metric([name, resource], _base_units(amount))
            for tier in ("guaranteed", "burst"):
                usage = ledger.guaranteed if tier == "guaranteed" else ledger.burst
                for resource in sorted(set(quota.ceiling) | set(usage)):
                    in_use = usage.get(resource)
                    used.add_metric(
                        [name, tier, resource], _base_units(in_use) if in_use is not None else 0.0
                    )
            reservations.add_metric([name], len(ledger.reservations))
            holds.add_metric([name], _holds(ledger))
            pods.add_metric([name], len(ledger.charges))
        yield from (guaranteed, ceiling, used, reservations, holds, pods)
        yield from _cohort_metrics(_pools(policy, ledgers))

        synced = GaugeMetricFamily(
            "tenantgate_cluster_synced",
            "1 once pods, namespaces and priority classes are synced (always 1 offline).",
        )
        synced.add_metric([], 1.0 if self._sources.synced() else 0.0)
        yield synced

        restarts = CounterMetricFamily(
            "tenantgate_watch_restarts",
            "Watches restarted, by resource and reason (closed, expired, error).",
            labels=["resource", "reason"],
        )
        for (resource, reason), count in sorted(self._watch_restarts().items()):
            restarts.add_metric([resource, reason], count)
        yield restarts

        config_failures = CounterMetricFamily(
            "tenantgate_config_reload_failures",
            "Config reloads rejected (the last good config stays in use).",
        )
        config_failures.add_metric([], self._config_reload_failures())
        yield config_failures
        config_ok = GaugeMetricFamily(
            "tenantgate_config_last_reload_ok",
            "1 when the config file in use is the one on disk, 0 after a rejected reload.",
        )
        config_ok.add_metric([], 1.0 if self._config_ok() else 0.0)
        yield config_ok

        stats = self._sources.stats()
        if stats is not None:
            yield from _controller_metrics(stats, self._sources.pods())


def _cohort_metrics(pools: Iterable[PoolView]) -> Iterable[Metric]:
    capacity = GaugeMetricFamily(
        "tenantgate_cohort_capacity",
        "A cohort tree's lendable capacity: cohort quotas and members' lendable guarantees "
        "(base units).",
        labels=["cohort", "resource"],
    )
    borrowed = GaugeMetricFamily(
        "tenantgate_cohort_borrowed",
        "What a member uses past its guarantee, borrowed from its cohort (base units).",
        labels=["cohort", "tenant", "resource"],
    )
    shares = GaugeMetricFamily(
        "tenantgate_tenant_share",
        "A cohort member's weighted dominant share of its cohort's borrowed capacity.",
        labels=["tenant"],
    )
    fair = GaugeMetricFamily(
        "tenantgate_tenant_fair_share",
        "A cohort member's fair share: its weight over the weights of the borrowing members.",
        labels=["tenant"],
    )
    for view in pools:
        for resource, amount in sorted(view.capacity.items()):
            capacity.add_metric([view.cohort, resource], _base_units(amount))
        for member in view.members:
            for resource, amount in sorted(view.borrowed[member].items()):
                borrowed.add_metric([view.cohort, member, resource], _base_units(amount))
            shares.add_metric([member], float(view.shares[member]))
            fair.add_metric([member], float(view.fair_shares[member]))
    yield from (capacity, borrowed, shares, fair)


def _counter(name: str, documentation: str, label: str, values: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def _controller_metrics(stats: ControllerStats, pods: int | None) -> Iterable[Metric]:
    yield _counter(
        "tenantgate_pods_unadmitted",
        "Stored pods found without passing the webhook (counted on their own request).",
        "tenant",
        stats.unadmitted,
    )
    yield _counter(
        "tenantgate_pods_late",
        "Stored pods whose reservation had already expired (raise reservationTTLSeconds?).",
        "tenant",
        stats.late,
    )
    yield _counter(
        "tenantgate_reservations_expired",
        "Reservations released unconfirmed after their TTL (pod rejected later, or lost).",
        "tenant",
        stats.expired,
    )
    yield _counter(
        "tenantgate_pods_released",
        "Pod charges released, by reason (deleted, finished, terminating, moved).",
        "reason",
        stats.released,
    )
    yield _counter(
        "tenantgate_ledger_drift_repairs",
        "Recounts that found the ledger different from the live pods and repaired it.",
        "tenant",
        stats.drift_repairs,
    )
    confirmed = CounterMetricFamily(
        "tenantgate_reservations_confirmed", "Reservations confirmed by a stored pod."
    )
    confirmed.add_metric([], stats.confirmed)
    yield confirmed
    recounts = CounterMetricFamily("tenantgate_ledger_recounts", "Full recounts run.")
    recounts.add_metric([], stats.recounts)
    yield recounts
    drift = GaugeMetricFamily(
        "tenantgate_ledger_drift",
        "Ledger minus truth found by the last recount, per tenant, tier, resource (base units).",
        labels=["tenant", "tier", "resource"],
    )
    for (tenant, tier, resource), amount in sorted(stats.last_drift.items()):
        drift.add_metric([tenant, tier, resource], _base_units(amount))
    yield drift
    if pods is not None:
        tracked = GaugeMetricFamily("tenantgate_pods_tracked", "Pods known from the watch.")
        tracked.add_metric([], pods)
        yield tracked


__all__ = [
    "MAX_LIMIT",
    "BadSelection",
    "StatusCollector",
    "StatusSources",
    "TenantSelection",
    "queue_route",
    "status_document",
    "status_route",
    "tenant_selection",
]
