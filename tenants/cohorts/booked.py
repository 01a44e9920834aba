"""The cohort-level ledger: borrowed bookings in flight between the cohort and the member.

With several replicas a member's booking is two writes: first the cohort tree's
``TenantCohortLedger`` (a compare-and-swap that every booking of the tree goes through),
then the member's own ``TenantLedger``. Between the two, the booking is a :class:`Pending`
entry of the cohort ledger: every replica deciding later counts it as the member's burst
usage until the member's ledger shows it (its reservations, with the same amounts), it is
settled (removed once the second write is known to be done or known not to happen) or it
expires. So room lent once is counted as lent until the member's ledger says so itself; a
crash between the two writes leaves it reserved until the entry expires, never lent twice.

The cohort ledger also keeps, per member, its usage by tier as of its last write (what
``kubectl get tenantcohortledgers`` shows). Pure: the store in ``tenants.kube.cohortstore``
reads and writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from classifier.quantities import Quantity, QuantityError
from tenants.ledger import LedgerError, TenantLedger


@dataclass(frozen=True, slots=True)
class Pending:
    """A booking on borrowed room written to the cohort ledger, not yet seen in the member's.

    ``amount``: the burst usage it adds to ``tenant``; ``reservations``: the member's
    reservation ids it books, with their amounts (how its arrival in the member's ledger is
    recognised); ``expires_at``: Unix time after which nobody counts it any more.
    """

    id: str
    tenant: str
    amount: Mapping[str, Quantity]
    reservations: Mapping[str, Mapping[str, Quantity]]
    expires_at: float


@dataclass(frozen=True, slots=True)
class CohortLedger:
    """One cohort tree's ledger: the pending bookings and each member's usage by tier."""

    cohort: str
    pending: tuple[Pending, ...] = ()
    members: Mapping[str, Mapping[str, Mapping[str, Quantity]]] = field(default_factory=dict)


def arrived(entry: Pending, ledger: TenantLedger) -> bool:
    """Whether the member's ledger shows the booking: each of its reservations is there, on
    the burst tier, with the amount booked."""
    if not entry.reservations:
        return False
    for reservation_id, amount in entry.reservations.items():
        stored = ledger.reservations.get(reservation_id)
        if stored is None or stored.tier != "burst" or dict(stored.amount) != dict(amount):
            return False
    return True


def counted(
    cohort: CohortLedger,
    ledgers: Mapping[str, TenantLedger],
    *,
    now: float,
    excluded: Iterable[str] = (),
) -> tuple[Pending, ...]:
    """The entries still to count: not expired, not arrived, not ``excluded`` (ids being
    booked again)."""
    skip = set(excluded)
    return tuple(
        entry
        for entry in cohort.pending
        if entry.id not in skip
        and entry.expires_at > now
        and not arrived(entry, ledgers.get(entry.tenant) or TenantLedger(entry.tenant))
    )


def with_pending(ledger: TenantLedger, entries: Iterable[Pending]) -> TenantLedger:
    """``ledger`` with the burst usage of its tenant's pending entries added (a view to decide
    on, never written)."""
    burst = dict(ledger.burst)
    added = False
    for entry in entries:
        if entry.tenant != ledger.tenant:
            continue
        for name, amount in entry.amount.items():
            current = burst.get(name)
            burst[name] = amount if current is None else current + amount
            added = True
    return replace(ledger, burst=burst) if added else ledger


def never_lower(new: TenantLedger, old: TenantLedger) -> TenantLedger:
    """``new`` with each tier's usage at least ``old``'s, per resource: what the bookings
    decided after a change may count on (a view to decide on, never written).

    A change plans its releases (holds past their TTL, a re-invoked pod's old hold) on the
    ledger it read, but only its own member write makes them happen, on the ledger as it is
    then; another replica may have released them first, and put its own pods in their place.
    So room a release would free is lent to nobody else before the release is written.
    """
    guaranteed = _at_least(new.guaranteed, old.guaranteed)
    burst = _at_least(new.burst, old.burst)
    if guaranteed is new.guaranteed and burst is new.burst:
        return new
    return replace(new, guaranteed=guaranteed, burst=burst)


def _at_least(
    usage: Mapping[str, Quantity], floor: Mapping[str, Quantity]
) -> Mapping[str, Quantity]:
    raised: dict[str, Quantity] | None = None
    for name, least in floor.items():
        current = usage.get(name)
        if current is None or current < least:
            if raised is None:
                raised = dict(usage)
            raised[name] = least
    return usage if raised is None else raised


def burst_growth(new: TenantLedger, old: TenantLedger) -> dict[str, Quantity]:
    """What a change added to the burst tier, per resource (only growth)."""
    growth: dict[str, Quantity] = {}
    for name, amount in new.burst.items():
        before = old.burst.get(name)
        grown = amount if before is None else amount - before
        if grown.nanos > 0:
            growth[name] = grown
    return growth


def burst_bookings(new: TenantLedger, old: TenantLedger) -> dict[str, Mapping[str, Quantity]]:
    """The burst reservations a change added or changed, by id, with their amounts."""
    return {
        reservation_id: dict(reservation.amount)
        for reservation_id, reservation in new.reservations.items()
        if reservation.tier == "burst" and old.reservations.get(reservation_id) != reservation
    }


def within(growth: Mapping[str, Quantity], allowed: Mapping[str, Quantity]) -> bool:
    """Whether ``growth`` adds no more burst usage than ``allowed``, in every resource."""
    for name, amount in growth.items():
        limit = allowed.get(name)
        if limit is None or amount > limit:
            return False
    return True


# --------------------------------------------------------------------------- serialisation


def _quantities(amount: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(amount[name]) for name in sorted(amount)}


def _parse_quantities(value: Any, *, where: str) -> dict[str, Quantity]:
    if not isinstance(value, dict):
        raise LedgerError(f"{where}: expected an object of resource quantities")
    try:
        return {str(name): Quantity.from_json(raw) for name, raw in value.items()}
    except QuantityError as exc:
        raise LedgerError(f"{where}: {exc}") from exc


def cohort_to_json(cohort: CohortLedger) -> dict[str, Any]:
    """The object's ``status``: pending entries by id, members by name, quantities canonical."""
    return {
        "members": {
            name: {tier: _quantities(usage) for tier, usage in sorted(tiers.items())}
            for name, tiers in sorted(cohort.members.items())
        },
        "pending": [
            {
                "id": entry.id,
                "tenant": entry.tenant,
                "amount": _quantities(entry.amount),
                "reservations": {
                    rid: _quantities(amount) for rid, amount in sorted(entry.reservations.items())
                },
                "expiresAt": entry.expires_at,
            }
            for entry in sorted(cohort.pending, key=lambda e: e.id)
        ],
    }


def cohort_from_json(cohort: str, status: Any) -> CohortLedger:
    """Read :func:`cohort_to_json`'s document back; :class:`LedgerError` names a bad field."""
    if status is None:
        return CohortLedger(cohort)
    if not isinstance(status, dict):
        raise LedgerError(f"{cohort}.status: expected an object")
    raw_pending = status.get("pending", [])
    if not isinstance(raw_pending, list):
        raise LedgerError(f"{cohort}.pending: expected a list")
    pending: list[Pending] = []
    for index, item in enumerate(raw_pending):
        where = f"{cohort}.pending[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise LedgerError(f"{where}: expected an object with an id")
        tenant = item.get("tenant")
        expires = item.get("expiresAt")
        reservations = item.get("reservations", {})
        if not isinstance(tenant, str) or not tenant:
            raise LedgerError(f"{where}.tenant: expected a tenant name")
        if isinstance(expires, bool) or not isinstance(expires, int | float):
            raise LedgerError(f"{where}.expiresAt: expected a number")
        if not isinstance(reservations, dict):
            raise LedgerError(f"{where}.reservations: expected an object keyed by id")
        pending.append(
            Pending(
                id=item["id"],
                tenant=tenant,
                amount=_parse_quantities(item.get("amount", {}), where=f"{where}.amount"),
                reservations={
                    str(rid): _parse_quantities(amount, where=f"{where}.reservations.{rid}")
                    for rid, amount in reservations.items()
                },
                expires_at=float(expires),
            )
        )
    raw_members = status.get("members", {})
    if not isinstance(raw_members, dict):
        raise LedgerError(f"{cohort}.members: expected an object keyed by tenant")
    members: dict[str, dict[str, dict[str, Quantity]]] = {}
    for name, tiers in raw_members.items():
        if not isinstance(tiers, dict):
            raise LedgerError(f"{cohort}.members.{name}: expected usage by tier")
        members[str(name)] = {
            str(tier): _parse_quantities(usage, where=f"{cohort}.members.{name}.{tier}")
            for tier, usage in tiers.items()
        }
    return CohortLedger(cohort, tuple(pending), members)


def member_usage(ledger: TenantLedger) -> dict[str, Mapping[str, Quantity]]:
    """A member's usage by tier, as the cohort ledger records it."""
    return {"guaranteed": dict(ledger.guaranteed), "burst": dict(ledger.burst)}


__all__ = [
    "CohortLedger",
    "Pending",
    "arrived",
    "burst_bookings",
    "burst_growth",
    "cohort_from_json",
    "cohort_to_json",
    "counted",
    "member_usage",
    "with_pending",
    "within",
]
