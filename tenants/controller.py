"""The ledger's lifecycle: what the cluster's pods do to the quota ledger after admission.

The admission path books reservations; this module keeps the ledger equal to the truth of the
cluster afterwards. It is pure in the sense of the core: no I/O, time passed in as ``now``. The
watch machinery (``tenants.kube``) turns API objects into :class:`PodFacts` and calls a
:class:`LedgerController` on the event-loop thread, the same thread that runs admission, so a
check-and-book in the admission path never interleaves with a ledger change made here.

* A stored pod carrying a reservation confirms it (the reservation becomes the pod's charge).
  A pod without one (created while the webhook was down or before tenantgate was installed)
  is charged from its own request and reported.
* A deleted pod, one reaching ``Succeeded``/``Failed``, or one stuck terminating past its
  grace period (as the ResourceQuota evaluator decides) releases its usage exactly once.
* Namespace labels decide ``namespaceSelector`` tenants: relabelling moves the namespace's pods
  (their charges) to the new tenant.
* :meth:`LedgerController.sweep` expires reservations never confirmed.
* :meth:`LedgerController.recount` computes the truth (live pods + open reservations), repairs
  any difference from the incrementally kept ledger and reports it per tenant and resource.

Per-event cost does not grow with the number of pods: the ledger keeps charges in a persistent
map (O(log n) per change), the index here is a dict, and bulk work (the first list, a recount)
builds ledgers in one pass rather than one transition per pod.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, Protocol, TypeVar

import orjson

from classifier import podview
from classifier.limits import pod_limit_usage
from classifier.quantities import Quantity, QuantityFormat
from classifier.resources import PodResourceError, pod_requests
from tenants.config import RESERVATION_ANNOTATION, TIER_LABEL, Policy, QueuePolicy
from tenants.groups.membership import (
    GROUP_ANNOTATION,
    GROUP_SIZE_ANNOTATION,
    Membership,
    membership_of,
)
from tenants.groups.running import RunningGroups
from tenants.ledger import (
    Charge,
    Queued,
    Reservation,
    TenantLedger,
    Tier,
    cancel,
    confirm,
    dequeue,
    expire,
    expire_queued,
    queued_entry_for,
    queued_id_for,
    recharge,
    release,
    settle_queued,
)
from tenants.queue.admission import has_gate
from tenants.queue.book import QueueBook

logger = logging.getLogger(__name__)

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
TIER_NAMES: Final[tuple[Tier, ...]] = ("guaranteed", "burst")
_MAX_LOGGED_NAMES: Final = 5

T = TypeVar("T")


# --------------------------------------------------------------------------- pod facts


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the ledger needs to know about one stored pod, read once from its JSON.

    ``release_at`` is ``deletionTimestamp + deletionGracePeriodSeconds`` for a terminating pod:
    like the ResourceQuota evaluator, a pod stuck terminating past it (a lost node) is no
    longer charged. ``invalid`` says why the request could not be computed (it then counts as
    one pod and nothing else). ``limited_amount`` is ``amount`` plus the pod's ``limits.*``
    usage, what a tenant with a limits quota charges; None when the pod sets no limit.

    ``gated``: the pod waits behind tenantgate's scheduling gate. It holds no quota (it is
    queued), and ``priority`` and ``created_at`` (read only for such pods) place it in line.
    ``unschedulable_since`` is when the scheduler last found no node for it (its
    ``PodScheduled=False/Unschedulable`` condition), for pods the queue released.
    """

    uid: str
    namespace: str
    name: str
    resource_version: str
    amount: Mapping[str, Quantity]
    tier_label: Tier | None = None
    priority_class: str | None = None
    reservation: str | None = None
    terminal: bool = False
    release_at: float | None = None
    invalid: str | None = None
    gated: bool = False
    priority: int = 0
    created_at: float = 0.0
    unschedulable_since: float | None = None
    limited_amount: Mapping[str, Quantity] | None = None
    group: Membership | None = None  # the pod group /mutate recorded on it

    def charged(self, *, limits: bool) -> Mapping[str, Quantity]:
        """What the pod is charged by a tenant with (``limits``) or without limits quotas."""
        if limits and self.limited_amount is not None:
            return self.limited_amount
        return self.amount

    def counted(self, now: float) -> bool:
        """Whether the pod holds quota at ``now`` (a gated pod is queued, not charged)."""
        if self.terminal or self.gated:
            return False
        return self.release_at is None or now <= self.release_at

    def tier(self, burst_classes: Collection[str]) -> Tier:
        """The tier to charge when no reservation says: its label, else its priority class
        (one of the policy's burst classes: burst)."""
        if self.tier_label is not None:
            return self.tier_label
        return "burst" if self.priority_class in burst_classes else "guaranteed"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


_ONE_POD: Final[Mapping[str, Quantity]] = {"pods": Quantity.from_int(1)}


class AmountInterner:
    """Shares one mapping between pods with the same request (a Deployment's replicas).

    150,000 pods usually have a few hundred distinct requests; keeping one copy of each saves
    most of the memory the per-pod amounts would take. Bounded: past ``limit`` distinct amounts
    new ones are simply not shared.

    It also remembers the request computed for each distinct resource spec (up to
    ``spec_limit`` of them), keyed by every field :func:`pod_requests` reads: the replicas of a
    workload then cost one computation, not one each.
    """

    def __init__(self, *, limit: int = 65536, spec_limit: int = 4096) -> None:
        self._limit = limit
        self._spec_limit = spec_limit
        self._amounts: dict[
            tuple[tuple[str, int, QuantityFormat], ...], Mapping[str, Quantity]
        ] = {}
        self._requests: dict[bytes, Amounts] = {}

    def __call__(self, amount: dict[str, Quantity]) -> Mapping[str, Quantity]:
        key = tuple(sorted((name, q.nanos, q.format) for name, q in amount.items()))
        shared = self._amounts.get(key)
        if shared is not None:
            return shared
        if len(self._amounts) < self._limit:
            # setdefault: two converter threads may race here; either copy is correct.
            return self._amounts.setdefault(key, amount)
        return amount

    def request(self, pod: Mapping[str, Any]) -> Amounts:
        """The pod's shared amounts (without and with limits) and why it is invalid (None when
        valid), remembered by spec."""
        key = _request_key(pod)
        known = self._requests.get(key) if key is not None else None
        if known is not None:
            return known
        found = _request(pod, self)
        if key is not None and len(self._requests) < self._spec_limit:
            self._requests[key] = found
        return found


# (requests, requests plus limits.* or None without limits, why it is invalid or None)
Amounts = tuple[Mapping[str, Quantity], Mapping[str, Quantity] | None, str | None]


