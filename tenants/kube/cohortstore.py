"""Cohorts with the ``kubernetes`` ledger backend: one ``TenantCohortLedger`` per cohort tree.

A member's booking reads every member's ledger and must never take room another booking
took meanwhile, on any replica. :class:`CohortLedgerStore` adds
:meth:`~CohortLedgerStore.transact_with_peers` to :class:`KubeLedgerStore`:

1. read the tree's ``TenantCohortLedger`` (created when missing), then every member's
   ``TenantLedger``; each member's usage counts the cohort ledger's pending entries for it
   (:mod:`tenants.cohorts.booked`); run the change. A change that grows the member's burst
   tier (a borrowed booking) becomes a pending entry, written with one compare-and-swap on the
   cohort object's ``resourceVersion`` (409: re-read everything, re-run, jittered backoff).
   The bookings of one tree waiting in this replica are decided together and written at once.
2. the member's ``TenantLedger`` records the booking through the store's group commit, the
   change re-run on the fresh object with the members' usage of step 1; it may grow the burst
   tier by no more than the pending entry holds (else step 1 runs again). Then the entry is
   settled (removed) in the background.

Every borrowed booking of a tree is thus ordered by the cohort object's resourceVersion, and
each sees the ones before it either as pending or in the member's ledger, which it reads
after the cohort object. See docs/architecture.md, "Cohorts with several replicas".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

from classifier.quantities import Quantity
from tenants.cohorts.booked import (
    CohortLedger,
    Pending,
    burst_bookings,
    burst_growth,
    cohort_from_json,
    cohort_to_json,
    counted,
    member_usage,
    never_lower,
    with_pending,
    within,
)
from tenants.cohorts.tree import CohortTree
from tenants.kube.cohortclient import COHORT_CRD_NAME
from tenants.kube.errors import KubeConflict, KubeError, KubeNotFound
from tenants.kube.ledgerstore import (
    CONFLICT_CODE,
    CasPolicy,
    KubeLedgerStore,
    LedgerClient,
    StoredLedger,
)
from tenants.ledger import LedgerError, LedgerUnavailable, TenantLedger

logger = logging.getLogger(__name__)

T = TypeVar("T")


# How long a pending entry counts, and how long after its cohort write the member's write may
# still be started. The gap covers the API server's own request timeout (60 s): a member write
# started in time lands before anyone stops counting its entry.
PENDING_TTL_SECONDS: Final = 120.0
SECOND_WRITE_WINDOW_SECONDS: Final = 10.0
SETTLE_DELAY_SECONDS: Final = 0.05

PeerChange = Callable[[TenantLedger, Mapping[str, TenantLedger]], tuple[TenantLedger, Any]]


@dataclass(slots=True)
class CohortStats:
    """Counters of the cohort bookings (tests, the benchmark and the metrics read them)."""

    changes: int = 0
    batches: int = 0
    writes: int = 0
    conflicts: int = 0
    second_writes_rerun: int = 0  # step 2 found the member's burst tier grown: step 1 again
    settled: int = 0


@dataclass(slots=True)
class _Waiter:
    id: str
    tenant: str
    peers: tuple[str, ...]
    change: PeerChange
    commit: bool
    future: asyncio.Future[Any]
    attempts: int = 0


@dataclass(slots=True)
class _Plan:
    """What step 1 decided for one waiter: the views it decided on and what it may grow."""

    waiter: _Waiter
    peers: Mapping[str, TenantLedger]
    growth: Mapping[str, Quantity]
    pending: bool
    started: float


@dataclass(slots=True)
class _CohortQueue:
    waiters: list[_Waiter] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    settle: set[str] = field(default_factory=set)
    settle_task: asyncio.Task[None] | None = None
    second: set[asyncio.Task[None]] = field(default_factory=set)  # member writes in flight


class _Rerun:
    """Step 2 found the member's ledger grown on the burst tier since step 1."""


_RERUN: Final = _Rerun()


