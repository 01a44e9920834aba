"""The admission decisions: ``PolicyAdmitter`` behind ``/mutate`` and ``/validate``.

/mutate classifies and plans the pod, resolves its tenant, applies container defaults, computes
the exact request of the final pod, picks the tier, books a reservation (its id goes into the
``tenantgate.io/reservation`` annotation) and writes the tier's labels and priority class.
/validate checks the final object, after every mutating webhook: allowed priority class, and a
reservation that covers the final request (topped up in the same tier, or booked here when the
mutating webhook was skipped). Dry-run requests get the same verdict and book nothing.

Every ledger change is one awaited ``LedgerStore.transact`` with a pure function, so the check
and the booking can never be separated by another request: the store applies the function to
the ledger it writes (under a lock in memory, in a compare-and-swap loop in the Kubernetes
API). When the store cannot reach its backend (:class:`~tenants.ledger.LedgerUnavailable`),
/validate fails closed with the store's retryable message, and /mutate raises it so that the
webhook call fails and the API server applies the mutating webhook's ``failurePolicy``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple, TypeVar

from classifier import podview
from classifier.config import BUILTIN_PRIORITY_CLASSES, PROFILE_LABEL, set_priority_class
from classifier.limits import pod_limit_usage, pod_usage
from classifier.podgroups import GroupClaim, GroupClaimError, GroupRule, claim_group
from classifier.quantities import Quantity, format_list, from_nanos
from classifier.records import record
from classifier.resources import PodResourceError, pod_requests
from classifier.types import JSONObject
from tenants.bounds import bounds_violations, missing_limits
from tenants.cohorts.borrowing import borrow_warning
from tenants.cohorts.tier import cohort_rule, within_guarantee
from tenants.cohorts.tree import Membership as CohortMembership
from tenants.config import (
    BORROWED_ANNOTATION,
    DRY_RUN_TIER_ANNOTATION,
    QUEUED_TIER,
    QUOTA_GATE,
    RESERVATION_ANNOTATION,
    TENANT_LABEL,
    TIER_LABEL,
    Policy,
    TenantPolicy,
)
from tenants.defaults import apply_defaults, describe_filled, lacks_defaults
from tenants.groups.admission import (
    known_total,
    never_fits_group,
    queue_member,
    unknown_size_warning,
    waiting_warning,
)
from tenants.groups.membership import Membership, read_membership, write_membership
from tenants.groups.sizes import NoCluster, SizeReader
from tenants.ledger import (
    TIERS,
    LedgerStore,
    LedgerUnavailable,
    PeerLedgerStore,
    TenantLedger,
    Tier,
    book,
    cancel,
    expire,
    resize,
    top_up,
)
from tenants.queue.admission import (
    QueueAnswer,
    add_gate,
    full_message,
    has_gate,
    never_fits,
    queue_pod,
    queued_warning,
    remove_gate,
    requeue_base,
    waits_ahead,
)
from tenants.queue.gate import (
    book_ungated_create,
    confirm_gated_create,
    gate_removal_denial,
    owner_rule,
)
from tenants.quota import (
    Decision,
    TierRule,
    check,
    check_growth,
    denial_message,
    format_over,
    headroom,
    over_ceiling,
)
from tenants.resourcenames import limit_keys
from tenants.verdicts import AdmissionInput, Verdict

logger = logging.getLogger(__name__)

NamespaceLabels = Callable[[str], Mapping[str, str] | None]
# Reads a namespace the watch has not shown yet: its labels, None when it does not exist;
# raises NamespaceUnreadable when the API server cannot say.
NamespaceLookup = Callable[[str], Awaitable[Mapping[str, str] | None]]


class NamespaceUnreadable(Exception):
    """A namespace's labels are not known yet and could not be read."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# The requests of a group's members the controller has seen waiting: (tenant, group id).
GroupMembers = Callable[[str, str], Sequence[Mapping[str, Quantity]]]
T = TypeVar("T")

_ZERO: Final = Quantity(0)
_RESERVATION_ID_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MANAGED_LABELS: Final = (TENANT_LABEL, TIER_LABEL)
# Who may remove tenantgate's scheduling gate: the Deployment's service account by default.
DEFAULT_GATE_OWNER: Final = "system:serviceaccount:tenantgate-system:tenantgate"
# A denial the client should simply retry (the admission chain changed under us). Conflict is
# what Kubernetes answers to optimistic-concurrency failures, and what clients retry.
_RETRY_CODE: Final = 409
_RETRY_REASON: Final = "Conflict"


def reservation_id_for(request_uid: str) -> str:
    """A reservation id derived from the admission request uid.

    Deterministic, so that a dry-run answers with the same patch every time it is asked.
    """
    return "r-" + hashlib.blake2b(request_uid.encode(), digest_size=10).hexdigest()


# --------------------------------------------------------------------------- ledger changes


@record
class Booking:
    """What a mutate booking did: the decision, the reservation id and the ledger after it."""

    decision: Decision
    reservation_id: str
    ledger: TenantLedger


def _free_id(ledger: TenantLedger, base: str) -> str:
    candidate, attempt = base, 1
    while candidate in ledger.reservations:
        attempt += 1
        candidate = f"{base}-{attempt}"
    return candidate


def book_for_mutate(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    request: Mapping[str, Quantity],
    existing_id: str | None,
    derived_id: str,
    now: float,
    ttl: float,
    rule: TierRule | None = None,
) -> tuple[TenantLedger, Booking]:
    """Pick the tier and book a hold, re-using the pod's own hold on re-invocation.

    ``rule`` chooses the tier (:func:`tenants.quota.check` on the tenant's quota when None; a
    cohort member's borrowing rule otherwise).

    The booking is a *hold* that expires ``ttl`` seconds from ``now`` (the policy's short hold
    TTL): a later admission step may still refuse the pod, and only /validate turns the hold
    into a reservation. A hold named by the pod is this admission's own (the webhook was
    re-invoked): it is released and booked again under the same id with the new request, so
    the tier can follow resources another webhook changed. A denied re-invocation releases
    it. When the request does not fit, holds past their TTL that the sweep has not removed yet
    are released first and the check is made again.
    """
    base = ledger
    reservation_id: str | None = None
    if existing_id is not None:
        mine = ledger.reservations.get(existing_id)
        if mine is None:
            reservation_id = existing_id
        elif mine.pod_uid is None:
            base = cancel(ledger, reservation_id=existing_id)
            reservation_id = existing_id
    if reservation_id is None:
        same_request = ledger.reservations.get(derived_id)
        if same_request is not None and same_request.pod_uid is None:
            base = cancel(ledger, reservation_id=derived_id)
            reservation_id = derived_id
        else:
            reservation_id = _free_id(ledger, derived_id)
    decide = rule if rule is not None else _quota_rule(tenant)
    decision = decide(base, request)
    if decision.tier is None:
        base, decision = _recheck_without_stale_holds(tenant, base, request, now=now, rule=decide)
    if decision.tier is None:
        return base, Booking(decision, reservation_id, base)
    after = book(
        base, reservation_id=reservation_id, tier=decision.tier, amount=request, now=now, ttl=ttl
    )
    return after, Booking(decision, reservation_id, after)


