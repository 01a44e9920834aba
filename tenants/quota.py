"""Tenant quotas and the tier rule: which tier a request fits, or exactly why it does not.

A :class:`Quota` holds a tenant's guaranteed share and burst ceiling per resource. The checks
here are pure functions of (quota, ledger, request): they never book anything, so the same code
serves a real admission, a dry-run and an offline review. Only resources the tenant limits (the
keys of its ceiling) are checked, and only those the request actually asks for, as the
ResourceQuota admission plugin does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from classifier.quantities import Quantity, ResourceList, format_list
from classifier.records import record
from tenants.cohorts.borrowing import Borrow
from tenants.ledger import TenantLedger, Tier

logger = logging.getLogger(__name__)

_ZERO = Quantity(0)

LimitKind = Literal["guaranteed", "burst ceiling", "cohort"]


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's guaranteed share and burst ceiling; ``ceiling`` names every limited resource.

    ``ceiling[r] >= guaranteed[r]`` always holds, and a resource limited only by a burst ``max``
    has no guarantee (treated as a guarantee of zero: such pods always run on burst).
    """

    guaranteed: Mapping[str, Quantity]
    ceiling: Mapping[str, Quantity]
    # Whether a ``limits.*`` resource is limited (its pods must then set limits). Every
    # admission asks, so it is worked out once, when the quota is built.
    has_limits: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        limited = any(name.startswith("limits.") for name in self.ceiling)
        object.__setattr__(self, "has_limits", limited)

    def guarantee_of(self, resource: str) -> Quantity:
        return self.guaranteed.get(resource, _ZERO)