def _request(pod: Mapping[str, Any], intern: AmountInterner | None) -> Amounts:
    try:
        # What the pod holds, as the quota evaluator charges it: after an in-place resize its
        # containers' status counts too (PodRequests with UseStatusResources).
        computed = pod_requests(pod, use_status=True)
        limits = pod_limit_usage(pod, use_status=True)
    except PodResourceError as exc:
        return _ONE_POD, None, str(exc)
    limited = {**computed, **limits} if limits else None
    if intern is None:
        return computed, limited, None
    return intern(computed), intern(limited) if limited is not None else None, None


_KEY_OPTIONS: Final = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _container_key(items: Any) -> list[Any] | None:
    if not isinstance(items, list):
        return None
    # Non-objects stay in place: pod_requests skips them but counts them in error paths.
    return [
        [item.get("resources"), item.get("restartPolicy")] if isinstance(item, dict) else 0
        for item in items
    ]


def _container_names(items: Any) -> list[Any] | None:
    if not isinstance(items, list):
        return None
    return [item.get("name") if isinstance(item, dict) else 0 for item in items]


def _status_key(status: Mapping[str, Any]) -> list[Any] | None:
    """What :func:`pod_requests` reads of a pod's status (containers' resources, the resize
    condition); None for a status without container statuses (a pod not started yet)."""
    containers = status.get("containerStatuses")
    init_containers = status.get("initContainerStatuses")
    if not containers and not init_containers:
        return None
    return [
        [
            [item.get("name"), item.get("resources"), item.get("allocatedResources")]
            if isinstance(item, dict)
            else 0
            for item in (items if isinstance(items, list) else ())
        ]
        for items in (containers, init_containers)
    ] + [_resize_pending(status.get("conditions"))]


def _resize_pending(conditions: Any) -> Any:
    """The reason of the first ``PodResizePending`` condition (the rest differ pod by pod)."""
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, dict) and condition.get("type") == "PodResizePending":
            return condition.get("reason")
    return None


def _request_key(pod: Mapping[str, Any]) -> bytes | None:
    """Every field of ``pod`` that :func:`pod_requests` reads, serialized; None if it cannot be.

    Serializing keeps the field types apart (``"1"`` and ``1`` are different keys), as
    :func:`pod_requests` does when it reads them; anything but parsed JSON (a date, a
    subclass, a huge integer) is not written, so such a pod is computed every time.
    """
    spec = podview.spec(pod)
    status = _status_key(podview.obj(pod.get("status")))
    if status is not None:
        # Statuses are matched to containers by name.
        status.append([_container_names(spec.get(f)) for f in ("containers", "initContainers")])
    try:
        return orjson.dumps(
            [
                _container_key(spec.get("containers")),
                _container_key(spec.get("initContainers")),
                spec.get("resources"),
                spec.get("overhead"),
                status,
            ],
            option=_KEY_OPTIONS,
        )
    except TypeError:
        return None


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def pod_facts(pod: Mapping[str, Any], *, intern: AmountInterner | None = None) -> PodFacts | None:
    """The facts of a pod as the API server stores it; None without a uid or namespace.

    Namespace and priority class names are interned: 150,000 tracked pods share a few
    thousand of them, instead of holding a copy each. A listed pod arrives reduced to the
    fields read here (``tenants.kube.connection.PodItem``): a field read here must be added there.
    """
    meta = podview.metadata(pod)
    uid = podview.string(meta.get("uid"))
    namespace = podview.string(meta.get("namespace"))
    if not uid or not namespace:
        return None
    priority_class = podview.string(podview.spec(pod).get("priorityClassName"))
    name = podview.string(meta.get("name")) or ""
    version = podview.string(meta.get("resourceVersion")) or ""
    amount, limited, invalid = intern.request(pod) if intern is not None else _request(pod, None)
    # One key each from labels and annotations: no need to copy the whole maps.
    label = podview.obj(meta.get("labels")).get(TIER_LABEL)
    annotations = podview.obj(meta.get("annotations"))
    reservation = podview.string(annotations.get(RESERVATION_ANNOTATION))
    tier_label: Tier | None = (
        "burst" if label == "burst" else "guaranteed" if label == "guaranteed" else None
    )
    release_at: float | None = None
    deleted_at = _timestamp(meta.get("deletionTimestamp"))
    grace = meta.get("deletionGracePeriodSeconds")
    if deleted_at is not None and isinstance(grace, int) and not isinstance(grace, bool):
        release_at = deleted_at + grace
    spec = podview.spec(pod)
    gated = has_gate(spec)
    priority = spec.get("priority") if gated else 0
    return PodFacts(
        uid=uid,
        namespace=sys.intern(namespace),
        name=name,
        resource_version=version,
        amount=amount,
        tier_label=tier_label,
        priority_class=sys.intern(priority_class) if priority_class else None,
        reservation=reservation or None,
        terminal=podview.phase(pod) in TERMINAL_PHASES,
        release_at=release_at,
        invalid=invalid,
        gated=gated,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        created_at=(_timestamp(meta.get("creationTimestamp")) or 0.0) if gated else 0.0,
        unschedulable_since=(
            _unschedulable_since(pod) if tier_label is not None and not gated else None
        ),
        limited_amount=limited,
        group=membership_of(
            namespace, annotations.get(GROUP_ANNOTATION), annotations.get(GROUP_SIZE_ANNOTATION)
        ),
    )


def _unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    conditions = podview.obj(pod.get("status")).get("conditions")
    for condition in podview.objects(conditions):
        if condition.get("type") == "PodScheduled":
            if condition.get("status") == "False" and condition.get("reason") == "Unschedulable":
                return _timestamp(condition.get("lastTransitionTime"))
            return None
    return None


# --------------------------------------------------------------------------- ledger changes


Outcome = Literal["charged", "confirmed", "unadmitted", "late", "known"]


def charge_pod(
    ledger: TenantLedger,
    facts: PodFacts,
    *,
    burst_classes: Collection[str],
    carry: Charge | None = None,
    limits: bool = False,
) -> tuple[TenantLedger, Outcome]:
    """Charge a live pod to ``ledger``: confirm its reservation, or charge its own request.

    ``carry`` is the charge the pod held in another tenant (its namespace moved): it moves as
    it was. A pod already charged is left alone, so repeated events charge exactly once.
    Outcome: ``confirmed`` (its reservation became its charge), ``known`` (already charged),
    ``charged`` (carried over), ``unadmitted`` (no reservation and none named: it never passed
    the webhook) or ``late`` (it names a reservation that expired or was never booked here).
    ``limits``: the tenant has a limits quota, so the pod's own charge includes its limits.
    """
    if facts.uid in ledger.charges:
        return ledger, "known"
    if carry is not None:
        moved = confirm(
            ledger, pod_uid=facts.uid, reservation_id=None, tier=carry.tier, amount=carry.amount
        )
        return moved, "charged"
    charged = confirm(
        ledger,
        pod_uid=facts.uid,
        reservation_id=facts.reservation,
        tier=facts.tier(burst_classes),
        amount=facts.charged(limits=limits),
    )
    if len(charged.reservations) < len(ledger.reservations):
        return charged, "confirmed"
    return charged, "late" if facts.reservation is not None else "unadmitted"


