"""Releasing pod groups: the plan and the one ledger change (tenants/groups/release.py)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from classifier.quantities import Quantity
from tenants.config import QueuePolicy
from tenants.groups.membership import Membership
from tenants.groups.release import GroupPlan, book_group, plan_groups, undo_group, waiting_groups
from tenants.groups.running import RunningGroups
from tenants.ledger import TenantLedger, book, settle_queued
from tenants.queue.line import QueuedPod, TenantQueue
from tenants.quota import build_quota

QUOTA = build_quota({"cpu": Quantity.parse("12")})
PLAIN = QueuePolicy()


def cpu(amount: str) -> dict[str, Quantity]:
    return {"cpu": Quantity.parse(amount)}


def member(group: str, index: int, *, size: int = 8, at: float = 0.0, prio: int = 0) -> QueuedPod:
    name = f"{group}-{index}"
    return QueuedPod(
        f"uid-{name}",
        "ns",
        name,
        prio,
        at + index,
        cpu("1"),
        f"e-{name}",
        group=f"ns/job/{group}",
        group_size=size,
    )


def single(name: str, amount: str = "1", *, at: float = 0.0) -> QueuedPod:
    return QueuedPod(f"uid-{name}", "ns", name, 0, at, cpu(amount), f"e-{name}")


def queue_of(*pods: QueuedPod) -> TenantQueue:
    queue = TenantQueue("t")
    for pod in pods:
        queue.add(pod)
    return queue


def plan(
    queue: TenantQueue,
    ledger: TenantLedger,
    *,
    policy: QueuePolicy = PLAIN,
    running: Collection[str] = (),
) -> GroupPlan:
    return plan_groups(
        queue,
        quota=QUOTA,
        ledger=ledger,
        policy=policy,
        now=100.0,
        running=lambda group: group in running,
        parked=queue.is_parked,
    )


def used(amount: str) -> TenantLedger:
    return book(
        TenantLedger("t"), reservation_id="r", tier="guaranteed", amount=cpu(amount), now=0, ttl=1e9
    )


def test_an_incomplete_group_is_never_released_and_members_are_not_lanes() -> None:
    queue = queue_of(*(member("a", i) for i in range(7)))
    assert not list(queue.lanes())  # a member is never offered alone
    assert plan(queue, TenantLedger("t")).releases == ()
    [group] = waiting_groups(queue)
    assert not group.complete
    assert group.total == cpu("7")


def test_two_groups_of_eight_into_room_for_twelve_go_one_after_the_other() -> None:
    queue = queue_of(
        *(member("a", i) for i in range(8)), *(member("b", i, at=50) for i in range(8))
    )
    first = plan(queue, TenantLedger("t"))
    assert [r.group.name for r in first.releases] == ["a"]
    assert len(first.releases[0].members) == 8
    # a runs (8 used): b waits, never 4 of it.
    for pod in first.releases[0].members:
        queue.remove(pod.uid)
    assert plan(queue, used("8")).releases == ()
    assert [r.group.name for r in plan(queue, used("4")).releases] == ["b"]


def test_a_cohort_members_group_keeps_its_total_within_the_guarantee() -> None:
    # 2 cpu in the guaranteed tier and 6 of burst (borrowed from the cohort while the guarantee
    # was full): the tier has room for a group of 8 (2 + 8 <= 12), but the member's total would
    # reach 16, 4 past its guarantee, which the cohort's pool counts as borrowed and no group
    # booking reads (tenants/cohorts/tier.py, within_guarantee).
    burst = book(used("2"), reservation_id="b", tier="burst", amount=cpu("6"), now=0, ttl=1e9)
    members = [member("a", i) for i in range(8)]
    queue = queue_of(*members)
    assert [r.group.name for r in plan(queue, burst).releases] == ["a"]  # a tenant alone
    planned = plan_groups(
        queue,
        quota=QUOTA,
        ledger=burst,
        policy=PLAIN,
        now=100.0,
        running=lambda group: False,
        parked=queue.is_parked,
        cohort_member=True,
    )
    assert planned.releases == ()
    same, refused = book_group(
        burst, quota=QUOTA, tier="guaranteed", members=members, now=1, ttl=60, cohort_member=True
    )
    assert not refused.booked
    assert same == burst
    assert [(s.resource, s.used) for s in refused.shortfalls] == [("cpu", cpu("8")["cpu"])]
    # Four of its burst cpu end: 4 + 8 = 12, the group fits.
    freed = book(used("2"), reservation_id="b", tier="burst", amount=cpu("2"), now=0, ttl=1e9)
    _, booking = book_group(
        freed, quota=QUOTA, tier="guaranteed", members=members, now=1, ttl=60, cohort_member=True
    )
    assert booking.booked


def test_booking_a_group_is_one_change_of_all_or_none() -> None:
    members = [member("a", i) for i in range(8)]
    ledger = TenantLedger("t")
    for pod in members:
        ledger = settle_queued(
            ledger, entry_id=pod.entry_id, pod_uid=pod.uid, priority=0, queued_at=pod.queued_at
        )
    short, refused = book_group(
        used("5"), quota=QUOTA, tier="guaranteed", members=members, now=1, ttl=60
    )
    assert not refused.booked
    assert short == used("5")
    assert [s.resource for s in refused.shortfalls] == ["cpu"]
    after, booking = book_group(
        ledger, quota=QUOTA, tier="guaranteed", members=members, now=1, ttl=60
    )
    assert booking.booked
    assert after.guaranteed["cpu"] == Quantity.parse("8")
    assert not after.queued
    assert {after.reservations[r].pod_uid for r in booking.reservations.values()} == {
        pod.uid for pod in members
    }
    # Booked already (a gate removal retried): counted once, never twice.
    again, second = book_group(
        after, quota=QUOTA, tier="guaranteed", members=members, now=2, ttl=60
    )
    assert second.booked
    assert again.guaranteed["cpu"] == Quantity.parse("8")
    undone, _ = undo_group(after, members=members, reservations=booking.reservations)
    assert not undone.guaranteed
    assert len(undone.queued) == 8


def test_a_running_groups_new_member_goes_alone_ahead_of_other_work() -> None:
    queue = queue_of(single("early", "2", at=-100), member("a", 3))
    result = plan(queue, used("8"), running={"ns/job/a"})
    assert [(r.replacement, [m.name for m in r.members]) for r in result.releases] == [
        (True, ["a-3"])
    ]


def test_strict_fifo_a_group_ahead_that_does_not_fit_holds_single_pods() -> None:
    strict = replace(PLAIN, ordering="StrictFIFO")
    queue = queue_of(*(member("a", i) for i in range(8)), single("late", at=50))
    assert plan(queue, used("6"), policy=strict).holds_line
    assert not plan(queue, used("6")).holds_line  # BestEffortFIFO: singles may pass
    ahead = queue_of(single("early", at=-5), *(member("a", i) for i in range(8)))
    assert not plan(ahead, used("6"), policy=strict).holds_line


def test_a_group_is_placed_by_its_highest_priority_and_first_time() -> None:
    queue = queue_of(
        *(member("low", i, size=2, at=0) for i in range(2)),
        member("high", 0, size=2, at=10, prio=0),
        member("high", 1, size=2, at=10, prio=500),
    )
    result = plan(queue, used("9"))
    assert [r.group.name for r in result.releases] == ["high"]


def test_running_groups_follow_released_members() -> None:
    running = RunningGroups()
    group = Membership("ns", "job/a", 8)
    running.observe("u1", group, running=True)
    running.observe("u2", group, running=True)
    assert running.running("ns/job/a")
    running.observe("u1", group, running=False)
    running.forget("u2")
    assert not running.running("ns/job/a")
    assert not running
