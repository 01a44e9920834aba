"""Releasing across a cohort: lowest share first, then queue order; borrowed room re-checked on
the ledgers being written; members queueing for the burst tier."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from classifier.quantities import Quantity
from tenants.cohorts.release import MemberQueue, book_member_release, plan_cohort_release
from tenants.config import Policy
from tenants.configfile import load_text
from tenants.ledger import TenantLedger, book, enqueue
from tenants.queue.admission import never_fits, queue_pod, queued_warning
from tenants.queue.line import QueuedPod, TenantQueue
from tenants.queue.release import ReleaseBooking

HEAD = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
"""

# Three members queueing for borrowed room, weights 1, 1 and 2; the pool is the cohort's own
# 8 cpu; team-g queues for its guarantee and lends none of it.
POOL = (
    HEAD
    + """\
cohorts:
  pool: {quota: {cpu: "8"}}
tenants:
  one:
    namespaces: [one]
    cohort: pool
    overQuota: queue
    queue: {tier: burst}
    quota: {guaranteed: {cpu: "0"}}
  two:
    namespaces: [two]
    cohort: pool
    overQuota: queue
    queue: {tier: burst}
    quota: {guaranteed: {cpu: "0"}}
  four:
    namespaces: [four]
    cohort: pool
    fairSharing: {weight: 2}
    overQuota: queue
    queue: {tier: burst}
    quota: {guaranteed: {cpu: "0"}}
  team-g:
    namespaces: [team-g]
    cohort: pool
    overQuota: queue
    lendingLimit: {cpu: "0"}
    borrowingLimit: {cpu: "3"}
    quota: {guaranteed: {cpu: "2"}}
"""
)


def cpu(text: str) -> dict[str, Quantity]:
    return {"cpu": Quantity.parse(text)}


def compiled(text: str = POOL) -> Policy:
    return load_text(text, filename="test.yaml").policy


def queued(tenant: str, index: int, amount: str = "1") -> QueuedPod:
    return QueuedPod(
        uid=f"{tenant}-{index}",
        namespace=tenant,
        name=f"p-{index}",
        priority=10,
        queued_at=100.0 + index,
        amount=cpu(amount),
        entry_id=f"q-{tenant}-{index}",
    )


def members(policy: Policy, pods: Mapping[str, list[QueuedPod]]) -> dict[str, MemberQueue]:
    out = {}
    for name, waiting in pods.items():
        queue = TenantQueue(name)
        for pod in waiting:
            queue.add(pod)
        tenant = policy.tenants[name]
        assert tenant.queue is not None
        out[name] = MemberQueue(tenant, tenant.queue, queue)
    return out


def ledgers(policy: Policy, **totals: str) -> dict[str, TenantLedger]:
    out = {}
    for name in policy.cohorts.members:
        amount = totals.get(name.replace("-", "_"))
        out[name] = TenantLedger.of(name, burst=cpu(amount) if amount else {})
    return out


def test_release_order_across_three_tenants_with_weights_1_1_and_2() -> None:
    policy = compiled()
    waiting = {name: [queued(name, i) for i in range(4)] for name in ("one", "two", "four")}
    plan = plan_cohort_release(
        policy.cohorts, members(policy, waiting), ledgers(policy), now=200.0, limit=100
    )
    # Lowest weighted share first (four's counts half), then queue order (time queued, then
    # namespace/name); the 8 cpu of the pool go 4 to four, 2 each to one and two.
    assert [pod.uid for _, pod in plan] == [
        "four-0",  # all at 0: four/p-0 is first in queue order
        "one-0",
        "two-0",
        "four-1",  # four at 1/16 < 1/8
        "one-1",  # all at 1/8: one/p-1 and two/p-1 were queued before four/p-2
        "two-1",
        "four-2",  # four at 1/8 < 1/4
        "four-3",  # four at 3/16 < 1/4
    ]


def test_a_member_whose_head_does_not_fit_stops_only_its_own_walk() -> None:
    policy = compiled()
    waiting = {
        "one": [queued("one", 0, "6"), queued("one", 1)],
        "two": [queued("two", i) for i in range(3)],
    }
    plan = plan_cohort_release(
        policy.cohorts, members(policy, waiting), ledgers(policy, four="4"), now=200.0, limit=10
    )
    # 4 of 8 are borrowed: one's 6-cpu head does not fit, and one-1 waits behind it.
    assert [pod.uid for _, pod in plan] == ["two-0", "two-1", "two-2"]


def test_a_guaranteed_queue_releases_within_the_guarantee_whatever_the_pool() -> None:
    policy = compiled()
    waiting = {"team-g": [queued("team-g", i) for i in range(3)]}
    plan = plan_cohort_release(
        policy.cohorts, members(policy, waiting), ledgers(policy, four="8"), now=200.0, limit=10
    )
    assert [pod.uid for _, pod in plan] == ["team-g-0", "team-g-1"]


