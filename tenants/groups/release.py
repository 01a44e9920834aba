"""Releasing pod groups: which waiting groups go now, and the ledger change that books them.

A group waits in its tenant's queue as one entry: placed by its highest member priority (plus
aging) and its first member's time. :func:`plan_groups` walks the tenant's groups in that order:

* a group with released members (a member restarted: the Job or operator replaced it) has
  each waiting member released on its own as soon as it fits, ahead of other work;
* a complete group (every member exists) is released when its whole total fits the room of
  the tier it waits for, with the room the groups before it take counted;
* an incomplete group, or one whose size is unknown, is never released: nothing is booked.

A complete group that does not fit is skipped for the groups behind it (``BestEffortFIFO``)
unless it has reached ``maxBoost`` or the queue is ``StrictFIFO``: then it holds the line, and
single pods behind it wait too (:attr:`GroupPlan.holds_line`).

:func:`book_group` books every member in one change of the tenant's ledger (one
compare-and-swap with several replicas): all of them or, when the room is short, none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from classifier.quantities import Quantity
from tenants.cohorts.tier import guarantee_measure
from tenants.config import QueuePolicy
from tenants.groups.admission import sum_amounts
from tenants.ledger import (
    TenantLedger,
    Tier,
    book,
    cancel,
    dequeue,
    queued_entry_for,
    settle_queued,
)
from tenants.queue.admission import room_shortfalls
from tenants.queue.line import OrderKey, QueuedPod, TenantQueue, order_key
from tenants.queue.release import measure_room
from tenants.quota import Quota, Shortfall


@dataclass(frozen=True, slots=True)
class WaitingGroup:
    """One group's waiting members, in the order they were created."""

    id: str  # namespace/key
    size: int  # 0: unknown
    members: tuple[QueuedPod, ...]

    @property
    def name(self) -> str:
        """``train-42`` for ``team-a/job/train-42``."""
        return self.id.rpartition("/")[2]

    @property
    def namespace(self) -> str:
        return self.id.partition("/")[0]

    @property
    def complete(self) -> bool:
        return self.size > 0 and len(self.members) >= self.size

    @property
    def priority(self) -> int:
        return max(member.priority for member in self.members)

    @property
    def queued_at(self) -> float:
        return self.members[0].queued_at

    @property
    def total(self) -> dict[str, Quantity]:
        return sum_amounts([member.amount for member in self.members])

    def key(self, policy: QueuePolicy, now: float) -> OrderKey:
        return order_key(self.priority, (self.queued_at, self.id, ""), policy, now)


def waiting_groups(queue: TenantQueue) -> list[WaitingGroup]:
    """Every group waiting in ``queue``; a group with more members than its size offers the
    first ``size`` created."""
    found = []
    for group_id, members in queue.groups().items():
        ordered = sorted(members.values(), key=lambda pod: pod.slot)
        size = max((pod.group_size for pod in ordered), default=0)
        found.append(WaitingGroup(group_id, size, tuple(ordered[:size] if size else ordered)))
    return found


@dataclass(frozen=True, slots=True)
class GroupRelease:
    """Members to book and release together: a whole group, or one replacement member."""

    group: WaitingGroup
    members: tuple[QueuedPod, ...]
    replacement: bool = False


@dataclass(frozen=True, slots=True)
class GroupPlan:
    releases: tuple[GroupRelease, ...]
    holds_line: bool = False  # a group ahead of every single pod does not fit, and blocks


def plan_groups(
    queue: TenantQueue,
    *,
    quota: Quota,
    ledger: TenantLedger,
    policy: QueuePolicy,
    now: float,
    running: Callable[[str], bool],
    parked: Callable[[str], bool],
    cohort_member: bool = False,
) -> GroupPlan:
    """The group releases that fit now, in order; see the module docstring.

    ``cohort_member``: the tenant is in a cohort, so its guaranteed room is what keeps its
    total within its guarantee (:func:`tenants.cohorts.tier.guarantee_measure`).
    """
    # A running group's new members first: they never wait behind other work.
    groups = sorted(
        waiting_groups(queue), key=lambda group: (not running(group.id), group.key(policy, now))
    )
    if not groups:
        return GroupPlan(())
    measured = (
        guarantee_measure(ledger) if cohort_member and policy.tier == "guaranteed" else ledger
    )
    used, room = measure_room(quota, measured, policy.tier)
    single = _single_head(queue, policy, now)
    releases: list[GroupRelease] = []

    def unbooked(member: QueuedPod) -> Mapping[str, Quantity]:
        # A member booked already (its gate removal is being retried) takes no more room.
        booked = ledger.reservation_for_pod(member.uid) is not None or member.uid in ledger.charges
        return {} if booked else member.amount

    for group in groups:
        free = [member for member in group.members if not parked(member.uid)]
        if running(group.id):
            for member in free:
                if _take(unbooked(member), used, room):
                    releases.append(GroupRelease(group, (member,), replacement=True))
            continue
        if not group.complete or len(free) < len(group.members):
            continue  # incomplete, or a release of it is in flight
        if _take(sum_amounts([unbooked(member) for member in free]), used, room):
            releases.append(GroupRelease(group, group.members))
            continue
        if policy.ordering == "StrictFIFO" or policy.at_max_boost(now - group.queued_at):
            ahead = single is None or group.key(policy, now) < single
            return GroupPlan(tuple(releases), holds_line=ahead)
    return GroupPlan(tuple(releases))


