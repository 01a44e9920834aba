"""The tier rule of a cohort member: its guarantee first, then borrowed room.

:func:`cohort_rule` is the strategy the admission path uses in place of
:func:`tenants.quota.check` for a tenant in a cohort. It is built from the other members'
ledgers read in the same transaction as the booking (``MemoryLedger.transact_with_peers``),
so two borrowers can never take the same room.
"""

from __future__ import annotations

from collections.abc import Mapping

from classifier.quantities import Quantity, ResourceList
from tenants.cohorts.borrowing import check_borrow
from tenants.cohorts.tree import CohortTree, Membership
from tenants.ledger import TenantLedger
from tenants.quota import Decision, Quota, TierRule, check


def waiting(peers: Mapping[str, TenantLedger]) -> set[str]:
    """The members with pods waiting in their queues (queue mode)."""
    return {name for name, ledger in peers.items() if ledger.queued}


def within_guarantee(membership: Membership, ledger: TenantLedger, request: ResourceList) -> bool:
    """Whether the member's *total* usage with ``request`` stays within its guarantee.

    The guaranteed tier alone is not enough: burst pods admitted while the guarantee was full
    (of holds that later lapsed, or of pods that ended since) still count, and the pool
    measures a member's borrowing as its total past its guarantee. A request past it borrows,
    whichever tier has room, or the cohort would hold more than its guarantees and its pool.
    """
    if not ledger.burst:
        return True  # the guaranteed tier is the total
    total = ledger.total()
    for resource, amount in request.items():
        if amount.nanos <= 0 or not membership.limits(resource):
            continue
        guaranteed = membership.guaranteed.get(resource)
        used = total.get(resource)
        after = amount.nanos + (used.nanos if used is not None else 0)
        if guaranteed is None or after > guaranteed.nanos:
            return False
    return True


def guarantee_measure(ledger: TenantLedger) -> TenantLedger:
    """The ledger a cohort member's guaranteed room is measured on where the pool is not read
    (a pod group's booking): its whole usage counted in the guaranteed tier, so that what fits
    keeps the member's total within its guarantee (:func:`within_guarantee`)."""
    if not ledger.burst:
        return ledger
    return TenantLedger(ledger.tenant, guaranteed=ledger.total())


def total_of(tree: CohortTree, ledger: TenantLedger) -> Mapping[str, Quantity]:
    """``ledger.total()``, kept on ``tree`` per member while its ledger is the same object
    (ledgers are immutable values: a booking makes a new one)."""
    cached = tree.totals.get(ledger.tenant)
    if cached is not None and cached[0] is ledger:
        return cached[1]
    total = ledger.total()
    tree.totals[ledger.tenant] = (ledger, total)
    return total


def cohort_rule(
    tree: CohortTree, tenant: str, quota: Quota, peers: Mapping[str, TenantLedger]
) -> TierRule:
    """Guaranteed when the request fits the guarantee; else burst when :func:`check_borrow`
    allows it (the decision carries what it borrows); else a denial naming the cohort."""
    membership = tree.members[tenant]
    limited = set(quota.ceiling) | set(membership.borrowing_limit)

    def rule(ledger: TenantLedger, request: ResourceList) -> Decision:
        plain = check(quota, ledger, request)
        if plain.tier == "guaranteed" and within_guarantee(membership, ledger, request):
            return plain  # the guarantee is a promise: the peers are not read
        totals: dict[str, Mapping[str, Quantity]] = {}
        waiters: set[str] = set()
        for name, peer in peers.items():
            if name == tenant:
                continue
            if peer.guaranteed or peer.burst:  # an idle member only lends: pool() knows it
                totals[name] = total_of(tree, peer)
            if peer.queued:
                waiters.add(name)
        totals[tenant] = total_of(tree, ledger)
        result = check_borrow(tree, tenant, totals, request, limited=limited, waiting=waiters)
        if result.fits:
            return Decision("burst", borrow=result)
        return Decision(None, limit="cohort", borrow=result)

    return rule
