"""The queue of one tenant: pods waiting behind tenantgate's scheduling gate, in order.

Order: effective priority first (the pod's ``spec.priority`` plus its aging boost, highest
first), then the time it was queued (its creation), then ``namespace/name``. A pod's priority
cannot change once it is created, so aging lives here, as a function of the time waited
(:meth:`tenants.config.QueuePolicy.boost`), never on the pod.

Aging never reorders pods of one priority: the older one always has at least the younger's
boost. So a :class:`TenantQueue` keeps, per priority, its pods sorted by (time queued, name):
along such a list the effective priority never grows, and the whole order key never shrinks,
whatever ``now`` is. The order of the whole queue is a merge of a few such lists (one per
priority class), a pod's position is a binary search in each, and the release planner
(:mod:`tenants.queue.release`) only looks at list heads. Each list is also split by request
("lanes"): under BestEffortFIFO, a request that does not fit rules out every pod asking the
same, so planning a release costs O(lanes x log lanes), not O(pods).

Pure and single-threaded: the controller updates it from watch events on the event loop.
"""

from __future__ import annotations

import heapq
import logging
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from classifier.quantities import Quantity
from tenants.config import QueuePolicy
from tenants.ledger import Queued

logger = logging.getLogger(__name__)

Shape = tuple[tuple[str, int], ...]
# The ledger entries of pod groups' members (tenants.groups.admission) start with this: a group
# waits for its whole total, so its members are never ahead of a single pod in line.
GROUP_ENTRY_PREFIX = "g-"
# (time queued, namespace/name, uid): the order of one priority, whatever the time.
Slot = tuple[float, str, str]
OrderKey = tuple[int, float, str]


def shape_of(amount: Mapping[str, Quantity]) -> Shape:
    """A hashable form of a request: pods with equal requests share a lane."""
    return tuple(sorted((name, q.nanos) for name, q in amount.items() if q.nanos))


@dataclass(frozen=True, slots=True)
class QueuedPod:
    """One gated pod as the queue knows it (from the watch)."""

    uid: str
    namespace: str
    name: str
    priority: int
    queued_at: float
    amount: Mapping[str, Quantity]
    entry_id: str  # its queued entry in the ledger
    resource_version: str = ""
    shape: Shape = field(default=(), compare=False)
    # Of a pod group's member: the group (``namespace/key``) and its size (0: unknown). A
    # member is never offered alone: its group is (``tenants.groups.release``).
    group: str = ""
    group_size: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def slot(self) -> Slot:
        return (self.queued_at, self.key, self.uid)

    def effective_priority(self, policy: QueuePolicy, now: float) -> int:
        return self.priority + policy.boost(now - self.queued_at)


def order_key(priority: int, slot: Slot, policy: QueuePolicy, now: float) -> OrderKey:
    """The sort key of a pod in the whole queue at ``now`` (smaller goes first)."""
    return (-(priority + policy.boost(now - slot[0])), slot[0], slot[1])