def _single_head(queue: TenantQueue, policy: QueuePolicy, now: float) -> OrderKey | None:
    keys = [order_key(priority, slots[0], policy, now) for priority, _, slots in queue.lanes()]
    keys.extend(order_key(priority, slot, policy, now) for priority, slot in queue.parked_heads())
    return min(keys) if keys else None


def _take(amount: Mapping[str, Quantity], used: dict[str, int], room: Mapping[str, int]) -> bool:
    """Whether ``amount`` fits; if so it is counted as used."""
    if any(
        used[name] + q.nanos > room[name] for name, q in amount.items() if name in room and q.nanos
    ):
        return False
    for name, q in amount.items():
        if name in used:
            used[name] += q.nanos
    return True


# --------------------------------------------------------------------------- ledger changes


@dataclass(frozen=True, slots=True)
class GroupBooking:
    """What :func:`book_group` did: every member booked (``reservations``: uid -> id), or
    nothing (``shortfalls`` says what did not fit)."""

    booked: bool
    reservations: Mapping[str, str]
    shortfalls: tuple[Shortfall, ...] = ()


def reservation_id_for(uid: str) -> str:
    return f"rel-{uid}"


def book_group(
    ledger: TenantLedger,
    *,
    quota: Quota,
    tier: Tier,
    members: Sequence[QueuedPod],
    now: float,
    ttl: float,
    cohort_member: bool = False,
) -> tuple[TenantLedger, GroupBooking]:
    """Book every member of ``members`` in ``tier``, or none: one ledger change.

    A cohort member's guaranteed booking must also keep its total within its guarantee
    (``cohort_member``, as in :func:`plan_groups`).

    A member booked already (an earlier release whose gate removal did not finish) keeps its
    booking and is counted as booked. Each booking is a reservation bound to the member, so
    the stored pod confirms it once ungated; the members' queued entries are dropped.
    """
    booked_ids = {
        member.uid: found.id
        for member in members
        if (found := ledger.reservation_for_pod(member.uid)) is not None
    }
    charged = {member.uid for member in members if member.uid in ledger.charges}
    missing = [m for m in members if m.uid not in booked_ids and m.uid not in charged]
    measured = guarantee_measure(ledger) if cohort_member and tier == "guaranteed" else ledger
    shortfalls = room_shortfalls(quota, measured, tier, sum_amounts([m.amount for m in missing]))
    if shortfalls:
        return ledger, GroupBooking(False, {}, shortfalls)
    after = ledger
    for member in missing:
        reservation_id = reservation_id_for(member.uid)
        after = cancel(after, reservation_id=reservation_id)
        after = book(
            after,
            reservation_id=reservation_id,
            tier=tier,
            amount=member.amount,
            now=now,
            ttl=ttl,
            pod_uid=member.uid,
        )
        booked_ids[member.uid] = reservation_id
    for member in members:
        entry = queued_entry_for(after, entry_id=member.entry_id, pod_uid=member.uid)
        if entry is not None:
            after = dequeue(after, entry_id=entry.id)
    return after, GroupBooking(True, booked_ids)


def undo_group(
    ledger: TenantLedger, *, members: Iterable[QueuedPod], reservations: Mapping[str, str]
) -> tuple[TenantLedger, None]:
    """No member's gate could be removed: cancel every booking, put every entry back."""
    after = ledger
    for member in members:
        reservation_id = reservations.get(member.uid)
        if reservation_id is not None:
            after = cancel(after, reservation_id=reservation_id)
        after = settle_queued(
            after,
            entry_id=member.entry_id,
            pod_uid=member.uid,
            priority=member.priority,
            queued_at=member.queued_at,
        )
    return after, None


__all__ = [
    "GroupBooking",
    "GroupPlan",
    "GroupRelease",
    "WaitingGroup",
    "book_group",
    "plan_groups",
    "undo_group",
    "waiting_groups",
]
