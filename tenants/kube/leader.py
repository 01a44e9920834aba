"""Leader election on a ``coordination.k8s.io/v1`` Lease, the way client-go's leaderelection does.

Every replica campaigns; the one holding the Lease runs the duties that must happen once
(confirming reservations, releasing pods, expiring reservations, the full recount), while every
replica keeps answering admission requests.

The algorithm is client-go's: a candidate takes the Lease when nobody holds it or when its
holder has not renewed it for ``lease_duration`` *as observed on this replica's own monotonic
clock* (so clock skew between nodes does not matter); the holder renews it every
``retry_period`` and gives up leading at once when it could not renew within
``renew_deadline``, which is shorter than ``lease_duration`` so that it has stopped before anyone
else may start. Every write is a compare-and-swap on the Lease's resourceVersion. On a graceful
stop the holder releases the Lease (empty holder), so that another replica takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeVar

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tenants.controller import LedgerController
from tenants.kube.backoff import BackoffPolicy
from tenants.kube.connection import Connection, Resource
from tenants.kube.errors import KubeConflict, KubeError, KubeNotFound, wrap
from tenants.kube.informer import RestartHook
from tenants.kube.ledgerstore import KubeLedgerStore
from tenants.kube.responses import drain
from tenants.kube.sync import ClusterSync

logger = logging.getLogger(__name__)

T = TypeVar("T")

LEASE_NAME: Final = "tenantgate-controller"
JITTER_FACTOR: Final = 1.2  # client-go's: candidates retry after retry_period * [1, 1.2)
CONNECT_TIMEOUT_SECONDS: Final = 5.0

Duty = Callable[[], Coroutine[Any, Any, None]]
LeadingHook = Callable[[bool], None]


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    """How long a Lease lasts, how long its holder keeps trying to renew it, how often to try.

    The usual Kubernetes values (kube-controller-manager, kube-scheduler): 15 s, 10 s, 2 s.
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"renew_deadline must be longer than {JITTER_FACTOR} x retry_period "
                "(the holder needs more than one try before it gives up)"
            )
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                "lease_duration must be longer than renew_deadline (the holder must stop "
                "leading before another replica may take over)"
            )

    @property
    def lease_seconds(self) -> int:
        """``leaseDurationSeconds`` as written in the Lease (whole seconds, rounded up)."""
        return max(1, math.ceil(self.lease_duration))


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election fields of a Lease's spec."""

    holder: str
    lease_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Any) -> LeaseRecord:
        spec = spec if isinstance(spec, dict) else {}
        holder = spec.get("holderIdentity")
        seconds = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=holder if isinstance(holder, str) else "",
            lease_seconds=seconds if _is_int(seconds) and seconds > 0 else 1,
            acquire_time=_parse_time(spec.get("acquireTime")),
            renew_time=_parse_time(spec.get("renewTime")),
            transitions=transitions if _is_int(transitions) and transitions >= 0 else 0,
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        return spec


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def format_micro_time(moment: datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class StoredLease:
    """A Lease as read: its election record and the resourceVersion to write against."""

    record: LeaseRecord
    resource_version: str


class LeaseClient(Protocol):
    """Blocking reads and compare-and-swap writes of one Lease (run in a worker thread).

    ``create`` raises :class:`KubeConflict` when the Lease already exists, ``update`` when it
    changed since ``resource_version``.
    """

    def get(self) -> StoredLease | None: ...

    def create(self, record: LeaseRecord) -> StoredLease: ...

    def update(self, record: LeaseRecord, *, resource_version: str) -> StoredLease: ...


class KubeLeaseClient:
    """:class:`LeaseClient` for ``leases.coordination.k8s.io`` through the official client."""

    def __init__(
        self, api_client: Any, *, namespace: str, name: str = LEASE_NAME, timeout: float = 5.0
    ) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.name = name
        # The generic object calls, not CoordinationV1Api's: its typed methods validate a body
        # into a V1Lease and write its MicroTimes back with datetime.isoformat(), which drops
        # the fraction on a whole second; the API server wants exactly six digits
        # (UnmarshalJSON in k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go) and refused
        # such a renewal with 400. A plain dict goes out exactly as to_spec() wrote it.
        self._api = client.CustomObjectsApi(api_client)
        self._timeout = (CONNECT_TIMEOUT_SECONDS, timeout)

    @property
    def where(self) -> str:
        return f"lease {self.namespace}/{self.name}"

    def _body(self, record: LeaseRecord, resource_version: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/managed-by": "tenantgate"},
        }
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": record.to_spec(),
        }

    def _call(self, action: str, method: Callable[..., Any], *args: Any) -> StoredLease:
        try:
            response = method(*args, _preload_content=False, _request_timeout=self._timeout)
            body = drain(response)
            document = orjson.loads(body)
        except Exception as exc:
            raise wrap(exc, action=f"{action} {self.where}") from exc
        if not isinstance(document, dict):
            raise KubeError(f"{action} {self.where}: not a JSON object", reason="BadResponse")
        metadata = document.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return StoredLease(
            LeaseRecord.from_spec(document.get("spec")),
            version if isinstance(version, str) else "",
        )

    def get(self) -> StoredLease | None:
        try:
            return self._call(
                "read",
                self._api.get_namespaced_custom_object,
                *_leases_in(self.namespace),
                self.name,
            )
        except KubeNotFound:
            return None

    def create(self, record: LeaseRecord) -> StoredLease:
        return self._call(
            "create",
            self._api.create_namespaced_custom_object,
            *_leases_in(self.namespace),
            self._body(record, None),
        )

    def update(self, record: LeaseRecord, *, resource_version: str) -> StoredLease:
        return self._call(
            "update",
            self._api.replace_namespaced_custom_object,
            *_leases_in(self.namespace),
            self.name,
            self._body(record, resource_version),
        )