def recharge_pod(
    ledger: TenantLedger, facts: PodFacts, *, limits: bool = False
) -> tuple[TenantLedger, bool]:
    """Set a charged pod's charge to what it holds now (``facts.charged``), same tier.

    ``limits``: the tenant has a limits quota, so the charge includes the pod's limits.
    Idempotent: a charge /validate already grew for a resize is left as it is. Returns whether
    the charge changed; a pod not charged (its reservation not yet confirmed) is left alone.
    """
    recharged = recharge(ledger, pod_uid=facts.uid, amount=facts.charged(limits=limits))
    return recharged, recharged is not ledger


def release_pod(ledger: TenantLedger, facts: PodFacts) -> tuple[TenantLedger, Charge | None]:
    """Free a pod's usage: its charge, or the reservation it holds; a no-op the second time.

    Returns the charge removed (None when the pod was not charged). A reservation the pod
    names but that was never bound (the validating webhook did not run) goes too.
    """
    charge = ledger.charges.get(facts.uid)
    released = release(ledger, pod_uid=facts.uid)
    if charge is None and released is ledger and facts.reservation is not None:
        named = ledger.reservations.get(facts.reservation)
        if named is not None and named.pod_uid is None:
            released = cancel(ledger, reservation_id=named.id)
    return released, charge


# --------------------------------------------------------------------------- truth and drift


def _sum(
    amounts: Iterable[tuple[Tier, Mapping[str, Quantity]]],
) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    """Per-tier usage of many amounts, summed in plain integers (one Quantity per resource)."""
    nanos: dict[Tier, dict[str, int]] = {tier: {} for tier in TIER_NAMES}
    formats: dict[str, QuantityFormat] = {}
    for tier, amount in amounts:
        sums = nanos[tier]
        for name, quantity in amount.items():
            sums[name] = sums.get(name, 0) + quantity.nanos
            if name not in formats:
                formats[name] = quantity.format
    guaranteed = {n: Quantity(v, formats[n]) for n, v in nanos["guaranteed"].items() if v}
    burst = {n: Quantity(v, formats[n]) for n, v in nanos["burst"].items() if v}
    return guaranteed, burst


def build_ledger(
    tenant: str,
    *,
    charges: Mapping[str, Charge],
    reservations: Mapping[str, Reservation],
    queued: Mapping[str, Queued] | None = None,
) -> TenantLedger:
    """A ledger whose usage is exactly its charges plus its reservations (queued entries are
    not usage)."""
    guaranteed, burst = _sum(
        [(c.tier, c.amount) for c in charges.values()]
        + [(r.tier, r.amount) for r in reservations.values()]
    )
    return TenantLedger.of(
        tenant,
        guaranteed=guaranteed,
        burst=burst,
        reservations=reservations.values(),
        charges=charges,
        queued=(queued or {}).values(),
    )


def _settled(entry: Queued | None, facts: PodFacts) -> Queued:
    """The queued entry a stored gated pod holds: the one booked for it (its place kept), or
    one recorded from the pod."""
    if entry is not None:
        return Queued(entry.id, entry.priority, entry.queued_at, None, facts.uid)
    return Queued(
        facts.reservation or queued_id_for(facts.uid),
        facts.priority,
        facts.created_at,
        None,
        facts.uid,
    )


def _queued_here(facts: PodFacts, now: float) -> bool:
    """Whether a pod waits in its tenant's queue: gated, not finished, not being deleted."""
    return facts.gated and not facts.terminal and facts.release_at is None


@dataclass(frozen=True, slots=True)
class Drift:
    """One resource whose incremental usage differed from the truth: ``ledger - truth``."""

    tenant: str
    tier: Tier
    resource: str
    ledger: Quantity
    truth: Quantity

    @property
    def amount(self) -> Quantity:
        return self.ledger - self.truth

    def __str__(self) -> str:
        sign = "+" if self.amount.nanos > 0 else ""
        return (
            f"tenant {self.tenant} {self.tier} {self.resource}: ledger {self.ledger}, "
            f"truth {self.truth} (drift {sign}{self.amount})"
        )


def _charge_differences(ledger: TenantLedger, truth: TenantLedger) -> tuple[int, int, int]:
    """(charges missing, charges stale, charges with another tier or amount) in ``ledger``."""
    missing = mismatched = 0
    for uid, charge in truth.charges.items():
        held = ledger.charges.get(uid)
        if held is None:
            missing += 1
        elif held.tier != charge.tier or held.amount != charge.amount:
            mismatched += 1
    stale = sum(1 for uid in ledger.charges if uid not in truth.charges)
    return missing, stale, mismatched


def usage_drift(tenant: str, ledger: TenantLedger, truth: TenantLedger) -> list[Drift]:
    """Every (tier, resource) where the two ledgers' usage differ, sorted."""
    found: list[Drift] = []
    zero = Quantity(0)
    for tier in TIER_NAMES:
        mine, true = ledger.used(tier), truth.used(tier)
        for name in sorted(set(mine) | set(true)):
            a, b = mine.get(name, zero), true.get(name, zero)
            if a.nanos != b.nanos:
                found.append(Drift(tenant, tier, name, a, b))
    return found


@dataclass(frozen=True, slots=True)
class RecountReport:
    """What a recount found and repaired."""

    pods: int
    drift: tuple[Drift, ...] = ()
    missing_charges: int = 0  # live pods the ledger did not charge
    stale_charges: int = 0  # charges of pods that are gone, finished or elsewhere
    wrong_charges: int = 0  # charges of live pods with another tier or amount

    @property
    def repaired(self) -> bool:
        return bool(self.drift or self.missing_charges or self.stale_charges or self.wrong_charges)


@dataclass(frozen=True, slots=True)
class SweepReport:
    expired: tuple[tuple[str, Reservation], ...] = ()  # (tenant, reservation)
    released_terminating: int = 0


# --------------------------------------------------------------------------- the recount