def test_a_guaranteed_release_past_the_members_guarantee_in_total_needs_the_pools_room() -> None:
    # team-g runs 2 cpu of burst pods (borrowed while its guarantee was full) and none in its
    # guaranteed tier: that tier has room for both queued pods, but each takes team-g's total
    # past its guarantee of 2, and the pool measures that as borrowing (tenants/cohorts/tier.py,
    # within_guarantee). With four holding the whole pool, nothing is released.
    policy = compiled()
    waiting = {"team-g": [queued("team-g", i) for i in range(2)]}
    full = ledgers(policy, team_g="2", four="8")
    plan = plan_cohort_release(policy.cohorts, members(policy, waiting), full, now=200.0, limit=10)
    assert plan == []
    # One cpu of the pool free: one pod, borrowing it.
    room = ledgers(policy, team_g="2", four="7")
    plan = plan_cohort_release(policy.cohorts, members(policy, waiting), room, now=200.0, limit=10)
    assert [pod.uid for _, pod in plan] == ["team-g-0"]
    # The booking checks the same on the ledgers being written.
    pod = queued("team-g", 0)
    ledger = enqueue(full["team-g"], entry_id=pod.entry_id, priority=10, now=100, ttl=None)

    def release_on(peers: dict[str, TenantLedger]) -> tuple[TenantLedger, ReleaseBooking]:
        return book_member_release(
            ledger,
            peers,
            tree=policy.cohorts,
            tenant=policy.tenants["team-g"],
            tier="guaranteed",
            pod=pod,
            now=200,
            ttl=60,
        )

    _, refused = release_on(full)
    assert (refused.decision.tier, refused.decision.limit) == (None, "cohort")
    booked, released = release_on(room)
    assert released.decision.tier == "guaranteed"
    assert booked.guaranteed["cpu"] == Quantity.parse("1")


def test_the_release_booking_checks_the_room_on_the_ledgers_being_written() -> None:
    policy = compiled()
    tenant = policy.tenants["one"]
    pod = queued("one", 0, "2")
    ledger = enqueue(TenantLedger("one"), entry_id=pod.entry_id, priority=10, now=100, ttl=None)
    peers = ledgers(policy, four="7")  # another replica took 7 of the 8 meanwhile
    unchanged, refused = book_member_release(
        ledger, peers, tree=policy.cohorts, tenant=tenant, tier="burst", pod=pod, now=200, ttl=60
    )
    assert refused.decision.tier is None
    assert refused.decision.limit == "cohort"
    assert refused.decision.borrowed_from is None
    assert unchanged is ledger

    peers = ledgers(policy, four="6")
    booked, released = book_member_release(
        ledger, peers, tree=policy.cohorts, tenant=tenant, tier="burst", pod=pod, now=200, ttl=60
    )
    assert released.decision.tier == "burst"
    assert released.decision.borrowed_from == "pool"  # what the release PATCH records
    assert booked.burst == cpu("2")
    assert dict(booked.queued) == {}
    assert booked.reservation_for_pod("one-0") is not None
    again, twice = book_member_release(
        booked, peers, tree=policy.cohorts, tenant=tenant, tier="burst", pod=pod, now=201, ttl=60
    )
    assert twice.already
    assert again is booked


def test_a_member_may_queue_for_borrowed_room_up_to_what_it_could_hold() -> None:
    policy = compiled()
    one = policy.tenants["one"]
    assert one.queue is not None
    assert one.queue.tier == "burst"
    assert one.queue_room == cpu("8")  # nothing guaranteed, the whole pool to borrow
    assert never_fits(one, cpu("8")) is None
    assert never_fits(one, cpu("9")) == (
        "it is larger than the most tenant one can hold with what its cohort lends (cpu=8), "
        "so it is never queued"
    )
    # A guaranteed queue keeps its rule: the guarantee.
    assert policy.tenants["team-g"].queue_room is None
    assert never_fits(policy.tenants["team-g"], cpu("3")) is not None


def test_a_release_within_the_guarantee_borrows_from_no_cohort() -> None:
    policy = compiled()
    pod = queued("team-g", 0, "2")
    ledger = enqueue(TenantLedger("team-g"), entry_id=pod.entry_id, priority=10, now=100, ttl=None)
    tenant = policy.tenants["team-g"]
    _, released = book_member_release(
        ledger,
        ledgers(policy),
        tree=policy.cohorts,
        tenant=tenant,
        tier="guaranteed",
        pod=pod,
        now=200,
        ttl=60,
    )
    assert released.decision.tier == "guaranteed"
    assert released.decision.borrowed_from is None


@pytest.mark.parametrize("limit", [0, -1])
def test_no_tokens_no_plan(limit: int) -> None:
    policy = compiled()
    waiting = {"one": [queued("one", 0)]}
    assert (
        plan_cohort_release(
            policy.cohorts, members(policy, waiting), ledgers(policy), now=0, limit=limit
        )
        == []
    )


def test_a_booked_member_counts_in_the_plan() -> None:
    policy = compiled()
    booked = book(
        TenantLedger("two"), reservation_id="r", tier="burst", amount=cpu("7"), now=0, ttl=60
    )
    view = {**ledgers(policy), "two": booked}
    waiting = {"one": [queued("one", i) for i in range(3)]}
    plan = plan_cohort_release(policy.cohorts, members(policy, waiting), view, now=0, limit=10)
    assert [pod.uid for _, pod in plan] == ["one-0"]


def test_a_member_queued_for_borrowed_room_is_told_what_releases_it() -> None:
    policy = compiled()
    one = policy.tenants["one"]
    _, answer = queue_pod(
        TenantLedger("one"), tenant=one, amount=cpu("1"), priority=10, entry_id="q", now=0, ttl=60
    )
    assert queued_warning(one, answer) == (
        "queued: one is past its guarantee and its cohort has no room to lend it now; position "
        "1 of 1; released when the cohort has room to lend, to its members with the lowest "
        "share first"
    )


def test_a_pod_groups_members_are_never_released_one_by_one_by_the_cohort_plan() -> None:
    # Members are released whole by the group releaser (tenants/groups/release.py); the
    # tree's plan offers only single pods, even when a member alone would fit.
    policy = compiled()
    member = replace(queued("team-g", 0), group="team-g/labels/train", group_size=2)
    waiting = {"team-g": [member, queued("team-g", 1)]}
    plan = plan_cohort_release(
        policy.cohorts, members(policy, waiting), ledgers(policy), now=200.0, limit=10
    )
    assert [pod.uid for _, pod in plan] == ["team-g-1"]