def book_or_queue(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    request: Mapping[str, Quantity],
    existing_id: str | None,
    derived_id: str,
    now: float,
    ttl: float,
    priority: int,
    can_queue: bool,
    queue_ttl: float | None = None,
    rule: TierRule | None = None,
) -> tuple[TenantLedger, tuple[Booking, QueueAnswer | None]]:
    """:func:`book_for_mutate`, or, for a tenant in queue mode, the pod queued instead.

    A pod is queued when it does not fit (and could fit an empty room), or when it fits the
    queue's tier but pods wait ahead of it there (see :mod:`tenants.queue.admission`). The
    entry takes the booking's id, so the pod's annotation names either; it lapses
    ``queue_ttl`` seconds from ``now`` (default ``ttl``) unless the controller sees the
    stored pod.
    """
    base = requeue_base(ledger, existing_id) if can_queue else ledger
    after, booking = book_for_mutate(
        base,
        tenant=tenant,
        request=request,
        existing_id=existing_id,
        derived_id=derived_id,
        now=now,
        ttl=ttl,
        rule=rule,
    )
    if not can_queue:
        return after, (booking, None)
    decision = booking.decision
    if decision.tier is not None:
        if not waits_ahead(base, tenant=tenant, decision=decision, priority=priority, now=now):
            return after, (booking, None)
        before = cancel(after, reservation_id=booking.reservation_id)
    elif never_fits(tenant, request) is not None:
        return after, (booking, None)
    else:
        before = after
    entry_id = booking.reservation_id
    attempt = 1
    while entry_id in before.queued:
        attempt += 1
        entry_id = f"{booking.reservation_id}-q{attempt}"
    queued, answer = queue_pod(
        before,
        tenant=tenant,
        amount=request,
        priority=priority,
        entry_id=entry_id,
        now=now,
        ttl=ttl if queue_ttl is None else queue_ttl,
    )
    return queued, (booking, answer)


def _quota_rule(tenant: TenantPolicy) -> TierRule:
    quota = tenant.quota
    return lambda ledger, request: check(quota, ledger, request)


def _recheck_without_stale_holds(
    tenant: TenantPolicy,
    ledger: TenantLedger,
    request: Mapping[str, Quantity],
    *,
    now: float,
    rule: TierRule | None = None,
) -> tuple[TenantLedger, Decision]:
    """The check again, once holds past their TTL are released; the ledger it was made on.

    Only a denial pays for this scan: an admission that fits never looks at the holds.
    """
    fresh, expired = expire(ledger, now=now, only_unbound=True)
    if expired:
        logger.info(
            "tenant %s: %d holds past their TTL released before checking a request",
            tenant.name,
            len(expired),
            extra={"tenant": tenant.name, "holds": len(expired)},
        )
    return fresh, (rule if rule is not None else _quota_rule(tenant))(fresh, request)


@record
class Confirmation:
    """What validation found: allowed in ``tier``, or a denial (``verdict``)."""

    tier: Tier | None
    verdict: Verdict | None = None
    booked_here: bool = False


def _retry(message: str) -> Verdict:
    return Verdict.deny(message, code=_RETRY_CODE, reason=_RETRY_REASON, cause="retry")