@dataclass(slots=True)
class _Tally:
    """What a tenant's live pods add up to, and how many the ledger charges the same way."""

    groups: dict[tuple[Tier, int], list[Any]] = field(default_factory=dict)  # [amount, count]
    held: set[str] = field(default_factory=set)  # open reservations a tracked pod accounts for
    present: int = 0
    missing: int = 0
    differing: int = 0
    queued: int = 0  # gated pods waiting
    queued_present: int = 0  # ... whose settled entry the ledger holds

    def differs_from(self, ledger: TenantLedger) -> bool:
        if self.missing or self.differing or self.held:
            return True
        if self.queued_present != self.queued or self.queued != sum(
            1 for entry in ledger.queued.values() if entry.expires_at is None
        ):
            return True
        if len(ledger.charges) != self.present:
            return True
        nanos: dict[Tier, dict[str, int]] = {"guaranteed": {}, "burst": {}}
        for (tier, _), (amount, count) in self.groups.items():
            sums = nanos[tier]
            for name, quantity in amount.items():
                sums[name] = sums.get(name, 0) + quantity.nanos * count
        for reservation in ledger.reservations.values():
            sums = nanos[reservation.tier]
            for name, quantity in reservation.amount.items():
                sums[name] = sums.get(name, 0) + quantity.nanos
        for tier in TIER_NAMES:
            usage = ledger.used(tier)
            wanted = {name: value for name, value in nanos[tier].items() if value}
            if len(usage) != len(wanted):
                return True
            if any(
                usage[name].nanos != value if name in usage else True
                for name, value in wanted.items()
            ):
                return True
        return False


@dataclass(frozen=True, slots=True)
class RecountInput:
    """What a recount reads, copied at one instant on the event-loop thread."""

    pods: tuple[PodFacts, ...]
    namespaces: Mapping[str, Mapping[str, str]]
    policy: Policy
    ledgers: Mapping[str, TenantLedger]
    now: float


def find_drift(frozen: RecountInput) -> frozenset[str]:
    """The tenants whose ledger differs from the truth in ``frozen``; pure, any thread.

    The full pass over every pod runs here, off the event loop; only when it finds a suspect
    does the loop run ``LedgerController.recount``, which checks the live state again, so a
    change made meanwhile is never "repaired" away.
    """
    policy, namespaces = frozen.policy, frozen.namespaces

    def tenant_of(namespace: str) -> str | None:
        tenant = policy.tenant_for(namespace, namespaces.get(namespace))
        return tenant.name if tenant is not None else None

    pods = ((facts.uid, facts) for facts in frozen.pods)
    return frozenset(
        _differing(pods, frozen.ledgers, policy=policy, tenant_of=tenant_of, now=frozen.now)
    )


def _differing(
    pods: Iterable[tuple[str, PodFacts]],
    ledgers: Mapping[str, TenantLedger],
    *,
    policy: Policy,
    tenant_of: Callable[[str], str | None],
    now: float,
    assigned: dict[str, str | None] | None = None,
) -> set[str]:
    """Tenants whose ledger is not what their live pods and open reservations add up to.

    ``assigned`` receives, per pod, the tenant that should charge it (None: none).
    """
    burst_classes = policy.burst_classes
    empty = {name: TenantLedger(name) for name in policy.tenants if name not in ledgers}
    tallies = {name: _Tally() for name in policy.tenants}
    limited = {name: tenant.quota.has_limits for name, tenant in policy.tenants.items()}
    tenant_cache: dict[str, str | None] = {}
    for uid, facts in pods:
        namespace = facts.namespace
        if namespace in tenant_cache:
            tenant = tenant_cache[namespace]
        else:
            tenant = tenant_cache[namespace] = tenant_of(namespace)
        counted = facts.counted(now)
        if assigned is not None:
            assigned[uid] = tenant if counted else None
        if tenant is None or tenant not in tallies:
            continue
        ledger = ledgers.get(tenant) or empty[tenant]
        tally = tallies[tenant]
        if ledger.reservations:
            held = ledger.reservation_for_pod(uid)
            if held is None and facts.reservation is not None:
                named = ledger.reservations.get(facts.reservation)
                held = named if named is not None and named.pod_uid is None else None
            if held is not None:
                tally.held.add(held.id)
        if _queued_here(facts, now):
            tally.queued += 1
            entry = queued_entry_for(ledger, entry_id=facts.reservation, pod_uid=uid)
            if entry is not None and entry.expires_at is None and entry.pod_uid == uid:
                tally.queued_present += 1
        if not counted:
            continue
        tier = facts.tier(burst_classes)
        amount = facts.charged(limits=limited[tenant])
        group = tally.groups.get((tier, id(amount)))
        if group is None:
            tally.groups[(tier, id(amount))] = [amount, 1]
        else:
            group[1] += 1
        charge = ledger.charges.get(uid)
        if charge is None:
            tally.missing += 1
        elif charge.tier != tier or (charge.amount is not amount and charge.amount != amount):
            tally.differing += 1
        else:
            tally.present += 1
    wrong = {
        tenant
        for tenant, tally in tallies.items()
        if tally.differs_from(ledgers.get(tenant) or empty[tenant])
    }
    for tenant, ledger in ledgers.items():
        if tenant not in tallies and (ledger.charges or ledger.reservations or ledger.queued):
            wrong.add(tenant)  # no longer configured, yet still holds usage
    return wrong


# --------------------------------------------------------------------------- the controller


class LedgerStoreLike(Protocol):
    """What the controller needs from the ledger store (``MemoryLedger`` provides it)."""

    def get(self, tenant: str) -> TenantLedger: ...

    def update(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        written: Callable[[T], None] | None = None,
    ) -> T: ...

    def snapshot(self) -> dict[str, TenantLedger]: ...


@dataclass(slots=True)
class ControllerStats:
    """Running counters, for metrics and logs."""

    confirmed: int = 0
    released: dict[str, int] = field(default_factory=dict)  # by reason
    unadmitted: dict[str, int] = field(default_factory=dict)  # by tenant
    late: dict[str, int] = field(default_factory=dict)  # by tenant
    expired: dict[str, int] = field(default_factory=dict)  # by tenant
    moved: int = 0
    recounts: int = 0
    drift_repairs: dict[str, int] = field(default_factory=dict)  # by tenant
    last_drift: dict[tuple[str, str, str], Quantity] = field(default_factory=dict)
    last_recount_at: float | None = None
    rebuilt_at: float | None = None

    def count(self, counter: dict[str, int], key: str, amount: int = 1) -> None:
        counter[key] = counter.get(key, 0) + amount


