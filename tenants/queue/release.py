"""Releasing queued pods: which ones fit now, the ledger changes that book them, and the pace.

:func:`plan_release` walks a :class:`~tenants.queue.TenantQueue` in order and picks the pods
that fit their tier's room, as admission would measure it (:func:`tenants.quota.check` for
the tier the queue waits for):

* ``StrictFIFO``: the first pod that does not fit stops the walk.
* ``BestEffortFIFO``: a pod that does not fit is skipped for the pods behind it, unless it has
  reached ``maxBoost``: then nobody behind it is released until it fits. A skipped request
  rules out every later pod asking the same (room only shrinks during a walk), so the walk
  looks at lane heads only and its cost does not grow with the queue.

A parked pod (release in flight or backing off) is skipped under BestEffortFIFO and blocks
under StrictFIFO (and at ``maxBoost``), as one that does not fit.

:func:`book_release` / :func:`undo_release` are the ledger changes (pure, for
``LedgerStore.transact``): the queued entry becomes a reservation bound to the pod in one
step, and back when the PATCH that removes the gate fails; :func:`book_checked_release` is
that booking under a room rule of the caller's (a cohort member's release passes the
borrowing rule). :class:`ReleasePace` holds the per-pod exponential backoff and the overall
token bucket, as client-go's default controller rate limiter
(``util/workqueue/default_rate_limiters.go``: ``ItemExponentialFailureRateLimiter`` 5 ms
doubling to 1000 s, under a ``BucketRateLimiter`` of 10/s with a burst of 100).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from classifier.quantities import Quantity
from tenants.config import QueuePolicy
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
from tenants.queue.line import QueuedPod, Shape, TenantQueue, order_key
from tenants.quota import Decision, Quota

logger = logging.getLogger(__name__)

_ZERO: Final = Quantity(0)


# --------------------------------------------------------------------------- planning


def measure_room(
    quota: Quota, ledger: TenantLedger, tier: Tier
) -> tuple[dict[str, int], dict[str, int]]:
    """(used, limit) in nanos for every resource ``quota`` limits, in ``tier``'s room.

    The guaranteed room is the guarantee, used by guaranteed bookings; the burst room is the
    ceiling, used by both tiers' bookings: the room :func:`room_shortfalls` checks, as mutable
    counts for a planner that takes room as it releases.
    """
    used: dict[str, int] = {}
    limit: dict[str, int] = {}
    for name, ceiling in quota.ceiling.items():
        guaranteed_used = ledger.guaranteed.get(name, _ZERO).nanos
        if tier == "guaranteed":
            used[name] = guaranteed_used
            limit[name] = quota.guarantee_of(name).nanos
        else:
            used[name] = guaranteed_used + ledger.burst.get(name, _ZERO).nanos
            limit[name] = ceiling.nanos
    return used, limit


def _fits(shape: Shape, used: Mapping[str, int], limit: Mapping[str, int]) -> bool:
    return all(
        used[name] + nanos <= limit[name] for name, nanos in shape if name in limit and nanos > 0
    )


@dataclass(frozen=True, slots=True)
class ReleasePlan:
    """The pods to release now, in order, and what stopped the walk (for logs and tests)."""

    pods: tuple[QueuedPod, ...]
    blocked_by: QueuedPod | None = None  # StrictFIFO head, or a pod at maxBoost, not fitting


def plan_release(
    queue: TenantQueue,
    *,
    quota: Quota,
    ledger: TenantLedger,
    policy: QueuePolicy,
    now: float,
    limit: int,
) -> ReleasePlan:
    """The pods that fit their tier's room now, first in line first, at most ``limit``."""
    if limit <= 0 or not len(queue):
        return ReleasePlan(())
    used, room = measure_room(quota, ledger, policy.tier)
    strict = policy.ordering == "StrictFIFO"
    # (order key, kind, lane index): kind 0 a lane head, 1 a parked pod that blocks.
    heap: list[tuple[tuple[int, float, str], int, int]] = []
    lanes: list[tuple[int, Shape, list[tuple[float, str, str]]]] = list(queue.lanes())
    cursors = [0] * len(lanes)
    for index, (priority, _, slots) in enumerate(lanes):
        heap.append((order_key(priority, slots[0], policy, now), 0, index))
    parked: list[tuple[int, tuple[float, str, str]]] = list(queue.parked_heads())
    for index, (priority, slot) in enumerate(parked):
        if strict or policy.at_max_boost(now - slot[0]):
            heap.append((order_key(priority, slot, policy, now), 1, index))
    heapq.heapify(heap)
    dead: set[Shape] = set()
    released: list[QueuedPod] = []
    while heap and len(released) < limit:
        _, kind, index = heapq.heappop(heap)
        if kind == 1:
            return ReleasePlan(tuple(released), queue.pod(parked[index][1][2]))
        priority, shape, slots = lanes[index]
        slot = slots[cursors[index]]
        pod = queue.pod(slot[2])
        if shape not in dead and _fits(shape, used, room):
            released.append(pod)
            for name, nanos in shape:
                if name in used:
                    used[name] += nanos
            cursors[index] += 1
            if cursors[index] < len(slots):
                following = slots[cursors[index]]
                heapq.heappush(heap, (order_key(priority, following, policy, now), 0, index))
            continue
        if strict or policy.at_max_boost(now - pod.queued_at):
            return ReleasePlan(tuple(released), pod)
        # Skipped, and with it every later pod of this lane: none of them fits either. Only
        # the lane's head can have reached maxBoost (the oldest), and it has not.
        dead.add(shape)
    return ReleasePlan(tuple(released))


# --------------------------------------------------------------------------- ledger changes


