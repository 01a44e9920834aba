"""The validating webhook's side of queue mode: tenantgate owns the gate ``tenantgate.io/quota``.

* A gated pod is accepted at creation: its queued entry (booked by the mutating webhook) is
  bound to it, or, when the gate came without that webhook, booked here within
  ``maxPending``.
* A pod that was queued by the mutating webhook but reaches validation without the gate (a
  later webhook removed it) is a pod that must fit now: its entry is dropped and its request
  booked on the queue's tier, or it is denied.
* Removing the gate afterwards is denied to everyone but tenantgate's own identity, with the
  pod's position in the message. (The API server itself only lets gates be removed, never
  added, once a pod exists: ``ValidatePodUpdate`` in pkg/apis/core/validation/validation.go.)

Every function here is a pure change of one tenant's ledger, for ``LedgerStore.transact``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from classifier.quantities import Quantity
from tenants.config import QUOTA_GATE, TenantPolicy
from tenants.ledger import (
    TenantLedger,
    Tier,
    bind_queued,
    book,
    dequeue,
    queued_entry_for,
    queued_id_for,
)
from tenants.queue.admission import (
    entry_position,
    never_fits,
    queue_pod,
    queued_warning,
    room_shortfalls,
)
from tenants.quota import Decision, check, denial_message
from tenants.verdicts import DenialCause

logger = logging.getLogger(__name__)

Outcome = Literal["queued", "booked", "denied"]


@dataclass(frozen=True, slots=True)
class GateCheck:
    """What validating a gated (or ungated-on-the-way) pod found."""

    outcome: Outcome
    message: str = ""  # the denial, or the warning of a pod queued here
    tier: Tier | None = None
    code: int = 403
    reason: str = "Forbidden"
    cause: DenialCause = "over_quota"  # of a denial, for the metric


def confirm_gated_create(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    request: Mapping[str, Quantity],
    entry_id: str | None,
    pod_uid: str,
    priority: int,
    now: float,
    ttl: float,
) -> tuple[TenantLedger, GateCheck]:
    """A gated pod being created: bind its queued entry, or queue it here."""
    if tenant.queue is None:
        return ledger, GateCheck(
            "denied",
            f"the scheduling gate {QUOTA_GATE} is tenantgate's, and tenant {tenant.name} does "
            "not queue pods (overQuota: reject); remove the gate",
        )
    entry = queued_entry_for(ledger, entry_id=entry_id, pod_uid=pod_uid)
    if entry is not None:
        return bind_queued(ledger, entry_id=entry.id, pod_uid=pod_uid), GateCheck("queued")
    reason = never_fits(tenant, request)
    if reason is not None:
        decision = check(tenant.quota, TenantLedger(tenant.name), request)
        base = (
            denial_message(tenant.name, decision)
            if not decision.fits
            else f"tenant {tenant.name}: cannot queue the pod"
        )
        return ledger, GateCheck("denied", f"{base}; {reason}")
    queued, answer = queue_pod(
        ledger,
        tenant=tenant,
        amount=request,
        priority=priority,
        entry_id=queued_id_for(pod_uid),
        now=now,
        ttl=ttl,
        pod_uid=pod_uid,
    )
    if answer.full:
        return ledger, GateCheck(
            "denied",
            f"tenant {tenant.name}'s queue is full ({answer.pending} pods waiting, maxPending "
            f"{tenant.queue.max_pending})",
            cause="queue_full",
        )
    return queued, GateCheck("queued", queued_warning(tenant, answer))


def book_ungated_create(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    request: Mapping[str, Quantity],
    entry_id: str | None,
    pod_uid: str,
    reservation_id: str,
    now: float,
    ttl: float,
) -> tuple[TenantLedger, GateCheck]:
    """A pod queued by the mutating webhook lost the gate on the way: it must fit now."""
    entry = queued_entry_for(ledger, entry_id=entry_id, pod_uid=pod_uid)
    base = dequeue(ledger, entry_id=entry.id) if entry is not None else ledger
    if tenant.queue is not None:
        tier: Tier = tenant.queue.tier
        shortfalls = room_shortfalls(tenant.quota, base, tier, request)
        decision = Decision(
            None if shortfalls else tier,
            shortfalls,
            "guaranteed" if tier == "guaranteed" else "burst ceiling",
        )
    else:
        decision = check(tenant.quota, base, request)
    if decision.tier is None:
        return base, GateCheck(
            "denied",
            f"{denial_message(tenant.name, decision)}; the scheduling gate {QUOTA_GATE} was "
            "removed by a later admission step, so the pod must fit now",
        )
    booked = book(
        base,
        reservation_id=reservation_id,
        tier=decision.tier,
        amount=request,
        now=now,
        ttl=ttl,
        pod_uid=pod_uid,
    )
    return booked, GateCheck("booked", tier=decision.tier)


def gate_removal_denial(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    entry_id: str | None,
    pod_uid: str,
    pod_name: str,
    owner: str,
    now: float,
) -> str:
    """Why someone other than ``owner`` may not remove the gate, with the pod's position."""
    where = f"it waits in tenant {tenant.name}'s queue"
    entry = queued_entry_for(ledger, entry_id=entry_id, pod_uid=pod_uid)
    if entry is not None and tenant.queue is not None:
        position, pending = entry_position(ledger, entry, policy=tenant.queue, now=now)
        where = f"position {position} of {pending} in tenant {tenant.name}'s queue"
    return f"pod {pod_name}: {owner_rule(owner)} when the tenant has room; {where}"


# How tenantgate's webhook words a gate removal by anyone but the owner: the releaser knows a
# denial of its own releases by it.
OWNER_RULE_PREFIX: Final = f"the scheduling gate {QUOTA_GATE} is removed only by tenantgate ("


def owner_rule(owner: str) -> str:
    return f"{OWNER_RULE_PREFIX}{owner})"


__all__ = [
    "OWNER_RULE_PREFIX",
    "GateCheck",
    "book_ungated_create",
    "confirm_gated_create",
    "gate_removal_denial",
    "owner_rule",
]