class TenantQueue:
    """The gated pods of one tenant; see the module docstring.

    ``parked`` pods (a release in flight, or backing off after a failed one) keep their place
    for positions but are not offered for release.
    """

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self._pods: dict[str, QueuedPod] = {}
        self._classes: dict[int, list[Slot]] = {}
        self._lanes: dict[tuple[int, Shape], list[Slot]] = {}
        self._parked: dict[int, list[Slot]] = {}
        self._parked_uids: set[str] = set()
        self._groups: dict[str, dict[str, QueuedPod]] = {}

    # -- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def get(self, uid: str) -> QueuedPod | None:
        return self._pods.get(uid)

    def is_parked(self, uid: str) -> bool:
        return uid in self._parked_uids

    def priorities(self) -> list[int]:
        return list(self._classes)

    def oldest_queued_at(self) -> float | None:
        heads = [slots[0][0] for slots in self._classes.values() if slots]
        return min(heads) if heads else None

    def ordered(self, policy: QueuePolicy, now: float) -> Iterator[QueuedPod]:
        """Every pod, first in line first: a merge of the per-priority lists."""
        streams = [
            _stream(slots, _keyed(priority, policy, now))
            for priority, slots in self._classes.items()
        ]
        for _, uid in heapq.merge(*streams):
            yield self._pods[uid]

    def position(self, uid: str, policy: QueuePolicy, now: float) -> int:
        """1 for the first pod in line; O(priorities x log n)."""
        pod = self._pods[uid]
        target = order_key(pod.priority, pod.slot, policy, now)
        ahead = 0
        for priority, slots in self._classes.items():
            ahead += bisect_left(slots, target, key=_keyed(priority, policy, now))
        return ahead + 1

    # -- changing ------------------------------------------------------------------------

    def add(self, pod: QueuedPod) -> None:
        """Add a pod, or update it (its place follows its priority and time queued)."""
        if not pod.shape:
            pod = replace(pod, shape=shape_of(pod.amount))
        known = self._pods.get(pod.uid)
        parked = pod.uid in self._parked_uids
        if known is not None:
            self.remove(pod.uid)
        self._pods[pod.uid] = pod
        insort(self._classes.setdefault(pod.priority, []), pod.slot)
        if pod.group:
            self._groups.setdefault(pod.group, {})[pod.uid] = pod
            if parked:
                self._parked_uids.add(pod.uid)
        elif parked:
            self._parked_uids.add(pod.uid)
            insort(self._parked.setdefault(pod.priority, []), pod.slot)
        else:
            insort(self._lanes.setdefault((pod.priority, pod.shape), []), pod.slot)

    def remove(self, uid: str) -> QueuedPod | None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return None
        _discard(self._classes, pod.priority, pod.slot)
        if pod.group:
            members = self._groups.get(pod.group)
            if members is not None:
                members.pop(uid, None)
                if not members:
                    del self._groups[pod.group]
            self._parked_uids.discard(uid)
        elif uid in self._parked_uids:
            self._parked_uids.discard(uid)
            _discard(self._parked, pod.priority, pod.slot)
        else:
            _discard(self._lanes, (pod.priority, pod.shape), pod.slot)
        return pod

    def park(self, uid: str) -> None:
        """Keep the pod in line but offer it for no release (in flight, or backing off)."""
        pod = self._pods.get(uid)
        if pod is None or uid in self._parked_uids:
            return
        if pod.group:
            self._parked_uids.add(uid)
            return
        _discard(self._lanes, (pod.priority, pod.shape), pod.slot)
        self._parked_uids.add(uid)
        insort(self._parked.setdefault(pod.priority, []), pod.slot)

    def unpark(self, uid: str) -> None:
        pod = self._pods.get(uid)
        if pod is None or uid not in self._parked_uids:
            return
        self._parked_uids.discard(uid)
        if pod.group:
            return
        _discard(self._parked, pod.priority, pod.slot)
        insort(self._lanes.setdefault((pod.priority, pod.shape), []), pod.slot)

    # -- for the release planner ---------------------------------------------------------

    def lanes(self) -> Iterator[tuple[int, Shape, list[Slot]]]:
        """(priority, request shape, its releasable pods in order); never empty lists."""
        for (priority, shape), slots in self._lanes.items():
            yield priority, shape, slots

    def parked_heads(self) -> Iterator[tuple[int, Slot]]:
        """Per priority, the first parked pod (the only one that can block the others)."""
        for priority, slots in self._parked.items():
            yield priority, slots[0]

    def pod(self, uid: str) -> QueuedPod:
        return self._pods[uid]

    def groups(self) -> Mapping[str, Mapping[str, QueuedPod]]:
        """The waiting members of each pod group (group id -> uid -> member)."""
        return self._groups


K = TypeVar("K")


def _keyed(priority: int, policy: QueuePolicy, now: float) -> Callable[[Slot], OrderKey]:
    def key(slot: Slot) -> OrderKey:
        return order_key(priority, slot, policy, now)

    return key


def _stream(slots: list[Slot], key: Callable[[Slot], OrderKey]) -> Iterator[tuple[OrderKey, str]]:
    for slot in slots:
        yield key(slot), slot[2]


def _discard(index: dict[K, list[Slot]], key: K, slot: Slot) -> None:
    slots = index.get(key)
    if slots is None:
        return
    at = bisect_left(slots, slot)
    if at < len(slots) and slots[at] == slot:
        del slots[at]
    if not slots:
        del index[key]


def ledger_position(
    entries: Iterable[Queued], *, priority: int, policy: QueuePolicy, now: float
) -> int:
    """The position a pod of ``priority`` queued at ``now`` gets among the ledger's entries.

    Every entry was queued earlier, so one of equal effective priority stays ahead. This is
    what admission tells (every replica shares the ledger; only the leader watches pods).
    """
    # Aging only adds (0 to maxBoost): an entry already at ``priority`` is ahead whatever its
    # age, one below ``priority - maxBoost`` never is, and only those between need their
    # boost worked out. Admission counts every entry, so this loop is the queued pod's cost.
    lowest = priority - policy.max_boost if policy.aging else priority
    boost = policy.boost
    ahead = 0
    for entry in entries:
        level = entry.priority
        if level < lowest:
            continue
        if level < priority and level + boost(now - entry.queued_at) < priority:
            continue
        if not entry.id.startswith(GROUP_ENTRY_PREFIX):
            ahead += 1
    return ahead + 1


__all__ = [
    "GROUP_ENTRY_PREFIX",
    "OrderKey",
    "QueuedPod",
    "Shape",
    "Slot",
    "TenantQueue",
    "ledger_position",
    "order_key",
    "shape_of",
]
