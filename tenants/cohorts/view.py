"""What a cohort tree looks like right now: capacity, free room, who lends and borrows, shares.

One :class:`PoolView` per tree (named by its root), for ``/status``, ``tenantgate usage`` and
the metrics; computed from the members' usage with the same functions the rule uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from classifier.quantities import Quantity
from tenants.cohorts.borrowing import pool
from tenants.cohorts.fairshare import Totals, borrowers, capacity, fair_share, share
from tenants.cohorts.tree import CohortTree


@dataclass(frozen=True, slots=True)
class PoolView:
    """One tree: its cohorts and members; per resource its lendable capacity, the room free to
    lend now and what each member borrows and lends; each member's share and fair share."""

    cohort: str
    cohorts: tuple[str, ...]
    members: tuple[str, ...]
    capacity: Mapping[str, Quantity]
    free: Mapping[str, Quantity]
    borrowed: Mapping[str, Mapping[str, Quantity]]
    lent: Mapping[str, Mapping[str, Quantity]]
    shares: Mapping[str, Fraction]
    fair_shares: Mapping[str, Fraction]


def pool_views(tree: CohortTree, totals: Totals, waiting: set[str]) -> list[PoolView]:
    """Every tree of ``tree``, by root name; ``waiting``: members with queued pods."""
    views = []
    for root in sorted(c.name for c in tree.cohorts.values() if c.parent is None):
        cohorts = tuple(c.name for c in tree.subtree(root))
        members = tuple(sorted(m for c in tree.subtree(root) for m in c.members))
        if not members:
            continue
        first = members[0]
        resources = sorted(
            {r for c in tree.subtree(root) for r in c.quota}
            | {r for m in members for r in tree.members[m].guaranteed}
        )
        borrowed: dict[str, dict[str, Quantity]] = {m: {} for m in members}
        lent: dict[str, dict[str, Quantity]] = {m: {} for m in members}
        caps: dict[str, Quantity] = {}
        free: dict[str, Quantity] = {}
        for resource in resources:
            caps[resource] = capacity(tree, first, resource)
            measured = pool(tree, first, totals, resource)
            free[resource] = measured.supply
            for name, amount in measured.borrowed_by.items():
                borrowed[name][resource] = amount
            for name, amount in measured.lent_by.items():
                if name in lent:
                    lent[name][resource] = amount
        active = borrowers(tree, first, totals) | (waiting & set(members))
        views.append(
            PoolView(
                cohort=root,
                cohorts=cohorts,
                members=members,
                capacity=caps,
                free=free,
                borrowed=borrowed,
                lent=lent,
                shares={m: share(tree, m, totals.get(m, {})) for m in members},
                fair_shares={m: fair_share(tree, m, active) for m in members},
            )
        )
    return views
