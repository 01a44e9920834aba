"""Releasing queued pods for real: book, one guarded PATCH, events, backoff and metrics.

:class:`Releaser` listens to the controller's queues (:class:`~tenants.queue.book.QueueBook`).
When a tenant's room may have freed it plans with :func:`tenants.queue.release.plan_release`
(for the members of a cohort tree, all their queues at once, lowest share first:
:func:`tenants.cohorts.release.plan_cohort_release`) and, for each pod, in order:

1. books the pod's request through the ledger store's ``transact``, the path admission takes
   (a compare-and-swap on the TenantLedger with several replicas): the booking is re-checked
   against the ledger being written, so a release never goes past the room;
2. sends one strategic-merge PATCH that deletes only ``tenantgate.io/quota`` from
   ``spec.schedulingGates`` and sets the tier label, with the pod's ``resourceVersion`` as a
   precondition, so it cannot clobber a concurrent change (409 instead);
3. on failure cancels the booking and puts the pod's entry back in line, then retries it after
   a per-pod exponential backoff; after ``max_failures`` the pod is reported and skipped until
   it changes.

Releases are paced by a token bucket. ``Queued`` and ``Released`` events go to the pod (best
effort, off the event loop). A released pod the scheduler still finds no node for after
``unschedulable_after`` seconds is reported: a warning event, a metric and ``/status``.

Only the lease holder runs this (it alone watches pods); without a lease, the only replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import orjson
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from tenants.cohorts.release import MemberQueue, book_member_release, plan_cohort_release
from tenants.config import BORROWED_ANNOTATION, QUOTA_GATE, TIER_LABEL
from tenants.controller import LedgerController
from tenants.kube.errors import KubeConflict, KubeError, KubeForbidden, KubeNotFound, wrap
from tenants.kube.groupreleaser import GroupReleaser
from tenants.kube.responses import drain
from tenants.ledger import LedgerStore, LedgerUnavailable, PeerLedgerStore, Tier
from tenants.queue.admission import has_gate
from tenants.queue.gate import OWNER_RULE_PREFIX
from tenants.queue.line import QueuedPod
from tenants.queue.release import (
    PaceSettings,
    ReleaseBooking,
    ReleasePace,
    book_release,
    plan_release,
    undo_release,
)
from tenants.recent import RecentDecisions

logger = logging.getLogger(__name__)

COMPONENT: Final = "tenantgate"
REQUEST_TIMEOUT: Final = (5.0, 10.0)
# tenantgate_queue_wait_seconds: exponential buckets from 0.1 s (0.1 x 2^i, up to ~55 min).
WAIT_BUCKETS: Final = tuple(0.1 * 2**i for i in range(16))
CHECK_SECONDS: Final = 5.0
# A booking the stored ledgers refuse although the view showed room: the view is behind (a
# cohort booking not settled yet, a hold another replica took). What brings the two together
# may free no room this replica sees (a pending entry expiring, a settle), so the tenant is
# looked at again after 0.25 s, doubling to 30 s while the refusals go on (a refusal more than
# 30 s after the last one starts again at 0.25 s).
RECHECK_FIRST_SECONDS: Final = 0.25
RECHECK_MAX_SECONDS: Final = 30.0


@dataclass(frozen=True, slots=True)
class PodEvent:
    """A Kubernetes Event about one pod (``kubectl describe pod`` shows it)."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    type: str = "Normal"


class PodClient(Protocol):
    """Blocking calls on pods (run in worker threads); failures are :class:`KubeError`."""

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None: ...

    def gated(self, pod: QueuedPod) -> bool | None: ...

    def record(self, event: PodEvent, *, now: float) -> None: ...


