"""The quota ledger: per tenant, usage by tier and resource, reservations and per-pod charges.

A :class:`TenantLedger` is an immutable value and every transition (``book``, ``top_up``,
``bind``, ``confirm``, ``release``, ``resize``, ``expire``) is a pure function returning a new
one, so a store can apply them under a lock (:class:`MemoryLedger`) or in a compare-and-swap loop
against a resource version (the Kubernetes backend) and simply re-run them after a conflict.

Usage counts everything booked: reservations (admitted pods not yet seen stored) and charges
(stored pods, keyed by pod uid so that a release happens exactly once). Queued pods (waiting
behind tenantgate's scheduling gate) are recorded apart, as :class:`Queued` entries: they are
not usage, but their number is what ``maxPending`` bounds, across replicas too. Reservations
and charges are persistent maps (``immutables.Map``, a HAMT): a new version shares all but
O(log n) of the old one, so a booking costs the same with ten pods in flight as with a hundred
thousand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, ItemsView, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from immutables import Map

from classifier.quantities import Quantity, QuantityError, from_nanos
from classifier.records import record

logger = logging.getLogger(__name__)

Tier = Literal["guaranteed", "burst"]
TIERS: tuple[Tier, ...] = ("guaranteed", "burst")

T = TypeVar("T")

_EMPTY_USAGE: Mapping[str, Quantity] = {}


class LedgerError(ValueError):
    """A transition that does not apply to this ledger (unknown or duplicate reservation id)."""


class LedgerUnavailable(Exception):
    """The store could not read or write a ledger: nothing was booked, the caller may retry.

    Raised by stores that keep ledgers elsewhere (the Kubernetes API server) when it cannot be
    reached or a write kept conflicting. ``message`` is one line a user can act on; ``code``
    and ``reason`` are what a denial should carry (503 ServiceUnavailable, 409 Conflict).
    """

    def __init__(
        self, message: str, *, code: int = 503, reason: str = "ServiceUnavailable"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason


@record
class Reservation:
    """Usage booked at admission for a pod not yet seen stored; expires at ``expires_at``.

    ``pod_uid`` is set when the validating webhook binds the reservation to the pod it admits,
    so that one reservation can never admit two pods. Until then the booking is a *hold*
    (:attr:`held`): the mutating webhook made it and a later admission step may still refuse
    the pod, so it expires after the short hold TTL; binding gives it the reservation TTL.
    """

    id: str
    tier: Tier
    amount: Mapping[str, Quantity]
    created_at: float
    expires_at: float
    pod_uid: str | None = None

    @property
    def held(self) -> bool:
        """Whether this is a hold: booked by /mutate, not yet validated (bound to a pod)."""
        return self.pod_uid is None


@record
class Queued:
    """A pod waiting behind tenantgate's scheduling gate: counted against ``maxPending``.

    Booked by the mutating webhook with an expiry (it lapses like a reservation when the pod is
    never stored), bound to the pod by the validating webhook, and kept without expiry
    (``expires_at`` None) once the controller sees the stored gated pod. ``priority`` and
    ``queued_at`` place it in line: every replica tells a new pod its position from them.
    """

    id: str
    priority: int
    queued_at: float
    expires_at: float | None
    pod_uid: str | None = None


def queued_id_for(pod_uid: str) -> str:
    """The queued entry id of a gated pod that names none (its gate was set without mutate)."""
    return f"q-{pod_uid}"


@record
class Charge:
    """Usage of a stored pod, kept until the pod is released."""

    tier: Tier
    amount: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class TenantLedger:
    """One tenant's bookings. ``guaranteed`` / ``burst`` are the usage of each tier.

    ``bound`` indexes the reservations already bound to a pod (pod uid -> reservation id);
    :meth:`of` builds a ledger from plain mappings and computes it.
    """

    tenant: str
    guaranteed: Mapping[str, Quantity] = field(default_factory=dict)
    burst: Mapping[str, Quantity] = field(default_factory=dict)
    reservations: Map[str, Reservation] = field(default_factory=Map)
    charges: Map[str, Charge] = field(default_factory=Map)
    bound: Map[str, str] = field(default_factory=Map)
    queued: Map[str, Queued] = field(default_factory=Map)

    @classmethod
    def of(
        cls,
        tenant: str,
        *,
        guaranteed: Mapping[str, Quantity] | None = None,
        burst: Mapping[str, Quantity] | None = None,
        reservations: Iterable[Reservation] = (),
        charges: Mapping[str, Charge] | None = None,
        queued: Iterable[Queued] = (),
    ) -> TenantLedger:
        """A ledger from plain values (usage zero entries dropped, bound index computed)."""
        by_id = {r.id: r for r in reservations}
        return cls(
            tenant=tenant,
            guaranteed={n: q for n, q in (guaranteed or {}).items() if q.nanos},
            burst={n: q for n, q in (burst or {}).items() if q.nanos},
            reservations=Map(by_id),
            charges=Map(charges or {}),
            bound=Map({r.pod_uid: r.id for r in by_id.values() if r.pod_uid is not None}),
            queued=Map({entry.id: entry for entry in queued}),
        )

    def used(self, tier: Tier) -> Mapping[str, Quantity]:
        return self.guaranteed if tier == "guaranteed" else self.burst

    def total(self) -> dict[str, Quantity]:
        """Usage of both tiers together."""
        return _combine(self.guaranteed, self.burst, 1)

    def reservation_for_pod(self, pod_uid: str) -> Reservation | None:
        reservation_id = self.bound.get(pod_uid)
        return self.reservations.get(reservation_id) if reservation_id is not None else None


def _combine(
    usage: Mapping[str, Quantity], amount: Mapping[str, Quantity], sign: int
) -> dict[str, Quantity]:
    """``usage + sign * amount``; resources that come out at zero are dropped."""
    result = dict(usage)
    for name, quantity in amount.items():
        if quantity.nanos == 0:
            continue
        current = result.get(name)
        nanos = (current.nanos if current is not None else 0) + sign * quantity.nanos
        if nanos == 0:
            result.pop(name, None)
        else:
            result[name] = from_nanos(nanos, (current or quantity).format)
    return result


def _ledger(
    ledger: TenantLedger,
    *,
    guaranteed: Mapping[str, Quantity] | None = None,
    burst: Mapping[str, Quantity] | None = None,
    reservations: Map[str, Reservation] | None = None,
    charges: Map[str, Charge] | None = None,
    bound: Map[str, str] | None = None,
    queued: Map[str, Queued] | None = None,
) -> TenantLedger:
    """``ledger`` with the given fields replaced, built in one step.

    Each transition builds its new ledger once through here: ``dataclasses.replace`` per
    changed field cost several microseconds per admission.
    """
    new = _new_object(TenantLedger)
    _set_tenant(new, ledger.tenant)
    _set_guaranteed(new, ledger.guaranteed if guaranteed is None else guaranteed)
    _set_burst(new, ledger.burst if burst is None else burst)
    _set_reservations(new, ledger.reservations if reservations is None else reservations)
    _set_charges(new, ledger.charges if charges is None else charges)
    _set_bound(new, ledger.bound if bound is None else bound)
    _set_queued(new, ledger.queued if queued is None else queued)
    return new


# The slots of a frozen dataclass written directly: every value is valid by construction (a
# copy of a ledger's own fields), and the frozen ``__init__`` is several times slower.
_new_object = object.__new__
_set_tenant = TenantLedger.__dict__["tenant"].__set__
_set_guaranteed = TenantLedger.__dict__["guaranteed"].__set__
_set_burst = TenantLedger.__dict__["burst"].__set__
_set_reservations = TenantLedger.__dict__["reservations"].__set__
_set_charges = TenantLedger.__dict__["charges"].__set__
_set_bound = TenantLedger.__dict__["bound"].__set__
_set_queued = TenantLedger.__dict__["queued"].__set__


def _charge_usage(
    ledger: TenantLedger,
    tier: Tier,
    amount: Mapping[str, Quantity],
    sign: int,
    *,
    reservations: Map[str, Reservation] | None = None,
    charges: Map[str, Charge] | None = None,
    bound: Map[str, str] | None = None,
) -> TenantLedger:
    """``ledger`` with ``sign * amount`` added to ``tier``'s usage (and the maps given)."""
    if tier == "guaranteed":
        return _ledger(
            ledger,
            guaranteed=_combine(ledger.guaranteed, amount, sign),
            reservations=reservations,
            charges=charges,
            bound=bound,
        )
    return _ledger(
        ledger,
        burst=_combine(ledger.burst, amount, sign),
        reservations=reservations,
        charges=charges,
        bound=bound,
    )


