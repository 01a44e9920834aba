"""The ``kubernetes`` ledger backend: one cluster-scoped ``TenantLedger`` object per tenant.

Several replicas share one quota, so none of them may trust its own memory for a yes. Like the
ResourceQuota admission plugin, every change is a read-modify-write of the tenant's object
with a compare-and-swap on its ``resourceVersion``: the API server (etcd) decides which of two
concurrent writers wins, and the loser re-reads and re-runs its pure ``change`` functions.

Group commit: the admission requests of one tenant that wait while a write is in flight are
collected, applied in arrival order to the freshly read ledger, and written at once, each
waiter then getting its own result. A burst of creates thus costs a few writes instead of a
storm of conflicts. A conflict re-reads and re-runs the whole batch after a jittered backoff;
a change that has been through ``max_attempts`` conflicts fails with a retryable message
(409), and an unreachable API server fails every waiting change at once (503): the store fails
closed, it never answers from its cache.

The object's ``status`` holds usage by tier and the reservations in flight (a reservation is
removed once its pod is confirmed, so the object's size follows pods in flight, not pods
running). The per-pod charges behind the usage are known only to the replica holding the
controller Lease, which alone confirms, releases, expires and recounts: the controller's
synchronous :meth:`KubeLedgerStore.update` calls are applied to a local view at once and
replayed against the fresh object by the same group commit, and only while leading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, Protocol, TypeVar, cast

import orjson
from immutables import Map
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from classifier.quantities import Quantity
from tenants.kube.backoff import BackoffPolicy
from tenants.kube.errors import (
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    wrap,
)
from tenants.kube.responses import drain
from tenants.ledger import (
    TIERS,
    Charge,
    LedgerError,
    LedgerUnavailable,
    Reservation,
    TenantLedger,
    Tier,
    ledger_from_json,
    ledger_to_json,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

GROUP: Final = "tenantgate.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "tenantledgers"
KIND: Final = "TenantLedger"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "tenantgate"}

CONNECT_TIMEOUT_SECONDS: Final = 5.0
REQUEST_TIMEOUT_SECONDS: Final = 5.0
CONFLICT_CODE: Final = 409
UNAVAILABLE_CODE: Final = 503

Change = Callable[[TenantLedger], tuple[TenantLedger, Any]]


# --------------------------------------------------------------------------- the API port


@dataclass(frozen=True, slots=True)
class StoredLedger:
    """One TenantLedger object as read or written: its name, resourceVersion and status."""

    name: str
    resource_version: str
    status: Mapping[str, Any] | None


class LedgerClient(Protocol):
    """Blocking calls on TenantLedger objects (they run in the store's worker threads).

    ``create`` raises :class:`KubeConflict` when the object exists, ``write_status`` when it
    changed since ``resource_version``; a missing object or resource type is
    :class:`KubeNotFound`.
    """

    def read(self, name: str) -> StoredLedger | None: ...

    def create(self, name: str) -> StoredLedger: ...

    def write_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> StoredLedger: ...

    def list(self) -> list[StoredLedger]: ...


class KubeLedgerClient:
    """:class:`LedgerClient` through the official client, read raw and parsed with orjson.

    The resource is the class's: TenantLedger objects here, whose ``spec`` names their
    tenant; a subclass names another kind of ledger object with the same calls.
    """

    plural: ClassVar[str] = PLURAL
    kind: ClassVar[str] = KIND
    spec_field: ClassVar[str] = "tenant"

    def __init__(self, api_client: Any, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self._timeout = (CONNECT_TIMEOUT_SECONDS, timeout)

    def _call(self, action: str, method: Callable[..., Any], *args: Any) -> dict[str, Any]:
        try:
            response = method(
                GROUP,
                VERSION,
                self.plural,
                *args,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            body = drain(response)
            document = orjson.loads(body)
        except Exception as exc:
            raise wrap(exc, action=action) from exc
        if not isinstance(document, dict):
            raise KubeError(f"{action}: the response is not a JSON object", reason="BadResponse")
        return document

    def read(self, name: str) -> StoredLedger | None:
        try:
            document = self._call(
                f"read {self.plural}/{name}", self._api.get_cluster_custom_object, name
            )
        except KubeNotFound:
            return None
        return stored_ledger(document, name)

    def create(self, name: str) -> StoredLedger:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": self.kind,
            "metadata": {"name": name, "labels": dict(MANAGED_BY)},
            "spec": {self.spec_field: name},
        }
        document = self._call(
            f"create {self.plural}/{name}", self._api.create_cluster_custom_object, body
        )
        return stored_ledger(document, name)

    def write_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> StoredLedger:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": self.kind,
            "metadata": {"name": name, "resourceVersion": resource_version},
            "spec": {self.spec_field: name},
            "status": dict(status),
        }
        document = self._call(
            f"write {self.plural}/{name}/status",
            self._api.replace_cluster_custom_object_status,
            name,
            body,
        )
        return stored_ledger(document, name)

    def list(self) -> list[StoredLedger]:
        document = self._call(f"list {self.plural}", self._api.list_cluster_custom_object)
        items = document.get("items")
        return [
            stored_ledger(item, "")
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict)
        ]


def stored_ledger(document: Mapping[str, Any], name: str) -> StoredLedger:
    """A TenantLedger object as read, listed or watched (``name`` when it names none)."""
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    version = metadata.get("resourceVersion")
    status = document.get("status")
    stored_name = metadata.get("name")
    return StoredLedger(
        name=stored_name if isinstance(stored_name, str) else name,
        resource_version=version if isinstance(version, str) else "",
        status=status if isinstance(status, dict) else None,
    )


def _older(version: str, than: str) -> bool:
    """Whether resourceVersion ``version`` is before ``than``.

    Resource versions are opaque, but the API server's are etcd revisions: integers that only
    grow. Anything else is never taken as older.
    """
    return version.isdigit() and than.isdigit() and int(version) < int(than)


# --------------------------------------------------------------------------- policy, stats


@dataclass(frozen=True, slots=True)
class CasPolicy:
    """How hard to try: conflicts per change before failing, and the backoffs between tries.

    ``conflict_backoff`` is short and fully jittered: the writers that collided are in other
    replicas, and spreading them is what lets one of them through. ``replay_backoff`` spaces
    the retries of the controller's changes while the API server is unreachable.
    """

    max_attempts: int = 10
    conflict_backoff: BackoffPolicy = field(
        default_factory=lambda: BackoffPolicy(base=0.005, factor=2.0, cap=0.2, jitter=1.0)
    )
    replay_backoff: BackoffPolicy = field(
        default_factory=lambda: BackoffPolicy(base=0.5, factor=2.0, cap=10.0, jitter=0.2)
    )

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


@dataclass(slots=True)
class StoreStats:
    """Running counters, read by the metrics collector, the benchmark and the tests."""

    changes: int = 0  # admission changes answered (committed or dry-run)
    batches: int = 0  # group commits tried (one read, at most one write each)
    batched_changes: int = 0  # changes that went through those batches, counting retries
    max_batch: int = 0  # the largest batch so far
    reads: int = 0
    creates: int = 0
    writes: int = 0  # successful compare-and-swap writes
    conflicts: int = 0  # writes refused with 409 Conflict (each one is followed by a retry)
    exhausted: int = 0  # changes failed after max_attempts conflicts
    unavailable: int = 0  # changes failed because the API server could not be reached
    replays: int = 0  # controller changes written by the lease holder
    replays_dropped: int = 0  # controller changes not written: this replica stopped leading
    observed: int = 0  # TenantLedger objects taken from the watch into the view

    @property
    def retries(self) -> int:
        """Re-reads after a conflict: one per conflict."""
        return self.conflicts


# --------------------------------------------------------------------------- ledger merging


def _charged(ledger: TenantLedger) -> dict[Tier, dict[str, int]]:
    """Usage not held by reservations (the confirmed pods' charges), in nanos per tier."""
    result: dict[Tier, dict[str, int]] = {}
    for tier in TIERS:
        nanos = {name: q.nanos for name, q in ledger.used(tier).items()}
        for reservation in ledger.reservations.values():
            if reservation.tier == tier:
                for name, q in reservation.amount.items():
                    nanos[name] = nanos.get(name, 0) - q.nanos
        result[tier] = nanos
    return result


def _usage(
    charged: Mapping[str, int], reservations: Iterable[Reservation], tier: Tier
) -> dict[str, Quantity]:
    nanos = dict(charged)
    formats: dict[str, Quantity] = {}
    for reservation in reservations:
        if reservation.tier != tier:
            continue
        for name, q in reservation.amount.items():
            nanos[name] = nanos.get(name, 0) + q.nanos
            formats.setdefault(name, q)
    return {
        name: Quantity(value, formats[name].format) if name in formats else Quantity(value)
        for name, value in nanos.items()
        if value
    }


def rebase(replacement: TenantLedger, *, base: TenantLedger, current: TenantLedger) -> TenantLedger:
    """A whole-ledger replacement computed from ``base``, carried over onto ``current``.

    The controller's full recount replaces a ledger with the truth it computed from its view
    (``base``); meanwhile other replicas may have booked, topped up or cancelled reservations
    in the stored object (``current``). The result keeps the replacement's charges and what it
    did to the reservations it knew, and ``current``'s state of every reservation it did not
    change (new ones included), and likewise for queued entries; usage is the replacement's
    charged usage plus those reservations.
    """
    merged: dict[str, Reservation] = dict(replacement.reservations)
    for reservation_id, known in base.reservations.items():
        ours = replacement.reservations.get(reservation_id)
        if ours is None or ours != known:
            continue  # removed or changed by the replacement: ours wins
        theirs = current.reservations.get(reservation_id)
        if theirs is None:
            del merged[reservation_id]  # cancelled or confirmed meanwhile
        else:
            merged[reservation_id] = theirs
    for reservation_id, theirs in current.reservations.items():
        if reservation_id not in base.reservations and reservation_id not in merged:
            merged[reservation_id] = theirs  # booked meanwhile
    # Queued entries merge the same way: the replacement's word on those it knew and changed,
    # the stored object's on the others (entries booked by admission meanwhile included).
    queued = dict(replacement.queued)
    for entry_id, known_entry in base.queued.items():
        mine = replacement.queued.get(entry_id)
        if mine is None or mine != known_entry:
            continue
        stored_entry = current.queued.get(entry_id)
        if stored_entry is None:
            del queued[entry_id]
        else:
            queued[entry_id] = stored_entry
    for entry_id, stored_entry in current.queued.items():
        if entry_id not in base.queued and entry_id not in queued:
            queued[entry_id] = stored_entry
    charged = _charged(replacement)
    rebased = TenantLedger.of(
        replacement.tenant,
        guaranteed=_usage(charged["guaranteed"], merged.values(), "guaranteed"),
        burst=_usage(charged["burst"], merged.values(), "burst"),
        reservations=merged.values(),
        queued=queued.values(),
    )
    return replace(rebased, charges=replacement.charges)


# --------------------------------------------------------------------------- queues


@dataclass(slots=True)
class _Waiter:
    """One admission change waiting for its group commit."""

    change: Change
    commit: bool
    future: asyncio.Future[Any]
    conflicts: int = 0


@dataclass(slots=True)
class _Replay:
    """One controller change: what it was applied to locally and what that gave.

    ``written`` is told the change's answer on the stored object once it is written
    (``outcome``: the answer of its last application to the stored object).
    """

    change: Change
    base: TenantLedger
    local: TenantLedger
    written: Callable[[Any], None] | None = None
    outcome: Any = None

    def apply(self, ledger: TenantLedger, *, stored: bool = False) -> TenantLedger:
        new, answer = self.change(ledger)
        if stored:
            self.outcome = answer
        if new is self.local and new is not ledger:
            # The change returned a ledger it had computed before, whatever it was given:
            # a replacement (a recount's truth). Keep what others did meanwhile.
            return rebase(new, base=self.base, current=ledger)
        return new


@dataclass(slots=True)
class _Queue:
    waiters: list[_Waiter] = field(default_factory=list)
    replays: list[_Replay] = field(default_factory=list)
    writing: list[_Replay] = field(default_factory=list)  # taken by the commit in flight
    task: asyncio.Task[None] | None = None
    replay_failures: int = 0
    replay_after: float = 0.0  # monotonic time before which replays wait (API unreachable)
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True, slots=True)
class _Known:
    resource_version: str
    ledger: TenantLedger  # as stored: no charges


class _Unavailable(Exception):
    """The API server could not be used for this tenant; carries the user-facing error."""

    def __init__(self, error: LedgerUnavailable) -> None:
        super().__init__(error.message)
        self.error = error


_NO_CHARGES: Final[Map[str, Charge]] = Map()


# --------------------------------------------------------------------------- the store


class KubeLedgerStore:
    """Tenant ledgers in TenantLedger objects; see the module docstring.

    Admission uses :meth:`transact` (async, group commit, never trusts the cache). The ledger
    controller uses the synchronous ``get``/``update``/``snapshot`` on the event-loop thread:
    while :attr:`leading`, each ``update`` is applied to the local view and replayed against the
    stored object; otherwise nothing is written. ``clock`` is a monotonic clock.
    """

    def __init__(
        self,
        client: LedgerClient,
        *,
        policy: CasPolicy | None = None,
        max_threads: int = 8,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.policy = policy if policy is not None else CasPolicy()
        self.stats = StoreStats()
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._executor = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="ledger")
        self._queues: dict[str, _Queue] = {}
        self._known: dict[str, _Known] = {}
        self._charges: dict[str, Map[str, Charge]] = {}
        self._views: dict[str, TenantLedger] = {}
        self._leading = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self) -> None:
        """Stop: fail whatever still waits, cancel the commits in flight, free the threads."""
        self._closed = True
        for tenant, queue in list(self._queues.items()):
            if queue.timer is not None:
                queue.timer.cancel()
            for waiter in queue.waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(self._shutting_down(tenant))
            queue.waiters.clear()
            queue.replays.clear()
            if queue.task is not None:
                queue.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await queue.task
        self._executor.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _shutting_down(tenant: str) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"tenant {tenant}: the webhook is shutting down; retry",
            code=UNAVAILABLE_CODE,
            reason="ServiceUnavailable",
        )

    # -- leadership ----------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self._leading

    def set_leading(self, leading: bool) -> None:
        """This replica starts or stops holding the controller Lease (call at once).

        Either way the charges known so far are forgotten: a new leader rebuilds them from the
        live pods and writes the truth; a former leader must not write anything any more.
        """
        if leading == self._leading:
            return
        self._leading = leading
        self._charges.clear()
        self._views.clear()
        dropped = 0
        for queue in self._queues.values():
            dropped += len(queue.replays)
            queue.replays.clear()
            queue.replay_failures = 0
            queue.replay_after = 0.0
        if dropped:
            self.stats.replays_dropped += dropped
            logger.warning(
                "%d ledger changes of the controller were not written: no longer leading",
                dropped,
            )

    async def refresh(self) -> int:
        """Read every TenantLedger object into the local view; returns how many there are."""
        stored = await self._run(self._client.list)
        self.stats.reads += 1
        for item in stored:
            if not item.name:
                continue
            try:
                ledger = self._parse(item)
            except _Unavailable as exc:
                logger.error("%s", exc.error.message)
                continue
            self._known[item.name] = _Known(item.resource_version, ledger)
        return len(stored)

    async def keep_fresh(self, *, interval: float) -> None:
        """Refresh every ``interval`` seconds until cancelled (run it while leading).

        The controller's sweep finds the expired reservations in the local view: this brings
        in those booked by the other replicas.
        """
        while True:
            await self._sleep(interval)
            try:
                await self.refresh()
            except KubeError as exc:
                logger.warning("cannot refresh the tenant ledgers: %s", exc)

    def observe(self, stored: StoredLedger) -> None:
        """A TenantLedger object as the watch delivered it: the view follows it.

        Call on the event-loop thread (:class:`~tenants.kube.ledgerwatch.LedgerWatch`). Every
        replica's ``/status`` and metrics then show what any replica wrote, within a watch
        event. An object older than what this replica wrote or read itself is ignored.
        """
        if not stored.name:
            return
        known = self._known.get(stored.name)
        if known is not None and _older(stored.resource_version, known.resource_version):
            return
        try:
            ledger = self._parse(stored)
        except _Unavailable as exc:
            logger.error("%s", exc.error.message)
            return
        self._known[stored.name] = _Known(stored.resource_version, ledger)
        self.stats.observed += 1
        queue = self._queues.get(stored.name)
        if stored.name in self._views and queue is not None and not queue.writing:
            # Controller changes queued, none being written: the view is this object with
            # them applied, so the controller sees what other replicas booked meanwhile (a
            # pod they admitted is confirmed, not counted as late). While a write is in
            # flight this object may already hold its changes: the commit's own read
            # refreshes the view instead.
            charges = self._charges.get(stored.name)
            self._set_view(
                stored.name, replace(ledger, charges=charges) if charges is not None else ledger
            )

    def forget(self, name: str) -> None:
        """The TenantLedger object is gone (deleted): the view drops it."""
        self._known.pop(name, None)

    # -- the controller's synchronous view -----------------------------------------------

    def get(self, tenant: str) -> TenantLedger:
        """The local view of a tenant's ledger: a cache, never used to admit anything."""
        view = self._views.get(tenant)
        if view is not None:
            return view
        known = self._known.get(tenant)
        if known is None:
            return TenantLedger(tenant)
        charges = self._charges.get(tenant)
        return replace(known.ledger, charges=charges) if charges is not None else known.ledger

    def snapshot(self) -> dict[str, TenantLedger]:
        """Every tenant's ledger in the local view."""
        return {tenant: self.get(tenant) for tenant in self._known.keys() | self._views.keys()}

    def __iter__(self) -> Iterator[TenantLedger]:
        return iter(self.snapshot().values())

    def update(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        written: Callable[[T], None] | None = None,
    ) -> T:
        """Apply a controller change to the local view now; write it if this replica leads.

        Call on the event-loop thread. The result is computed from the local view; the write
        re-runs ``change`` on the freshly read object (a recount's replacement is rebased onto
        it), so the stored ledger is exact even when the view was behind. ``written`` is called
        with the change's answer on the stored object once it is written (never when it is
        not): the view's answer may be wrong while another replica's write is not in it yet.
        """
        base = self.get(tenant)
        new, result = change(base)
        if not commit:
            return result
        if not self._leading:
            self.stats.replays_dropped += 1
            logger.debug("not leading: ledger change for tenant %s not written", tenant)
            return result
        self._views[tenant] = new
        queue = self._queue(tenant)
        queue.replays.append(
            _Replay(cast(Change, change), base, new, cast(Callable[[Any], None] | None, written))
        )
        self._kick(tenant, queue)
        return result

    # -- admission -----------------------------------------------------------------------

    async def transact(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
    ) -> T:
        """Run ``change`` on the freshly read ledger and store its result; returns its answer.

        Raises :class:`LedgerUnavailable` when the API server cannot be reached or the object
        kept changing for ``max_attempts`` tries. ``commit=False`` (dry-run) reads and answers
        without writing.
        """
        if self._closed:
            raise self._shutting_down(tenant)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(cast(Change, change), commit, loop.create_future())
        queue = self._queue(tenant)
        queue.waiters.append(waiter)
        self._kick(tenant, queue)
        return cast(T, await waiter.future)

    # -- group commit --------------------------------------------------------------------

    def _queue(self, tenant: str) -> _Queue:
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = _Queue()
        return queue

    def _kick(self, tenant: str, queue: _Queue) -> None:
        if queue.task is None and not self._closed:
            queue.task = asyncio.get_running_loop().create_task(
                self._drain(tenant, queue), name=f"ledger commit {tenant}"
            )

    def _has_work(self, queue: _Queue) -> bool:
        if queue.waiters:
            return True
        return bool(queue.replays) and self._leading and self._clock() >= queue.replay_after

    async def _drain(self, tenant: str, queue: _Queue) -> None:
        try:
            # Requests arriving in this same turn of the event loop join the first batch.
            await asyncio.sleep(0)
            while self._has_work(queue):
                await self._commit(tenant, queue)
        finally:
            queue.task = None
        if queue.waiters and not self._closed:
            self._kick(tenant, queue)

    def _take(
        self, tenant: str, queue: _Queue, batch: list[_Waiter], replays: list[_Replay]
    ) -> None:
        batch[:] = [w for w in batch if not w.future.done()]
        batch.extend(w for w in queue.waiters if not w.future.done())
        queue.waiters.clear()
        if not self._leading:
            self._drop_replays(tenant, replays)
        elif self._clock() >= queue.replay_after:
            replays.extend(queue.replays)
            queue.replays.clear()

    async def _commit(self, tenant: str, queue: _Queue) -> None:
        """One group commit: read, apply every waiting change, one compare-and-swap write."""
        batch: list[_Waiter] = []
        replays: list[_Replay] = []
        queue.writing = replays
        try:
            await self._commit_batch(tenant, queue, batch, replays)
        except asyncio.CancelledError:
            self._fail(batch, self._shutting_down(tenant))
            raise
        except Exception:
            logger.exception("ledger commit for tenant %s failed", tenant)
            if replays:
                # Those controller changes are lost (the next recount repairs what they did):
                # the view must not keep showing them, or the sweep and the recount would
                # trust a ledger that was never stored.
                self.stats.replays_dropped += len(replays)
                queue.writing = []
                self._forget_view(tenant)
            self._fail(
                batch,
                LedgerUnavailable(
                    f"tenant {tenant}: internal error while booking quota; retry",
                    code=500,
                    reason="InternalError",
                ),
            )
        finally:
            queue.writing = []

    async def _commit_batch(
        self, tenant: str, queue: _Queue, batch: list[_Waiter], replays: list[_Replay]
    ) -> None:
        conflicts = 0
        while True:
            self._take(tenant, queue, batch, replays)
            if not batch and not replays:
                return
            self.stats.batches += 1
            self.stats.batched_changes += len(batch) + len(replays)
            self.stats.max_batch = max(self.stats.max_batch, len(batch) + len(replays))
            try:
                stored, current = await self._read(tenant)
                if not self._leading:
                    # The lease went while the read was in flight: a former leader writes
                    # none of the controller's changes (the new leader recounts).
                    self._drop_replays(tenant, replays)
                elif replays or queue.replays:
                    # A fresh object without the changes about to be written: the view
                    # follows it, with them applied (see ``observe``).
                    self._set_view(tenant, current)
                ledger, answers = self._apply(current, batch, replays)
                if ledger is current:
                    # Nothing to write, but the view must follow the fresh read all the same:
                    # a view left behind would hide later bookings from the sweep for good.
                    self._remember(tenant, stored, current)
                    self._answer(answers)
                    self._replays_written(queue, replays)
                    return
                written = await self._write(tenant, stored, ledger)
            except KubeConflict:
                self.stats.conflicts += 1
                conflicts += 1
                for waiter in batch:
                    waiter.conflicts += 1
                exhausted = [w for w in batch if w.conflicts >= self.policy.max_attempts]
                if exhausted:
                    self.stats.exhausted += len(exhausted)
                    self._fail(exhausted, self._busy(tenant, self.policy.max_attempts))
                    batch[:] = [w for w in batch if w.conflicts < self.policy.max_attempts]
                if not batch and conflicts >= self.policy.max_attempts:
                    self._defer(tenant, queue, replays, reason="kept conflicting")
                    return
                await self._sleep(self.policy.conflict_backoff.delay(conflicts))
                continue
            except _Unavailable as exc:
                live = [w for w in batch if not w.future.done()]
                self.stats.unavailable += len(live)
                self._fail(live, exc.error)
                self._defer(tenant, queue, replays, reason=exc.error.message)
                return
            self._remember(tenant, written, ledger)
            self._answer(answers)
            self._replays_written(queue, replays)
            return

    def _apply(
        self, current: TenantLedger, batch: list[_Waiter], replays: list[_Replay]
    ) -> tuple[TenantLedger, list[tuple[_Waiter, Any, bool]]]:
        ledger = current
        for replay in list(replays):
            try:
                ledger = replay.apply(ledger, stored=True)
            except Exception:
                # A change the controller could apply to its view but not to the stored
                # ledger: drop it rather than block every later write; the recount repairs.
                logger.exception("controller change for tenant %s failed; dropped", ledger.tenant)
                replays.remove(replay)
        answers: list[tuple[_Waiter, Any, bool]] = []
        for waiter in batch:
            try:
                new, result = waiter.change(ledger)
            except Exception as exc:
                answers.append((waiter, exc, True))
                continue
            if waiter.commit:
                ledger = new
            answers.append((waiter, result, False))
        return ledger, answers

    def _answer(self, answers: list[tuple[_Waiter, Any, bool]]) -> None:
        for waiter, value, failed in answers:
            if waiter.future.done():
                continue
            self.stats.changes += 1
            if failed:
                waiter.future.set_exception(value)
            else:
                waiter.future.set_result(value)

    @staticmethod
    def _fail(waiters: Iterable[_Waiter], error: LedgerUnavailable) -> None:
        for waiter in waiters:
            if not waiter.future.done():
                # A fresh exception per waiter: each request raises and logs its own.
                waiter.future.set_exception(
                    LedgerUnavailable(error.message, code=error.code, reason=error.reason)
                )

    def _replays_written(self, queue: _Queue, replays: list[_Replay]) -> None:
        self.stats.replays += len(replays)
        if replays:
            queue.replay_failures = 0
            queue.replay_after = 0.0
        for replay in replays:
            if replay.written is not None:
                try:
                    replay.written(replay.outcome)
                except Exception:
                    logger.exception("reporting a written controller change failed")

    def _defer(self, tenant: str, queue: _Queue, replays: list[_Replay], *, reason: str) -> None:
        """Put the controller's changes back and try them again after a backoff."""
        if not self._leading:
            self._drop_replays(tenant, replays)
            return
        if not replays:
            return
        queue.replays[:0] = replays
        queue.replay_failures += 1
        delay = self.policy.replay_backoff.delay(queue.replay_failures)
        queue.replay_after = self._clock() + delay
        logger.warning(
            "ledger of tenant %s: %d controller changes wait %.1fs (%s)",
            tenant,
            len(replays),
            delay,
            reason,
        )
        if queue.timer is not None:
            queue.timer.cancel()
        queue.timer = asyncio.get_running_loop().call_later(delay, self._kick, tenant, queue)

    def _drop_replays(self, tenant: str, replays: list[_Replay]) -> None:
        """Forget controller changes taken for a write while this replica stopped leading.

        :meth:`set_leading` counts those still queued; these were in flight (read, written
        or refused) at that moment, and are just as unwritten.
        """
        if not replays:
            return
        self.stats.replays_dropped += len(replays)
        logger.warning(
            "ledger of tenant %s: %d controller changes were not written: no longer leading",
            tenant,
            len(replays),
        )
        replays.clear()

    # -- reading and writing -------------------------------------------------------------

    async def _run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: function(*args, **kwargs))

    async def _read(self, tenant: str) -> tuple[StoredLedger, TenantLedger]:
        """The stored object (created when missing) and its ledger with the known charges."""
        try:
            stored = await self._run(self._client.read, tenant)
            self.stats.reads += 1
            if stored is None:
                stored = await self._create(tenant)
        except KubeError as exc:
            raise _Unavailable(self._unavailable(tenant, exc)) from exc
        ledger = self._parse(stored)
        self._known[tenant] = _Known(stored.resource_version, ledger)
        charges = self._charges.get(tenant)
        return stored, replace(ledger, charges=charges) if charges is not None else ledger

    async def _create(self, tenant: str) -> StoredLedger:
        try:
            created = await self._run(self._client.create, tenant)
        except KubeConflict:
            # Another replica created it first: read theirs.
            again = await self._run(self._client.read, tenant)
            self.stats.reads += 1
            if again is None:
                raise KubeConflict(
                    f"{PLURAL}/{tenant} was created and deleted meanwhile", status=409
                ) from None
            return again
        except KubeNotFound as exc:
            raise KubeNotFound(
                f"the {CRD_NAME} custom resource definition is not installed ({exc.message})",
                status=404,
                reason="NotFound",
            ) from exc
        self.stats.creates += 1
        logger.info("created TenantLedger %s", tenant)
        return created

    async def _write(self, tenant: str, stored: StoredLedger, ledger: TenantLedger) -> StoredLedger:
        status = ledger_to_json(ledger, charges=False)
        status.pop("tenant", None)
        try:
            written = await self._run(
                self._client.write_status,
                tenant,
                status,
                resource_version=stored.resource_version,
            )
        except KubeConflict:
            raise
        except KubeError as exc:
            raise _Unavailable(self._unavailable(tenant, exc)) from exc
        self.stats.writes += 1
        return written

    def _remember(self, tenant: str, written: StoredLedger, ledger: TenantLedger) -> None:
        queue = self._queues.get(tenant)
        if queue is not None:
            queue.writing = []  # part of ``ledger`` now
        as_stored = replace(ledger, charges=_NO_CHARGES)
        self._known[tenant] = _Known(written.resource_version, as_stored)
        if self._leading:
            self._charges[tenant] = ledger.charges
        # Controller changes made while this write was in flight: the view keeps them.
        self._set_view(tenant, ledger)

    def _forget_view(self, tenant: str) -> None:
        """Rebuild the view from the last stored object and the changes still queued."""
        self._views.pop(tenant, None)
        self._set_view(tenant, self.get(tenant))

    def _set_view(self, tenant: str, stored: TenantLedger) -> None:
        """The view: ``stored`` with the controller's changes not written yet applied (those
        of a commit in flight, then those still queued); none when there are none (``get``
        then reads the stored object)."""
        queue = self._queues.get(tenant)
        if queue is None or not (queue.writing or queue.replays) or not self._leading:
            self._views.pop(tenant, None)
            return
        view = stored
        for replay in (*queue.writing, *queue.replays):
            with contextlib.suppress(Exception):
                view = replay.apply(view)
        self._views[tenant] = view

    def _parse(self, stored: StoredLedger) -> TenantLedger:
        try:
            return ledger_from_json(dict(stored.status or {}), tenant=stored.name)
        except LedgerError as exc:
            raise _Unavailable(
                LedgerUnavailable(
                    f"TenantLedger {stored.name} has an invalid status ({exc}); delete it to "
                    "have the controller's next recount rebuild it",
                    code=500,
                    reason="InternalError",
                )
            ) from exc

    # -- messages ------------------------------------------------------------------------

    def _busy(self, tenant: str, attempts: int) -> LedgerUnavailable:
        """Each failed change tried ``attempts`` times; the batch it last rode may have tried
        more (later changes join a batch that keeps conflicting), which is not its story."""
        return LedgerUnavailable(
            f"tenant {tenant}: the quota ledger is busy (TenantLedger {tenant} changed during "
            f"{attempts} attempts to book); retry",
            code=CONFLICT_CODE,
            reason="Conflict",
        )

    @staticmethod
    def _unavailable(tenant: str, exc: KubeError) -> LedgerUnavailable:
        if isinstance(exc, KubeForbidden):
            what = (
                f"tenantgate may not read or write TenantLedger {tenant} ({exc.message}); "
                "check its RBAC (deploy/webhooks/overlays/ha)"
            )
        elif isinstance(exc, KubeNotFound):
            what = exc.message
        else:
            what = f"the Kubernetes API server is unreachable ({exc.message})"
        return LedgerUnavailable(
            f"tenant {tenant}: cannot check the quota ledger: {what}; retry",
            code=UNAVAILABLE_CODE,
            reason="ServiceUnavailable",
        )


