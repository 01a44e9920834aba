"""Fair sharing of a cohort's borrowed room: weighted dominant shares and the release order.

A tenant's share is the largest, over resources, of what it borrows divided by its tree's
lendable capacity of that resource, divided by its weight (the dominant share, weighted).
Its fair share is its weight over the weights of the members that borrow or wait to borrow.
Pure functions of the members' usage (``totals``: guaranteed + burst usage per tenant).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from fractions import Fraction
from typing import TypeVar

from classifier.quantities import Quantity
from tenants.cohorts.tree import CohortTree, Membership

K = TypeVar("K")
OrderKey = tuple[float | str, ...]

_ZERO = Quantity(0)
_NONE: Mapping[str, Quantity] = {}
Totals = Mapping[str, Mapping[str, Quantity]]


def borrowed(membership: Membership, total: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """What a member uses past its guarantee, per resource (only resources it borrows: of
    those its quota limits)."""
    out: dict[str, Quantity] = {}
    for resource, used in total.items():
        if not membership.limits(resource):
            continue
        over = used - membership.guaranteed.get(resource, _ZERO)
        if over.nanos > 0:
            out[resource] = over
    return out


def capacity(tree: CohortTree, tenant: str, resource: str) -> Quantity:
    """The lendable capacity of ``tenant``'s tree: every cohort's quota and every member's
    lendable guarantee of ``resource`` (used or not)."""
    root = tree.root_of(tree.members[tenant].cohort)
    key = (root.name, resource)
    cached = tree.capacities.get(key)
    if cached is not None:
        return cached
    amount = _ZERO
    for cohort in tree.subtree(root.name):
        amount += cohort.quota.get(resource, _ZERO)
        for member in cohort.members:
            amount += tree.members[member].lendable(resource)
    tree.capacities[key] = amount
    return amount


def share(tree: CohortTree, tenant: str, total: Mapping[str, Quantity]) -> Fraction:
    """max over resources of (borrowed / tree capacity), divided by the tenant's weight."""
    membership = tree.members[tenant]
    dominant = Fraction(0)
    for resource, amount in borrowed(membership, total).items():
        room = capacity(tree, tenant, resource)
        # Nothing is lendable: the tenant cannot borrow it from the cohort, only from its
        # own ceiling outside the pool; it does not count towards its share.
        if room.nanos > 0:
            dominant = max(dominant, Fraction(amount.nanos, room.nanos))
    return dominant / membership.weight


def fair_share(tree: CohortTree, tenant: str, active: Collection[str]) -> Fraction:
    """``tenant``'s weight over the weights of ``active`` (the borrowers and waiters) and it."""
    scaled = tree.scaled_weights()
    names = set(active)
    names.add(tenant)
    return Fraction(scaled[tenant], sum([scaled[name] for name in names]))


def borrowers(tree: CohortTree, tenant: str, totals: Totals) -> set[str]:
    """The members of ``tenant``'s tree that borrow now."""
    same = tree.tree_member_set(tenant)
    members = tree.members
    # Only a member that uses something can borrow: visit those ``totals`` names.
    return {
        name
        for name, total in totals.items()
        if total and name in same and _borrows(members[name], total)
    }


def _borrows(membership: Membership, total: Mapping[str, Quantity]) -> bool:
    """Whether :func:`borrowed` is not empty (without building it)."""
    guaranteed = membership.guaranteed
    for resource, used in total.items():
        if used.nanos > guaranteed.get(resource, _ZERO).nanos and membership.limits(resource):
            return True
    return False


def release_order(
    tree: CohortTree,
    totals: Totals,
    queues: Mapping[str, Sequence[tuple[K, Mapping[str, Quantity]]]],
    *,
    order: Callable[[K], OrderKey],
) -> list[tuple[str, K]]:
    """The order in which the heads of several members' queues are released.

    Each step releases the head of the queue whose tenant has the lowest share (ties: the
    head's own queue order, ``order``), then counts its request as used, so the shares change
    as releases go. ``queues`` maps a tenant to its pods in queue order with their requests.
    """
    used = {name: dict(totals.get(name, {})) for name in queues}
    heads = {name: 0 for name in queues}
    out: list[tuple[str, K]] = []
    while True:
        ready = [name for name, queue in queues.items() if heads[name] < len(queue)]
        if not ready:
            return out
        name = min(
            ready,
            key=lambda n: (share(tree, n, used[n]), order(queues[n][heads[n]][0]), n),
        )
        pod, request = queues[name][heads[name]]
        heads[name] += 1
        for resource, amount in request.items():
            used[name][resource] = used[name].get(resource, _ZERO) + amount
        out.append((name, pod))