def _difference(new: Mapping[str, Quantity], old: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """``new - old`` per resource, zero entries dropped."""
    return _combine(new, old, -1)


# --------------------------------------------------------------------------- transitions


def book(
    ledger: TenantLedger,
    *,
    reservation_id: str,
    tier: Tier,
    amount: Mapping[str, Quantity],
    now: float,
    ttl: float,
    pod_uid: str | None = None,
) -> TenantLedger:
    """Add a reservation of ``amount`` in ``tier``, expiring ``ttl`` seconds from ``now``."""
    if reservation_id in ledger.reservations:
        raise LedgerError(f"reservation {reservation_id} already exists in tenant {ledger.tenant}")
    if pod_uid is not None and pod_uid in ledger.bound:
        raise LedgerError(f"pod {pod_uid} already holds a reservation in tenant {ledger.tenant}")
    reservation = Reservation(reservation_id, tier, dict(amount), now, now + ttl, pod_uid)
    return _charge_usage(
        ledger,
        tier,
        amount,
        1,
        reservations=ledger.reservations.set(reservation_id, reservation),
        bound=ledger.bound.set(pod_uid, reservation_id) if pod_uid is not None else None,
    )


def top_up(
    ledger: TenantLedger,
    *,
    reservation_id: str,
    amount: Mapping[str, Quantity],
    pod_uid: str | None = None,
    expires_at: float | None = None,
) -> TenantLedger:
    """Set a reservation's amount to exactly ``amount`` (growing or shrinking it), same tier.

    ``pod_uid`` also binds the reservation when given, and ``expires_at`` moves its expiry (a
    hold becoming a reservation). Whether growth fits is the caller's check
    (``quota.check_growth``): this only books.
    """
    reservation = _reservation(ledger, reservation_id)
    bound: Map[str, str] | None = None
    new_pod_uid = reservation.pod_uid
    if pod_uid is not None and pod_uid != reservation.pod_uid:
        _check_bindable(ledger, reservation, pod_uid)
        bound = ledger.bound.set(pod_uid, reservation_id)
        new_pod_uid = pod_uid
    updated = Reservation(
        reservation_id,
        reservation.tier,
        dict(amount),
        reservation.created_at,
        reservation.expires_at if expires_at is None else expires_at,
        new_pod_uid,
    )
    reservations = ledger.reservations.set(reservation_id, updated)
    delta = _difference(amount, reservation.amount)
    if not delta:
        return _ledger(ledger, reservations=reservations, bound=bound)
    return _charge_usage(ledger, reservation.tier, delta, 1, reservations=reservations, bound=bound)


def bind(ledger: TenantLedger, *, reservation_id: str, pod_uid: str) -> TenantLedger:
    """Tie a reservation to the pod it admits (done by the validating webhook)."""
    reservation = _reservation(ledger, reservation_id)
    if reservation.pod_uid == pod_uid:
        return ledger
    return _bind(ledger, reservation, pod_uid)


def _check_bindable(ledger: TenantLedger, reservation: Reservation, pod_uid: str) -> None:
    if reservation.pod_uid is not None:
        raise LedgerError(
            f"reservation {reservation.id} is bound to pod {reservation.pod_uid}, not {pod_uid}"
        )
    if pod_uid in ledger.bound:
        raise LedgerError(f"pod {pod_uid} already holds a reservation in tenant {ledger.tenant}")


def _bind(ledger: TenantLedger, reservation: Reservation, pod_uid: str) -> TenantLedger:
    _check_bindable(ledger, reservation, pod_uid)
    return _ledger(
        ledger,
        reservations=ledger.reservations.set(reservation.id, replace(reservation, pod_uid=pod_uid)),
        bound=ledger.bound.set(pod_uid, reservation.id),
    )


def _unbound(ledger: TenantLedger, reservation: Reservation) -> Map[str, str]:
    """The ``bound`` index without this reservation's entry."""
    bound = ledger.bound
    if reservation.pod_uid is not None and bound.get(reservation.pod_uid) == reservation.id:
        return bound.delete(reservation.pod_uid)
    return bound


def cancel(ledger: TenantLedger, *, reservation_id: str) -> TenantLedger:
    """Remove a reservation and its usage (no-op when it is already gone)."""
    reservation = ledger.reservations.get(reservation_id)
    if reservation is None:
        return ledger
    return _charge_usage(
        ledger,
        reservation.tier,
        reservation.amount,
        -1,
        reservations=ledger.reservations.delete(reservation_id),
        bound=_unbound(ledger, reservation),
    )


def confirm(
    ledger: TenantLedger,
    *,
    pod_uid: str,
    reservation_id: str | None,
    tier: Tier,
    amount: Mapping[str, Quantity],
) -> TenantLedger:
    """The stored pod was seen: turn its reservation into a charge; usage stays as booked.

    Without a reservation (expired, or the pod was created while the webhook was down) the pod
    is charged ``amount`` in ``tier``. A pod already charged is left alone, so repeated watch
    events confirm exactly once.
    """
    if pod_uid in ledger.charges:
        return ledger
    reservation = ledger.reservation_for_pod(pod_uid)
    if reservation is None and reservation_id is not None:
        candidate = ledger.reservations.get(reservation_id)
        # A reservation bound to another pod is that pod's booking, not this one's.
        if candidate is not None and candidate.pod_uid is None:
            reservation = candidate
    if reservation is None:
        return _charge_usage(
            ledger, tier, amount, 1, charges=ledger.charges.set(pod_uid, Charge(tier, dict(amount)))
        )
    return _ledger(
        ledger,
        reservations=ledger.reservations.delete(reservation.id),
        bound=_unbound(ledger, reservation),
        charges=ledger.charges.set(pod_uid, Charge(reservation.tier, reservation.amount)),
    )


def release(ledger: TenantLedger, *, pod_uid: str) -> TenantLedger:
    """The pod is gone (deleted, Succeeded or Failed): free its usage, exactly once.

    Frees its charge, or the reservation bound to it if it was never confirmed; a pod the
    ledger does not know is a no-op.
    """
    charge = ledger.charges.get(pod_uid)
    if charge is not None:
        return _charge_usage(
            ledger, charge.tier, charge.amount, -1, charges=ledger.charges.delete(pod_uid)
        )
    reservation = ledger.reservation_for_pod(pod_uid)
    if reservation is not None:
        return cancel(ledger, reservation_id=reservation.id)
    return ledger


def resize(
    ledger: TenantLedger, *, pod_uid: str, delta: Mapping[str, Quantity]
) -> tuple[TenantLedger, bool]:
    """Add ``delta`` to the pod's charge (or bound reservation) and to its tier's usage.

    Returns the new ledger and whether the pod was known; an unknown pod changes nothing (the
    periodic recount counts it from the live pod).
    """
    charge = ledger.charges.get(pod_uid)
    if charge is not None:
        resized = Charge(charge.tier, _combine(charge.amount, delta, 1))
        return _charge_usage(
            ledger, charge.tier, delta, 1, charges=ledger.charges.set(pod_uid, resized)
        ), True
    reservation = ledger.reservation_for_pod(pod_uid)
    if reservation is not None:
        amount = _combine(reservation.amount, delta, 1)
        return top_up(ledger, reservation_id=reservation.id, amount=amount), True
    return ledger, False


def recharge(ledger: TenantLedger, *, pod_uid: str, amount: Mapping[str, Quantity]) -> TenantLedger:
    """Set a stored pod's charge to exactly ``amount`` (same tier), its usage following.

    For what a pod holds changing after admission (an in-place resize the kubelet applied or
    found infeasible). A pod without a charge is left alone.
    """
    charge = ledger.charges.get(pod_uid)
    if charge is None or charge.amount == amount:
        return ledger
    charges = ledger.charges.set(pod_uid, Charge(charge.tier, amount))
    delta = _difference(amount, charge.amount)
    if not delta:
        return _ledger(ledger, charges=charges)
    return _charge_usage(ledger, charge.tier, delta, 1, charges=charges)


def expire(
    ledger: TenantLedger, *, now: float, only_unbound: bool = False
) -> tuple[TenantLedger, tuple[Reservation, ...]]:
    """Remove every reservation whose ``expires_at`` is reached; returns the removed ones.

    ``only_unbound`` keeps reservations already bound to a pod by the validating webhook: an
    admitted pod's only record until a controller confirms it from the stored pod. Unbound
    ones past their TTL are orphans for certain (the pod never reached validation).
    """
    # A scan: expiry runs periodically (not per request) over the reservations in flight.
    expired = tuple(
        sorted(
            (
                r
                for r in ledger.reservations.values()
                if r.expires_at <= now and not (only_unbound and r.pod_uid is not None)
            ),
            key=lambda r: (r.expires_at, r.id),
        )
    )
    for reservation in expired:
        ledger = cancel(ledger, reservation_id=reservation.id)
    return ledger, expired


# --------------------------------------------------------------------------- queued pods


def enqueue(
    ledger: TenantLedger,
    *,
    entry_id: str,
    priority: int,
    now: float,
    ttl: float | None,
    pod_uid: str | None = None,
) -> TenantLedger:
    """Record a pod as queued (no usage); it expires ``ttl`` seconds from ``now`` unless the
    controller settles it (``ttl`` None: settled already)."""
    if entry_id in ledger.queued:
        raise LedgerError(f"queued entry {entry_id} already exists in tenant {ledger.tenant}")
    entry = Queued(entry_id, priority, now, now + ttl if ttl is not None else None, pod_uid)
    return _ledger(ledger, queued=ledger.queued.set(entry_id, entry))


def bind_queued(ledger: TenantLedger, *, entry_id: str, pod_uid: str) -> TenantLedger:
    """Tie a queued entry to the pod it stands for (the validating webhook)."""
    entry = ledger.queued.get(entry_id)
    if entry is None:
        raise LedgerError(f"no queued entry {entry_id} in tenant {ledger.tenant}")
    if entry.pod_uid == pod_uid:
        return ledger
    if entry.pod_uid is not None:
        raise LedgerError(f"queued entry {entry_id} is bound to pod {entry.pod_uid}")
    return _ledger(ledger, queued=ledger.queued.set(entry_id, replace(entry, pod_uid=pod_uid)))


def settle_queued(
    ledger: TenantLedger, *, entry_id: str, pod_uid: str, priority: int, queued_at: float
) -> TenantLedger:
    """The stored gated pod was seen: its entry stays until it is released or deleted.

    An entry admission booked keeps its place (``queued_at``); one missing (expired, or the
    gate was set without tenantgate's webhooks) is recorded from the pod.
    """
    entry = ledger.queued.get(entry_id)
    if entry is not None and entry.expires_at is None and entry.pod_uid == pod_uid:
        return ledger
    if entry is not None and entry.pod_uid not in (None, pod_uid):
        entry = None  # another pod's entry: this pod records its own under its uid
        entry_id = queued_id_for(pod_uid)
    settled = Queued(
        entry_id,
        entry.priority if entry is not None else priority,
        entry.queued_at if entry is not None else queued_at,
        None,
        pod_uid,
    )
    return _ledger(ledger, queued=ledger.queued.set(entry_id, settled))


def dequeue(ledger: TenantLedger, *, entry_id: str) -> TenantLedger:
    """Remove a queued entry (released or gone); a no-op when it is already gone."""
    if entry_id not in ledger.queued:
        return ledger
    return _ledger(ledger, queued=ledger.queued.delete(entry_id))


def queued_entry_for(ledger: TenantLedger, *, entry_id: str | None, pod_uid: str) -> Queued | None:
    """The entry standing for a pod: the one its annotation names (unless another pod's),
    else the one recorded under its uid."""
    if entry_id is not None:
        entry = ledger.queued.get(entry_id)
        if entry is not None and entry.pod_uid in (None, pod_uid):
            return entry
    return ledger.queued.get(queued_id_for(pod_uid))


def expire_queued(ledger: TenantLedger, *, now: float) -> tuple[TenantLedger, tuple[Queued, ...]]:
    """Remove every queued entry whose pod was never seen stored by its expiry."""
    expired = tuple(
        sorted(
            (e for e in ledger.queued.values() if e.expires_at is not None and e.expires_at <= now),
            key=lambda e: e.id,
        )
    )
    if not expired:
        return ledger, ()
    queued = ledger.queued
    for entry in expired:
        queued = queued.delete(entry.id)
    return _ledger(ledger, queued=queued), expired


def _reservation(ledger: TenantLedger, reservation_id: str) -> Reservation:
    reservation = ledger.reservations.get(reservation_id)
    if reservation is None:
        raise LedgerError(f"no reservation {reservation_id} in tenant {ledger.tenant}")
    return reservation


# --------------------------------------------------------------------------- serialisation


def _quantities_to_json(amount: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(amount[name]) for name in sorted(amount)}


def _quantities_from_json(value: Any, *, where: str) -> dict[str, Quantity]:
    if not isinstance(value, dict):
        raise LedgerError(f"{where}: expected an object of resource quantities")
    result: dict[str, Quantity] = {}
    for name, raw in value.items():
        try:
            result[str(name)] = Quantity.from_json(raw)
        except QuantityError as exc:
            raise LedgerError(f"{where}.{name}: {exc}") from exc
    return result


def _tier_from_json(value: Any, *, where: str) -> Tier:
    if value == "guaranteed":
        return "guaranteed"
    if value == "burst":
        return "burst"
    raise LedgerError(f"{where}: tier must be guaranteed or burst, not {value!r}")


def _number(value: Any, *, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LedgerError(f"{where}: expected a number")
    return float(value)


def ledger_to_json(ledger: TenantLedger, *, charges: bool = True) -> dict[str, Any]:
    """A JSON document of the ledger (quantities as canonical strings, keys sorted).

    ``charges=False`` leaves out the per-pod charges, whose number grows with running pods.
    """
    document: dict[str, Any] = {
        "tenant": ledger.tenant,
        "used": {
            "guaranteed": _quantities_to_json(ledger.guaranteed),
            "burst": _quantities_to_json(ledger.burst),
        },
        "reservations": [
            {
                "id": r.id,
                "tier": r.tier,
                "amount": _quantities_to_json(r.amount),
                "createdAt": r.created_at,
                "expiresAt": r.expires_at,
                **({"podUID": r.pod_uid} if r.pod_uid is not None else {}),
            }
            for r in sorted(ledger.reservations.values(), key=lambda r: r.id)
        ],
    }
    if ledger.queued:
        document["queued"] = [
            {
                "id": e.id,
                "priority": e.priority,
                "queuedAt": e.queued_at,
                **({"expiresAt": e.expires_at} if e.expires_at is not None else {}),
                **({"podUID": e.pod_uid} if e.pod_uid is not None else {}),
            }
            for e in sorted(ledger.queued.values(), key=lambda e: e.id)
        ]
    if charges:
        document["charges"] = {
            uid: {"tier": c.tier, "amount": _quantities_to_json(c.amount)}
            for uid, c in sorted(ledger.charges.items())
        }
    return document


def ledger_from_json(document: Any, *, tenant: str | None = None) -> TenantLedger:
    """Read :func:`ledger_to_json`'s document back; :class:`LedgerError` names a bad field.

    ``reservations`` and ``charges`` may be missing (or, in a usage snapshot, ``reservations``
    may be a count): the usage alone is enough to check a request.
    """
    if not isinstance(document, dict):
        raise LedgerError("ledger: expected an object")
    name = tenant if tenant is not None else document.get("tenant")
    if not isinstance(name, str) or not name:
        raise LedgerError("ledger.tenant: expected a tenant name")
    used = document.get("used", {})
    if not isinstance(used, dict):
        raise LedgerError(f"{name}.used: expected an object with guaranteed and burst")
    unknown = set(used) - set(TIERS)
    if unknown:
        raise LedgerError(f"{name}.used: unknown tier {sorted(unknown)[0]!r}")
    reservations: list[Reservation] = []
    raw_reservations = document.get("reservations", [])
    for index, item in enumerate(raw_reservations if isinstance(raw_reservations, list) else []):
        where = f"{name}.reservations[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise LedgerError(f"{where}: expected an object with an id")
        pod_uid = item.get("podUID")
        reservations.append(
            Reservation(
                id=item["id"],
                tier=_tier_from_json(item.get("tier"), where=f"{where}.tier"),
                amount=_quantities_from_json(item.get("amount", {}), where=f"{where}.amount"),
                created_at=_number(item.get("createdAt", 0), where=f"{where}.createdAt"),
                expires_at=_number(item.get("expiresAt", 0), where=f"{where}.expiresAt"),
                pod_uid=pod_uid if isinstance(pod_uid, str) else None,
            )
        )
    queued: list[Queued] = []
    raw_queued = document.get("queued", [])
    for index, item in enumerate(raw_queued if isinstance(raw_queued, list) else []):
        where = f"{name}.queued[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise LedgerError(f"{where}: expected an object with an id")
        priority = item.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise LedgerError(f"{where}.priority: expected an integer")
        expires = item.get("expiresAt")
        pod_uid = item.get("podUID")
        queued.append(
            Queued(
                id=item["id"],
                priority=priority,
                queued_at=_number(item.get("queuedAt", 0), where=f"{where}.queuedAt"),
                expires_at=(
                    _number(expires, where=f"{where}.expiresAt") if expires is not None else None
                ),
                pod_uid=pod_uid if isinstance(pod_uid, str) else None,
            )
        )
    charges: dict[str, Charge] = {}
    raw_charges = document.get("charges", {})
    if not isinstance(raw_charges, dict):
        raise LedgerError(f"{name}.charges: expected an object keyed by pod uid")
    for uid, item in raw_charges.items():
        where = f"{name}.charges.{uid}"
        if not isinstance(item, dict):
            raise LedgerError(f"{where}: expected an object with tier and amount")
        charges[str(uid)] = Charge(
            _tier_from_json(item.get("tier"), where=f"{where}.tier"),
            _quantities_from_json(item.get("amount", {}), where=f"{where}.amount"),
        )
    return TenantLedger.of(
        name,
        guaranteed=_quantities_from_json(
            used.get("guaranteed", {}), where=f"{name}.used.guaranteed"
        ),
        burst=_quantities_from_json(used.get("burst", {}), where=f"{name}.used.burst"),
        reservations=reservations,
        charges=charges,
        queued=queued,
    )


# --------------------------------------------------------------------------- stores


class LedgerStore(Protocol):
    """Where ledgers live: the port the admission path books through.

    ``transact`` is an atomic read-modify-write of one tenant's ledger, awaited by the
    admitter. ``change`` must be a pure function of the ledger it is given: a store may call it
    more than once (a compare-and-swap store re-runs it after a conflict) and may batch the
    changes of concurrent requests into one write. With ``commit=False`` the result is
    computed and returned but nothing is stored (dry-run). A store that cannot reach its
    backend raises :class:`LedgerUnavailable`. ``get`` is a view for display, never for a yes.
    """

    def get(self, tenant: str) -> TenantLedger: ...

    async def transact(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
    ) -> T: ...


@runtime_checkable
class PeerLedgerStore(Protocol):
    """A store that can change one tenant's ledger after reading others' in the same atomic
    step: what a cohort member's borrowed booking needs (it must never take room another
    borrower took meanwhile). ``cohort`` names the tree (its root): a store shared by
    replicas keeps one cohort-level object per tree.

    ``change`` gets the peers' ledgers as a mapping that may leave out a peer that has never
    booked (it uses and waits for nothing); looking one up gives its empty ledger.
    """

    async def transact_with_peers(
        self,
        tenant: str,
        peers: Collection[str],
        change: Callable[[TenantLedger, Mapping[str, TenantLedger]], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        cohort: str | None = None,
    ) -> T: ...


class MemoryLedger:
    """Every tenant's ledger in this process, behind one lock.

    ``update`` runs the whole read-check-book under the lock and never awaits, so any number of
    concurrent requests (threads or tasks) can never over-admit. The lock is held only for the
    pure, short ``change`` function.
    """

    def __init__(self, ledgers: Iterable[TenantLedger] = ()) -> None:
        self._lock = threading.Lock()
        self._ledgers: dict[str, TenantLedger] = {ledger.tenant: ledger for ledger in ledgers}
        self._idle: dict[str, TenantLedger] = {}  # empty ledgers handed to cohort peers

    def get(self, tenant: str) -> TenantLedger:
        ledger = self._ledgers.get(tenant)
        return ledger if ledger is not None else TenantLedger(tenant)

    def update(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        written: Callable[[T], None] | None = None,
    ) -> T:
        """Apply ``change`` now; ``written`` is called with its answer when it is committed."""
        with self._lock:
            current = self._ledgers.get(tenant)
            given = current if current is not None else TenantLedger(tenant)
            new, result = change(given)
            if commit and new is not given:
                self._ledgers[tenant] = new
        if commit and written is not None:
            written(result)
        return result

    async def transact(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
    ) -> T:
        """:meth:`update` for the admission path: it never awaits between check and book.

        The whole read-check-book runs in this one synchronous call, so no other task on the
        event loop can interleave with it; the lock covers threads.
        """
        return self.update(tenant, change, commit=commit)

    async def transact_with_peers(
        self,
        tenant: str,
        peers: Collection[str],
        change: Callable[[TenantLedger, Mapping[str, TenantLedger]], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        cohort: str | None = None,
    ) -> T:
        """:meth:`transact` with ``peers``' ledgers read under the same lock (only ``tenant``'s
        is written): one lock covers every ledger, so no booking can interleave (``cohort``
        is not needed here)."""
        with self._lock:
            others = _Peers(self._ledgers, peers, self._idle)
            current = self._ledgers.get(tenant)
            given = current if current is not None else TenantLedger(tenant)
            new, result = change(given, others)
            if commit and new is not given:
                self._ledgers[tenant] = new
            return result

    def snapshot(self) -> dict[str, TenantLedger]:
        """Every tenant's current ledger (immutable values: safe to read without the lock)."""
        with self._lock:
            return dict(self._ledgers)

    def expire(self, *, now: float, only_unbound: bool = False) -> tuple[Reservation, ...]:
        """Expire reservations in every tenant (see :func:`expire`); returns those removed."""
        removed: list[Reservation] = []
        with self._lock:
            for tenant, ledger in list(self._ledgers.items()):
                new, expired = expire(ledger, now=now, only_unbound=only_unbound)
                if expired:
                    self._ledgers[tenant] = new
                    removed.extend(expired)
        for reservation in removed:
            logger.info(
                "reservation expired",
                extra={"reservation": reservation.id, "tier": reservation.tier},
            )
        return tuple(removed)

    def __iter__(self) -> Iterator[TenantLedger]:
        return iter(self.snapshot().values())


class _Peers(Mapping[str, TenantLedger]):
    """``peers``' ledgers, read when asked (under the caller's lock): a member's guaranteed
    booking never reads them.

    It iterates, in name order, only the peers that have a ledger here: one that never booked
    has none, uses nothing and waits for nothing (it only lends, which the cohort tree knows
    without its ledger). A borrowed booking so reads the members in use, not the whole tree.
    Any peer's ledger can still be looked up: one without a ledger reads as empty, as from
    :meth:`MemoryLedger.get`.
    """

    __slots__ = ("_idle", "_known", "_ledgers", "_stored")

    def __init__(
        self,
        ledgers: dict[str, TenantLedger],
        names: Collection[str],
        idle: dict[str, TenantLedger],
    ) -> None:
        self._ledgers = ledgers
        self._known = names if isinstance(names, frozenset) else frozenset(names)
        self._idle = idle
        self._stored: list[str] | None = None

    def empty(self, name: str) -> TenantLedger:
        found = self._idle.get(name)
        if found is None:
            found = self._idle[name] = TenantLedger(name)
        return found

    def stored(self) -> list[str]:
        """The peers with a ledger here, sorted (found once, by a set intersection)."""
        if self._stored is None:
            self._stored = sorted(self._ledgers.keys() & self._known)
        return self._stored

    def __getitem__(self, name: str) -> TenantLedger:
        if name not in self._known:
            raise KeyError(name)
        found = self._ledgers.get(name)
        return found if found is not None else self.empty(name)

    def __contains__(self, name: object) -> bool:
        return name in self._known and name in self._ledgers

    def __iter__(self) -> Iterator[str]:
        return iter(self.stored())

    def __len__(self) -> int:
        return len(self.stored())

    def items(self) -> ItemsView[str, TenantLedger]:
        return _PeerItems(self)


class _PeerItems(ItemsView[str, TenantLedger]):
    """``_Peers.items()`` without a lookup per key (a borrowed booking reads every peer in
    use)."""

    _mapping: _Peers

    def __iter__(self) -> Iterator[tuple[str, TenantLedger]]:
        peers = self._mapping
        ledgers = peers._ledgers
        return iter([(name, ledgers[name]) for name in peers.stored()])


def ledger_from_usage(document: Any) -> MemoryLedger:
    """A :class:`MemoryLedger` from a usage snapshot: ``{"tenants": {NAME: {"used": ...}}}``.

    Accepts the ``/status`` document the metrics port serves (extra keys are ignored), so CI can
    ask whether a pod would still fit at today's usage.
    """
    if not isinstance(document, dict) or not isinstance(document.get("tenants"), dict):
        raise LedgerError('usage snapshot: expected an object with a "tenants" object')
    return MemoryLedger(
        ledger_from_json(item, tenant=str(name)) for name, item in document["tenants"].items()
    )


__all__ = [
    "TIERS",
    "Charge",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailable",
    "MemoryLedger",
    "Queued",
    "Reservation",
    "TenantLedger",
    "Tier",
    "bind",
    "bind_queued",
    "book",
    "cancel",
    "confirm",
    "dequeue",
    "enqueue",
    "expire",
    "expire_queued",
    "ledger_from_json",
    "ledger_from_usage",
    "ledger_to_json",
    "queued_entry_for",
    "queued_id_for",
    "recharge",
    "release",
    "resize",
    "settle_queued",
    "top_up",
]
