"""Releasing queued pods across a cohort: lowest share first, then queue order.

The members of one cohort tree compete for the same borrowed room, so their queues are
released together. :func:`plan_cohort_release` takes the first pods of each member's queue
(in its own queue order), interleaves them with :func:`tenants.cohorts.fairshare.release_order`
(the head of the member with the lowest weighted share goes first, shares counted as the
releases go) and keeps those that fit, as admission would measure them: the guarantee for a
member queueing for guaranteed room, the borrowing rule (:func:`check_borrow`) for one queueing
for the burst tier. A member's pod that does not fit stops that member's walk, not the others'.
Fair sharing is the order here, so the rule's fair-share gate (which holds back a borrower
while others wait) is not applied on top: every member waiting is in the walk.

:func:`book_member_release` is the ledger change (pure, for ``transact_with_peers``): the
same check on the ledgers being written, then the queued entry becomes a reservation bound
to the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice

from classifier.quantities import Quantity
from tenants.cohorts.borrowing import check_borrow
from tenants.cohorts.fairshare import release_order
from tenants.cohorts.tier import within_guarantee
from tenants.cohorts.tree import CohortTree
from tenants.config import QueuePolicy, TenantPolicy
from tenants.ledger import TenantLedger, Tier
from tenants.queue.admission import room_shortfalls
from tenants.queue.line import QueuedPod, TenantQueue, order_key
from tenants.queue.release import ReleaseBooking, book_checked_release
from tenants.quota import Decision

_ZERO = Quantity(0)


@dataclass(frozen=True, slots=True)
class MemberQueue:
    """One member's queue as the planner needs it."""

    tenant: TenantPolicy
    policy: QueuePolicy
    queue: TenantQueue


def _limited(tree: CohortTree, tenant: TenantPolicy) -> set[str]:
    return set(tenant.quota.ceiling) | set(tree.members[tenant.name].borrowing_limit)


def _fits(
    tree: CohortTree,
    tenant: TenantPolicy,
    tier: Tier,
    ledgers: Mapping[str, TenantLedger],
    amount: Mapping[str, Quantity],
) -> Decision:
    ledger = ledgers.get(tenant.name) or TenantLedger(tenant.name)
    if tier == "guaranteed":
        shortfalls = room_shortfalls(tenant.quota, ledger, "guaranteed", amount)
        if shortfalls:
            return Decision(None, shortfalls, "guaranteed")
        if within_guarantee(tree.members[tenant.name], ledger, amount):
            return Decision("guaranteed")
        # Room in the guaranteed tier, but the member's burst pods already take its total
        # past its guarantee: the pool counts this pod as borrowed, so it needs the pool's room
        # too (tenants/cohorts/tier.py).
    totals = {name: other.total() for name, other in ledgers.items()}
    totals[tenant.name] = ledger.total()
    result = check_borrow(tree, tenant.name, totals, amount, limited=_limited(tree, tenant))
    if not result.fits:
        return Decision(None, limit="cohort", borrow=result)
    # A guaranteed pod keeps its class and tier: it is charged as guaranteed, not as borrowed.
    return Decision("burst", borrow=result) if tier == "burst" else Decision("guaranteed")


def _grown(ledger: TenantLedger, tier: Tier, amount: Mapping[str, Quantity]) -> TenantLedger:
    """``ledger`` with ``amount`` counted in ``tier`` (a planning view, never written)."""
    used = dict(ledger.used(tier))
    for name, quantity in amount.items():
        used[name] = used.get(name, _ZERO) + quantity
    if tier == "guaranteed":
        return TenantLedger(ledger.tenant, guaranteed=used, burst=ledger.burst)
    return TenantLedger(ledger.tenant, guaranteed=ledger.guaranteed, burst=used)


def plan_cohort_release(
    tree: CohortTree,
    members: Mapping[str, MemberQueue],
    ledgers: Mapping[str, TenantLedger],
    *,
    now: float,
    limit: int,
) -> list[tuple[str, QueuedPod]]:
    """The pods of ``members``' queues to release now, in order, at most ``limit``.

    ``ledgers``: every member of the tree (lenders too), as the controller sees them.
    """
    if limit <= 0:
        return []
    heads: dict[str, list[tuple[QueuedPod, Mapping[str, Quantity]]]] = {}
    for name, member in members.items():
        waiting = (
            pod
            for pod in member.queue.ordered(member.policy, now)
            # A pod group's members are released whole, by the group releaser.
            if not pod.group and not member.queue.is_parked(pod.uid)
        )
        pods = list(islice(waiting, limit))
        if pods:
            heads[name] = [(pod, pod.amount) for pod in pods]

    def order(pod: QueuedPod) -> tuple[float | str, ...]:
        policy = members[pod_tenant[pod.uid]].policy
        return order_key(pod.priority, pod.slot, policy, now)

    pod_tenant = {pod.uid: name for name, pods in heads.items() for pod, _ in pods}
    totals = {name: ledger.total() for name, ledger in ledgers.items()}
    view = dict(ledgers)
    blocked: set[str] = set()
    plan: list[tuple[str, QueuedPod]] = []
    for name, pod in release_order(tree, totals, heads, order=order):
        if name in blocked:
            continue
        member = members[name]
        tier = member.policy.tier
        if _fits(tree, member.tenant, tier, view, pod.amount).tier is None:
            blocked.add(name)
            continue
        view[name] = _grown(view.get(name) or TenantLedger(name), tier, pod.amount)
        plan.append((name, pod))
        if len(plan) >= limit:
            break
    return plan


def book_member_release(
    ledger: TenantLedger,
    peers: Mapping[str, TenantLedger],
    *,
    tree: CohortTree,
    tenant: TenantPolicy,
    tier: Tier,
    pod: QueuedPod,
    now: float,
    ttl: float,
) -> tuple[TenantLedger, ReleaseBooking]:
    """Book a member's queued pod in ``tier`` if it fits (the guarantee, or borrowed room
    by the borrowing rule, on the ledgers being written) and drop its queued entry."""
    others = {name: other for name, other in peers.items() if name != tenant.name}
    return book_checked_release(
        ledger,
        tier=tier,
        pod=pod,
        now=now,
        ttl=ttl,
        check=lambda current: _fits(
            tree, tenant, tier, {**others, tenant.name: current}, pod.amount
        ),
    )


__all__ = ["MemberQueue", "book_member_release", "plan_cohort_release"]
