"""The TenantCohortLedger objects through the official client, and the cohort store's metrics.

One cluster-scoped ``TenantCohortLedger`` per cohort tree, named after its root cohort: what
:class:`tenants.kube.cohortstore.CohortLedgerStore` reads and compare-and-swaps. The calls are
those of :class:`tenants.kube.ledgerstore.LedgerClient`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson
from prometheus_client.core import CounterMetricFamily, Metric

from tenants.kube.errors import KubeError, KubeNotFound, wrap
from tenants.kube.ledgerstore import (
    CONNECT_TIMEOUT_SECONDS,
    GROUP,
    MANAGED_BY,
    REQUEST_TIMEOUT_SECONDS,
    VERSION,
    StoredLedger,
    stored_ledger,
)

if TYPE_CHECKING:
    from tenants.kube.cohortstore import CohortLedgerStore

COHORT_PLURAL: Final = "tenantcohortledgers"
COHORT_KIND: Final = "TenantCohortLedger"
COHORT_CRD_NAME: Final = f"{COHORT_PLURAL}.{GROUP}"


class KubeCohortClient:
    """TenantCohortLedger objects through the official client (the :class:`LedgerClient`
    calls, read raw and parsed with orjson)."""

    def __init__(self, api_client: Any, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self._timeout = (CONNECT_TIMEOUT_SECONDS, timeout)

    def _call(self, action: str, method: Callable[..., Any], *args: Any) -> dict[str, Any]:
        try:
            response = method(
                GROUP,
                VERSION,
                COHORT_PLURAL,
                *args,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            try:
                body = response.data
            finally:
                response.release_conn()
            document = orjson.loads(body)
        except Exception as exc:
            raise wrap(exc, action=action) from exc
        if not isinstance(document, dict):
            raise KubeError(f"{action}: the response is not a JSON object", reason="BadResponse")
        return document

    def read(self, name: str) -> StoredLedger | None:
        try:
            document = self._call(
                f"read {COHORT_PLURAL}/{name}", self._api.get_cluster_custom_object, name
            )
        except KubeNotFound:
            return None
        return stored_ledger(document, name)

    def create(self, name: str) -> StoredLedger:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": COHORT_KIND,
            "metadata": {"name": name, "labels": dict(MANAGED_BY)},
            "spec": {"cohort": name},
        }
        document = self._call(
            f"create {COHORT_PLURAL}/{name}", self._api.create_cluster_custom_object, body
        )
        return stored_ledger(document, name)

    def write_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> StoredLedger:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": COHORT_KIND,
            "metadata": {"name": name, "resourceVersion": resource_version},
            "spec": {"cohort": name},
            "status": dict(status),
        }
        document = self._call(
            f"write {COHORT_PLURAL}/{name}/status",
            self._api.replace_cluster_custom_object_status,
            name,
            body,
        )
        return stored_ledger(document, name)

    def list(self) -> list[StoredLedger]:
        document = self._call(f"list {COHORT_PLURAL}", self._api.list_cluster_custom_object)
        items = document.get("items")
        return [
            stored_ledger(item, "")
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict)
        ]


_COUNTERS: Final = (
    ("cohort_bookings", "changes", "Cohort members' bookings answered (committed or dry-run)."),
    ("cohort_cas_writes", "writes", "TenantCohortLedger compare-and-swap writes that succeeded."),
    ("cohort_cas_conflicts", "conflicts", "TenantCohortLedger writes refused with 409, retried."),
    (
        "cohort_member_writes_rerun",
        "second_writes_rerun",
        "Member writes that would borrow more than the cohort object ordered: decided again.",
    ),
    ("cohort_pending_settled", "settled", "Pending cohort bookings removed once written."),
)


class CohortStoreCollector:
    """Prometheus view of :attr:`CohortLedgerStore.cohort_stats`."""

    def __init__(self, store: CohortLedgerStore) -> None:
        self._store = store

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self._store.cohort_stats
        for name, attribute, documentation in _COUNTERS:
            family = CounterMetricFamily(f"tenantgate_{name}", documentation)
            family.add_metric([], getattr(stats, attribute))
            yield family


__all__ = [
    "COHORT_CRD_NAME",
    "COHORT_KIND",
    "COHORT_PLURAL",
    "CohortStoreCollector",
    "KubeCohortClient",
]