def scale(quantity: Quantity, ratio: Fraction) -> Quantity:
    """``quantity * ratio`` rounded down to the nano, keeping the format (``8Gi * 1.5 = 12Gi``).

    Rounding down keeps a computed ceiling on the safe side of what the config says.
    """
    return Quantity(quantity.nanos * ratio.numerator // ratio.denominator, quantity.format)


def build_quota(
    guaranteed: Mapping[str, Quantity],
    *,
    ratio: Fraction | None = None,
    maximum: Mapping[str, Quantity] | None = None,
) -> Quota:
    """The ceiling is the largest of the guarantee, ``ratio`` x guarantee and ``maximum``.

    A resource with no burst entry keeps its guarantee as its ceiling.
    """
    ceiling = dict(guaranteed)
    if ratio is not None:
        for name, amount in guaranteed.items():
            scaled = scale(amount, ratio)
            if scaled > ceiling[name]:
                ceiling[name] = scaled
    for name, amount in (maximum or {}).items():
        current = ceiling.get(name)
        if current is None or amount > current:
            ceiling[name] = amount
    return Quota(guaranteed=dict(guaranteed), ceiling=ceiling)


@record
class Shortfall:
    """One resource that does not fit: ``used + requested > limit``."""

    resource: str
    requested: Quantity
    used: Quantity
    limit: Quantity
    guaranteed: Quantity


@record
class Decision:
    """The outcome of a check: the tier that fits, or the resources that do not.

    ``limit`` says which limit the shortfalls were measured against: the burst ceiling for a new
    request, the tier's own limit for growing an existing booking, or the cohort (``borrow``
    then says why, and for an admitted pod of a cohort member what it borrows).
    """

    tier: Tier | None
    shortfalls: tuple[Shortfall, ...] = ()
    limit: LimitKind = "burst ceiling"
    borrow: Borrow | None = None

    @property
    def fits(self) -> bool:
        return self.tier is not None

    @property
    def borrowed_from(self) -> str | None:
        """The cohort (its tree's root) a booked pod borrows room from; None when it stays
        within its tenant's own guarantee."""
        if self.tier is None or self.borrow is None or not self.borrow.borrows:
            return None
        return self.borrow.cohort


def _requested(request: ResourceList, limited: Mapping[str, Quantity]) -> Iterable[str]:
    # Resources the tenant does not limit never block, nor do those the pod does not ask for.
    return [name for name, amount in request.items() if name in limited and amount.nanos > 0]


# How a tenant's tier is chosen for a request: :func:`check` bound to its quota, or a cohort
# member's rule (``tenants.cohorts.tier``).
TierRule = Callable[[TenantLedger, ResourceList], Decision]


def check(quota: Quota, ledger: TenantLedger, request: ResourceList) -> Decision:
    """The tier rule: guaranteed if it fits the guarantee, else burst if it fits the ceiling.

    guaranteed: guaranteed-tier usage + request <= guaranteed in every limited resource;
    burst: (guaranteed + burst usage) + request <= ceiling in every limited resource.
    A guaranteed admission never looks at the ceiling: the guarantee is a promise.
    """
    names = _requested(request, quota.ceiling)
    g_used = ledger.guaranteed
    b_used = ledger.burst
    if all(
        g_used.get(name, _ZERO).nanos + request[name].nanos <= quota.guarantee_of(name).nanos
        for name in names
    ):
        return Decision("guaranteed")
    shortfalls = []
    for name in names:
        used = g_used.get(name, _ZERO) + b_used.get(name, _ZERO)
        limit = quota.ceiling[name]
        if used.nanos + request[name].nanos > limit.nanos:
            shortfalls.append(Shortfall(name, request[name], used, limit, quota.guarantee_of(name)))
    if not shortfalls:
        return Decision("burst")
    return Decision(None, tuple(shortfalls), "burst ceiling")


def check_growth(
    quota: Quota, ledger: TenantLedger, *, tier: Tier, delta: ResourceList
) -> Decision:
    """Whether an existing booking in ``tier`` may grow by ``delta`` (its negative parts free).

    The growth stays in the booking's tier: guaranteed growth must fit the guarantee, burst
    growth the ceiling. Shrinking always fits.
    """
    names = _requested(delta, quota.ceiling)
    shortfalls = []
    for name in names:
        if tier == "guaranteed":
            used = ledger.guaranteed.get(name, _ZERO)
            limit = quota.guarantee_of(name)
        else:
            used = ledger.guaranteed.get(name, _ZERO) + ledger.burst.get(name, _ZERO)
            limit = quota.ceiling[name]
        if used.nanos + delta[name].nanos > limit.nanos:
            shortfalls.append(Shortfall(name, delta[name], used, limit, quota.guarantee_of(name)))
    if not shortfalls:
        return Decision(tier)
    return Decision(
        None, tuple(shortfalls), "guaranteed" if tier == "guaranteed" else "burst ceiling"
    )


def denial_message(tenant: str, decision: Decision) -> str:
    """``exceeded tenant quota: team-a: requested cpu=2, used cpu=5.5/6 (burst ceiling), ...``.

    Only the resources that do not fit are listed, sorted by name, with canonical quantities.
    A cohort member's denial gives the cohort rule's reasons instead.
    """
    if decision.limit == "cohort" and decision.borrow is not None:
        return f"exceeded tenant quota: {tenant}: " + "; ".join(decision.borrow.reasons)
    items = sorted(decision.shortfalls, key=lambda s: s.resource)
    requested = ",".join(f"{s.resource}={s.requested}" for s in items)
    used = ",".join(f"{s.resource}={s.used}/{s.limit}" for s in items)
    message = (
        f"exceeded tenant quota: {tenant}: requested {requested}, used {used} ({decision.limit})"
    )
    if decision.limit == "burst ceiling":
        guaranteed = ",".join(f"{s.resource}={s.guaranteed}" for s in items)
        message += f", guaranteed {guaranteed}"
    return message


@record
class Headroom:
    """What is left below the ceiling, and what is above it, after a booking."""

    left: dict[str, Quantity] = field(default_factory=dict)
    over: dict[str, tuple[Quantity, Quantity]] = field(default_factory=dict)


def over_ceiling(
    quota: Quota, ledger: TenantLedger, *, resources: Iterable[str]
) -> dict[str, tuple[Quantity, Quantity]]:
    """Those of ``resources`` whose total usage is above the ceiling: (total, ceiling).

    :attr:`Headroom.over` without working out what is left of the others (a guaranteed
    admission's warning names only what is over).
    """
    return {
        name: (total, limit)
        for name, total, limit in _against_ceiling(quota, ledger, resources)
        if total > limit
    }


def headroom(quota: Quota, ledger: TenantLedger, *, resources: Iterable[str]) -> Headroom:
    """Burst left (ceiling - total usage) for ``resources``, and those above their ceiling."""
    left: dict[str, Quantity] = {}
    over: dict[str, tuple[Quantity, Quantity]] = {}
    for name, total, limit in _against_ceiling(quota, ledger, resources):
        if total > limit:
            over[name] = (total, limit)
        else:
            left[name] = limit - total
    return Headroom(left, over)


def _against_ceiling(
    quota: Quota, ledger: TenantLedger, resources: Iterable[str]
) -> Iterator[tuple[str, Quantity, Quantity]]:
    """(name, total usage, ceiling) of each of ``resources`` that has a ceiling."""
    for name in resources:
        limit = quota.ceiling.get(name)
        if limit is not None:
            yield name, ledger.guaranteed.get(name, _ZERO) + ledger.burst.get(name, _ZERO), limit


def format_over(over: Mapping[str, tuple[Quantity, Quantity]]) -> str:
    """``cpu=7/6,memory=13Gi/12Gi`` (sorted)."""
    return ",".join(f"{name}={over[name][0]}/{over[name][1]}" for name in sorted(over))


__all__ = [
    "Decision",
    "Headroom",
    "LimitKind",
    "Quota",
    "Shortfall",
    "TierRule",
    "build_quota",
    "check",
    "check_growth",
    "denial_message",
    "format_list",
    "format_over",
    "headroom",
    "over_ceiling",
    "scale",
]