class LedgerController:
    """Keeps one ledger store equal to the cluster's pods; call it on one thread only.

    The index holds every pod seen (all namespaces, terminal ones too until deleted) with the
    tenant whose ledger charges it, so that a namespace moving between tenants or a relist
    after a lost watch can be reconciled without asking the API server again.
    """

    def __init__(self, store: LedgerStoreLike, *, policy: Policy) -> None:
        self._store = store
        self._policy = policy
        self._pods: dict[str, PodFacts] = {}
        # Per namespace, its pods: uid -> the tenant whose ledger charges it (None: none). The
        # tenant lives here rather than in a record per pod: one object fewer per pod, ~7 MiB
        # at 150,000 pods.
        self._by_namespace: dict[str, dict[str, str | None]] = {}
        self._terminating: dict[str, float] = {}
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self.stats = ControllerStats()
        self.queues = QueueBook()
        self.running_groups = RunningGroups()

    # -- reading -------------------------------------------------------------------------

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """The labels of ``namespace`` as last seen; None when unknown (for the admitter)."""
        return self._namespaces.get(namespace)

    def tenant_of(self, namespace: str) -> str | None:
        tenant = self._policy.tenant_for(namespace, self._namespaces.get(namespace))
        return tenant.name if tenant is not None else None

    def tracked(self, uid: str) -> tuple[PodFacts, str | None] | None:
        facts = self._pods.get(uid)
        return (facts, self._by_namespace[facts.namespace][uid]) if facts is not None else None

    # -- pods ----------------------------------------------------------------------------

    def apply_pod(self, facts: PodFacts, *, now: float) -> None:
        """A pod was added or modified (watch ADDED/MODIFIED)."""
        self._apply_charge(facts, now=now)
        self._apply_queue(facts, now=now)
        if facts.group is not None or self.running_groups:
            self.running_groups.observe(
                facts.uid, facts.group, running=not facts.gated and facts.counted(now)
            )

    def _apply_charge(self, facts: PodFacts, *, now: float) -> None:
        uid = facts.uid
        counted = facts.counted(now)
        tenant = self.tenant_of(facts.namespace) if counted else None
        known = self._pods.get(uid)
        self._pods[uid] = facts
        if known is None:
            self._by_namespace.setdefault(facts.namespace, {})[uid] = None
            if not counted:
                # Finished before we ever saw it running: free what admission booked for it.
                self._release_untracked(facts)
        elif known.namespace != facts.namespace:
            # A uid never changes namespace in Kubernetes; keep the index right if it did.
            held = self._forget(known)
            self._by_namespace.setdefault(facts.namespace, {})[uid] = held
        self._track_termination(facts, counted=counted)
        members = self._by_namespace[facts.namespace]
        charged = members[uid]
        if tenant == charged:
            if (
                tenant is not None
                and known is not None
                and (
                    known.amount is not facts.amount
                    or known.limited_amount is not facts.limited_amount
                )
            ):
                # An in-place resize changed what the pod holds (its spec, or the kubelet's
                # allocated and actual resources): its charge follows.
                limits = self._policy.tenants[tenant].quota.has_limits
                self._store.update(
                    tenant, lambda ledger: recharge_pod(ledger, facts, limits=limits)
                )
            return
        carry = None
        if charged is not None:
            members[uid] = None
            reason = "moved" if tenant is not None else self._release_reason(facts)
            carry = self._release(facts, charged, reason=reason)
        if tenant is not None:
            self._charge(facts, tenant, carry=carry)

    def delete_pod(self, facts: PodFacts, *, now: float) -> None:
        """A pod was deleted (watch DELETED, or missing from a relist)."""
        known = self._pods.pop(facts.uid, None)
        self._terminating.pop(facts.uid, None)
        self._leave_queue(facts.uid, known or facts)
        self.running_groups.forget(facts.uid)
        if known is None:
            self._release_untracked(facts)
            return
        charged = self._forget(known)
        if charged is not None:
            self._release(known, charged, reason="deleted")

    def replace_pods(self, pods: Iterable[PodFacts], *, now: float, initial: bool) -> RecountReport:
        """The full list of pods (a first list, or a relist after a lost watch).

        Pods missing from the list were deleted meanwhile; every pod listed is applied. The
        first list rebuilds the ledger from the truth; a relist goes through the same
        per-pod transitions as watch events, so nothing is counted twice.
        """
        listed = {facts.uid: facts for facts in pods}
        if initial:
            return self._rebuild(listed, now=now)
        gone = [facts for uid, facts in self._pods.items() if uid not in listed]
        for facts in gone:
            self.delete_pod(facts, now=now)
        changed = 0
        for uid, facts in listed.items():
            known = self._pods.get(uid)
            if known is None or known.resource_version != facts.resource_version:
                changed += 1
                self.apply_pod(facts, now=now)
        logger.info(
            "pods relisted: %d listed, %d deleted meanwhile, %d added or changed",
            len(listed),
            len(gone),
            changed,
        )
        return RecountReport(pods=len(listed))

    # -- namespaces ----------------------------------------------------------------------

    def apply_namespace(self, name: str, labels: Mapping[str, str], *, now: float) -> None:
        """A namespace was added or relabelled: its pods follow it to its (new) tenant."""
        before = self.tenant_of(name)
        self._namespaces[name] = dict(labels)
        if self.tenant_of(name) != before:
            self._retenant(self._by_namespace.get(name, {}), now=now)

    def delete_namespace(self, name: str, *, now: float) -> None:
        before = self.tenant_of(name)
        self._namespaces.pop(name, None)
        if self.tenant_of(name) != before:
            self._retenant(self._by_namespace.get(name, {}), now=now)

    def replace_namespaces(
        self, namespaces: Mapping[str, Mapping[str, str]], *, now: float
    ) -> None:
        """The full list of namespaces with their labels."""
        before = {name: self.tenant_of(name) for name in set(self._namespaces) | set(namespaces)}
        self._namespaces = {name: dict(labels) for name, labels in namespaces.items()}
        for name, tenant in before.items():
            if self.tenant_of(name) != tenant:
                self._retenant(self._by_namespace.get(name, {}), now=now)

    # -- policy --------------------------------------------------------------------------

    def set_policy(self, policy: Policy, *, now: float) -> None:
        """A new config: pods move to the tenant the new policy gives their namespace.

        Tenants that no longer exist lose their ledger (reservations included).
        """
        old = self._policy
        self._policy = policy
        # Only the pods of a namespace whose tenant changed can move: one lookup per namespace,
        # not per pod, so a reload (or a priority class change, which moves nobody) does not
        # walk every tracked pod on the event loop.
        for namespace in [
            namespace
            for namespace in self._by_namespace
            if _tenant_name(old, namespace, self._namespaces.get(namespace))
            != _tenant_name(policy, namespace, self._namespaces.get(namespace))
        ]:
            self._retenant(list(self._by_namespace[namespace]), now=now)
        for tenant in old.tenants:
            if tenant not in policy.tenants:
                self._put(tenant, TenantLedger(tenant))
        for tenant in list(self.queues.queues):
            self.queues.room_changed(tenant)  # other quotas, classes or queue settings

    # -- periodic ------------------------------------------------------------------------

    def sweep(self, *, now: float, listed: bool) -> SweepReport:
        """Expire unconfirmed reservations; release pods stuck terminating past their grace.

        ``listed``: whether the pods have been listed since this controller started its term.
        Until then a reservation bound to a pod stays whatever its expiry: the validating
        webhook admitted that pod, which may well be stored and not seen yet (a new lease
        holder's first list of a large cluster takes a while), and freeing its room would lend
        it twice. The first list charges such pods; unbound holds past their TTL go at once
        (their pods never reached validation). Queued entries wait for the list likewise.
        """
        only_unbound = not listed
        expired: list[tuple[str, Reservation]] = []
        for tenant, ledger in self._store.snapshot().items():
            if not any(
                r.expires_at <= now and (listed or r.pod_uid is None)
                for r in ledger.reservations.values()
            ):
                continue
            removed = self._store.update(
                tenant,
                lambda current: expire(current, now=now, only_unbound=only_unbound),
                written=self._freed_by_expiry(tenant),
            )
            for reservation in removed:
                expired.append((tenant, reservation))
                self.stats.count(self.stats.expired, tenant)
                logger.info(
                    "reservation %s of tenant %s expired unconfirmed: released %s (%s)",
                    reservation.id,
                    tenant,
                    _format(reservation.amount),
                    reservation.tier,
                    extra={"tenant": tenant, "reservation": reservation.id},
                )
        for tenant, ledger in self._store.snapshot().items():
            if not listed or not any(
                e.expires_at is not None and e.expires_at <= now for e in ledger.queued.values()
            ):
                continue
            lapsed = self._store.update(tenant, lambda current: expire_queued(current, now=now))
            for entry in lapsed:
                logger.info(
                    "queued entry %s of tenant %s lapsed: its pod was never seen stored",
                    entry.id,
                    tenant,
                    extra={"tenant": tenant, "reservation": entry.id},
                )
        for tenant in list(self.queues.queues):
            if self.queue_policy(tenant).aging:
                self.queues.room_changed(tenant)  # an aging step may have passed
        released = 0
        for uid, release_at in list(self._terminating.items()):
            if release_at < now:
                facts = self._pods.get(uid)
                if facts is not None:
                    self.apply_pod(facts, now=now)
                    released += 1
        return SweepReport(tuple(expired), released)

    def freeze(self, *, now: float) -> RecountInput:
        """A consistent copy of what a recount reads, for :func:`find_drift` in another thread."""
        return RecountInput(
            pods=tuple(self._pods.values()),
            namespaces=dict(self._namespaces),
            policy=self._policy,
            ledgers=self._store.snapshot(),
            now=now,
        )

    def mark_recounted(self, *, now: float) -> None:
        """Record a recount that found nothing to repair (see :func:`find_drift`)."""
        self.stats.recounts += 1
        self.stats.last_recount_at = now
        self.stats.last_drift = {}

    def recount(self, *, now: float) -> RecountReport:
        """Compare the ledger with the truth, repair any difference and report it.

        A first pass only counts (usage sums by shared amount, charges present or missing), so
        a ledger without drift costs no allocation per pod; a tenant's truth is built only when
        its ledger differs. With many pods, run :func:`find_drift` on :meth:`freeze` in a
        thread first and call this only when it finds a suspect.
        """
        snapshot = self._store.snapshot()
        assigned: dict[str, str | None] = {}
        wrong = _differing(
            self._pods.items(),
            snapshot,
            policy=self._policy,
            tenant_of=self.tenant_of,
            now=now,
            assigned=assigned,
        )
        drift: list[Drift] = []
        missing = stale = mismatched = 0
        if wrong:
            truth, _ = self._truth(snapshot, now=now, only=wrong)
            for tenant in sorted(wrong):
                current = snapshot.get(tenant) or TenantLedger(tenant)
                wanted = truth.get(tenant) or TenantLedger(tenant)
                found = usage_drift(tenant, current, wanted)
                counts = _charge_differences(current, wanted)
                drift.extend(found)
                missing += counts[0]
                stale += counts[1]
                mismatched += counts[2]
                self._put(tenant, wanted)
                self.stats.count(self.stats.drift_repairs, tenant)
                self._report_drift(tenant, found, counts)
        self._assign(assigned)
        self.stats.recounts += 1
        self.stats.last_recount_at = now
        self.stats.last_drift = {(d.tenant, d.tier, d.resource): d.amount for d in drift}
        return RecountReport(len(self._pods), tuple(drift), missing, stale, mismatched)

    @staticmethod
    def _report_drift(tenant: str, found: list[Drift], counts: tuple[int, int, int]) -> None:
        for item in found:
            logger.warning(
                "ledger drift repaired: %s",
                item,
                extra={
                    "tenant": item.tenant,
                    "tier": item.tier,
                    "resource": item.resource,
                    "drift": str(item.amount),
                },
            )
        missing, stale, mismatched = counts
        if missing or stale or mismatched:
            logger.warning(
                "ledger drift repaired: tenant %s: %d live pods were not charged, "
                "%d charges belonged to no live pod, %d had another tier or amount",
                tenant,
                missing,
                stale,
                mismatched,
                extra={"tenant": tenant},
            )

    # -- internals -----------------------------------------------------------------------

    def _rebuild(self, listed: dict[str, PodFacts], *, now: float) -> RecountReport:
        """Replace the index with ``listed`` (kept, not copied) and the ledger with the truth."""
        self._pods = listed
        self._by_namespace = {}
        self._terminating = {}
        self.queues.clear()
        self.running_groups.clear()
        for uid, facts in listed.items():
            self._by_namespace.setdefault(facts.namespace, {})[uid] = None
            if facts.release_at is not None and facts.counted(now):
                self._terminating[uid] = facts.release_at
            if facts.group is not None:
                self.running_groups.observe(
                    uid, facts.group, running=not facts.gated and facts.counted(now)
                )
        snapshot = self._store.snapshot()
        truth, assigned = self._truth(snapshot, now=now)
        for name in set(truth) | set(snapshot):
            self._put(name, truth.get(name, TenantLedger(name)))
        self._assign(assigned)
        for facts in listed.values():
            if _queued_here(facts, now):
                tenant = self.tenant_of(facts.namespace)
                if tenant is not None:
                    self.queues.observe(
                        facts, tenant, amount=self._queued_amount(facts, tenant), listed=True
                    )
        unadmitted: dict[str, list[str]] = {}
        for uid, owner in assigned.items():
            if owner is not None:
                facts = listed[uid]
                if facts.reservation is None:
                    unadmitted.setdefault(owner, []).append(facts.key)
        for tenant, names in sorted(unadmitted.items()):
            self.stats.count(self.stats.unadmitted, tenant, len(names))
            shown = ", ".join(sorted(names)[:_MAX_LOGGED_NAMES])
            more = (
                f" and {len(names) - _MAX_LOGGED_NAMES} more"
                if len(names) > _MAX_LOGGED_NAMES
                else ""
            )
            logger.warning(
                "tenant %s: %d running pods were created without passing the webhook "
                "(counted on their own request): %s%s",
                tenant,
                len(names),
                shown,
                more,
                extra={"tenant": tenant, "pods": len(names)},
            )
        self.stats.rebuilt_at = now
        charged = sum(1 for owner in assigned.values() if owner is not None)
        logger.info(
            "ledger rebuilt from %d pods (%d charged to tenants)",
            len(listed),
            charged,
            extra={"pods": len(listed), "charged": charged},
        )
        return RecountReport(pods=len(listed))

    def _truth(
        self,
        snapshot: Mapping[str, TenantLedger],
        *,
        now: float,
        only: set[str] | None = None,
    ) -> tuple[dict[str, TenantLedger], dict[str, str | None]]:
        """Every configured tenant's ledger as the live pods and open reservations say.

        Returns the ledgers (of the tenants in ``only``, when given) and, per tracked pod, the
        tenant charging it (None: not charged).
        """
        policy = self._policy
        burst_classes = policy.burst_classes
        built = [t for t in policy.tenants if only is None or t in only]
        open_reservations: dict[str, dict[str, Reservation]] = {
            tenant: dict(snapshot[tenant].reservations) if tenant in snapshot else {}
            for tenant in built
        }
        limited = {name: tenant.quota.has_limits for name, tenant in policy.tenants.items()}
        # Pods of one Deployment share their amount: share their Charge too.
        shared: dict[tuple[Tier, int], Charge] = {}
        bound: dict[tuple[str, str], str] = {}
        for name, held in open_reservations.items():
            for reservation in held.values():
                if reservation.pod_uid is not None:
                    bound[(name, reservation.pod_uid)] = reservation.id
        charges: dict[str, dict[str, Charge]] = {name: {} for name in built}
        queued: dict[str, dict[str, Queued]] = {name: {} for name in built}
        # Entries not settled yet (pods in admission): kept until their pod is seen or expiry.
        open_queued: dict[str, dict[str, Queued]] = {
            name: {
                entry.id: entry
                for entry in snapshot[name].queued.values()
                if entry.expires_at is not None and entry.expires_at > now
            }
            if name in snapshot
            else {}
            for name in built
        }
        assigned: dict[str, str | None] = {}
        tenant_cache: dict[str, str | None] = {}
        for uid, facts in self._pods.items():
            namespace = facts.namespace
            if namespace in tenant_cache:
                tenant = tenant_cache[namespace]
            else:
                tenant = tenant_cache[namespace] = self.tenant_of(namespace)
            counted = facts.counted(now)
            assigned[uid] = tenant if counted else None
            if tenant is None or tenant not in open_reservations:
                continue
            # The booking this pod holds, chosen as ledger.confirm chooses it: a live pod
            # turns it into its charge, a finished one frees it (as release_pod does).
            reservations = open_reservations[tenant]
            consumed = bound.get((tenant, uid))
            if consumed is None and facts.reservation is not None:
                named = reservations.get(facts.reservation)
                if named is not None and named.pod_uid is None:
                    consumed = named.id
            # A gated member of a pod group keeps its group's booking: the leader that booked
            # the group may have died before removing its gate, and the group must not lose
            # the room its released members were booked with.
            if consumed is not None and not (facts.group is not None and _queued_here(facts, now)):
                reservations.pop(consumed, None)
            if _queued_here(facts, now):
                stored = snapshot.get(tenant)
                entry = (
                    queued_entry_for(stored, entry_id=facts.reservation, pod_uid=uid)
                    if stored is not None
                    else None
                )
                settled = _settled(entry, facts)
                open_queued[tenant].pop(settled.id, None)
                queued[tenant][settled.id] = settled
            if counted:
                tier = facts.tier(burst_classes)
                amount = facts.charged(limits=limited[tenant])
                key = (tier, id(amount))
                charge = shared.get(key)
                if charge is None or charge.amount is not amount:
                    charge = shared[key] = Charge(tier, amount)
                charges[tenant][uid] = charge
        truth = {
            tenant: build_ledger(
                tenant,
                charges=charges[tenant],
                reservations=open_reservations[tenant],
                queued={**open_queued[tenant], **queued[tenant]},
            )
            for tenant in built
        }
        return truth, assigned

    def _assign(self, assigned: Mapping[str, str | None]) -> None:
        """Record, per tracked pod, the tenant charging it (as a recount or rebuild decided)."""
        pods, index = self._pods, self._by_namespace
        for uid, owner in assigned.items():
            index[pods[uid].namespace][uid] = owner

    def _forget(self, facts: PodFacts) -> str | None:
        """Take the pod out of its namespace's index; returns the tenant that charged it."""
        members = self._by_namespace.get(facts.namespace)
        if members is None:
            return None
        charged = members.pop(facts.uid, None)
        if not members:
            del self._by_namespace[facts.namespace]
        return charged

    def _charge(self, facts: PodFacts, tenant: str, *, carry: Charge | None) -> None:
        """Charge the pod to ``tenant`` and record it in the index."""
        burst_classes = self._policy.burst_classes
        configured = self._policy.tenants.get(tenant)
        limits = configured is not None and configured.quota.has_limits
        self._store.update(
            tenant,
            lambda ledger: charge_pod(
                ledger, facts, burst_classes=burst_classes, carry=carry, limits=limits
            ),
            written=lambda outcome: self._charged(facts, tenant, outcome),
        )
        self._by_namespace[facts.namespace][facts.uid] = tenant
        if facts.invalid is not None:
            logger.warning("pod %s: cannot compute its request: %s", facts.key, facts.invalid)

    def _charged(self, facts: PodFacts, tenant: str, outcome: str) -> None:
        """Count and report how a pod's charge was written: judged on the stored ledger, not
        on this replica's view of it, which may not hold another replica's booking yet."""
        if outcome == "confirmed":
            self.stats.confirmed += 1
        elif outcome == "unadmitted":
            self.stats.count(self.stats.unadmitted, tenant)
            logger.warning(
                "pod %s of tenant %s did not pass the webhook: counted on its own request %s",
                facts.key,
                tenant,
                _format(facts.amount),
                extra={"tenant": tenant, "pod": facts.key},
            )
        elif outcome == "late":
            self.stats.count(self.stats.late, tenant)
            logger.warning(
                "pod %s of tenant %s names reservation %s, which expired before the pod was "
                "seen: counted on its own request %s (raise reservationTTLSeconds?)",
                facts.key,
                tenant,
                facts.reservation,
                _format(facts.amount),
                extra={"tenant": tenant, "pod": facts.key},
            )

    def _release(self, facts: PodFacts, tenant: str, *, reason: str) -> Charge | None:
        """Free the pod's usage in ``tenant``'s ledger (the caller updates the index)."""
        charge = self._store.update(
            tenant,
            lambda ledger: release_pod(ledger, facts),
            written=lambda _: self._room_freed(tenant),
        )
        self.stats.count(self.stats.released, reason)
        logger.debug("pod %s released from tenant %s (%s)", facts.key, tenant, reason)
        return charge

    def _room_freed(self, tenant: str) -> None:
        """Room freed in ``tenant``'s ledger is written: its queue, and with cohorts every
        queue of its tree, may release now.

        Not before it is written: a release books on the stored ledgers, and one refused
        there for want of the room this replica's view already shows would wait for the next
        change of room, which may never come.
        """
        self.queues.room_changed(tenant)
        if tenant in self.policy.cohorts.members:
            # Room freed in a cohort tree may be borrowed by any member waiting there.
            for member in self.policy.cohorts.tree_members(tenant):
                self.queues.room_changed(member)

    def _freed_by_expiry(self, tenant: str) -> Callable[[tuple[Reservation, ...]], None]:
        def written(expired: tuple[Reservation, ...]) -> None:
            if expired:
                self._room_freed(tenant)

        return written

    def _release_untracked(self, facts: PodFacts) -> None:
        """Cancel what admission booked for a pod that is gone before it was ever tracked."""
        tenant = self.tenant_of(facts.namespace)
        if tenant is not None:
            self._store.update(
                tenant,
                lambda ledger: release_pod(ledger, facts),
                written=lambda _: self._room_freed(tenant),
            )

    def _put(self, tenant: str, ledger: TenantLedger) -> None:
        self._store.update(tenant, lambda _current: (ledger, None))

    def _retenant(self, uids: Iterable[str], *, now: float) -> None:
        for uid in list(uids):
            facts = self._pods.get(uid)
            if facts is None:
                continue
            if facts.gated:
                self._apply_queue(facts, now=now)
            tenant = self.tenant_of(facts.namespace) if facts.counted(now) else None
            members = self._by_namespace[facts.namespace]
            charged = members[uid]
            if tenant == charged:
                continue
            carry = None
            if charged is not None:
                members[uid] = None
                carry = self._release(facts, charged, reason="moved")
            if tenant is not None:
                self._charge(facts, tenant, carry=carry)
                self.stats.moved += 1

    def group_members(self, tenant: str, group: str) -> list[Mapping[str, Quantity]]:
        """What the members of ``group`` seen waiting in ``tenant``'s queue request (for the
        admitter's known total of the group)."""
        queue = self.queues.queues.get(tenant)
        members = queue.groups().get(group) if queue is not None else None
        return [member.amount for member in members.values()] if members else []

    def group_queue_policy(self, tenant: str) -> QueuePolicy:
        """The queue ``tenant``'s pod groups wait in (queue mode's defaults when it has none)."""
        known = self._policy.tenants.get(tenant)
        return known.group_queue() if known is not None else QueuePolicy()

    def queue_policy(self, tenant: str) -> QueuePolicy:
        """The tenant's queue settings (the defaults once it no longer queues: the pods
        already waiting are released as room frees)."""
        known = self._policy.tenants.get(tenant)
        return known.queue if known is not None and known.queue is not None else QueuePolicy()

    def _apply_queue(self, facts: PodFacts, *, now: float) -> None:
        """Keep the pod's place in its tenant's queue, and its settled entry in the ledger."""
        tenant = self.tenant_of(facts.namespace) if _queued_here(facts, now) else None
        if tenant is None:
            self._leave_queue(facts.uid, facts)
            return
        before = self.queues.tenant_of(facts.uid)
        if before is not None and before != tenant:
            self._leave_queue(facts.uid, facts)
        held = queued_entry_for(
            self._store.get(tenant), entry_id=facts.reservation, pod_uid=facts.uid
        )
        if held is None or held.expires_at is not None or held.pod_uid != facts.uid:
            self._store.update(
                tenant,
                lambda ledger: (
                    settle_queued(
                        ledger,
                        entry_id=facts.reservation or queued_id_for(facts.uid),
                        pod_uid=facts.uid,
                        priority=facts.priority,
                        queued_at=facts.created_at,
                    ),
                    None,
                ),
            )
        self.queues.observe(facts, tenant, amount=self._queued_amount(facts, tenant))

    def _queued_amount(self, facts: PodFacts, tenant: str) -> Mapping[str, Quantity]:
        """What releasing the pod books: what its tenant charges (limits too, with a limits
        quota)."""
        configured = self._policy.tenants.get(tenant)
        return facts.charged(limits=configured is not None and configured.quota.has_limits)

    def _leave_queue(self, uid: str, facts: PodFacts) -> None:
        """The pod no longer waits (released, ungated, finished or deleted): drop its entry."""
        tenant = self.queues.forget(uid)
        if tenant is None:
            return
        held = queued_entry_for(self._store.get(tenant), entry_id=facts.reservation, pod_uid=uid)
        if held is not None and held.pod_uid == uid:
            self._store.update(tenant, lambda ledger: (dequeue(ledger, entry_id=held.id), None))

    def _track_termination(self, facts: PodFacts, *, counted: bool) -> None:
        if counted and facts.release_at is not None:
            self._terminating[facts.uid] = facts.release_at
        else:
            self._terminating.pop(facts.uid, None)

    @staticmethod
    def _release_reason(facts: PodFacts) -> str:
        if facts.terminal:
            return "finished"
        return "terminating"


def _tenant_name(policy: Policy, namespace: str, labels: Mapping[str, str] | None) -> str | None:
    tenant = policy.tenant_for(namespace, labels)
    return tenant.name if tenant is not None else None


def _format(amount: Mapping[str, Quantity]) -> str:
    return ",".join(f"{name}={amount[name]}" for name in sorted(amount)) or "nothing"


__all__ = [
    "TERMINAL_PHASES",
    "AmountInterner",
    "ControllerStats",
    "Drift",
    "LedgerController",
    "LedgerStoreLike",
    "PodFacts",
    "RecountInput",
    "RecountReport",
    "SweepReport",
    "build_ledger",
    "charge_pod",
    "find_drift",
    "pod_facts",
    "recharge_pod",
    "release_pod",
    "usage_drift",
]
