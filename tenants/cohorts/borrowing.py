"""The borrowing rule: whether a pod past its tenant's guarantee may run on borrowed room.

A member's pod that does not fit its guarantee is admitted on the burst tier only if, in
every resource it requests past the guarantee:

* the tenant's total stays within its burst ceiling (when it configures ``burst``) and what
  it borrows stays within its ``borrowingLimit``;
* the tree's borrowed room stays within what is free to borrow: every cohort's own quota plus
  every member's unused guarantee up to its ``lendingLimit``. A cohort's unused room serves
  its parent's members and a cohort short of room borrows from its parent, so the room of a
  tree is one pool at its root;
* fair sharing allows it: while another member waits to borrow, a tenant at or above its fair
  share borrows no more.

A resource the pod needs only within its tenant's own guarantee is not borrowed and not
checked against the pool: the guarantee is a promise. The result also says whether the
tenant is above its fair share after the booking (its pod then gets the over-share class).
Pure: ``totals`` is every member's guaranteed + burst usage, read in the same transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from classifier.quantities import Quantity
from tenants.cohorts.fairshare import (
    Totals,
    borrowed,
    borrowers,
    capacity,
    fair_share,
    share,
)
from tenants.cohorts.tree import CohortTree, Membership

_ZERO = Quantity(0)
_NONE: Mapping[str, Quantity] = {}


@dataclass(frozen=True, slots=True)
class Pool:
    """The tree's room of one resource: free to borrow (``supply``) and borrowed (``demand``),
    with who borrows and who lends how much."""

    resource: str
    supply: Quantity
    demand: Quantity
    borrowed_by: Mapping[str, Quantity]
    lent_by: Mapping[str, Quantity]  # members' unused lendable guarantee, and cohort quotas


def _idle_lenders(tree: CohortTree, root: str, resource: str) -> tuple[dict[str, Quantity], int]:
    """Who lends how much of ``resource`` in ``root``'s tree while no member uses any (every
    cohort's quota and every member's lendable guarantee), and its sum in nanos; cached on the
    tree."""
    key = (root, resource)
    found = tree.idle_lenders.get(key)
    if found is None:
        lenders: dict[str, Quantity] = {}
        for cohort in tree.subtree(root):
            own = cohort.quota.get(resource, _ZERO)
            if own.nanos > 0:
                lenders[f"cohort {cohort.name}"] = own
            for name in cohort.members:
                membership = tree.members[name]
                lendable = membership.lendable(resource)
                if lendable.nanos > 0 and membership.limits(resource):
                    lenders[name] = lendable
        found = tree.idle_lenders[key] = (lenders, sum(q.nanos for q in lenders.values()))
    return found


def pool(tree: CohortTree, tenant: str, totals: Totals, resource: str) -> Pool:
    """``resource``'s pool in ``tenant``'s tree, measured from ``totals``.

    A borrowed booking measures its whole tree, so this starts from the tree's pool while
    idle (cached) and visits only the members ``totals`` names (those using something).
    """
    root = tree.root_name(tenant) or ""
    idle, supply = _idle_lenders(tree, root, resource)
    same = tree.tree_member_set(tenant)
    demand = 0
    borrowed_by: dict[str, Quantity] = {}
    lent_by = dict(idle)
    members = tree.members
    for name, total in totals.items():
        if not total or name not in same:
            continue
        membership = members[name]
        lent, taken = _part(membership, total, resource)
        full = idle.get(name)
        full_nanos = full.nanos if full is not None else 0
        if lent != full_nanos:
            supply += lent - full_nanos
            guaranteed = membership.guaranteed.get(resource, _ZERO)
            if lent:
                lent_by[name] = Quantity(lent, guaranteed.format)
            else:
                lent_by.pop(name, None)
        if taken:
            demand += taken
            borrowed_by[name] = Quantity(taken, membership.guaranteed.get(resource, _ZERO).format)
    sample = next(iter(idle.values()), None) or next(iter(borrowed_by.values()), _ZERO)
    return Pool(
        resource,
        Quantity(supply, sample.format),
        Quantity(demand, sample.format),
        borrowed_by,
        lent_by,
    )


def _part(membership: Membership, total: Mapping[str, Quantity], resource: str) -> tuple[int, int]:
    """What one member adds to its tree's pool of ``resource``, in nanos: (lent, borrowed)."""
    if not membership.limits(resource):
        return 0, 0
    unused = membership.guaranteed.get(resource, _ZERO).nanos - total.get(resource, _ZERO).nanos
    if unused > 0:
        return min(unused, membership.lendable(resource).nanos), 0
    return 0, -unused


@dataclass(frozen=True, slots=True)
class Borrow:
    """The outcome: ``fits``; the reasons it does not (sorted); what it borrows; the shares."""

    cohort: str
    reasons: tuple[str, ...]
    borrows: Mapping[str, Quantity]
    lenders: tuple[str, ...]
    share: Fraction
    fair_share: Fraction

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def over_share(self) -> bool:
        """Whether the tenant is above its fair share with this booking."""
        return self.share > self.fair_share


def _pairs(amounts: Mapping[str, Quantity]) -> str:
    return ", ".join(f"{name} {amounts[name]}" for name in sorted(amounts)) or "none"


