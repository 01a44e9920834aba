"""A pod group's member at admission: gated until the whole group exists and fits.

Every member is admitted behind tenantgate's gate, whatever the tenant's ``overQuota``, with
the class of the tier its group waits for, and recorded in the tenant's ledger as a queued
entry (not usage; ``maxPending`` counts it). Nothing is booked for a group until all its
members exist: the controller books them together (:mod:`tenants.groups.release`).

A group that can never fit is denied at admission, as soon as that is certain from what is
known: its *known total* is the members seen so far plus, for each missing member, the
smallest member seen (per resource). Over the guarantee for a group waiting for the
guaranteed tier, over the ceiling for the burst tier: it is denied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from classifier.quantities import Quantity, format_list
from tenants.config import TenantPolicy
from tenants.ledger import TenantLedger, Tier, enqueue
from tenants.queue.admission import QueueAnswer, requeue_base, room_shortfalls
from tenants.queue.line import GROUP_ENTRY_PREFIX

_ZERO: Final = Quantity(0)


def known_total(
    amount: Mapping[str, Quantity], seen: Sequence[Mapping[str, Quantity]], size: int
) -> dict[str, Quantity]:
    """What the group needs at least: ``amount`` (this member) and ``seen`` (the others known),
    plus, for each member not seen yet, the smallest member seen, per resource."""
    if not seen:
        return {name: Quantity(q.nanos * size, q.format) for name, q in amount.items() if q.nanos}
    members = [*seen, amount]
    names = {name for member in members for name, q in member.items() if q.nanos}
    missing = max(size - len(members), 0)
    total: dict[str, Quantity] = {}
    for name in names:
        values = [member.get(name, _ZERO) for member in members]
        nanos = sum(q.nanos for q in values) + missing * min(q.nanos for q in values)
        if nanos:
            fmt = next(q.format for q in values if q.nanos)
            total[name] = Quantity(nanos, fmt)
    return total


def sum_amounts(amounts: Sequence[Mapping[str, Quantity]]) -> dict[str, Quantity]:
    """The exact sum of ``amounts``, resource by resource (zero entries left out)."""
    total: dict[str, Quantity] = {}
    for amount in amounts:
        for name, q in amount.items():
            if not q.nanos:
                continue
            current = total.get(name)
            total[name] = (
                q if current is None else Quantity(current.nanos + q.nanos, current.format)
            )
    return {name: q for name, q in total.items() if q.nanos}


def never_fits_group(
    tenant: TenantPolicy, *, tier: Tier, name: str, size: int, total: Mapping[str, Quantity]
) -> str | None:
    """Why a group of ``size`` members needing at least ``total`` can never be released onto
    ``tier``'s room of ``tenant`` (None when it could)."""
    shortfalls = room_shortfalls(tenant.quota, TenantLedger(tenant.name), tier, total)
    if shortfalls:
        what = "guarantee" if tier == "guaranteed" else "burst ceiling"
        needs = format_list({s.resource: s.requested for s in shortfalls})
        limits = format_list({s.resource: s.limit for s in shortfalls})
        return (
            f"pod group {name} ({size} members) needs {needs}, more than tenant "
            f"{tenant.name}'s {what} ({limits}): it can never run; make the group smaller "
            "or raise the quota"
        )
    queue = tenant.group_queue()
    if size > queue.max_pending:
        return (
            f"pod group {name} has {size} members, more than tenant {tenant.name}'s queue "
            f"holds (maxPending {queue.max_pending}): it can never be complete"
        )
    return None


def free_room(
    tenant: TenantPolicy, ledger: TenantLedger, tier: Tier, resources: Sequence[str]
) -> dict[str, Quantity]:
    """What ``tier``'s room of ``tenant`` has free in each of ``resources`` it limits."""
    quota = tenant.quota
    free: dict[str, Quantity] = {}
    for name in resources:
        ceiling = quota.ceiling.get(name)
        if ceiling is None:
            continue
        used = ledger.guaranteed.get(name, _ZERO).nanos
        if tier == "guaranteed":
            limit = quota.guarantee_of(name)
        else:
            used += ledger.burst.get(name, _ZERO).nanos
            limit = ceiling
        free[name] = Quantity(max(limit.nanos - used, 0), limit.format)
    return free


@dataclass(frozen=True, slots=True)
class MemberAnswer:
    """A member queued (``queue.queued``) or not (``queue.full``), and the room free for its
    group's tier in the ledger it was written to."""

    queue: QueueAnswer
    free: Mapping[str, Quantity]


def queue_member(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    amount: Mapping[str, Quantity],
    resources: Sequence[str],
    priority: int,
    existing_id: str | None,
    derived_id: str,
    now: float,
    ttl: float,
) -> tuple[TenantLedger, MemberAnswer]:
    """Record the member as queued in its tenant's ledger (re-using its own entry on a
    re-invoked webhook), within ``maxPending``; nothing is booked."""
    queue = tenant.group_queue()
    base = requeue_base(ledger, existing_id)
    entry_id = GROUP_ENTRY_PREFIX + derived_id if existing_id is None else existing_id
    attempt = 1
    candidate = entry_id
    while candidate in base.queued:
        attempt += 1
        candidate = f"{entry_id}-q{attempt}"
    pending = len(base.queued)
    free = free_room(tenant, base, queue.tier, resources)
    if pending >= queue.max_pending:
        return base, MemberAnswer(QueueAnswer(False, candidate, pending=pending, full=True), free)
    # A member's place is its group's (tenants.groups.release): no position to tell, so no
    # walk of the queue here.
    after = enqueue(base, entry_id=candidate, priority=priority, now=now, ttl=ttl)
    return after, MemberAnswer(QueueAnswer(True, candidate, pending=pending + 1), free)


def waiting_warning(
    *,
    tenant: str,
    name: str,
    created: int,
    size: int,
    total: Mapping[str, Quantity],
    free: Mapping[str, Quantity],
) -> str:
    """``waiting for pod group train-42: 5 of 8 members created; the group needs
    nvidia.com/gpu=8, team-a has nvidia.com/gpu=5 free``."""
    # The resources the group lacks (all it asks of the room when none is short).
    short = {n: q for n, q in total.items() if n in free and q.nanos > free[n].nanos}
    shown = short or {n: q for n, q in total.items() if n in free} or dict(total)
    room = {n: free[n] for n in shown if n in free}
    needs = format_list(shown) or "nothing"
    # One resource reads as "team-a has 5 free"; several name each.
    has = str(next(iter(room.values()))) if len(room) == 1 else format_list(room) or "no limit"
    return (
        f"waiting for pod group {name}: {min(created, size)} of {size} members created; "
        f"the group needs {needs}, {tenant} has {has} free"
    )


def unknown_size_warning(name: str, missing: str) -> str:
    return (
        f"waiting for pod group {name}: its size is unknown ({missing}); the pod stays gated "
        "until it is recreated with the size known"
    )


__all__ = [
    "MemberAnswer",
    "free_room",
    "known_total",
    "never_fits_group",
    "queue_member",
    "sum_amounts",
    "unknown_size_warning",
    "waiting_warning",
]