# --------------------------------------------------------------------------- metrics


_COUNTERS: Final = (
    ("ledger_cas_writes", "writes", "TenantLedger compare-and-swap writes that succeeded."),
    ("ledger_cas_conflicts", "conflicts", "TenantLedger writes refused with 409 and retried."),
    ("ledger_cas_exhausted", "exhausted", "Ledger changes denied after too many conflicts."),
    ("ledger_unavailable", "unavailable", "Ledger changes failed: API server unreachable."),
    ("ledger_reads", "reads", "TenantLedger objects read from the API server."),
    ("ledger_group_commits", "batches", "Group commits tried (one read, at most one write)."),
    ("ledger_group_commit_changes", "batched_changes", "Changes in group commits, retries too."),
    ("ledger_controller_changes_written", "replays", "Controller changes written as leader."),
    ("ledger_controller_changes_dropped", "replays_dropped", "Controller changes not written."),
    ("ledger_watch_updates", "observed", "TenantLedger objects taken from the watch."),
)


class LedgerStoreCollector:
    """Prometheus view of :attr:`KubeLedgerStore.stats` (register on the app's registry)."""

    def __init__(self, store: KubeLedgerStore) -> None:
        self._store = store

    def describe(self) -> list[Metric]:
        return []  # collected lazily: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        stats = self._store.stats
        for name, attribute, documentation in _COUNTERS:
            family = CounterMetricFamily(f"tenantgate_{name}", documentation)
            family.add_metric([], getattr(stats, attribute))
            yield family
        largest = GaugeMetricFamily(
            "tenantgate_ledger_group_commit_max_changes", "The largest group commit so far."
        )
        largest.add_metric([], stats.max_batch)
        yield largest
        leading = GaugeMetricFamily(
            "tenantgate_ledger_leading", "1 while this replica writes the controller's changes."
        )
        leading.add_metric([], 1 if self._store.leading else 0)
        yield leading


__all__ = [
    "CRD_NAME",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "CasPolicy",
    "KubeLedgerClient",
    "KubeLedgerStore",
    "LedgerClient",
    "LedgerStoreCollector",
    "StoreStats",
    "StoredLedger",
    "rebase",
    "stored_ledger",
]