class CohortLedgerStore(KubeLedgerStore):
    """:class:`KubeLedgerStore` that also books cohort members (see the module docstring).

    ``cohort_client`` reads and writes the TenantCohortLedger objects; ``wall`` is the Unix
    clock of pending entries' expiry (every replica judges it).
    """

    def __init__(
        self,
        client: LedgerClient,
        cohort_client: LedgerClient,
        *,
        policy: CasPolicy | None = None,
        max_threads: int = 8,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(client, policy=policy, max_threads=max_threads, clock=clock, sleep=sleep)
        self._cohort_client = cohort_client
        self._wall = wall
        self._cohort_queues: dict[str, _CohortQueue] = {}
        self.cohort_stats = CohortStats()

    async def close(self) -> None:
        for name, queue in list(self._cohort_queues.items()):
            for waiter in queue.waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(self._shutting_down(name))
            queue.waiters.clear()
            for task in (queue.task, queue.settle_task, *queue.second):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        await super().close()

    def _count(self, **increments: int) -> None:
        for name, n in increments.items():
            setattr(self.cohort_stats, name, getattr(self.cohort_stats, name) + n)

    # -- admission -----------------------------------------------------------------------

    async def transact_with_peers(
        self,
        tenant: str,
        peers: Collection[str],
        change: Callable[[TenantLedger, Mapping[str, TenantLedger]], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        cohort: str | None = None,
    ) -> T:
        """Run ``change`` on ``tenant``'s ledger with ``peers``' ledgers, as one atomic step
        across replicas (``cohort``: the tree's root, which names its cohort object)."""
        if self._closed:
            raise self._shutting_down(tenant)
        name = cohort or tenant
        loop = asyncio.get_running_loop()
        waiter = _Waiter(
            id=uuid.uuid4().hex[:16],
            tenant=tenant,
            peers=tuple(sorted(set(peers) | {tenant})),
            change=cast(PeerChange, change),
            commit=commit,
            future=loop.create_future(),
        )
        queue = self._cohort_queue(name)
        queue.waiters.append(waiter)
        self._kick_cohort(name, queue)
        return cast(T, await waiter.future)

    def _cohort_queue(self, name: str) -> _CohortQueue:
        queue = self._cohort_queues.get(name)
        if queue is None:
            queue = self._cohort_queues[name] = _CohortQueue()
        return queue

    def _kick_cohort(self, name: str, queue: _CohortQueue) -> None:
        if queue.task is None and not self._closed:
            queue.task = asyncio.get_running_loop().create_task(
                self._drain_cohort(name, queue), name=f"cohort commit {name}"
            )

    async def _drain_cohort(self, name: str, queue: _CohortQueue) -> None:
        try:
            await asyncio.sleep(0)  # requests of this turn of the event loop join the batch
            while queue.waiters:
                batch = [w for w in queue.waiters if not w.future.done()]
                queue.waiters.clear()
                try:
                    await self._decide(name, queue, batch)
                except Exception:
                    logger.exception("cohort commit for %s failed", name)
                    self._fail_cohort(
                        batch,
                        LedgerUnavailable(
                            f"cohort {name}: internal error while booking quota; retry",
                            code=500,
                            reason="InternalError",
                        ),
                    )
        finally:
            queue.task = None
        if queue.waiters and not self._closed:
            self._kick_cohort(name, queue)

    @staticmethod
    def _fail_cohort(waiters: Collection[_Waiter], error: LedgerUnavailable) -> None:
        for waiter in waiters:
            if not waiter.future.done():
                waiter.future.set_exception(
                    LedgerUnavailable(error.message, code=error.code, reason=error.reason)
                )

    # -- step 1: the cohort object -------------------------------------------------------

    async def _decide(self, name: str, queue: _CohortQueue, batch: list[_Waiter]) -> None:
        conflicts = 0
        while batch:
            self._count(batches=1)
            try:
                plans = await self._step_one(name, batch)
            except KubeConflict:
                conflicts += 1
                self._count(conflicts=1)
                for waiter in batch:
                    waiter.attempts += 1
                exhausted = [w for w in batch if w.attempts >= self.policy.max_attempts]
                self._fail_cohort(exhausted, self._cohort_busy(name))
                batch = [w for w in batch if w.attempts < self.policy.max_attempts]
                await self._sleep(self.policy.conflict_backoff.delay(conflicts))
                continue
            except KubeError as exc:
                self._fail_cohort(batch, self._cohort_unavailable(name, exc))
                return
            except LedgerError as exc:
                self._fail_cohort(batch, self._cohort_invalid(name, exc))
                return
            except _StepOneUnavailable as exc:
                self._fail_cohort(batch, exc.error)
                return
            loop = asyncio.get_running_loop()
            for plan in plans:
                task = loop.create_task(
                    self._step_two(name, queue, plan), name=f"cohort member {plan.waiter.id}"
                )
                queue.second.add(task)
                task.add_done_callback(queue.second.discard)
            return

    async def repair(self, tree: CohortTree) -> int:
        """Bring every tree's cohort object in line with its members' ledgers: drop the
        pending entries that expired or arrived, record each member's usage. Run by the lease
        holder after its recounts (which repair the members' ledgers from the pods); returns
        how many objects it wrote."""
        written = 0
        for root in sorted(c.name for c in tree.cohorts.values() if c.parent is None):
            members = sorted(m for c in tree.subtree(root) for m in c.members)
            if not members:
                continue
            for attempt in range(1, self.policy.max_attempts + 1):
                try:
                    before = self.cohort_stats.writes
                    await self._step_one(root, [], members=members)
                    written += self.cohort_stats.writes - before
                    break
                except KubeConflict:
                    self._count(conflicts=1)
                    await self._sleep(self.policy.conflict_backoff.delay(attempt))
                except (KubeError, LedgerError, _StepOneUnavailable) as exc:
                    logger.warning("cohort %s not repaired: %s", root, exc)
                    break
        return written

    async def _step_one(
        self, name: str, batch: list[_Waiter], *, members: Collection[str] = ()
    ) -> list[_Plan]:
        stored = await self._run(self._cohort_client.read, name)
        if stored is None:
            stored = await self._create_cohort(name)
        cohort = cohort_from_json(name, stored.status)
        repairing = bool(members)
        members = sorted({m for w in batch for m in w.peers} | set(members))
        read = await asyncio.gather(*(self._read_member(m) for m in members))
        ledgers = dict(zip(members, read, strict=True))
        now = self._wall()
        live = counted(cohort, ledgers, now=now, excluded={w.id for w in batch})
        views = {m: with_pending(ledger, live) for m, ledger in ledgers.items()}
        plans: list[_Plan] = []
        answers: list[tuple[_Waiter, Any, bool]] = []
        entries = list(live)
        for waiter in batch:
            given = views[waiter.tenant]
            peers = {m: views[m] for m in waiter.peers}
            try:
                new, result = waiter.change(given, peers)
            except Exception as exc:
                answers.append((waiter, exc, True))
                continue
            if not waiter.commit or new is given:
                answers.append((waiter, result, False))
                continue
            growth = burst_growth(new, given)
            if growth:
                entries.append(
                    Pending(
                        id=waiter.id,
                        tenant=waiter.tenant,
                        amount=growth,
                        reservations=burst_bookings(new, given),
                        expires_at=now + PENDING_TTL_SECONDS,
                    )
                )
            # The bookings decided after this one count its growth, never its releases
            # (booked.never_lower): only its member write makes those happen.
            views[waiter.tenant] = never_lower(new, given)
            plans.append(_Plan(waiter, peers, growth, bool(growth), started=self._clock()))
        updated = CohortLedger(
            name,
            tuple(entries),
            {m: member_usage(views[m]) for m in members},
        )
        if (
            tuple(entries) != cohort.pending
            or any(p.pending for p in plans)
            or (repairing and updated.members != cohort.members)
        ):
            await self._write_cohort(name, stored, updated)
        for waiter, value, failed in answers:
            self._count(changes=1)
            if waiter.future.done():
                continue
            if failed:
                waiter.future.set_exception(value)
            else:
                waiter.future.set_result(value)
        return plans

    async def _read_member(self, tenant: str) -> TenantLedger:
        try:
            _, ledger = await self._read(tenant)
        except Exception as exc:
            error = getattr(exc, "error", None)
            if isinstance(error, LedgerUnavailable):
                raise _StepOneUnavailable(error) from exc
            raise
        return ledger

    async def _create_cohort(self, name: str) -> StoredLedger:
        try:
            return await self._run(self._cohort_client.create, name)
        except KubeConflict:
            again = await self._run(self._cohort_client.read, name)
            if again is None:
                raise
            return again
        except KubeNotFound as exc:
            raise KubeNotFound(
                f"the {COHORT_CRD_NAME} custom resource definition is not installed "
                f"({exc.message})",
                status=404,
                reason="NotFound",
            ) from exc

    async def _write_cohort(self, name: str, stored: StoredLedger, cohort: CohortLedger) -> None:
        await self._run(
            self._cohort_client.write_status,
            name,
            cohort_to_json(cohort),
            resource_version=stored.resource_version,
        )
        self._count(writes=1)

    # -- step 2: the member's ledger -----------------------------------------------------

    async def _step_two(self, name: str, queue: _CohortQueue, plan: _Plan) -> None:
        waiter = plan.waiter
        deadline = plan.started + SECOND_WRITE_WINDOW_SECONDS

        def apply(fresh: TenantLedger) -> tuple[TenantLedger, Any]:
            if self._clock() > deadline:
                return fresh, _RERUN
            new, result = waiter.change(fresh, plan.peers)
            if not within(burst_growth(new, fresh), plan.growth):
                return fresh, _RERUN
            return new, result

        try:
            outcome = await self.transact(waiter.tenant, apply)
        except asyncio.CancelledError:
            if not waiter.future.done():
                waiter.future.set_exception(self._shutting_down(waiter.tenant))
            raise
        except LedgerUnavailable as exc:
            if exc.code == CONFLICT_CODE:
                self._settle(name, queue, waiter.id, plan)  # every attempt was refused
            # Otherwise whether the write landed is unknown: the entry stays until it expires.
            if not waiter.future.done():
                waiter.future.set_exception(exc)
            return
        except Exception as exc:
            self._settle(name, queue, waiter.id, plan)
            if not waiter.future.done():
                waiter.future.set_exception(exc)
            return
        if isinstance(outcome, _Rerun):
            self._count(second_writes_rerun=1)
            waiter.attempts += 1
            if waiter.attempts >= self.policy.max_attempts:
                self._settle(name, queue, waiter.id, plan)
                self._fail_cohort([waiter], self._cohort_busy(name))
                return
            # Its pending entry is replaced by the next step 1 (same id).
            queue.waiters.append(waiter)
            self._kick_cohort(name, queue)
            return
        self._count(changes=1)
        self._settle(name, queue, waiter.id, plan)
        if not waiter.future.done():
            waiter.future.set_result(outcome)

    # -- settling pending entries --------------------------------------------------------

    def _settle(self, name: str, queue: _CohortQueue, entry_id: str, plan: _Plan) -> None:
        """Remove a pending entry whose member write is done (or known not to happen),
        batched in the background; an entry that stays is dropped by the next booking that
        sees it arrived, or when it expires."""
        if not plan.pending or self._closed:
            return
        queue.settle.add(entry_id)
        if queue.settle_task is None:
            queue.settle_task = asyncio.get_running_loop().create_task(
                self._settle_soon(name, queue), name=f"cohort settle {name}"
            )

    async def _settle_soon(self, name: str, queue: _CohortQueue) -> None:
        try:
            await self._sleep(SETTLE_DELAY_SECONDS)
            ids = set(queue.settle)
            queue.settle.clear()
            for attempt in range(1, self.policy.max_attempts + 1):
                try:
                    stored = await self._run(self._cohort_client.read, name)
                    if stored is None:
                        return
                    cohort = cohort_from_json(name, stored.status)
                    kept = tuple(e for e in cohort.pending if e.id not in ids)
                    if len(kept) == len(cohort.pending):
                        return
                    await self._write_cohort(name, stored, CohortLedger(name, kept, cohort.members))
                    self._count(settled=len(cohort.pending) - len(kept))
                    return
                except KubeConflict:
                    self._count(conflicts=1)
                    await self._sleep(self.policy.conflict_backoff.delay(attempt))
                except (KubeError, LedgerError) as exc:
                    logger.warning("cohort %s: pending bookings not settled: %s", name, exc)
                    return
            # Every write lost the race to another writer of the object. The entries must still
            # go: one left pending counts its booking a second time once the member's ledger
            # has confirmed it (the reservation became a charge), refusing room that is free
            # until it expires. Try again after the delay.
            queue.settle.update(ids)
        finally:
            queue.settle_task = None
            if queue.settle and not self._closed:
                queue.settle_task = asyncio.get_running_loop().create_task(
                    self._settle_soon(name, queue), name=f"cohort settle {name}"
                )

    # -- messages ------------------------------------------------------------------------

    @staticmethod
    def _cohort_busy(name: str) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"cohort {name}: the quota ledger is busy (TenantCohortLedger {name} kept changing "
            "while booking); retry",
            code=CONFLICT_CODE,
            reason="Conflict",
        )

    @staticmethod
    def _cohort_unavailable(name: str, exc: KubeError) -> LedgerUnavailable:
        if isinstance(exc, KubeNotFound):
            what = exc.message
        elif exc.status == 403:
            what = (
                f"tenantgate may not read or write TenantCohortLedger {name} ({exc.message}); "
                "check its RBAC (deploy/webhooks/overlays/ha)"
            )
        else:
            what = f"the Kubernetes API server is unreachable ({exc.message})"
        return LedgerUnavailable(f"cohort {name}: cannot check the quota ledger: {what}; retry")

    @staticmethod
    def _cohort_invalid(name: str, exc: LedgerError) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"TenantCohortLedger {name} has an invalid status ({exc}); delete it to have "
            "tenantgate create it again",
            code=500,
            reason="InternalError",
        )


class _StepOneUnavailable(Exception):
    def __init__(self, error: LedgerUnavailable) -> None:
        super().__init__(error.message)
        self.error = error


__all__ = ["CohortLedgerStore", "CohortStats"]