def check_borrow(
    tree: CohortTree,
    tenant: str,
    totals: Totals,
    request: Mapping[str, Quantity],
    *,
    limited: Collection[str],
    waiting: Collection[str] = (),
) -> Borrow:
    """The rule above for ``request`` of ``tenant`` (a member of ``tree``).

    ``limited``: the resources the tenant's quota names (others never block, as today);
    ``waiting``: members with pods waiting for borrowed room (queue mode).
    """
    membership = tree.members[tenant]
    root = tree.root_of(membership.cohort).name
    before = totals.get(tenant, {})
    after = dict(before)
    for resource, amount in request.items():
        after[resource] = after.get(resource, _ZERO) + amount
    was = borrowed(membership, before)
    now = borrowed(membership, after)
    reasons: list[str] = []
    borrows: dict[str, Quantity] = {}
    lenders: set[str] = set()
    for resource in sorted(request):
        amount = request[resource]
        if amount.nanos <= 0 or resource not in limited:
            continue
        ceiling = (membership.ceiling or {}).get(resource)
        if ceiling is not None and after[resource] > ceiling:
            reasons.append(
                f"{resource}: {tenant} would use {after[resource]}, above its burst ceiling "
                f"{ceiling}"
            )
        extra = now.get(resource, _ZERO) - was.get(resource, _ZERO)
        if extra.nanos <= 0:
            continue  # within its own guarantee: not borrowed
        borrows[resource] = extra
        limit = membership.borrowing_limit.get(resource)
        if limit is not None and now[resource] > limit:
            reasons.append(
                f"{resource}: {tenant} would borrow {now[resource]}, above its "
                f"borrowingLimit {limit}"
            )
        measured = pool(tree, tenant, totals, resource)
        lenders.update(measured.lent_by)
        # The pool with the booking: only the tenant's own part of it changes.
        supply_before, demand_before = _part(membership, before, resource)
        supply_after, demand_after = _part(membership, after, resource)
        supply = measured.supply.nanos - supply_before + supply_after
        demand = measured.demand.nanos - demand_before + demand_after
        if demand > supply:
            guaranteed = membership.guaranteed.get(resource, _ZERO)
            reasons.append(
                f"exceeded cohort {root}'s shared room: requested {resource}={amount}, "
                f"{resource} {measured.demand}/{measured.supply} borrowed "
                f"({_pairs(measured.borrowed_by)}), free to lend "
                f"({_pairs(measured.lent_by)}); {tenant}'s guarantee {resource}={guaranteed}"
            )
    active = borrowers(tree, tenant, totals) | set(waiting)
    current = share(tree, tenant, before)
    others_wait = bool(set(waiting) - {tenant})
    fair_before = fair_share(tree, tenant, active)
    if borrows and others_wait and current >= fair_before:
        reasons.append(
            f"{tenant} is at or above its fair share of cohort {root} "
            f"({_percent(current)} of {_percent(fair_before)}) while "
            f"{', '.join(sorted(set(waiting) - {tenant}))} wait to borrow"
        )
    active_after = active | ({tenant} if now else set())
    return Borrow(
        cohort=root,
        reasons=tuple(reasons),
        borrows=borrows,
        lenders=tuple(sorted(lenders - {tenant})),
        share=share(tree, tenant, after),
        fair_share=fair_share(tree, tenant, active_after),
    )


def most_held(tree: CohortTree, tenant: str, limited: Collection[str]) -> dict[str, Quantity]:
    """The most ``tenant`` could ever hold of each ``limited`` resource: its guarantee plus
    what it could borrow (its ``borrowingLimit``, what the rest of its tree can lend, its
    own burst ceiling when it sets one). A queued pod larger than that never fits."""
    membership = tree.members[tenant]
    out: dict[str, Quantity] = {}
    for resource in sorted(limited):
        guaranteed = membership.guaranteed.get(resource, _ZERO)
        lendable = capacity(tree, tenant, resource) - membership.lendable(resource)
        limit = membership.borrowing_limit.get(resource)
        borrowable = lendable if limit is None or limit > lendable else limit
        most = guaranteed + borrowable
        ceiling = (membership.ceiling or {}).get(resource)
        out[resource] = ceiling if ceiling is not None and ceiling < most else most
    return out


def _percent(value: Fraction) -> str:
    return f"{float(value) * 100:.0f}%"


# A warning names this many lenders; a large tree's others are counted (kubectl shows it).
NAMED_LENDERS: Final = 3


def borrow_warning(tenant: str, result: Borrow) -> str:
    """What a borrowed pod is told: whose room it uses, and that it may be preempted."""
    amounts = ",".join(f"{name}={result.borrows[name]}" for name in sorted(result.borrows))
    named = result.lenders[:NAMED_LENDERS]
    whose = ", ".join(named) or "the cohort"
    if len(result.lenders) > len(named):
        whose += f" and {len(result.lenders) - len(named)} more"
    text = (
        f"tenant {tenant} borrows {amounts} from cohort {result.cohort} (unused room of "
        f"{whose}): the pod may be preempted when they need it back"
    )
    if result.over_share:
        text += (
            f"; {tenant} is above its fair share ({_percent(result.share)} of "
            f"{_percent(result.fair_share)}), so its pod is among the first preempted"
        )
    return text
