"""Releasing pod groups for real: one booking for every member, then their gates together.

The :class:`~tenants.kube.releaser.Releaser` asks :class:`GroupReleaser` first, for each
tenant whose room may have freed. For each release :func:`tenants.groups.release.plan_groups`
picks, the members are booked in one ``transact`` (one compare-and-swap on the TenantLedger
with several replicas): all of them, or none when another booking took the room meanwhile.
Then every member's gate is removed (the same guarded PATCH as a single pod's), in parallel.
When no member's gate could be removed the booking is cancelled; when some were, the others
keep their booking and are retried after a backoff on it (a member booked already is counted
as booked, never booked twice), so a group is never released on half a booking.

It also reports groups still incomplete after their ``timeoutSeconds`` (a warning event on
each member, and the ``tenantgate_pod_groups_timed_out`` gauge), and keeps the group metrics.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from tenants.config import TenantPolicy
from tenants.groups.release import (
    GroupRelease,
    WaitingGroup,
    book_group,
    plan_groups,
    undo_group,
    waiting_groups,
)
from tenants.kube.errors import KubeError
from tenants.ledger import LedgerUnavailable
from tenants.queue.line import QueuedPod, TenantQueue

if TYPE_CHECKING:
    from tenants.kube.releaser import Releaser

logger = logging.getLogger(__name__)

# tenantgate_pod_group_wait_seconds: 0.1 s x 2^i, up to ~55 min, as the queue's waits.
GROUP_WAIT_BUCKETS: Final = tuple(0.1 * 2**i for i in range(16))


@dataclass(slots=True)
class GroupStats:
    released: int = 0
    waits: list[int] = field(default_factory=lambda: [0] * (len(GROUP_WAIT_BUCKETS) + 1))
    wait_sum: float = 0.0
    timed_out: dict[str, str] = field(default_factory=dict)  # group id -> tenant

    def observe_wait(self, seconds: float) -> None:
        for index, bound in enumerate(GROUP_WAIT_BUCKETS):
            if seconds <= bound:
                self.waits[index] += 1
                break
        else:
            self.waits[-1] += 1
        self.wait_sum += seconds


class GroupReleaser:
    """The group side of a :class:`Releaser` (same store, client, pace and events)."""

    def __init__(self, releaser: Releaser) -> None:
        self._releaser = releaser
        self.stats = GroupStats()

    async def evaluate(self, tenant: str, queue: TenantQueue, known: TenantPolicy) -> bool:
        """Release what fits of ``tenant``'s groups; True when a group holds the line (single
        pods behind it wait)."""
        releaser = self._releaser
        controller = releaser.controller
        now = releaser.clock()
        policy = known.group_queue()
        plan = plan_groups(
            queue,
            quota=known.quota,
            ledger=releaser.store.get(tenant),
            policy=policy,
            now=now,
            running=controller.running_groups.running,
            parked=queue.is_parked,
            cohort_member=tenant in controller.policy.cohorts.members,
        )
        for release in plan.releases:
            await self._release(tenant, queue, known, release)
        return plan.holds_line

    async def _release(
        self, tenant: str, queue: TenantQueue, known: TenantPolicy, release: GroupRelease
    ) -> None:
        releaser = self._releaser
        members = release.members
        tier = known.group_queue().tier
        ttl = releaser.controller.policy.reservation_ttl
        cohort_member = tenant in releaser.controller.policy.cohorts.members
        now = releaser.clock()
        for member in members:
            queue.park(member.uid)
        try:
            booking = await releaser.store.transact(
                tenant,
                lambda ledger: book_group(
                    ledger,
                    quota=known.quota,
                    tier=tier,
                    members=members,
                    now=now,
                    ttl=ttl,
                    cohort_member=cohort_member,
                ),
            )
        except LedgerUnavailable as exc:
            for member in members:
                releaser.failed(tenant, member, "ledger", exc.message)
            return
        if not booking.booked:
            for member in members:
                queue.unpark(member.uid)
            releaser.recheck(tenant)  # the plan saw room the stored ledger refused
            return
        releaser.pace.take(now, len(members))
        loop = asyncio.get_running_loop()
        outcomes = await asyncio.gather(
            *(
                loop.run_in_executor(releaser.executor, _ungate(releaser, member, tier))
                for member in members
            )
        )
        failures = [(m, e) for m, e in zip(members, outcomes, strict=True) if e is not None]
        if failures and len(failures) == len(members):
            definite = [e for _, e in failures if e.status and e.status != 504]
            if len(definite) == len(members):
                # Nothing was released: the whole booking goes back, every place in line kept.
                try:
                    await releaser.store.transact(
                        tenant,
                        lambda ledger: undo_group(
                            ledger, members=members, reservations=booking.reservations
                        ),
                    )
                except LedgerUnavailable as undo_error:
                    logger.warning(
                        "group %s: no gate removed and its booking not cancelled: %s",
                        release.group.id,
                        undo_error.message,
                    )
        for member, error in failures:
            # The booking stays with a member released with others: it is retried on it.
            releaser.failed(tenant, member, _reason(error), str(error))
        done = [m for m in members if all(m is not f for f, _ in failures)]
        for member in done:
            releaser.released_ok(tenant, member, tier)
        if done and not release.replacement:
            self.stats.released += 1
            self.stats.observe_wait(max(releaser.clock() - release.group.queued_at, 0.0))
            self.stats.timed_out.pop(release.group.id, None)
            logger.info(
                "pod group %s of tenant %s released: %d members, %s",
                release.group.id,
                tenant,
                len(members),
                _format(release.group),
                extra={"tenant": tenant, "group": release.group.id},
            )

    # -- incomplete groups -------------------------------------------------------------

    def check_timeouts(self, now: float) -> None:
        """Report each group still incomplete after its tenant's ``timeoutSeconds`` once."""
        releaser = self._releaser
        controller = releaser.controller
        waiting: set[str] = set()
        for tenant, queue in controller.queues.queues.items():
            known = controller.policy.tenants.get(tenant)
            if known is None:
                continue
            for group in waiting_groups(queue):
                if group.complete or controller.running_groups.running(group.id):
                    continue
                if now - group.queued_at <= known.groups.timeout:
                    continue
                waiting.add(group.id)
                if group.id in self.stats.timed_out:
                    continue
                self.stats.timed_out[group.id] = tenant
                size = str(group.size) if group.size else "an unknown number of"
                message = (
                    f"pod group {group.name} is incomplete after {known.groups.timeout:g}s: "
                    f"{len(group.members)} of {size} members created; its members stay gated "
                    "and nothing is booked"
                )
                logger.warning(message, extra={"tenant": tenant, "group": group.id})
                for member in group.members:
                    releaser.event(member, "PodGroupIncomplete", message, kind="Warning")
        for group_id in [g for g in self.stats.timed_out if g not in waiting]:
            del self.stats.timed_out[group_id]

    # -- metrics -----------------------------------------------------------------------

    def metrics(self) -> Iterator[Metric]:
        controller = self._releaser.controller
        waiting = GaugeMetricFamily(
            "tenantgate_pod_groups_waiting",
            "Pod groups whose members wait behind tenantgate's gate, by tenant.",
            labels=["tenant"],
        )
        for tenant, queue in sorted(controller.queues.queues.items()):
            count = len(queue.groups())
            if count:
                waiting.add_metric([tenant], count)
        yield waiting
        timed_out = GaugeMetricFamily(
            "tenantgate_pod_groups_timed_out",
            "Pod groups still incomplete after their timeoutSeconds, by tenant.",
            labels=["tenant"],
        )
        per_tenant: dict[str, int] = {}
        for tenant in self.stats.timed_out.values():
            per_tenant[tenant] = per_tenant.get(tenant, 0) + 1
        for tenant, count in sorted(per_tenant.items()):
            timed_out.add_metric([tenant], count)
        yield timed_out
        waits = HistogramMetricFamily(
            "tenantgate_pod_group_wait_seconds",
            "Time from a pod group's first member to the release of the whole group.",
        )
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*GROUP_WAIT_BUCKETS, math.inf), self.stats.waits, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else f"{bound:g}", cumulative))
        waits.add_metric([], buckets, self.stats.wait_sum)
        yield waits


def _ungate(releaser: Releaser, member: QueuedPod, tier: Any) -> Any:
    def run() -> KubeError | None:
        try:
            releaser.client.ungate(member, tier=tier)
        except KubeError as exc:
            return exc
        return None

    return run


def _reason(error: KubeError) -> str:
    from tenants.kube.releaser import failure_reason

    return failure_reason(error)


def _format(group: WaitingGroup) -> str:
    return ",".join(f"{name}={q}" for name, q in sorted(group.total.items()))


__all__ = ["GROUP_WAIT_BUCKETS", "GroupReleaser", "GroupStats"]
