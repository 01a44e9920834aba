"""Every tenant's queue, kept from the controller's pod events, and who must hear of changes.

The :class:`~tenants.controller.LedgerController` tells a :class:`QueueBook` about every pod
carrying tenantgate's gate (:meth:`QueueBook.observe`) and every pod leaving (:meth:`forget`);
the book keeps one :class:`~tenants.queue.TenantQueue` per tenant. Nothing else is stored: the
queues are the watch's gated pods, so a restart or a new leader rebuilds them from the first
pod list with every place in line intact.

A :class:`QueueListener` (the releaser) hears of new queued pods, of pods that changed (their
release backoff starts afresh), and of tenants whose room may have freed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from classifier.quantities import format_list
from tenants.config import QueuePolicy
from tenants.groups.admission import sum_amounts
from tenants.groups.membership import Membership
from tenants.ledger import queued_id_for
from tenants.queue.line import QueuedPod, TenantQueue

logger = logging.getLogger(__name__)


class GatedPod(Protocol):
    """What the book reads of a pod (``tenants.controller.PodFacts`` provides it)."""

    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def created_at(self) -> float: ...
    @property
    def reservation(self) -> str | None: ...
    @property
    def amount(self) -> Any: ...
    @property
    def group(self) -> Membership | None: ...


class QueueListener(Protocol):
    def queued(self, tenant: str, pod: QueuedPod, *, listed: bool) -> None:
        """A gated pod joined ``tenant``'s queue (``listed``: found by a full list)."""

    def changed(self, tenant: str, pod: QueuedPod) -> None:
        """A queued pod changed (its failed releases are forgotten)."""

    def left(self, tenant: str, uid: str) -> None:
        """A pod left ``tenant``'s queue (released, ungated or deleted)."""

    def room_changed(self, tenant: str) -> None:
        """``tenant``'s room may have freed, or its queue's head changed: evaluate it."""


def queued_pod(facts: GatedPod, amount: Any = None) -> QueuedPod:
    """The queue's view of a gated pod; ``amount`` is what releasing it books (its request,
    or with a limits quota its request and limits), ``facts.amount`` by default."""
    group = facts.group
    return QueuedPod(
        group=group.id if group is not None else "",
        group_size=group.size or 0 if group is not None else 0,
        uid=facts.uid,
        namespace=facts.namespace,
        name=facts.name,
        priority=facts.priority,
        queued_at=facts.created_at,
        amount=facts.amount if amount is None else amount,
        entry_id=facts.reservation or queued_id_for(facts.uid),
        resource_version=facts.resource_version,
    )