@dataclass(frozen=True, slots=True)
class ReleaseBooking:
    """What :func:`book_release` did: booked (``decision.tier`` set) or not, and why."""

    decision: Decision
    reservation_id: str
    already: bool = False  # booked before (another release of it is under way): do nothing


def book_release(
    ledger: TenantLedger,
    *,
    quota: Quota,
    tier: Tier,
    pod: QueuedPod,
    now: float,
    ttl: float,
) -> tuple[TenantLedger, ReleaseBooking]:
    """Book a queued pod's request in ``tier`` if it fits, and drop its queued entry.

    Run on the ledger being written (a compare-and-swap store re-runs it on a fresh one), so
    another replica's admission booked meanwhile is seen: it never releases past the room.
    The reservation is bound to the pod, so the stored pod confirms it once ungated.
    """

    def check(current: TenantLedger) -> Decision:
        shortfalls = room_shortfalls(quota, current, tier, pod.amount)
        if shortfalls:
            return Decision(
                None, shortfalls, "guaranteed" if tier == "guaranteed" else "burst ceiling"
            )
        return Decision(tier)

    return book_checked_release(ledger, tier=tier, pod=pod, now=now, ttl=ttl, check=check)


def book_checked_release(
    ledger: TenantLedger,
    *,
    tier: Tier,
    pod: QueuedPod,
    now: float,
    ttl: float,
    check: Callable[[TenantLedger], Decision],
) -> tuple[TenantLedger, ReleaseBooking]:
    """Book a queued pod's request in ``tier`` if ``check`` admits it on ``ledger``, and drop
    its queued entry.

    ``check`` is the room rule of the caller (the tenant's own room, or a cohort's borrowing
    rule); a decision with no tier books nothing and is returned as it is, one with a tier
    is returned with the booking. A pod booked or charged already is left alone
    (``already``). The reservation is bound to the pod, so the stored pod confirms it once
    ungated.
    """
    reservation_id = f"rel-{pod.uid}"
    if ledger.reservation_for_pod(pod.uid) is not None or pod.uid in ledger.charges:
        return ledger, ReleaseBooking(Decision(tier), reservation_id, already=True)
    decision = check(ledger)
    if decision.tier is None:
        return ledger, ReleaseBooking(decision, reservation_id)
    if reservation_id in ledger.reservations:
        ledger = cancel(ledger, reservation_id=reservation_id)
    booked = book(
        ledger,
        reservation_id=reservation_id,
        tier=tier,
        amount=pod.amount,
        now=now,
        ttl=ttl,
        pod_uid=pod.uid,
    )
    entry = queued_entry_for(booked, entry_id=pod.entry_id, pod_uid=pod.uid)
    if entry is not None:
        booked = dequeue(booked, entry_id=entry.id)
    return booked, ReleaseBooking(decision, reservation_id)


def undo_release(
    ledger: TenantLedger, *, pod: QueuedPod, reservation_id: str
) -> tuple[TenantLedger, None]:
    """The gate could not be removed: cancel the booking and put the entry back in line."""
    undone = cancel(ledger, reservation_id=reservation_id)
    settled = settle_queued(
        undone,
        entry_id=pod.entry_id,
        pod_uid=pod.uid,
        priority=pod.priority,
        queued_at=pod.queued_at,
    )
    return settled, None


# --------------------------------------------------------------------------- pace


@dataclass(frozen=True, slots=True)
class PaceSettings:
    """client-go's defaults: 5 ms doubling to 1000 s per pod, 10/s with a burst of 100."""

    base_delay: float = 0.005
    max_delay: float = 1000.0
    rate: float = 10.0
    burst: int = 100
    max_failures: int = 8

    def __post_init__(self) -> None:
        if self.base_delay <= 0 or self.max_delay < self.base_delay:
            raise ValueError("release backoff needs 0 < base delay <= max delay")
        if self.rate <= 0 or self.burst < 1 or self.max_failures < 1:
            raise ValueError("release pace needs rate > 0, burst >= 1 and max failures >= 1")


@dataclass(slots=True)
class ReleasePace:
    """The token bucket of all releases and each pod's failure count; time is an argument."""

    settings: PaceSettings = field(default_factory=PaceSettings)
    tokens: float = 0.0
    updated_at: float | None = None
    failures: dict[str, int] = field(default_factory=dict)

    def available(self, now: float) -> int:
        """Whole tokens available at ``now`` (the bucket starts full)."""
        self._refill(now)
        return int(self.tokens)

    def take(self, now: float, count: int = 1) -> None:
        self._refill(now)
        self.tokens -= count

    def next_token_in(self, now: float) -> float:
        """Seconds until one token is available (0 when one is)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.settings.rate

    def _refill(self, now: float) -> None:
        if self.updated_at is None:
            self.tokens = float(self.settings.burst)
        elif now > self.updated_at:
            self.tokens = min(
                float(self.settings.burst),
                self.tokens + (now - self.updated_at) * self.settings.rate,
            )
        self.updated_at = now if self.updated_at is None else max(self.updated_at, now)

    def failure(self, uid: str) -> tuple[float, bool]:
        """Count a failed release of ``uid``: (delay before the next try, given up)."""
        failures = self.failures.get(uid, 0) + 1
        self.failures[uid] = failures
        delay = self.settings.base_delay * 2 ** min(failures - 1, 64)
        return min(delay, self.settings.max_delay), failures >= self.settings.max_failures

    def forget(self, uid: str) -> None:
        """The pod was released, changed or is gone: its next failure starts afresh."""
        self.failures.pop(uid, None)


__all__ = [
    "PaceSettings",
    "ReleaseBooking",
    "ReleasePace",
    "ReleasePlan",
    "book_checked_release",
    "book_release",
    "measure_room",
    "plan_release",
    "undo_release",
]
