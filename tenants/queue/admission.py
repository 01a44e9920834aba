"""Queue mode at admission: whether an over-quota pod waits, the ledger change, what it is told.

A tenant in ``overQuota: queue`` has its pods that do not fit gated (``tenantgate.io/quota``)
instead of rejected. The decision is one pure change of the tenant's ledger (run by
``LedgerStore.transact``, so ``maxPending`` holds under concurrency and across replicas):

* a pod that fits is admitted as today, unless pods already wait ahead of it for the same
  room (effective priority at least its own): it then queues behind them, so a create never
  jumps the line while the controller is about to release;
* a pod that does not fit is queued when fewer than ``maxPending`` pods wait, and rejected
  with a message naming the limit otherwise;
* a pod that could never fit (larger than the guarantee for a guaranteed-tier queue, than the
  ceiling for a burst-tier one) is rejected as today, never queued.

Positions told at admission come from the ledger's queued entries (priority and time queued),
which every replica shares; the controller's queue, rebuilt from the watch, decides releases.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from classifier.quantities import Quantity
from classifier.types import JSONObject
from tenants.config import QUEUED_TIER, QUOTA_GATE, QueuePolicy, TenantPolicy
from tenants.ledger import (
    Queued,
    TenantLedger,
    Tier,
    dequeue,
    enqueue,
)
from tenants.queue.line import ledger_position
from tenants.quota import Decision, Quota, Shortfall

logger = logging.getLogger(__name__)

_ZERO: Final = Quantity(0)


def has_gate(spec: Mapping[str, Any], gate: str = QUOTA_GATE) -> bool:
    gates = spec.get("schedulingGates")
    return isinstance(gates, list) and any(
        isinstance(item, dict) and item.get("name") == gate for item in gates
    )


def add_gate(pod: JSONObject) -> None:
    """Append tenantgate's gate to ``pod``'s (copied) spec; the pod's other gates stay."""
    spec = pod.get("spec")
    spec_obj: JSONObject = dict(spec) if isinstance(spec, dict) else {}
    gates = spec_obj.get("schedulingGates")
    current = list(gates) if isinstance(gates, list) else []
    if not any(isinstance(g, dict) and g.get("name") == QUOTA_GATE for g in current):
        current.append({"name": QUOTA_GATE})
    spec_obj["schedulingGates"] = current
    pod["spec"] = spec_obj


def remove_gate(pod: JSONObject) -> bool:
    """Take tenantgate's gate out of ``pod``'s (copied) spec; whether it was there."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not has_gate(spec):
        return False
    spec_obj = dict(spec)
    kept = [
        g
        for g in spec["schedulingGates"]
        if not (isinstance(g, dict) and g.get("name") == QUOTA_GATE)
    ]
    if kept:
        spec_obj["schedulingGates"] = kept
    else:
        del spec_obj["schedulingGates"]
    pod["spec"] = spec_obj
    return True


def room_shortfalls(
    quota: Quota, ledger: TenantLedger, tier: Tier, amount: Mapping[str, Quantity]
) -> tuple[Shortfall, ...]:
    """The resources of ``amount`` that do not fit ``tier``'s room (the guarantee for
    guaranteed, the ceiling for burst) at ``ledger``'s usage, sorted by name."""
    found: list[Shortfall] = []
    for name in sorted(amount):
        requested = amount[name]
        ceiling = quota.ceiling.get(name)
        if ceiling is None or requested.nanos <= 0:
            continue
        guaranteed_used = ledger.guaranteed.get(name, _ZERO)
        if tier == "guaranteed":
            used, limit = guaranteed_used, quota.guarantee_of(name)
        else:
            used, limit = guaranteed_used + ledger.burst.get(name, _ZERO), ceiling
        if used.nanos + requested.nanos > limit.nanos:
            found.append(Shortfall(name, requested, used, limit, quota.guarantee_of(name)))
    return tuple(found)


def never_fits(tenant: TenantPolicy, amount: Mapping[str, Quantity]) -> str | None:
    """Why a pod could never be released onto its queue's room (None when it could)."""
    queue = tenant.queue
    if queue is None:
        return None
    if queue.tier == "burst" and tenant.queue_room is not None:
        return _never_held(tenant, tenant.queue_room, amount)
    empty = TenantLedger(tenant.name)
    shortfalls = room_shortfalls(tenant.quota, empty, queue.tier, amount)
    if not shortfalls:
        return None
    what = "guarantee" if queue.tier == "guaranteed" else "ceiling"
    limits = ",".join(f"{s.resource}={s.limit}" for s in shortfalls)
    return f"it is larger than tenant {tenant.name}'s {what} ({limits}), so it is never queued"


def _never_held(
    tenant: TenantPolicy, room: Mapping[str, Quantity], amount: Mapping[str, Quantity]
) -> str | None:
    """A cohort member queueing for borrowed room: larger than it could ever hold."""
    over = {
        name: room[name] for name in sorted(amount) if name in room and amount[name] > room[name]
    }
    if not over:
        return None
    limits = ",".join(f"{name}={limit}" for name, limit in over.items())
    return (
        f"it is larger than the most tenant {tenant.name} can hold with what its cohort "
        f"lends ({limits}), so it is never queued"
    )


