"""The TenantCohortLedger objects through the official client, and the cohort store's metrics.

One cluster-scoped ``TenantCohortLedger`` per cohort tree, named after its root cohort: what
:class:`tenants.kube.cohortstore.CohortLedgerStore` reads and compare-and-swaps. The calls are
those of :class:`tenants.kube.ledgerstore.KubeLedgerClient`, on this resource.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Final

from prometheus_client.core import CounterMetricFamily, Metric

from tenants.kube.ledgerstore import GROUP, KubeLedgerClient

if TYPE_CHECKING:
    from tenants.kube.cohortstore import CohortLedgerStore

COHORT_PLURAL: Final = "tenantcohortledgers"
COHORT_KIND: Final = "TenantCohortLedger"
COHORT_CRD_NAME: Final = f"{COHORT_PLURAL}.{GROUP}"


class KubeCohortClient(KubeLedgerClient):
    """TenantCohortLedger objects through the official client: the :class:`KubeLedgerClient`
    calls on that resource, whose ``spec`` names the root cohort."""

    plural: ClassVar[str] = COHORT_PLURAL
    kind: ClassVar[str] = COHORT_KIND
    spec_field: ClassVar[str] = "cohort"


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