def _leases_in(namespace: str) -> tuple[str, str, str, str]:
    """The generic object calls' (group, version, namespace, plural) for Leases."""
    return ("coordination.k8s.io", "v1", namespace, "leases")


def default_identity() -> str:
    """This replica's name in the Lease: the pod name (``POD_NAME``/hostname) and a random tag.

    The tag keeps a restarted container from mistaking its predecessor's Lease for its own.
    """
    base = os.environ.get("POD_NAME") or socket.gethostname() or "tenantgate"
    return f"{base}_{uuid.uuid4().hex[:10]}"


@dataclass(slots=True)
class ElectionStats:
    """Counters for metrics and tests."""

    acquired: int = 0  # times this replica became the leader
    lost: int = 0  # times it stopped leading without being asked to
    renew_failures: int = 0
    duty_failures: int = 0


class LeaderElector:
    """Campaigns for one Lease; :meth:`run` runs ``duty`` only while this replica holds it.

    ``clock`` is a monotonic clock (seconds) for every timing decision, ``wall`` the UTC time
    written into the Lease for people and tools to read, ``sleep`` and ``rand`` are injectable
    so tests can drive time. ``on_leading`` is called synchronously, on the event loop, the
    moment this replica starts or stops leading (before the duty starts, and before the duty's
    cancellation is awaited), so gated writers stop at once.
    """

    def __init__(
        self,
        client: LeaseClient,
        *,
        identity: str | None = None,
        timings: LeaseTimings | None = None,
        on_leading: LeadingHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.identity = identity if identity is not None else default_identity()
        if not self.identity:
            raise ValueError("a leader election identity must not be empty")
        self.timings = timings if timings is not None else LeaseTimings()
        self.stats = ElectionStats()
        self._client = client
        self._hooks: list[LeadingHook] = [on_leading] if on_leading is not None else []
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self._rand = rand
        self._leading = False
        self._observed: StoredLease | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._changed = asyncio.Event()

    # -- state ---------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def holder(self) -> str:
        """The holder of the Lease as last observed ("" when nobody, or not read yet)."""
        return self._observed.record.holder if self._observed is not None else ""

    def add_hook(self, hook: LeadingHook) -> None:
        """Also call ``hook(leading)`` on every change of leadership."""
        self._hooks.append(hook)

    async def wait_leading(self, leading: bool = True) -> None:
        """Return once this replica is (``leading=True``) or is not the leader."""
        while self._leading != leading:
            self._changed.clear()
            await self._changed.wait()

    def _set_leading(self, leading: bool, *, graceful: bool = False) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        self._changed.set()
        if leading:
            self.stats.acquired += 1
            logger.info("became the leader (lease holder %s)", self.identity)
        else:
            logger.log(
                logging.INFO if graceful else logging.WARNING,
                "stopped leading (lease holder %s)",
                self.identity,
            )
        for hook in list(self._hooks):
            try:
                hook(leading)
            except Exception:
                logger.exception("leadership hook failed")

    # -- the campaign --------------------------------------------------------------------

    async def run(self, duty: Duty | None = None, *, release: bool = True) -> None:
        """Campaign until cancelled; while leading, run ``duty`` and cancel it on losing.

        A duty that ends on its own (or fails) hands the Lease back, so that another replica,
        or this one after ``retry_period``, starts it again. On cancellation the Lease is
        released when ``release`` (graceful shutdown); a crash simply lets it expire.
        """
        try:
            while True:
                await self._acquire()
                await self._lead(duty)
                await self._sleep(self._jittered())
        finally:
            if self._leading:
                self._set_leading(False, graceful=True)
                if release:
                    await self._release()

    def _jittered(self) -> float:
        return self.timings.retry_period * (1 + (JITTER_FACTOR - 1) * self._rand())

    async def _acquire(self) -> None:
        while not await self._attempt(within=None):
            await self._sleep(self._jittered())
        self._last_renew = self._clock()
        self._set_leading(True)

    async def _lead(self, duty: Duty | None) -> None:
        task = asyncio.create_task(duty(), name="leader duty") if duty is not None else None
        try:
            while True:
                await self._wait_or_duty(task, self.timings.retry_period)
                if task is not None and task.done():
                    self._duty_ended(task)
                    self._set_leading(False)
                    await self._release()
                    return
                if not await self._renew():
                    self.stats.lost += 1
                    self._set_leading(False)
                    return
        finally:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _wait_or_duty(self, task: asyncio.Task[None] | None, delay: float) -> None:
        if task is None:
            await self._sleep(delay)
            return
        sleeper = asyncio.ensure_future(self._sleep(delay))
        try:
            await asyncio.wait({sleeper, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not sleeper.done():
                sleeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sleeper

    def _duty_ended(self, task: asyncio.Task[None]) -> None:
        self.stats.duty_failures += 1
        error = None if task.cancelled() else task.exception()
        if error is None:
            logger.error("leader duty ended; handing the lease back")
        else:
            logger.error(
                "leader duty failed; handing the lease back",
                exc_info=(type(error), error, error.__traceback__),
            )

    async def _renew(self) -> bool:
        """Renew until it works or ``renew_deadline`` since the last renewal has passed."""
        deadline = self._last_renew + self.timings.renew_deadline
        while True:
            remaining = deadline - self._clock()
            if remaining > 0 and await self._attempt(within=remaining):
                self._last_renew = self._clock()
                return True
            if remaining > 0:
                self.stats.renew_failures += 1
            if self.holder and self.holder != self.identity:
                logger.warning("the lease was taken by %s", self.holder)
                return False
            remaining = deadline - self._clock()
            if remaining <= 0:
                logger.warning(
                    "could not renew the lease within %.1fs", self.timings.renew_deadline
                )
                return False
            await self._sleep(min(self.timings.retry_period, remaining))

    async def _attempt(self, *, within: float | None) -> bool:
        """One try to take or renew the Lease, given up after ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            logger.info("the lease could not be renewed in time (API server slow?)")
            return False

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _try_acquire_or_renew(self) -> bool:
        now = self._wall()
        try:
            stored = await self._call(self._client.get)
        except KubeError as exc:
            logger.info("cannot read the lease: %s", exc)
            return False
        if stored is None:
            record = LeaseRecord(self.identity, self.timings.lease_seconds, now, now, 0)
            try:
                created = await self._call(self._client.create, record)
            except KubeError as exc:
                if not isinstance(exc, KubeConflict):
                    logger.info("cannot create the lease: %s", exc)
                return False
            self._observe(created)
            return True
        self._observe(stored)
        current = stored.record
        mine = current.holder == self.identity
        if (
            current.holder
            and not mine
            and self._observed_at + current.lease_seconds > self._clock()
        ):
            return False
        record = LeaseRecord(
            holder=self.identity,
            lease_seconds=self.timings.lease_seconds,
            acquire_time=current.acquire_time if mine else now,
            renew_time=now,
            transitions=current.transitions if mine else current.transitions + 1,
        )
        try:
            updated = await self._call(
                self._client.update, record, resource_version=stored.resource_version
            )
        except KubeError as exc:
            if not isinstance(exc, KubeConflict):
                logger.info("cannot update the lease: %s", exc)
            return False
        self._observe(updated)
        return True

    def _observe(self, stored: StoredLease) -> None:
        if self._observed is None or stored.record != self._observed.record:
            self._observed_at = self._clock()
        self._observed = stored

    async def _release(self) -> None:
        """Hand the Lease back: an empty holder lets any candidate take it at once."""
        observed = self._observed
        if observed is None or observed.record.holder != self.identity:
            return
        record = replace(
            observed.record,
            holder="",
            lease_seconds=1,
            acquire_time=None,
            renew_time=None,
        )
        try:
            released = await self._call(
                self._client.update, record, resource_version=observed.resource_version
            )
        except KubeError as exc:
            logger.info("could not release the lease (it will expire): %s", exc)
            return
        self._observe(released)
        logger.info("lease released by %s", self.identity)


_LEADER_RESOURCES: Final[tuple[Resource, ...]] = ("pods",)


class LeaderDuties:
    """What the lease holder runs: the pod watch feeding the ledger controller, the expiry
    sweep, the full recount, the refresh of the local ledger view and ``duties`` (the queue's
    releases).

    :meth:`run` is the :class:`LeaderElector` duty: it starts when this replica takes the Lease
    and is cancelled the moment it loses it (the store has already stopped writing by then:
    wire ``on_leading`` to :meth:`KubeLedgerStore.set_leading`). Every replica keeps watching
    namespaces and priority classes for admission; only the holder watches pods. Each term
    starts from the store's objects and the first full pod list, which rebuilds the ledger
    from the truth (the controller's initial list), so nothing a former leader left half done
    is counted twice.
    """

    def __init__(
        self,
        *,
        store: KubeLedgerStore,
        controller: LedgerController,
        connect: Callable[[], Connection],
        sweep_seconds: float,
        recount_seconds: float,
        watch_timeout: int,
        clock: Callable[[], float] = time.time,
        on_restart: RestartHook | None = None,
        backoff: BackoffPolicy | None = None,
        duties: Sequence[Duty] = (),
    ) -> None:
        self._store = store
        self._duties = tuple(duties)
        self._controller = controller
        self._connect = connect
        self._sweep_seconds = sweep_seconds
        self._recount_seconds = recount_seconds
        self._watch_timeout = watch_timeout
        self._clock = clock
        self._on_restart = on_restart
        self._backoff = backoff
        self.terms = 0
        self.sync: ClusterSync | None = None

    async def run(self) -> None:
        self.terms += 1
        await self._store.refresh()
        connection = await asyncio.to_thread(self._connect)
        sync = ClusterSync(
            connection,
            controller=self._controller,
            on_priority_classes=lambda _table: None,  # every replica watches those already
            clock=self._clock,
            on_restart=self._on_restart,
            backoff=self._backoff,
            watch_timeout=self._watch_timeout,
            resources=_LEADER_RESOURCES,
        )
        sync.start(asyncio.get_running_loop())
        self.sync = sync
        logger.info("leading: watching pods, sweeping and recounting the tenant ledgers")
        try:
            await asyncio.gather(
                self._sweep_loop(sync),
                self._recount_loop(sync),
                self._store.keep_fresh(interval=self._sweep_seconds),
                *(duty() for duty in self._duties),
            )
        finally:
            self.sync = None
            await sync.stop()

    async def _sweep_loop(self, sync: ClusterSync) -> None:
        while True:
            await asyncio.sleep(self._sweep_seconds)
            try:
                # This term's first pod list decides which bound reservations have pods.
                self._controller.sweep(now=self._clock(), listed=sync.synced)
            except Exception:
                logger.exception("reservation sweep failed")

    async def _recount_loop(self, sync: ClusterSync) -> None:
        while True:
            await asyncio.sleep(self._recount_seconds)
            if not sync.synced:
                continue
            try:
                report = self._controller.recount(now=self._clock())
            except Exception:
                logger.exception("ledger recount failed")
                continue
            if not report.repaired:
                logger.debug("recount: the ledgers match %d pods", report.pods)


class LeaderCollector:
    """Prometheus view of a :class:`LeaderElector` (register on the app's registry)."""

    def __init__(self, elector: LeaderElector) -> None:
        self._elector = elector

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        elector, stats = self._elector, self._elector.stats
        leading = GaugeMetricFamily(
            "tenantgate_leader", "1 while this replica holds the controller Lease."
        )
        leading.add_metric([], 1 if elector.is_leader else 0)
        yield leading
        for name, value, documentation in (
            ("leader_acquired", stats.acquired, "Times this replica became the leader."),
            ("leader_lost", stats.lost, "Times it stopped leading: renewal failed or taken."),
            ("leader_renew_failures", stats.renew_failures, "Failed tries to renew the Lease."),
            ("leader_duty_failures", stats.duty_failures, "Leader duties that ended or failed."),
        ):
            family = CounterMetricFamily(f"tenantgate_{name}", documentation)
            family.add_metric([], value)
            yield family


__all__ = [
    "LEASE_NAME",
    "ElectionStats",
    "KubeLeaseClient",
    "LeaderCollector",
    "LeaderDuties",
    "LeaderElector",
    "LeaseClient",
    "LeaseRecord",
    "LeaseTimings",
    "StoredLease",
    "default_identity",
    "format_micro_time",
]