def _delta(request: Mapping[str, Quantity], booked: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """``request - booked`` per resource, zero entries left out."""
    delta: dict[str, Quantity] = {}
    for name in request.keys() | booked.keys():
        new = request.get(name)
        old = booked.get(name)
        nanos = (new.nanos if new is not None else 0) - (old.nanos if old is not None else 0)
        if nanos:
            delta[name] = from_nanos(nanos, (new or old or _ZERO).format)
    return delta


def _grown(delta: Mapping[str, Quantity]) -> str:
    """``cpu=1,memory=1Gi``: the parts of ``delta`` that grow (empty: none)."""
    return format_list({name: amount for name, amount in delta.items() if amount.nanos > 0})


def _burst_class_denial(tenant: TenantPolicy, burst_class: str, actual: str | None) -> Verdict:
    return Verdict.deny(
        f"burst pods of tenant {tenant.name} must use priority class {burst_class}, "
        f"not {actual or 'none'}",
        cause="priority_class",
    )


def confirm_for_validate(
    ledger: TenantLedger,
    *,
    tenant: TenantPolicy,
    request: Mapping[str, Quantity],
    reservation_id: str | None,
    pod_uid: str,
    pod_name: str,
    label_tier: str | None,
    priority_class: str | None,
    burst_class: str,
    request_uid: str,
    dry_run: bool,
    now: float,
    ttl: float,
    mutated_tier: Tier | None = None,
    over_share_class: str | None = None,
    cohort_member: CohortMembership | None = None,
) -> tuple[TenantLedger, Confirmation]:
    """Check the final pod against its hold; top up, bind, or book here.

    The hold is bound to ``pod_uid`` so that it can never admit a second pod, and becomes a
    reservation: it now expires ``ttl`` seconds from ``now`` (the reservation TTL), the time
    the stored pod has to be seen. When the pod is denied, its hold is released at once: the
    pod will never be stored.

    A dry-run booked nothing at /mutate, so no hold is found: ``mutated_tier`` is the tier its
    /mutate chose (the caller reads it from the object on dry-runs only), and the pod is judged
    as /mutate judged it, whatever real pods took meanwhile.

    ``over_share_class`` is set for a cohort member: its burst pods may carry it, and their
    bookings never grow here (a borrowed booking is measured against the whole cohort, which
    only /mutate reads). ``cohort_member`` is its terms in the cohort: a pod booked here must
    keep the member's *total* usage within its guarantee, as at /mutate
    (:func:`tenants.cohorts.tier.within_guarantee`); past it, the pod would borrow.

    A pod booked here (its /mutate did not run) takes the id its annotation names, else the one
    derived from ``request_uid`` (:func:`reservation_id_for`, worked out only then).
    """
    burst_classes = (burst_class, over_share_class)
    # The pod's own booking: bound to it already (a retried request), else the one its
    # annotation names if no other pod took it.
    reservation = ledger.reservation_for_pod(pod_uid)
    if reservation is None and reservation_id is not None:
        named = ledger.reservations.get(reservation_id)
        if named is not None and named.pod_uid is None:
            reservation = named
    if reservation is not None:
        # A denial releases the reservation; it is only built on that path, since an allowed
        # pod (the common case) keeps it.
        if label_tier is not None and label_tier != reservation.tier:
            return cancel(ledger, reservation_id=reservation.id), Confirmation(
                None,
                _retry(
                    f"label {TIER_LABEL}={label_tier} does not match the {reservation.tier} "
                    f"reservation {reservation.id} of tenant {tenant.name}; retry"
                ),
            )
        if reservation.tier == "burst" and priority_class not in burst_classes:
            return cancel(ledger, reservation_id=reservation.id), Confirmation(
                None, _burst_class_denial(tenant, burst_class, priority_class)
            )
        delta = _delta(request, reservation.amount)
        if delta and over_share_class is not None and reservation.tier == "burst":
            grown = _grown(delta)
            if grown:
                return cancel(ledger, reservation_id=reservation.id), Confirmation(
                    None,
                    _retry(
                        f"the request of burst pod {pod_name} of tenant {tenant.name} grew "
                        f"after tenantgate's mutating webhook ran ({grown}): a booking on "
                        "the cohort's room cannot grow here; retry"
                    ),
                )
        if (
            delta
            and cohort_member is not None
            and reservation.tier == "guaranteed"
            and not within_guarantee(cohort_member, ledger, delta)
        ):
            return cancel(ledger, reservation_id=reservation.id), Confirmation(
                None,
                _retry(
                    f"the request of pod {pod_name} of tenant {tenant.name} grew after "
                    f"tenantgate's mutating webhook ran ({_grown(delta)}), past the tenant's "
                    "guarantee in its cohort: only the mutating webhook can book borrowed "
                    "room; retry"
                ),
            )
        if delta:
            growth = check_growth(tenant.quota, ledger, tier=reservation.tier, delta=delta)
            if not growth.fits:
                return cancel(ledger, reservation_id=reservation.id), Confirmation(
                    None,
                    _retry(
                        denial_message(tenant.name, growth)
                        + "; the pod's request grew after tenantgate's mutating webhook ran "
                        f"(reservation {reservation.id}); retry"
                    ),
                )
        if delta or reservation.pod_uid != pod_uid:
            ledger = top_up(
                ledger,
                reservation_id=reservation.id,
                amount=request,
                pod_uid=pod_uid,
                expires_at=now + ttl if reservation.pod_uid is None else None,
            )
        return ledger, Confirmation(reservation.tier)

    if dry_run and mutated_tier is not None and label_tier == mutated_tier:
        # This dry-run's /mutate chose the tier and booked nothing: answer as it did, never
        # with a check a real pod may have made fail since.
        if mutated_tier == "burst" and priority_class not in burst_classes:
            return ledger, Confirmation(
                None, _burst_class_denial(tenant, burst_class, priority_class)
            )
        return ledger, Confirmation(mutated_tier)
    decision = check(tenant.quota, ledger, request)
    if decision.tier is None:
        ledger, decision = _recheck_without_stale_holds(tenant, ledger, request, now=now)
    if decision.tier is None:
        return ledger, Confirmation(
            None, Verdict.deny(denial_message(tenant.name, decision), cause="over_quota")
        )
    borrows = (
        decision.tier == "guaranteed"
        and cohort_member is not None
        and not within_guarantee(cohort_member, ledger, request)
    )
    if borrows or decision.tier != "guaranteed" or label_tier not in (None, "guaranteed"):
        if (
            reservation_id is not None
            and reservation_id not in ledger.reservations
            and label_tier is not None
            and not dry_run
        ):
            # /mutate did run and its hold is gone: it expired before this webhook was called.
            message = (
                f"the quota hold {reservation_id} of pod {pod_name} (tenant {tenant.name}) "
                "expired before the validating webhook ran, and the pod does not fit the "
                "guarantee; retry (if this repeats, raise holdTTLSeconds)"
            )
        else:
            message = (
                f"pod {pod_name} of tenant {tenant.name} was not classified by the mutating "
                "webhook (it holds no reservation and does not fit the guarantee); retry"
            )
        return ledger, Confirmation(None, _retry(message))
    reservation_id = (
        reservation_id
        if reservation_id is not None and reservation_id not in ledger.reservations
        else _free_id(ledger, reservation_id_for(request_uid))
    )
    ledger = book(
        ledger,
        reservation_id=reservation_id,
        tier="guaranteed",
        amount=request,
        now=now,
        ttl=ttl,
        pod_uid=pod_uid,
    )
    return ledger, Confirmation("guaranteed", booked_here=True)


# --------------------------------------------------------------------------- pod edits


def apply_container_defaults(
    pod: JSONObject, defaults: Mapping[str, Quantity]
) -> list[tuple[str, dict[str, Quantity]]]:
    """Give every container the default request of each resource it neither requests nor limits.

    Requests only (``tenants.defaults.apply_defaults`` fills limits too): (container name,
    defaults applied) for each container changed.
    """
    return [
        (item.container, item.requests)
        for item in apply_defaults(pod, requests=defaults, limits={})
    ]


_PRIORITY_FIELDS: Final = ("priorityClassName", "priority", "preemptionPolicy")


def _without_default_class(pod: JSONObject, global_default: str | None) -> JSONObject:
    """``pod`` as its author wrote it when it carries the cluster's global default class.

    The Priority admission plugin runs before any webhook and writes the globalDefault class
    (with its priority and preemption policy) into every pod that names none
    (``admitPod`` in ``plugin/pkg/admission/priority/admission.go``): such a pod asked for no
    class, and is planned as one without. A shallow copy; ``pod`` itself is not changed.
    """
    spec = pod.get("spec")
    if (
        global_default is None
        or not isinstance(spec, dict)
        or spec.get("priorityClassName") != global_default
    ):
        return pod
    bare = dict(pod)
    bare["spec"] = {key: value for key, value in spec.items() if key not in _PRIORITY_FIELDS}
    return bare


class _Marks(NamedTuple):
    """What tenantgate's /mutate wrote into a pod's metadata, as /validate reads it."""

    tenant: str | None  # the tenant label
    tier: str | None  # the tier label
    reservation_id: str | None  # the reservation annotation, when it is a well-formed id
    # The tier a dry-run's own /mutate chose. Only a dry-run's /mutate writes it (and /mutate
    # strips it from real requests): a real request never reads it, so forging it gains nothing.
    dry_run_tier: Tier | None


def _read_marks(pod: Mapping[str, Any], *, dry_run: bool) -> _Marks:
    """The pod's :class:`_Marks`, its labels and annotations read once."""
    meta = podview.metadata(pod)
    labels = podview.obj(meta.get("labels"))
    annotations = podview.obj(meta.get("annotations"))
    reservation_id = podview.string(annotations.get(RESERVATION_ANNOTATION))
    if reservation_id is not None and not _RESERVATION_ID_RE.match(reservation_id):
        reservation_id = None
    written = podview.string(annotations.get(DRY_RUN_TIER_ANNOTATION)) if dry_run else None
    dry_run_tier: Tier | None = None
    if written == "guaranteed":
        dry_run_tier = "guaranteed"
    elif written == "burst":
        dry_run_tier = "burst"
    return _Marks(
        podview.string(labels.get(TENANT_LABEL)),
        podview.string(labels.get(TIER_LABEL)),
        reservation_id,
        dry_run_tier,
    )


def _meta_string(pod: Mapping[str, Any], field: str, key: str) -> str | None:
    """``podview.labels(pod).get(key)`` (or annotations) without copying the whole map."""
    return podview.string(podview.obj(podview.metadata(pod).get(field)).get(key))


def _set_managed_metadata(
    pod: JSONObject, *, tenant: str, tier: str, reservation_id: str, dry_run: bool
) -> None:
    # Classifier.plan gave the metadata, labels and annotations dicts their own copies.
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        pod["metadata"] = meta
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = {}
        meta["labels"] = labels
    labels[TENANT_LABEL] = tenant
    labels[TIER_LABEL] = tier
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
        meta["annotations"] = annotations
    annotations[RESERVATION_ANNOTATION] = reservation_id
    # A dry-run's decision travels in the object to its /validate (nothing was booked); a
    # real pod never carries it, whoever wrote it.
    if dry_run:
        annotations[DRY_RUN_TIER_ANNOTATION] = tier
    else:
        annotations.pop(DRY_RUN_TIER_ANNOTATION, None)


def _set_borrowed(pod: JSONObject, cohort: str | None) -> None:
    """Record the cohort a pod borrows from (or that it borrows nothing: a re-invocation may
    have changed its tier)."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return  # _set_managed_metadata ran first: only a pod without metadata lands here
    if cohort is None:
        annotations.pop(BORROWED_ANNOTATION, None)
    else:
        annotations[BORROWED_ANNOTATION] = cohort


def _exact_request(pod: Mapping[str, Any], *, limits: bool) -> Mapping[str, Quantity] | Verdict:
    """The pod's exact request (with its ``limits.*`` usage when the tenant has a limits quota),
    or the 400 denial saying what is wrong with its resources."""
    try:
        amount = pod_usage(pod) if limits else pod_requests(pod)
    except PodResourceError as exc:
        return _bad_request(str(exc))
    return _checked(amount)


def _with_limits(
    pod: Mapping[str, Any], requests: Mapping[str, Quantity]
) -> Mapping[str, Quantity] | Verdict:
    """``requests`` (already known) plus the pod's ``limits.*`` usage, or the 400 denial."""
    try:
        limits = pod_limit_usage(pod)
    except PodResourceError as exc:
        return _bad_request(str(exc))
    return _checked({**requests, **limits} if limits else requests)


def _shape_denial(tenant: TenantPolicy, pod: Mapping[str, Any], pod_name: str) -> Verdict | None:
    """The denial for a pod without a limit its tenant's quota caps, or outside its bounds."""
    capped = limit_keys(tenant.quota.ceiling)
    if capped:
        message = missing_limits(pod, capped, tenant=tenant.name, pod_name=pod_name)
        if message is not None:
            return Verdict.deny(message, cause="container_bounds")
    if tenant.bounds is not None:
        try:
            found = bounds_violations(pod, tenant.bounds, tenant=tenant.name, pod_name=pod_name)
        except PodResourceError as exc:
            return _bad_request(str(exc))
        if found:
            return Verdict.deny("; ".join(found), cause="container_bounds")
    return None


def _held(pod: Mapping[str, Any], *, limits: bool) -> dict[str, Quantity]:
    """What a running pod holds, as its containers' status says (allocated and actual
    resources, ``UseStatusResources``): its requests, and its ``limits.*`` usage when the
    tenant has a limits quota. Raises :class:`PodResourceError`."""
    held = pod_requests(pod, use_status=True)
    if limits:
        held.update(pod_limit_usage(pod, use_status=True))
    return held


def _checked(amount: Mapping[str, Quantity]) -> Mapping[str, Quantity] | Verdict:
    """``amount``, or the 400 denial naming its negative requests."""
    negative = {name: q for name, q in amount.items() if q.nanos < 0}
    if negative:
        return _bad_request(f"invalid pod resources: negative request {format_list(negative)}")
    return amount


def _bad_request(message: str) -> Verdict:
    return Verdict.deny(message, code=400, reason="BadRequest", cause="invalid_request")


def _is_pod(request: AdmissionInput) -> bool:
    return request.kind == "Pod" and request.group == ""


# --------------------------------------------------------------------------- the admitter


@dataclass(frozen=True, slots=True)
class Review:
    """What admission would do with one pod: both webhooks run as a dry-run, nothing booked.

    ``mutated`` is the pod after /mutate (the input itself when it was denied or untouched);
    ``tenant`` is None for a namespace no tenant claims, ``tier`` also for a denied pod.
    """

    tenant: str | None
    tier: str | None
    profile: str | None
    allowed: bool
    code: int
    reason: str
    message: str
    warnings: tuple[str, ...]
    mutated: Mapping[str, Any]


class PolicyAdmitter:
    """The real :class:`tenants.verdicts.Admitter`: classification, tiers and quota.

    ``namespace_labels`` looks up a namespace's labels (for ``namespaceSelector`` tenants); it
    returns None when they are not known. ``namespace_lookup`` then reads the namespace from
    the API server (one created a moment before its pod, not yet seen by the watch); without
    it only explicit namespace lists count.
    """

    def __init__(
        self,
        policy: Policy,
        ledger: LedgerStore,
        *,
        namespace_labels: NamespaceLabels | None = None,
        namespace_lookup: NamespaceLookup | None = None,
        gate_owner: str = DEFAULT_GATE_OWNER,
        sizes: SizeReader | None = None,
        group_members: GroupMembers | None = None,
    ) -> None:
        self._policy = policy
        self._ledger = ledger
        # Checked once: a runtime Protocol check costs tens of µs per admission.
        self._peer_store = ledger if isinstance(ledger, PeerLedgerStore) else None
        self._namespace_labels = namespace_labels
        self._namespace_lookup = namespace_lookup
        self.gate_owner = gate_owner
        self.sizes: SizeReader = sizes if sizes is not None else NoCluster()
        self.group_members = group_members

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def ledger(self) -> LedgerStore:
        return self._ledger

    def replace_policy(self, policy: Policy) -> None:
        """Swap in a newly loaded policy; requests already running keep the one they read."""
        self._policy = policy

    # -- shared --------------------------------------------------------------------------

    def _tenant(self, policy: Policy, namespace: str) -> TenantPolicy | None:
        tenant = policy.by_namespace.get(namespace)
        if tenant is not None or not policy.selector_tenants or self._namespace_labels is None:
            return tenant
        return policy.tenant_for(namespace, self._namespace_labels(namespace))

    async def _tenant_of(self, policy: Policy, namespace: str) -> TenantPolicy | None:
        """:meth:`_tenant`, reading the namespace when the watch has not shown it yet; raises
        :class:`NamespaceUnreadable` when that read fails."""
        tenant = self._tenant(policy, namespace)
        if (
            tenant is not None
            or self._namespace_lookup is None
            or not policy.selector_tenants
            or self._namespace_labels is None
            or self._namespace_labels(namespace) is not None
        ):
            return tenant
        return policy.tenant_for(namespace, await self._namespace_lookup(namespace))

    @staticmethod
    def _unknown_namespace(namespace: str, error: NamespaceUnreadable) -> Verdict:
        return _retry(
            f'cannot tell which tenant owns namespace "{namespace}": it is not known to '
            f"tenantgate yet and reading it failed ({error.message}); retry"
        )

    @staticmethod
    def _unclaimed(policy: Policy, namespace: str) -> Verdict:
        if policy.unclaimed == "deny":
            return Verdict.deny(
                f'namespace "{namespace}" is not claimed by any tenant; '
                "ask the platform team to add it to a tenant",
                cause="unclaimed_namespace",
            )
        return Verdict.allow()

    @staticmethod
    def _class_value(policy: Policy, name: str, pod_spec: Mapping[str, Any]) -> int | None:
        # The Priority admission plugin has resolved the class the pod asked for before any
        # webhook runs, so spec.priority is the cluster's value for it.
        priority = pod_spec.get("priority")
        if isinstance(priority, int) and not isinstance(priority, bool):
            return priority
        known = policy.priority_classes.get(name)
        if known is not None:
            return known.value
        return BUILTIN_PRIORITY_CLASSES.get(name)

    # -- /mutate -------------------------------------------------------------------------

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        pod = request.object
        if (
            not _is_pod(request)
            or request.operation != "CREATE"
            or request.sub_resource
            or not isinstance(pod, dict)
        ):
            return Verdict.allow()
        policy = self._policy
        namespace = request.namespace or podview.namespace(pod) or ""
        try:
            tenant = await self._tenant_of(policy, namespace)
        except NamespaceUnreadable as exc:
            return self._unknown_namespace(namespace, exc)
        if tenant is None:
            return self._unclaimed(policy, namespace)
        pod = _without_default_class(pod, policy.global_default)

        try:
            plan = tenant.classifier.plan(
                pod, namespace=namespace, allowed_profiles=tenant.allowed_profiles, notes=False
            )
        except PodResourceError as exc:
            return _bad_request(str(exc))
        classification = plan.classification
        if classification.problem is not None:
            return Verdict.deny(
                f"tenant {tenant.name}: {classification.problem}", cause="profile_not_allowed"
            )
        mutated = plan.mutated
        warnings = [f"profile {classification.profile}: {classification.reason}"]

        applied = apply_defaults(
            mutated, requests=tenant.container_defaults, limits=tenant.container_default_limits
        )
        if applied:
            warnings.append(describe_filled(tenant.name, applied))

        # The plan never changes what a pod requests, so the rules' figure holds unless
        # container defaults were applied.
        known = classification.requests
        limits = tenant.quota.has_limits
        if applied or known is None:
            amount = _exact_request(mutated, limits=limits)
        else:
            amount = _with_limits(mutated, known) if limits else _checked(known)
        if isinstance(amount, Verdict):
            return amount
        if tenant.bounds is not None or limits:
            denial = _shape_denial(tenant, mutated, _pod_name(request, pod, generated=True))
            if denial is not None:
                return denial

        original_spec = podview.spec(pod)
        asked = podview.string(original_spec.get("priorityClassName")) or None
        if asked in policy.burst_classes:
            asked = None  # only tenantgate gives burst classes; a re-invocation sees them here
        if asked is not None and asked not in tenant.allowed_classes:
            guaranteed_value = policy.priority_classes[tenant.guaranteed_class].value
            value = self._class_value(policy, asked, original_spec)
            if value is None or value > guaranteed_value:
                return Verdict.deny(self._class_denial(tenant, asked), cause="priority_class")
            warnings.append(
                f"priority class {asked} is not allowed for tenant {tenant.name}; "
                f"using {tenant.guaranteed_class}"
            )
            asked = None

        existing = _meta_string(pod, "annotations", RESERVATION_ANNOTATION)
        if existing is not None and not _RESERVATION_ID_RE.match(existing):
            existing = None
        grouped = await self._group_step(
            request,
            tenant,
            pod,
            mutated,
            amount,
            asked,
            existing,
            warnings,
            classification.profile,
            now=now,
        )
        if grouped is not None:
            return grouped
        queue = tenant.queue
        node_name = podview.string(original_spec.get("nodeName"))
        # A pod bound to a node cannot carry a scheduling gate (ValidatePodCreate in
        # pkg/apis/core/validation/validation.go): it is never queued.
        can_queue = queue is not None and not node_name
        queue_class = self._queue_class(policy, tenant, asked, mutated) if can_queue else ""
        priority = policy.priority_classes[queue_class].value if can_queue else 0
        # LedgerUnavailable propagates: the call fails and the failurePolicy decides.
        booking, answer = await self._book(
            policy,
            tenant,
            lambda ledger, rule: book_or_queue(
                ledger,
                tenant=tenant,
                request=amount,
                existing_id=existing,
                derived_id=reservation_id_for(request.uid),
                now=now,
                ttl=policy.hold_ttl,
                queue_ttl=policy.reservation_ttl,
                priority=priority,
                can_queue=can_queue,
                rule=rule,
            ),
            commit=not request.dry_run,
        )
        if answer is not None:
            return self._queued(
                tenant,
                booking,
                answer,
                mutated,
                queue_class,
                warnings,
                classification.profile,
                dry_run=request.dry_run,
            )
        tier = booking.decision.tier
        if tier is None:
            message = denial_message(tenant.name, booking.decision)
            if queue is not None:
                reason = (
                    "a pod with spec.nodeName cannot wait behind a scheduling gate"
                    if node_name
                    else never_fits(tenant, amount)
                )
                if reason is not None:
                    message += f"; {reason}"
            return Verdict.deny(message, cause="over_quota")
        # A re-invoked webhook, or a user, may have gated the pod: it is admitted, so it runs.
        remove_gate(mutated)

        borrow = booking.decision.borrow
        if tier == "burst":
            over_share = borrow is not None and borrow.over_share
            class_name = policy.over_share_class if over_share else policy.burst_class
            if asked is not None:
                warnings.append(
                    f"priority class {asked} replaced by {class_name}: "
                    "the pod runs on burst capacity"
                )
        else:
            class_name = self._guaranteed_class(policy, tenant, asked, mutated)
        set_priority_class(mutated, name=class_name, spec=policy.priority_classes[class_name])
        _set_managed_metadata(
            mutated,
            tenant=tenant.name,
            tier=tier,
            reservation_id=booking.reservation_id,
            dry_run=request.dry_run,
        )
        borrowed_from = booking.decision.borrowed_from
        _set_borrowed(mutated, borrowed_from)
        if borrowed_from is not None and borrow is not None:
            warnings.append(borrow_warning(tenant.name, borrow))
        else:
            member = policy.cohorts.members.get(tenant.name)
            warnings.extend(
                self._tier_warnings(
                    tenant,
                    booking,
                    amount,
                    class_name,
                    borrowing=member is not None and member.ceiling is None,
                )
            )
        return Verdict(
            allowed=True,
            patched=mutated,
            warnings=tuple(warnings),
            audit_annotations={
                "tenant": tenant.name,
                "tier": tier,
                "profile": classification.profile,
                "classified-by": classification.classified_by,
                "reservation": booking.reservation_id,
            },
        )

    async def _book(
        self,
        policy: Policy,
        tenant: TenantPolicy,
        change: Callable[[TenantLedger, TierRule | None], tuple[TenantLedger, T]],
        *,
        commit: bool,
    ) -> T:
        """Run a booking ``change`` in one transaction: on the tenant's ledger alone, or, for a
        cohort member, with its cohort tree's ledgers read in the same atomic step and the
        member's borrowing rule."""
        tree = policy.cohorts
        if tenant.name not in tree.members:
            return await self._ledger.transact(
                tenant.name, lambda ledger: change(ledger, None), commit=commit
            )
        store = self._peer_store
        if store is None:
            # compile_policy refuses cohorts with such a store; never book without the peers.
            raise LedgerUnavailable(
                f"tenant {tenant.name} is in a cohort and this ledger backend cannot read its "
                "cohort's ledgers in one step"
            )
        return await store.transact_with_peers(
            tenant.name,
            tree.tree_member_set(tenant.name),
            lambda ledger, peers: change(
                ledger, cohort_rule(tree, tenant.name, tenant.quota, peers)
            ),
            commit=commit,
            cohort=tree.root_name(tenant.name),
        )

    @staticmethod
    def _guaranteed_class(
        policy: Policy, tenant: TenantPolicy, asked: str | None, mutated: Mapping[str, Any]
    ) -> str:
        """The class of a guaranteed-tier pod: the one it asked for, else its profile's, else
        the tenant's guaranteed class."""
        planned = podview.string(podview.spec(mutated).get("priorityClassName"))
        if asked is not None:
            return asked
        if planned and planned not in policy.burst_classes and planned in tenant.allowed_classes:
            return planned
        return tenant.guaranteed_class

    def _queue_class(
        self, policy: Policy, tenant: TenantPolicy, asked: str | None, mutated: Mapping[str, Any]
    ) -> str:
        """The class a queued pod gets at creation: its queue tier's (it cannot change later)."""
        queue = tenant.queue
        if queue is not None and queue.tier == "burst":
            return policy.burst_class
        return self._guaranteed_class(policy, tenant, asked, mutated)

    def _queued(
        self,
        tenant: TenantPolicy,
        booking: Booking,
        answer: QueueAnswer,
        mutated: JSONObject,
        class_name: str,
        warnings: list[str],
        profile: str,
        *,
        dry_run: bool,
    ) -> Verdict:
        if answer.full:
            base = (
                denial_message(tenant.name, booking.decision)
                if booking.decision.tier is None
                else f"pods of tenant {tenant.name} wait for its room"
            )
            return Verdict.deny(full_message(tenant, base, answer.pending), cause="queue_full")
        policy = self._policy
        set_priority_class(mutated, name=class_name, spec=policy.priority_classes[class_name])
        add_gate(mutated)
        _set_managed_metadata(
            mutated,
            tenant=tenant.name,
            tier=QUEUED_TIER,
            reservation_id=answer.entry_id,
            dry_run=dry_run,
        )
        warnings.append(queued_warning(tenant, answer))
        return self._queued_verdict(
            mutated,
            warnings,
            tenant=tenant,
            profile=profile,
            reservation_id=answer.entry_id,
            audit={"position": str(answer.position)},
        )

    @staticmethod
    def _queued_verdict(
        mutated: JSONObject,
        warnings: Sequence[str],
        *,
        tenant: TenantPolicy,
        profile: str,
        reservation_id: str,
        audit: Mapping[str, str],
    ) -> Verdict:
        """Admit ``mutated`` gated in ``tenant``'s queue; ``audit`` adds to the annotations."""
        return Verdict(
            allowed=True,
            patched=mutated,
            warnings=tuple(warnings),
            audit_annotations={
                "tenant": tenant.name,
                "tier": QUEUED_TIER,
                "profile": profile,
                "reservation": reservation_id,
                **audit,
            },
        )

    async def _group_step(
        self,
        request: AdmissionInput,
        tenant: TenantPolicy,
        pod: Mapping[str, Any],
        mutated: JSONObject,
        amount: Mapping[str, Quantity],
        asked: str | None,
        existing: str | None,
        warnings: list[str],
        profile: str,
        *,
        now: float,
    ) -> Verdict | None:
        """The pod group step of /mutate: None for a pod of no group; else the member's
        verdict (gated, or denied)."""
        policy = self._policy
        try:
            claim = claim_group(pod, policy.group_rules(tenant, profile))
        except GroupClaimError as exc:
            return Verdict.deny(f"tenant {tenant.name}: {exc}", cause="invalid_request")
        if claim is None:
            return None
        on_guarantee = policy.group_policy(tenant, profile).tier == "guaranteed"
        return await self._admit_member(
            request,
            tenant,
            claim,
            mutated,
            amount,
            class_name=(
                self._guaranteed_class(policy, tenant, asked, mutated)
                if on_guarantee
                else policy.burst_class
            ),
            existing=existing,
            warnings=warnings,
            profile=profile,
            now=now,
        )

    async def _admit_member(
        self,
        request: AdmissionInput,
        tenant: TenantPolicy,
        claim: GroupClaim,
        mutated: JSONObject,
        amount: Mapping[str, Quantity],
        *,
        class_name: str,
        existing: str | None,
        warnings: list[str],
        profile: str,
        now: float,
    ) -> Verdict:
        """A pod group's member: gated until its whole group exists and fits (see
        :mod:`tenants.groups.admission`), or denied when the group can never fit."""
        policy = self._policy
        groups = policy.group_policy(tenant, profile)
        if podview.string(podview.spec(mutated).get("nodeName")):
            return Verdict.deny(
                f"pod group {claim.name}: a pod with spec.nodeName cannot wait behind a "
                "scheduling gate for its group",
                cause="over_quota",
            )
        size, missing = claim.size, ""
        if size is None and claim.size_from is not None:
            read = await self.sizes.read(claim.size_from)
            size, missing = read.size, read.missing
        namespace = request.namespace or podview.namespace(mutated) or ""
        membership = Membership(namespace, claim.key, size)
        seen = (
            self.group_members(tenant.name, membership.id) if self.group_members is not None else ()
        )
        total = known_total(amount, seen, size) if size is not None else dict(amount)
        if size is not None:
            reason = never_fits_group(
                tenant, tier=groups.tier, name=claim.name, size=size, total=total
            )
            if reason is not None:
                return Verdict.deny(reason, cause="over_quota")
        waiting = tenant if tenant.groups == groups else replace(tenant, groups=groups)
        answer = await self._ledger.transact(
            tenant.name,
            lambda ledger: queue_member(
                ledger,
                tenant=waiting,
                amount=amount,
                resources=sorted(total),
                priority=policy.priority_classes[class_name].value,
                existing_id=existing,
                derived_id=reservation_id_for(request.uid),
                now=now,
                ttl=policy.reservation_ttl,
            ),
            commit=not request.dry_run,
        )
        queued = answer.queue
        if queued.full:
            return Verdict.deny(
                full_message(
                    waiting, f"pod group {claim.name} waits for all its members", queued.pending
                ),
                cause="queue_full",
            )
        set_priority_class(mutated, name=class_name, spec=policy.priority_classes[class_name])
        add_gate(mutated)
        _set_managed_metadata(
            mutated,
            tenant=tenant.name,
            tier=QUEUED_TIER,
            reservation_id=queued.entry_id,
            dry_run=request.dry_run,
        )
        write_membership(mutated, key=claim.key, size=size)
        if size is None:
            warnings.append(unknown_size_warning(claim.name, missing))
        else:
            warnings.append(
                waiting_warning(
                    tenant=tenant.name,
                    name=claim.name,
                    created=len(seen) + 1,
                    size=size,
                    total=total,
                    free=answer.free,
                )
            )
        return self._queued_verdict(
            mutated,
            warnings,
            tenant=tenant,
            profile=profile,
            reservation_id=queued.entry_id,
            audit={"pod-group": claim.key},
        )

    @staticmethod
    def _class_denial(tenant: TenantPolicy, name: str) -> str:
        allowed = ", ".join(sorted(tenant.allowed_classes))
        return f"priority class {name} is not allowed for tenant {tenant.name} (allowed: {allowed})"

    @staticmethod
    def _tier_warnings(
        tenant: TenantPolicy,
        booking: Booking,
        amount: Mapping[str, Quantity],
        class_name: str,
        *,
        borrowing: bool = False,
    ) -> list[str]:
        requested = [name for name, q in amount.items() if q.nanos > 0]
        if booking.decision.tier == "burst":
            room = headroom(tenant.quota, booking.ledger, resources=requested)
            left = format_list(room.left) or "none"
            return [
                f"tenant {tenant.name} is above its guarantee: admitted on burst capacity "
                f"(burst left {left}); priority class {class_name}, may be preempted"
            ]
        # A guaranteed pod's warning names only what is over the ceiling, if anything.
        over = over_ceiling(tenant.quota, booking.ledger, resources=requested)
        if over:
            if borrowing:
                return [
                    f"tenant {tenant.name}'s guaranteed pods take back room its own burst "
                    f"pods use ({format_over(over)}): those are among the first to be "
                    "preempted"
                ]
            return [
                f"tenant {tenant.name} is above its burst ceiling ({format_over(over)}): "
                "its burst pods are the first to be preempted"
            ]
        return []

    # -- offline -------------------------------------------------------------------------

    async def review(
        self, pod: Mapping[str, Any], *, namespace: str, now: float, uid: str = "review"
    ) -> Review:
        """Run /mutate then /validate on ``pod`` as a dry-run (``tenantgate review``, CI).

        With a ledger loaded from a usage snapshot this answers "would this pod still fit at
        today's usage?"; the ledger is never changed.
        """
        request = AdmissionInput(
            uid=uid,
            operation="CREATE",
            namespace=namespace,
            name="",
            object=dict(pod),
            dry_run=True,
        )
        mutated = await self.mutate(request, now=now)
        final: Mapping[str, Any] = mutated.patched if mutated.patched is not None else pod
        verdict = mutated
        warnings = mutated.warnings
        if mutated.allowed:
            verdict = await self.validate(
                AdmissionInput(
                    uid=uid,
                    operation="CREATE",
                    namespace=namespace,
                    name=podview.name(final),
                    object=dict(final),
                    dry_run=True,
                ),
                now=now,
            )
            warnings += verdict.warnings
        labels = podview.labels(final) if mutated.patched is not None else {}
        profile = podview.annotations(final).get(PROFILE_LABEL) if mutated.allowed else None
        try:
            tenant = await self._tenant_of(self._policy, namespace)
        except NamespaceUnreadable:
            tenant = None  # the verdict above says why
        return Review(
            tenant=tenant.name if tenant is not None else None,
            tier=labels.get(TIER_LABEL) if verdict.allowed else None,
            profile=profile,
            allowed=verdict.allowed,
            code=verdict.code,
            reason=verdict.reason,
            message=verdict.message,
            warnings=warnings,
            mutated=final,
        )

    # -- /validate -----------------------------------------------------------------------

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        pod = request.object
        if not _is_pod(request) or not isinstance(pod, dict):
            return Verdict.allow()
        try:
            if request.operation == "CREATE" and not request.sub_resource:
                return await self._validate_create(request, pod, now=now)
            if request.operation == "UPDATE":
                if request.sub_resource == "resize":
                    return await self._validate_resize(request, pod)
                if not request.sub_resource:
                    return self._validate_update(request, pod, now=now)
        except LedgerUnavailable as exc:
            # Fail closed: without the ledger nothing shows that the pod fits its quota.
            logger.warning("validate: %s", exc.message)
            return Verdict.deny(
                exc.message, code=exc.code, reason=exc.reason, cause="ledger_unavailable"
            )
        return Verdict.allow()

    async def _validate_create(
        self, request: AdmissionInput, pod: JSONObject, *, now: float
    ) -> Verdict:
        policy = self._policy
        namespace = request.namespace or podview.namespace(pod) or ""
        try:
            tenant = await self._tenant_of(policy, namespace)
        except NamespaceUnreadable as exc:
            return self._unknown_namespace(namespace, exc)
        if tenant is None:
            return self._unclaimed(policy, namespace)
        marks = _read_marks(pod, dry_run=request.dry_run)
        if marks.tenant is not None and marks.tenant != tenant.name:
            return _retry(
                f"label {TENANT_LABEL}={marks.tenant} does not match tenant {tenant.name} "
                f"of namespace {namespace}; retry"
            )
        amount = _exact_request(pod, limits=tenant.quota.has_limits)
        if isinstance(amount, Verdict):
            return amount
        spec = podview.spec(pod)
        class_name = podview.string(spec.get("priorityClassName")) or None
        if class_name == policy.global_default and class_name not in tenant.allowed_classes:
            # The Priority plugin's default, written into a pod that named no class (and that
            # /mutate did not see): the pod asked for nothing.
            class_name = None
        if class_name is not None:
            if class_name not in tenant.allowed_classes:
                return Verdict.deny(self._class_denial(tenant, class_name), cause="priority_class")
            known = policy.priority_classes[class_name]
            priority = spec.get("priority")
            if isinstance(priority, int) and priority > known.value:
                return Verdict.deny(
                    f"spec.priority {priority} is above the value {known.value} of priority "
                    f"class {class_name}",
                    cause="priority_class",
                )
        if lacks_defaults(
            spec, requests=tenant.container_defaults, limits=tenant.container_default_limits
        ):
            missing = "requests or limits" if tenant.container_default_limits else "requests"
            return _retry(
                f"pod {_pod_name(request, pod)} of tenant {tenant.name} has containers without "
                f"{missing} and was not mutated by tenantgate; retry"
            )
        if tenant.bounds is not None or tenant.quota.has_limits:
            denial = _shape_denial(tenant, pod, _pod_name(request, pod))
            if denial is not None:
                return denial

        reservation_id, label_tier = marks.reservation_id, marks.tier
        pod_uid = podview.uid(pod) or f"request-{request.uid}"
        member = _group_member(pod, policy.group_rules(tenant, None))
        if isinstance(member, Verdict):
            return member
        gated = has_gate(spec)
        if member is not None:
            if not gated:
                # Only /mutate gates a pod; an ungated member would run before its group is
                # booked.
                return _retry(
                    f"pod {_pod_name(request, pod)} is a member of pod group {member}: it "
                    f"waits behind the scheduling gate {QUOTA_GATE} until its whole group "
                    "fits, and tenantgate's mutating webhook did not gate it; retry"
                )
            tenant = _group_waiting(tenant)
        if gated or label_tier == QUEUED_TIER:
            return await self._validate_queued_create(
                request,
                tenant,
                amount,
                gated=gated,
                entry_id=reservation_id,
                pod_uid=pod_uid,
                class_name=class_name,
                now=now,
            )
        confirmation = await self._ledger.transact(
            tenant.name,
            lambda ledger: confirm_for_validate(
                ledger,
                tenant=tenant,
                request=amount,
                reservation_id=reservation_id,
                pod_uid=pod_uid,
                pod_name=_pod_name(request, pod),
                label_tier=label_tier,
                priority_class=class_name,
                burst_class=policy.burst_class,
                over_share_class=policy.over_share_class_for(tenant.name),
                cohort_member=policy.cohorts.members.get(tenant.name),
                request_uid=request.uid,
                dry_run=request.dry_run,
                now=now,
                ttl=policy.reservation_ttl,
                mutated_tier=marks.dry_run_tier,
            ),
            commit=not request.dry_run,
        )
        verdict = confirmation.verdict
        if verdict is not None:
            if tenant.queue is not None and verdict.cause == "over_quota" and label_tier is None:
                # Over quota in a queueing tenant, and /mutate did not run (it fails open):
                # only /mutate can gate the pod, so ask for the create again.
                return _retry(
                    f"{verdict.message}; tenantgate's mutating webhook did not run for pod "
                    f"{_pod_name(request, pod)}, so it could not be queued; retry"
                )
            return verdict
        warnings: tuple[str, ...] = ()
        if confirmation.booked_here:
            warnings = (
                f"quota of tenant {tenant.name} booked by the validating webhook: "
                "the mutating webhook did not run for this pod",
            )
        return Verdict(
            allowed=True,
            warnings=warnings,
            audit_annotations={"tenant": tenant.name, "tier": confirmation.tier or ""},
        )

    async def _validate_queued_create(
        self,
        request: AdmissionInput,
        tenant: TenantPolicy,
        amount: Mapping[str, Quantity],
        *,
        gated: bool,
        entry_id: str | None,
        pod_uid: str,
        class_name: str | None,
        now: float,
    ) -> Verdict:
        """A gated pod, or one queued by /mutate that lost the gate on the way."""
        policy = self._policy
        queue = tenant.queue
        if (
            gated
            and queue is not None
            and queue.tier == "burst"
            and class_name != policy.burst_class
        ):
            return _burst_class_denial(tenant, policy.burst_class, class_name)
        if gated:
            priority = policy.priority_classes[class_name].value if class_name else 0
            result = await self._ledger.transact(
                tenant.name,
                lambda ledger: confirm_gated_create(
                    ledger,
                    tenant=tenant,
                    request=amount,
                    entry_id=entry_id,
                    pod_uid=pod_uid,
                    priority=priority,
                    now=now,
                    ttl=policy.reservation_ttl,
                ),
                commit=not request.dry_run,
            )
        else:
            result = await self._ledger.transact(
                tenant.name,
                lambda ledger: book_ungated_create(
                    ledger,
                    tenant=tenant,
                    request=amount,
                    entry_id=entry_id,
                    pod_uid=pod_uid,
                    reservation_id=reservation_id_for(request.uid),
                    now=now,
                    ttl=policy.reservation_ttl,
                ),
                commit=not request.dry_run,
            )
        if result.outcome == "denied":
            return Verdict.deny(
                result.message, code=result.code, reason=result.reason, cause=result.cause
            )
        return Verdict(
            allowed=True,
            warnings=(result.message,) if result.message else (),
            audit_annotations={"tenant": tenant.name, "tier": result.tier or QUEUED_TIER},
        )

    def _validate_update(self, request: AdmissionInput, pod: JSONObject, *, now: float) -> Verdict:
        old = request.old_object
        if not isinstance(old, dict):
            return Verdict.allow()
        old_labels, new_labels = podview.labels(old), podview.labels(pod)
        old_gated = has_gate(podview.spec(old))
        releasing = old_gated and not has_gate(podview.spec(pod))
        if releasing and request.username != self.gate_owner:
            return Verdict.deny(
                self._gate_denial(request, pod, old, now=now), cause="managed_metadata"
            )
        for key in _MANAGED_LABELS:
            before, after = old_labels.get(key), new_labels.get(key)
            if before == after:
                continue
            if key == TIER_LABEL and releasing and before == QUEUED_TIER and after in TIERS:
                continue  # tenantgate releasing the pod onto its tier
            return Verdict.deny(
                f"label {key} is managed by tenantgate and cannot be changed",
                cause="managed_metadata",
            )
        old_id = podview.annotations(old).get(RESERVATION_ANNOTATION)
        if old_id != podview.annotations(pod).get(RESERVATION_ANNOTATION):
            return Verdict.deny(
                f"annotation {RESERVATION_ANNOTATION} is managed by tenantgate "
                "and cannot be changed",
                cause="managed_metadata",
            )
        return Verdict.allow()

    def _gate_denial(
        self, request: AdmissionInput, pod: JSONObject, old: JSONObject, *, now: float
    ) -> str:
        name = _pod_name(request, pod)
        namespace = request.namespace or podview.namespace(pod) or ""
        tenant = self._tenant(self._policy, namespace)
        if tenant is None:
            return f"pod {name}: {owner_rule(self.gate_owner)}"
        entry_id = podview.annotations(old).get(RESERVATION_ANNOTATION)
        return gate_removal_denial(
            self._ledger.get(tenant.name),
            tenant=tenant,
            entry_id=entry_id,
            pod_uid=podview.uid(old) or "",
            pod_name=name,
            owner=self.gate_owner,
            now=now,
        )

    async def _validate_resize(self, request: AdmissionInput, pod: JSONObject) -> Verdict:
        old = request.old_object
        if not isinstance(old, dict):
            return Verdict.allow()
        policy = self._policy
        namespace = request.namespace or podview.namespace(pod) or ""
        tenant = self._tenant(policy, namespace)
        if tenant is None:
            return self._unclaimed(policy, namespace)
        # What the pod holds before and after: an in-place resize is charged as the quota
        # evaluator charges it, from the spec and the containers' allocated and actual
        # resources (UseStatusResources), so a shrink frees nothing until the kubelet applies
        # it, and growth is charged only above what is already held.
        limits = tenant.quota.has_limits
        try:
            new_amount = _held(pod, limits=limits)
            old_amount = _held(old, limits=limits)
        except PodResourceError as exc:
            return _bad_request(str(exc))
        checked = _checked(new_amount)
        if isinstance(checked, Verdict):
            return checked
        delta = _delta(new_amount, old_amount)
        if not delta:
            return Verdict.allow()
        label_tier = podview.labels(old).get(TIER_LABEL)
        pod_uid = podview.uid(pod) or podview.uid(old) or ""
        member = policy.cohorts.members.get(tenant.name)

        def change(ledger: TenantLedger) -> tuple[TenantLedger, Verdict]:
            charge = ledger.charges.get(pod_uid)
            reservation = ledger.reservation_for_pod(pod_uid) if charge is None else None
            tier: Tier = (
                charge.tier
                if charge is not None
                else reservation.tier
                if reservation is not None
                else "burst"
                if label_tier == "burst"
                else "guaranteed"
            )
            grown = _grown(delta)
            if member is not None and tier == "burst" and grown:
                return ledger, Verdict.deny(
                    f"tenant {tenant.name}: a burst pod of a cohort member cannot grow in "
                    f"place ({grown}): its room is measured against the whole cohort; "
                    "recreate the pod with the new request",
                    cause="over_quota",
                )
            if member is not None and grown and not within_guarantee(member, ledger, delta):
                return ledger, Verdict.deny(
                    f"tenant {tenant.name}: the pod cannot grow in place ({grown}): it would "
                    "take the tenant past its guarantee, and borrowed room is measured "
                    "against the whole cohort; recreate the pod with the new request",
                    cause="over_quota",
                )
            growth = check_growth(tenant.quota, ledger, tier=tier, delta=delta)
            if not growth.fits:
                return ledger, Verdict.deny(denial_message(tenant.name, growth), cause="over_quota")
            resized, known = resize(ledger, pod_uid=pod_uid, delta=delta)
            if not known:
                logger.debug("resize of a pod the ledger does not track", extra={"pod": pod_uid})
            return resized, Verdict.allow()

        return await self._ledger.transact(tenant.name, change, commit=not request.dry_run)


# tenant -> the tenant with its groups' queue, built once per compiled tenant: (tenant kept
# alive so that its id is never reused while cached, its copy).
_GROUP_WAITING: dict[int, tuple[TenantPolicy, TenantPolicy]] = {}


def _group_waiting(tenant: TenantPolicy) -> TenantPolicy:
    """``tenant`` with the queue its pod groups wait in (see ``TenantPolicy.group_queue``)."""
    cached = _GROUP_WAITING.get(id(tenant))
    if cached is not None and cached[0] is tenant:
        return cached[1]
    waiting = replace(tenant, queue=tenant.group_queue())
    if len(_GROUP_WAITING) >= 4096:
        _GROUP_WAITING.clear()
    _GROUP_WAITING[id(tenant)] = (tenant, waiting)
    return waiting


def _group_member(pod: Mapping[str, Any], rules: Sequence[GroupRule]) -> str | Verdict | None:
    """The name of the pod group ``pod`` belongs to (as /mutate recorded it, else from its
    labels and the config's ``podGroup`` rules), None for a pod of no group, or the 400 denial
    of a malformed group label."""
    recorded = read_membership(pod)
    if recorded is not None:
        return recorded.name
    try:
        claim = claim_group(pod, rules)
    except GroupClaimError as exc:
        return _bad_request(str(exc))
    return claim.name if claim is not None else None


def _pod_name(request: AdmissionInput, pod: Mapping[str, Any], *, generated: bool = False) -> str:
    """``namespace/name``; ``generated``: a pod not named yet goes by its ``generateName``
    (``team-a/web-7d9f8c-``), as /mutate sees a Deployment's pods."""
    name = request.name or podview.name(pod)
    if not name and generated:
        name = podview.string(podview.metadata(pod).get("generateName")) or ""
    namespace = request.namespace or podview.namespace(pod) or ""
    return f"{namespace}/{name}" if name else namespace


__all__ = [
    "DEFAULT_GATE_OWNER",
    "Booking",
    "Confirmation",
    "NamespaceLabels",
    "PolicyAdmitter",
    "Review",
    "apply_container_defaults",
    "book_for_mutate",
    "book_or_queue",
    "confirm_for_validate",
    "reservation_id_for",
]