def ungate_patch(pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> dict[str, Any]:
    """The strategic-merge patch that releases ``pod``: delete only tenantgate's gate (the
    list merges on ``name``), set the tier label, record the cohort the pod borrows from (a
    null deletes the annotation, as admission drops it from a pod within its guarantee), and
    fail (409) if the pod changed since ``resourceVersion``."""
    return {
        "metadata": {
            "resourceVersion": pod.resource_version,
            "labels": {TIER_LABEL: tier},
            "annotations": {BORROWED_ANNOTATION: borrowed_from},
        },
        "spec": {"schedulingGates": [{"$patch": "delete", "name": QUOTA_GATE}]},
    }


def _time(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubePodClient:
    """:class:`PodClient` through the official client (JSON bodies, raw responses)."""

    def __init__(self, api_client: Any, *, host: str = "") -> None:
        from kubernetes import client

        # Raw responses (_preload_content=False): the typed models are not what comes back.
        self._core: Any = client.CoreV1Api(api_client)
        self._host = host

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        action = f"release pod {pod.key}"
        try:
            response = self._core.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                ungate_patch(pod, tier=tier, borrowed_from=borrowed_from),
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            drain(response)
        except Exception as exc:
            raise wrap(exc, action=action) from exc

    def gated(self, pod: QueuedPod) -> bool | None:
        """Whether the stored pod still carries tenantgate's gate (None: it is gone)."""
        try:
            response = self._core.read_namespaced_pod(
                pod.name, pod.namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            document = orjson.loads(drain(response))
        except Exception as exc:
            error = wrap(exc, action=f"read pod {pod.key}")
            if isinstance(error, KubeNotFound):
                return None
            raise error from exc
        if not isinstance(document, dict):
            raise KubeError(f"read pod {pod.key}: not a JSON object", reason="BadResponse")
        metadata = document.get("metadata")
        if not isinstance(metadata, dict) or metadata.get("uid") != pod.uid:
            return None  # another pod of that name
        spec = document.get("spec")
        return has_gate(spec if isinstance(spec, dict) else {})

    def record(self, event: PodEvent, *, now: float) -> None:
        stamp = f"{now:.6f}".replace(".", "")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{event.name}.{stamp}"[:253], "namespace": event.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": event.namespace,
                "name": event.name,
                "uid": event.uid,
            },
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            # A core/v1 event as client-go's EventRecorder writes it (no eventTime: that
            # style also wants reportingController, reportingInstance and action).
            "source": {"component": COMPONENT, **({"host": self._host} if self._host else {})},
            "firstTimestamp": _time(now),
            "lastTimestamp": _time(now),
            "count": 1,
        }
        try:
            response = self._core.create_namespaced_event(
                event.namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            drain(response)
        except Exception as exc:
            raise wrap(exc, action=f"record event {event.reason} for pod {event.name}") from exc


@dataclass(slots=True)
class ReleaseStats:
    """Counters for metrics, ``/status`` and the tests."""

    released: dict[tuple[str, str], int] = field(default_factory=dict)  # (tenant, tier)
    errors: dict[str, int] = field(default_factory=dict)  # by reason
    waits: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # bucket counts
    wait_sums: dict[tuple[str, str], float] = field(default_factory=dict)
    given_up: dict[str, str] = field(default_factory=dict)  # pod key -> last error
    self_denied: str | None = None  # the last denial by tenantgate's own webhook, until a release
    unschedulable: dict[str, dict[str, Any]] = field(default_factory=dict)  # pod key -> report
    evaluations: int = 0
    events_failed: int = 0
    last_error: str = ""

    def observe_wait(self, tenant: str, tier: str, seconds: float) -> None:
        key = (tenant, tier)
        counts = self.waits.setdefault(key, [0] * (len(WAIT_BUCKETS) + 1))
        for index, bound in enumerate(WAIT_BUCKETS):
            if seconds <= bound:
                counts[index] += 1
                break
        else:
            counts[-1] += 1
        self.wait_sums[key] = self.wait_sums.get(key, 0.0) + seconds


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Releaser:
    """See the module docstring. Its listener methods run on the event-loop thread."""

    def __init__(
        self,
        controller: LedgerController,
        store: LedgerStore,
        client: PodClient,
        *,
        pace: PaceSettings | None = None,
        unschedulable_after: float = 300.0,
        clock: Callable[[], float] = time.time,
        max_threads: int = 4,
        recent: RecentDecisions | None = None,
    ) -> None:
        self._controller = controller
        self._store = store
        self._client = client
        self.pace = ReleasePace(pace if pace is not None else PaceSettings())
        self._unschedulable_after = unschedulable_after
        self._clock = clock
        self.stats = ReleaseStats()
        self.recent = recent
        self._dirty: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._in_flight: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # Tenants whose release the stored ledgers refused: tenant -> (refusals in a row, when
        # the last one was, in the loop's time; the timer of the next look).
        self._rechecks: dict[str, tuple[int, float, asyncio.TimerHandle | None]] = {}
        # Tenants whose head failed to release for a reason not its own (the API server, a
        # webhook or the ledger): tenant -> that pod's uid, until its backoff ends.
        self._held: dict[str, str] = {}
        self._released: dict[str, tuple[str, float]] = {}  # uid -> (tenant, released at)
        self._executor = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="release")
        self._events = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")
        self._running = False
        self._evaluating = False
        controller.queues.listener = self
        self.groups = GroupReleaser(self)

    # -- for the group releaser (tenants/kube/groupreleaser.py) --------------------------

    @property
    def controller(self) -> LedgerController:
        return self._controller

    @property
    def store(self) -> LedgerStore:
        return self._store

    @property
    def client(self) -> PodClient:
        return self._client

    @property
    def executor(self) -> ThreadPoolExecutor:
        return self._executor

    def clock(self) -> float:
        return self._clock()

    def failed(self, tenant: str, pod: QueuedPod, reason: str, message: str) -> None:
        self._failed(tenant, pod, reason, message)

    def released_ok(self, tenant: str, pod: QueuedPod, tier: Tier) -> None:
        self._released_ok(tenant, pod, tier)

    def recheck(self, tenant: str) -> None:
        self._recheck(tenant)

    def event(self, pod: QueuedPod, reason: str, message: str, *, kind: str = "Normal") -> None:
        self._event(pod, reason, message, kind=kind)

    # -- the controller's listener -------------------------------------------------------

    def queued(self, tenant: str, pod: QueuedPod, *, listed: bool) -> None:
        if listed:
            return  # a full list (start, new leader): these pods were told before
        if pod.group:
            groups = self._controller.group_queue_policy(tenant)
            size = f"all {pod.group_size}" if pod.group_size else "all its"
            self._event(
                pod,
                "Queued",
                f"waiting behind the scheduling gate {QUOTA_GATE} for pod group "
                f"{pod.group.rpartition('/')[2]}: released when {size} members exist and fit "
                f"tenant {tenant}'s {groups.tier} room",
            )
            return
        queue = self._controller.queues.queues.get(tenant)
        policy = self._controller.queue_policy(tenant)
        now = self._clock()
        position = queue.position(pod.uid, policy, now) if queue is not None else 0
        pending = len(queue) if queue is not None else 0
        self._event(
            pod,
            "Queued",
            f"waiting for tenant {tenant}'s {policy.tier} room behind the scheduling gate "
            f"{QUOTA_GATE}: position {position} of {pending}",
        )

    def changed(self, tenant: str, pod: QueuedPod) -> None:
        if pod.uid in self._in_flight:
            return
        self.pace.forget(pod.uid)
        self.stats.given_up.pop(pod.key, None)
        timer = self._timers.pop(pod.uid, None)
        if timer is not None:
            timer.cancel()
        queue = self._controller.queues.queues.get(tenant)
        if queue is not None:
            queue.unpark(pod.uid)
        self._unhold(tenant, pod.uid)

    def left(self, tenant: str, uid: str) -> None:
        self.pace.forget(uid)
        timer = self._timers.pop(uid, None)
        if timer is not None:
            timer.cancel()
        self._unhold(tenant, uid)

    def _unhold(self, tenant: str, uid: str) -> None:
        """The pod holding ``tenant``'s line is retried now or gone: the line moves again."""
        if self._held.get(tenant) == uid:
            del self._held[tenant]
            self.room_changed(tenant)

    def room_changed(self, tenant: str) -> None:
        self._dirty.add(tenant)
        if self._wake is not None:
            self._wake.set()

    @property
    def idle(self) -> bool:
        """Nothing to evaluate and nothing being released (for tests and benchmarks)."""
        return (
            not self._dirty
            and not self._evaluating
            and not self._in_flight
            and not self._timers
            and not any(timer is not None for _, _, timer in self._rechecks.values())
        )

    # -- running -------------------------------------------------------------------------

    async def run(self) -> None:
        """Release as room frees, until cancelled (run only where pods are watched)."""
        self._wake = asyncio.Event()
        self._running = True
        self._dirty.update(self._controller.queues.queues)
        self._wake.set()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), CHECK_SECONDS)
                self._wake.clear()
                now = self._clock()
                self._check_released(now)
                pending, self._dirty = self._dirty, set()
                self._evaluating = True
                try:
                    trees: set[str] = set()
                    for tenant in sorted(pending):
                        root = self._controller.policy.cohorts.root_name(tenant)
                        if root is None:
                            await self._evaluate(tenant)
                        elif root not in trees:
                            trees.add(root)
                            await self._evaluate_cohort(tenant)
                finally:
                    self._evaluating = False
        finally:
            self._running = False
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            for _, _, look in self._rechecks.values():
                if look is not None:
                    look.cancel()
            self._rechecks.clear()
            self._held.clear()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._events.shutdown(wait=False, cancel_futures=True)

    async def _evaluate(self, tenant: str) -> None:
        queue = self._controller.queues.queues.get(tenant)
        policy = self._controller.policy
        known = policy.tenants.get(tenant)
        if queue is None or known is None or tenant in self._held:
            return
        now = self._clock()
        available = self.pace.available(now)
        if available < 1:
            self._later(self.pace.next_token_in(now), tenant)
            return
        queue_policy = self._controller.queue_policy(tenant)
        self.stats.evaluations += 1
        if queue.groups() and await self.groups.evaluate(tenant, queue, known):
            return  # a pod group holds the line
        plan = plan_release(
            queue,
            quota=known.quota,
            ledger=self._store.get(tenant),
            policy=queue_policy,
            now=now,
            limit=available,
        )
        for pod in plan.pods:
            self.pace.take(now)
            queue.park(pod.uid)
            self._in_flight.add(pod.uid)
            try:
                room = await self._release(tenant, pod, tier=queue_policy.tier)
            finally:
                self._in_flight.discard(pod.uid)
            if not room or tenant in self._held:
                break
        if len(plan.pods) >= available:
            self._later(self.pace.next_token_in(self._clock()), tenant)

    async def _evaluate_cohort(self, member: str) -> None:
        """Release across ``member``'s cohort tree: lowest share first, then queue order."""
        policy = self._controller.policy
        tree = policy.cohorts
        names = tree.tree_members(member)
        now = self._clock()
        available = self.pace.available(now)
        if available < 1:
            self._later(self.pace.next_token_in(now), member)
            return
        members: dict[str, MemberQueue] = {}
        for name in names:
            queue = self._controller.queues.queues.get(name)
            known = policy.tenants.get(name)
            if queue is None or known is None or not len(queue) or name in self._held:
                continue
            if queue.groups() and await self.groups.evaluate(name, queue, known):
                continue  # a pod group holds this member's line
            members[name] = MemberQueue(known, self._controller.queue_policy(name), queue)
        if not members:
            return
        self.stats.evaluations += 1
        ledgers = {name: self._store.get(name) for name in names}
        plan = plan_cohort_release(tree, members, ledgers, now=now, limit=available)
        stopped: set[str] = set()
        for tenant, pod in plan:
            if tenant in stopped or tenant in self._held:
                continue
            self.pace.take(now)
            members[tenant].queue.park(pod.uid)
            self._in_flight.add(pod.uid)
            try:
                room = await self._release(tenant, pod, tier=members[tenant].policy.tier)
            finally:
                self._in_flight.discard(pod.uid)
            if not room:
                stopped.add(tenant)
        if len(plan) >= available:
            self._later(self.pace.next_token_in(self._clock()), member)

    async def _book(
        self, tenant: str, pod: QueuedPod, *, tier: Tier, now: float, ttl: float
    ) -> ReleaseBooking:
        """Book a release: on the tenant's ledger, or for a cohort member with its tree's
        ledgers read in the same atomic step (the room may be borrowed)."""
        policy = self._controller.policy
        known = policy.tenants[tenant]
        tree = policy.cohorts
        root = tree.root_name(tenant)
        store = self._store
        if root is None or not isinstance(store, PeerLedgerStore):
            quota = known.quota
            return await store.transact(
                tenant,
                lambda ledger: book_release(
                    ledger, quota=quota, tier=tier, pod=pod, now=now, ttl=ttl
                ),
            )
        booking: ReleaseBooking = await store.transact_with_peers(
            tenant,
            tree.tree_members(tenant),
            lambda ledger, peers: book_member_release(
                ledger, peers, tree=tree, tenant=known, tier=tier, pod=pod, now=now, ttl=ttl
            ),
            cohort=root,
        )
        return booking

    async def _release(self, tenant: str, pod: QueuedPod, *, tier: Tier) -> bool:
        """Release one pod; False when the ledger had no room for it after all."""
        policy = self._controller.policy
        known = policy.tenants.get(tenant)
        queue = self._controller.queues.queues.get(tenant)
        if known is None:
            return False
        ttl = policy.reservation_ttl
        now = self._clock()
        try:
            booking = await self._book(tenant, pod, tier=tier, now=now, ttl=ttl)
        except LedgerUnavailable as exc:
            self._failed(tenant, pod, "ledger", exc.message)
            return False
        if booking.already:
            # Booked by an earlier attempt whose outcome is unknown: its watch event follows,
            # or the booking expires and the pod is offered again.
            self._later(ttl, tenant, unpark=pod.uid)
            return True
        if booking.decision.tier is None:
            if queue is not None:
                queue.unpark(pod.uid)
            self._recheck(tenant)
            return False
        loop = asyncio.get_running_loop()
        # A member's pod released onto borrowed room says so, as one admitted onto it does.
        borrowed_from = booking.decision.borrowed_from
        try:
            await loop.run_in_executor(
                self._executor,
                lambda: self._client.ungate(pod, tier=tier, borrowed_from=borrowed_from),
            )
        except KubeError as exc:
            applied = await self._applied(pod, exc)
            if applied is None:
                # A lost answer: the PATCH may still apply. The booking stays (quota held,
                # never over-admitted) until the pod is seen ungated, or it expires.
                self._failed(tenant, pod, _reason(exc), str(exc))
                return True
            if applied:
                return self._released_ok(tenant, pod, tier)
            try:
                await self._store.transact(
                    tenant,
                    lambda ledger: undo_release(
                        ledger, pod=pod, reservation_id=booking.reservation_id
                    ),
                )
            except LedgerUnavailable as undo_error:
                # The booking stays until its reservation expires: quota is held, never
                # over-admitted.
                logger.warning(
                    "release of %s failed and its booking could not be cancelled: %s",
                    pod.key,
                    undo_error.message,
                )
            self._failed(tenant, pod, _reason(exc), str(exc))
            return True
        return self._released_ok(tenant, pod, tier)

    async def _applied(self, pod: QueuedPod, exc: KubeError) -> bool | None:
        """Whether a PATCH that failed took effect all the same (its answer was lost).

        False: the API server answered with a failure, so nothing was stored. True: no
        answer (or a timeout, 504), and the pod, read again, has lost the gate. None: no
        answer and no way to tell yet (the PATCH may still apply).
        """
        if exc.status and exc.status != 504:
            return False
        loop = asyncio.get_running_loop()
        try:
            gated = await loop.run_in_executor(self._executor, lambda: self._client.gated(pod))
        except KubeError:
            return None
        return True if gated is False else None

    def _recheck(self, tenant: str) -> None:
        """Look at ``tenant`` again soon: the plan saw room the stored ledgers refused."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        refusals, last, pending = self._rechecks.get(tenant, (0, now, None))
        if pending is not None:
            return
        if now - last > RECHECK_MAX_SECONDS:
            refusals = 0  # the last refusal is long past: this is a new disagreement
        delay = min(RECHECK_FIRST_SECONDS * 2 ** min(refusals, 16), RECHECK_MAX_SECONDS)

        def fire() -> None:
            done, at, _ = self._rechecks.get(tenant, (0, now, None))
            self._rechecks[tenant] = (done, at, None)
            self.room_changed(tenant)

        self._rechecks[tenant] = (refusals + 1, now, loop.call_later(delay, fire))

    def _released_ok(self, tenant: str, pod: QueuedPod, tier: Tier) -> bool:
        waited = max(self._clock() - pod.queued_at, 0.0)
        refused = self._rechecks.pop(tenant, None)
        if refused is not None and refused[2] is not None:
            refused[2].cancel()
        key = (tenant, tier)
        self.stats.released[key] = self.stats.released.get(key, 0) + 1
        self.stats.observe_wait(tenant, tier, waited)
        self.stats.self_denied = None
        self.pace.forget(pod.uid)
        self._released[pod.uid] = (tenant, self._clock())
        logger.info(
            "released %s onto tenant %s's %s room after %s",
            pod.key,
            tenant,
            tier,
            _duration(waited),
            extra={"tenant": tenant, "pod": pod.key, "tier": tier},
        )
        message = f"released onto tenant {tenant}'s {tier} room after waiting {_duration(waited)}"
        self._event(pod, "Released", message)
        if self.recent is not None:
            self.recent.released(
                at=self._clock(),
                tenant=tenant,
                pod=pod.key,
                outcome="released",
                tier=tier,
                waited_seconds=waited,
                message=message,
            )
        return True

    def _failed(self, tenant: str, pod: QueuedPod, reason: str, message: str) -> None:
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1
        self.stats.last_error = f"{pod.key}: {message}"
        delay, given_up = self.pace.failure(pod.uid)
        if reason == "gone":
            return  # the watch takes it out of the queue
        if reason == "self_denied":
            # Every release would be denied alike: hold the whole line, never give up on the
            # pod, and say what to fix.
            self.stats.self_denied = message
            logger.error(
                "tenantgate's own webhook denied the release of %s: this process is not the "
                "user its webhook lets remove the gate (%s); tenant %s's line waits until "
                "tenantgate runs with one identity (fix --gate-owner or the credentials)",
                pod.key,
                message,
                tenant,
                extra={"tenant": tenant, "pod": pod.key},
            )
            self._held[tenant] = pod.uid
            self._later(delay, tenant, unpark=pod.uid)
            return
        if given_up:
            self.stats.given_up[pod.key] = message
            logger.warning(
                "cannot release %s of tenant %s after %d attempts (%s); skipped until it changes",
                pod.key,
                tenant,
                self.pace.settings.max_failures,
                message,
                extra={"tenant": tenant, "pod": pod.key},
            )
            failure = (
                f"tenantgate could not remove the scheduling gate {QUOTA_GATE} after "
                f"{self.pace.settings.max_failures} attempts ({message}); it retries when the "
                "pod changes"
            )
            self._event(pod, "ReleaseFailed", failure, kind="Warning")
            if self.recent is not None:
                now = self._clock()
                self.recent.released(
                    at=now,
                    tenant=tenant,
                    pod=pod.key,
                    outcome="given up",
                    tier=self._controller.queue_policy(tenant).tier,
                    waited_seconds=now - pod.queued_at,
                    message=failure,
                )
            return  # stays parked
        logger.info("release of %s failed (%s); retry in %.3fs", pod.key, message, delay)
        if reason in _NOT_THE_POD:
            # Whatever failed would fail the next pod too, and letting it through would put
            # it ahead of this one: the whole line waits out this pod's backoff.
            self._held[tenant] = pod.uid
        self._later(delay, tenant, unpark=pod.uid)

    def _later(self, delay: float, tenant: str, *, unpark: str | None = None) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            if unpark is not None:
                self._timers.pop(unpark, None)
                queue = self._controller.queues.queues.get(tenant)
                if queue is not None:
                    queue.unpark(unpark)
                self._unhold(tenant, unpark)
            self.room_changed(tenant)

        handle = loop.call_later(max(delay, 0.0), fire)
        if unpark is not None:
            previous = self._timers.pop(unpark, None)
            if previous is not None:
                previous.cancel()
            self._timers[unpark] = handle

    # -- released pods the scheduler cannot place ----------------------------------------

    def _check_released(self, now: float) -> None:
        self.groups.check_timeouts(now)
        limit = self._unschedulable_after
        for uid, (tenant, released_at) in list(self._released.items()):
            tracked = self._controller.tracked(uid)
            if tracked is None:
                self._released.pop(uid, None)
                continue
            facts, _ = tracked
            since = facts.unschedulable_since
            if since is None:
                if now - released_at > 2 * limit:
                    self._released.pop(uid, None)  # placed (or never checked): stop watching
                continue
            if now - since <= limit or facts.key in self.stats.unschedulable:
                continue
            self.stats.unschedulable[facts.key] = {
                "tenant": tenant,
                "unschedulableSeconds": round(now - since, 1),
                "releasedAt": released_at,
            }
            logger.warning(
                "pod %s of tenant %s was released %s ago and is still unschedulable: it holds "
                "quota the tenant cannot use",
                facts.key,
                tenant,
                _duration(now - released_at),
                extra={"tenant": tenant, "pod": facts.key},
            )
            self._event_facts(
                facts.namespace,
                facts.name,
                uid,
                "ReleasedUnschedulable",
                f"released by tenantgate {_duration(now - released_at)} ago and unschedulable "
                f"for {_duration(now - since)}: it holds tenant {tenant}'s quota",
                kind="Warning",
            )

    def forget_unschedulable(self, key: str) -> None:
        self.stats.unschedulable.pop(key, None)

    # -- events ----------------------------------------------------------------------------

    def _event(self, pod: QueuedPod, reason: str, message: str, *, kind: str = "Normal") -> None:
        self._event_facts(pod.namespace, pod.name, pod.uid, reason, message, kind=kind)

    def _event_facts(
        self, namespace: str, name: str, uid: str, reason: str, message: str, *, kind: str
    ) -> None:
        event = PodEvent(namespace, name, uid, reason, message, kind)
        now = self._clock()

        def send() -> None:
            try:
                self._client.record(event, now=now)
            except KubeError as exc:
                self.stats.events_failed += 1
                logger.debug("event %s for %s/%s not recorded: %s", reason, namespace, name, exc)

        with contextlib.suppress(RuntimeError):  # shut down
            self._events.submit(send)

    # -- what users see --------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "leading": self._running,
            "releasing": len(self._in_flight),
            "givenUp": dict(sorted(self.stats.given_up.items())),
            "deniedByOwnWebhook": self.stats.self_denied,
            "releasedUnschedulable": dict(sorted(self.stats.unschedulable.items())),
        }


# Release failures that say nothing about the pod itself.
_NOT_THE_POD: Final = frozenset({"unavailable", "ledger", "self_denied"})


def _reason(exc: KubeError) -> str:
    if isinstance(exc, KubeConflict):
        return "conflict"
    if isinstance(exc, KubeNotFound):
        return "gone"
    if isinstance(exc, KubeForbidden):
        # tenantgate's own webhook refusing tenantgate: it runs as another user than the one
        # its webhook lets remove the gate. A configuration fault, never the pod's.
        return "self_denied" if OWNER_RULE_PREFIX in str(exc) else "forbidden"
    if exc.status in (400, 422):
        return "invalid"
    return "unavailable"


failure_reason = _reason


class QueueCollector:
    """The queue's Prometheus metrics (register on the app's registry)."""

    def __init__(
        self,
        controller: LedgerController,
        releaser: Releaser | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._controller = controller
        self._releaser = releaser
        self._clock = clock

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        pending = GaugeMetricFamily(
            "tenantgate_queue_pending", "Pods waiting behind tenantgate's gate.", labels=["tenant"]
        )
        oldest = GaugeMetricFamily(
            "tenantgate_queue_oldest_wait_seconds",
            "How long the longest-waiting queued pod has waited.",
            labels=["tenant"],
        )
        for tenant, count, queued_at in sorted(self._controller.queues.pending()):
            pending.add_metric([tenant], count)
            oldest.add_metric([tenant], max(now - queued_at, 0.0) if queued_at else 0.0)
        yield pending
        yield oldest
        stats = self._releaser.stats if self._releaser is not None else ReleaseStats()
        yield from _release_metrics(stats)
        if self._releaser is not None:
            yield from self._releaser.groups.metrics()


def _release_metrics(stats: ReleaseStats) -> Iterator[Metric]:
    released = CounterMetricFamily(
        "tenantgate_queue_released",
        "Queued pods released (gate removed), by tenant and tier.",
        labels=["tenant", "tier"],
    )
    for (tenant, tier), count in sorted(stats.released.items()):
        released.add_metric([tenant, tier], count)
    yield released
    errors = CounterMetricFamily(
        "tenantgate_queue_release_errors",
        "Failed releases, by reason (conflict, gone, forbidden, invalid, unavailable, ledger, "
        "self_denied).",
        labels=["reason"],
    )
    for reason, count in sorted(stats.errors.items()):
        errors.add_metric([reason], count)
    yield errors
    waits = HistogramMetricFamily(
        "tenantgate_queue_wait_seconds",
        "Time from creation to release of queued pods, by tenant and tier.",
        labels=["tenant", "tier"],
    )
    for (tenant, tier), counts in sorted(stats.waits.items()):
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*WAIT_BUCKETS, math.inf), counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else f"{bound:g}", cumulative))
        waits.add_metric([tenant, tier], buckets, stats.wait_sums[(tenant, tier)])
    yield waits
    unschedulable = GaugeMetricFamily(
        "tenantgate_queue_released_unschedulable",
        "Released pods unschedulable for longer than the threshold (they hold quota).",
        labels=["tenant"],
    )
    per_tenant: dict[str, int] = {}
    for report in stats.unschedulable.values():
        per_tenant[report["tenant"]] = per_tenant.get(report["tenant"], 0) + 1
    for tenant, count in sorted(per_tenant.items()):
        unschedulable.add_metric([tenant], count)
    yield unschedulable
    given_up = GaugeMetricFamily(
        "tenantgate_queue_release_given_up",
        "Queued pods skipped after too many failed releases (until they change).",
    )
    given_up.add_metric([], len(stats.given_up))
    yield given_up


def queue_listing(
    controller: LedgerController, *, now: float, tenant: str | None = None
) -> Mapping[str, Any]:
    """``GET /queue``'s document."""
    return controller.queues.listing(controller.queue_policy, now=now, tenant=tenant)


__all__ = [
    "WAIT_BUCKETS",
    "KubePodClient",
    "PodClient",
    "PodEvent",
    "QueueCollector",
    "ReleaseStats",
    "Releaser",
    "queue_listing",
    "ungate_patch",
]