@dataclass(frozen=True, slots=True)
class QueueAnswer:
    """A pod's outcome in a queueing tenant: ``queued`` with its place, or ``full``."""

    queued: bool
    entry_id: str
    position: int = 0
    pending: int = 0  # pods waiting once this one is in line
    shortfalls: tuple[Shortfall, ...] = ()  # what is exhausted (empty: pods wait ahead)
    ahead: int = 0
    full: bool = False


def ahead_of(entries: Iterable[Queued], *, priority: int, policy: QueuePolicy, now: float) -> int:
    """How many queued entries are ahead of a pod of ``priority`` queued at ``now``."""
    return ledger_position(entries, priority=priority, policy=policy, now=now) - 1


def queue_pod(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    amount: Mapping[str, Quantity],
    priority: int,
    entry_id: str,
    now: float,
    ttl: float,
    pod_uid: str | None = None,
) -> tuple[TenantLedger, QueueAnswer]:
    """Queue the pod (its entry in the ledger) unless ``maxPending`` pods already wait."""
    queue = tenant.queue
    if queue is None:
        raise ValueError(f"tenant {tenant.name} does not queue")
    shortfalls = room_shortfalls(tenant.quota, ledger, queue.tier, amount)
    ahead = ahead_of(ledger.queued.values(), priority=priority, policy=queue, now=now)
    pending = len(ledger.queued)
    if pending >= queue.max_pending:
        return ledger, QueueAnswer(False, entry_id, pending=pending, full=True)
    queued = enqueue(
        ledger, entry_id=entry_id, priority=priority, now=now, ttl=ttl, pod_uid=pod_uid
    )
    return queued, QueueAnswer(
        True,
        entry_id,
        position=ahead + 1,
        pending=pending + 1,
        shortfalls=shortfalls,
        ahead=ahead,
    )


def requeue_base(ledger: TenantLedger, entry_id: str | None) -> TenantLedger:
    """``ledger`` without the unbound entry or reservation a re-invoked mutate booked before."""
    if entry_id is None:
        return ledger
    entry = ledger.queued.get(entry_id)
    if entry is not None and entry.pod_uid is None and entry.expires_at is not None:
        return dequeue(ledger, entry_id=entry_id)
    return ledger


def waits_ahead(
    ledger: TenantLedger, *, tenant: TenantPolicy, decision: Decision, priority: int, now: float
) -> bool:
    """Whether a pod that fits must still queue: pods wait ahead of it for the same room."""
    queue = tenant.queue
    if queue is None or decision.tier != queue.tier or not ledger.queued:
        return False
    if len(ledger.queued) >= queue.max_pending:
        return False  # a full queue never makes a pod that fits wait
    return ahead_of(ledger.queued.values(), priority=priority, policy=queue, now=now) > 0


# --------------------------------------------------------------------------- messages


def queued_warning(tenant: TenantPolicy, answer: QueueAnswer) -> str:
    """``queued: team-a is at its ceiling (cpu 6/6); position 3 of 5; released when ...``."""
    queue = tenant.queue
    tier = queue.tier if queue is not None else "guaranteed"
    if tenant.queue_room is not None:
        return _borrowed_queued_warning(tenant, answer)
    if answer.shortfalls:
        limit = "guarantee" if tier == "guaranteed" else "ceiling"
        used = ", ".join(f"{s.resource} {s.used}/{s.limit}" for s in answer.shortfalls)
        why = f"{tenant.name} is at its {limit} ({used})"
    else:
        pods = "pod waits" if answer.ahead == 1 else "pods wait"
        why = f"{answer.ahead} {pods} ahead of it for {tenant.name}'s {tier} room"
    return (
        f"{QUEUED_TIER}: {why}; position {answer.position} of {answer.pending}; "
        f"released when {tenant.name}'s {tier} room frees"
    )


def _borrowed_queued_warning(tenant: TenantPolicy, answer: QueueAnswer) -> str:
    """A cohort member queued for borrowed room."""
    if answer.shortfalls:
        why = f"{tenant.name} is past its guarantee and its cohort has no room to lend it now"
    else:
        pods = "pod waits" if answer.ahead == 1 else "pods wait"
        why = f"{answer.ahead} {pods} ahead of it for room borrowed from {tenant.name}'s cohort"
    return (
        f"{QUEUED_TIER}: {why}; position {answer.position} of {answer.pending}; released "
        "when the cohort has room to lend, to its members with the lowest share first"
    )


def full_message(tenant: TenantPolicy, base: str, pending: int) -> str:
    queue = tenant.queue
    limit = queue.max_pending if queue is not None else pending
    return (
        f"{base}; tenant {tenant.name}'s queue is full ({pending} pods waiting, maxPending "
        f"{limit}): try again when pods of {tenant.name} finish"
    )


def entry_position(
    ledger: TenantLedger, entry: Queued, *, policy: QueuePolicy, now: float
) -> tuple[int, int]:
    """(position, pending) of an entry among the ledger's, in queue order."""

    def key(item: Queued) -> tuple[int, float, str]:
        return (-(item.priority + policy.boost(now - item.queued_at)), item.queued_at, item.id)

    mine = key(entry)
    ahead = sum(1 for item in ledger.queued.values() if key(item) < mine)
    return ahead + 1, len(ledger.queued)


__all__ = [
    "QueueAnswer",
    "add_gate",
    "ahead_of",
    "entry_position",
    "full_message",
    "has_gate",
    "never_fits",
    "queue_pod",
    "queued_warning",
    "remove_gate",
    "requeue_base",
    "room_shortfalls",
    "waits_ahead",
]