class QueueBook:
    """The queues of every tenant (single-threaded: the controller's event-loop thread)."""

    def __init__(self) -> None:
        self.queues: dict[str, TenantQueue] = {}
        self._where: dict[str, str] = {}
        self.listener: QueueListener | None = None

    def __len__(self) -> int:
        return len(self._where)

    def tenant_of(self, uid: str) -> str | None:
        return self._where.get(uid)

    def observe(
        self, facts: GatedPod, tenant: str | None, *, amount: Any = None, listed: bool = False
    ) -> None:
        """The pod as last seen: in ``tenant``'s queue, or in none (``tenant`` None)."""
        uid = facts.uid
        before = self._where.get(uid)
        if tenant is None:
            if before is not None:
                self.forget(uid)
            return
        if before is not None and before != tenant:
            self.forget(uid)
            before = None
        queue = self.queues.get(tenant)
        if queue is None:
            queue = self.queues[tenant] = TenantQueue(tenant)
        known = queue.get(uid)
        pod = queued_pod(facts, amount)
        if known is not None and known.resource_version == pod.resource_version:
            return
        queue.add(pod)
        self._where[uid] = tenant
        listener = self.listener
        if listener is None:
            return
        if known is None:
            listener.queued(tenant, pod, listed=listed)
        else:
            listener.changed(tenant, pod)
        listener.room_changed(tenant)  # a new or changed pod may fit already

    def forget(self, uid: str) -> str | None:
        """Take the pod out of its queue; returns the tenant it waited in."""
        tenant = self._where.pop(uid, None)
        if tenant is None:
            return None
        queue = self.queues.get(tenant)
        if queue is not None:
            queue.remove(uid)
            if not len(queue):
                del self.queues[tenant]
        if self.listener is not None:
            self.listener.left(tenant, uid)
            # Under StrictFIFO (or behind a pod at maxBoost) the pods behind may go now.
            self.listener.room_changed(tenant)
        return tenant

    def room_changed(self, tenant: str) -> None:
        if self.listener is not None and tenant in self.queues:
            self.listener.room_changed(tenant)

    def clear(self) -> None:
        """Forget every queue (a full list rebuilds them)."""
        for uid in list(self._where):
            self.forget(uid)

    # -- what users see ------------------------------------------------------------------

    def listing(
        self,
        policy_of: Callable[[str], QueuePolicy],
        *,
        now: float,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``GET /queue``: every queued pod with position, effective priority, request, wait."""
        tenants: dict[str, Any] = {}
        for name in sorted(self.queues) if tenant is None else [tenant]:
            queue = self.queues.get(name)
            if queue is None:
                tenants[name] = {"pending": 0, "pods": []}
                continue
            policy = policy_of(name)
            pods = list(_rows(queue, policy, now))
            tenants[name] = {"pending": len(queue), "pods": pods}
        return {"tenants": tenants, "generatedAt": now}

    def summary(
        self, name: str, policy: QueuePolicy, *, now: float, first: int = 5
    ) -> dict[str, Any]:
        """``/status``'s per-tenant ``queue``: pending count, oldest wait, first positions."""
        queue = self.queues.get(name)
        if queue is None:
            return {"pending": 0, "oldestWaitSeconds": 0.0, "first": []}
        oldest = queue.oldest_queued_at()
        rows = []
        for row in _rows(queue, policy, now):
            if row["position"] > first:
                break
            rows.append(row)
        return {
            "pending": len(queue),
            "oldestWaitSeconds": round(max(now - oldest, 0.0), 3) if oldest is not None else 0.0,
            "first": rows,
        }

    def pending(self) -> Iterator[tuple[str, int, float | None]]:
        """(tenant, pods waiting, oldest time queued) per tenant with a queue."""
        for name, queue in self.queues.items():
            yield name, len(queue), queue.oldest_queued_at()


def _rows(queue: TenantQueue, policy: QueuePolicy, now: float) -> Iterator[dict[str, Any]]:
    """The queue's entries in order: a pod, or a pod group as one entry (at its best-placed
    member) with its members and total."""
    groups = queue.groups()
    shown: set[str] = set()
    position = 0
    for pod in queue.ordered(policy, now):
        if pod.group:
            if pod.group in shown:
                continue
            shown.add(pod.group)
            position += 1
            yield _group_row(pod.group, list(groups[pod.group].values()), position, policy, now)
            continue
        position += 1
        yield _row(pod, position, policy, now, parked=queue.is_parked(pod.uid))


def _group_row(
    group: str, members: list[QueuedPod], position: int, policy: QueuePolicy, now: float
) -> dict[str, Any]:
    first = min(member.queued_at for member in members)
    best = max(members, key=lambda member: member.effective_priority(policy, now))
    size = max(member.group_size for member in members)
    namespace, _, key = group.partition("/")
    return {
        "position": position,
        "pod": f"{namespace}/{key.rpartition('/')[2]}",
        "group": group,
        "members": len(members),
        "size": size or None,
        "priority": best.priority,
        "effectivePriority": best.effective_priority(policy, now),
        "request": format_list(sum_amounts([member.amount for member in members])),
        "waitedSeconds": round(max(now - first, 0.0), 3),
        "releasing": False,
    }


def _row(
    pod: QueuedPod, position: int, policy: QueuePolicy, now: float, *, parked: bool
) -> dict[str, Any]:
    return {
        "position": position,
        "pod": pod.key,
        "priority": pod.priority,
        "effectivePriority": pod.effective_priority(policy, now),
        "request": format_list(pod.amount),
        "waitedSeconds": round(max(now - pod.queued_at, 0.0), 3),
        "releasing": parked,
    }


__all__ = ["GatedPod", "QueueBook", "QueueListener", "queued_pod"]
