"""The per-tenant queue and the release planner, checked against brute force.

``TenantQueue`` keeps per-priority lists so that ordering, positions and release plans never
scan the queue; these tests compare every answer with the plain definition: sort every pod by
(-effective priority, time queued, name) and walk that list.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from classifier.quantities import Quantity
from tenants.config import QueuePolicy
from tenants.ledger import TenantLedger, book, enqueue, queued_entry_for
from tenants.queue.line import (
    GROUP_ENTRY_PREFIX,
    QueuedPod,
    TenantQueue,
    ledger_position,
    order_key,
)
from tenants.queue.release import (
    PaceSettings,
    ReleasePace,
    book_release,
    plan_release,
    undo_release,
)
from tenants.quota import build_quota


def cpu(amount: str) -> dict[str, Quantity]:
    return {"cpu": Quantity.parse(amount)}


def queued(name: str, priority: int, at: float, amount: str = "1") -> QueuedPod:
    return QueuedPod(f"uid-{name}", "ns", name, priority, at, cpu(amount), f"e-{name}")


AGING = QueuePolicy(aging_interval=60, aging_step=100, max_boost=300)
PLAIN = QueuePolicy()


def brute_order(pods: list[QueuedPod], policy: QueuePolicy, now: float) -> list[str]:
    return [
        p.name
        for p in sorted(pods, key=lambda p: (*order_key(p.priority, p.slot, policy, now), p.uid))
    ]


def brute_plan(
    pods: list[QueuedPod],
    policy: QueuePolicy,
    now: float,
    *,
    room: int,
    parked: frozenset[str] = frozenset(),
    limit: int = 1000,
) -> list[str]:
    """The definition: walk in order; fit -> release; else skip, or stop (strict, maxBoost)."""
    left = room
    released: list[str] = []
    for pod in (p for name in brute_order(pods, policy, now) for p in pods if p.name == name):
        if len(released) >= limit:
            break
        need = pod.amount["cpu"].nanos
        if pod.uid not in parked and need <= left:
            released.append(pod.name)
            left -= need
            continue
        if policy.ordering == "StrictFIFO" or policy.at_max_boost(now - pod.queued_at):
            break
    return released


def test_higher_priority_first_then_time_queued_then_name() -> None:
    queue = TenantQueue("t")
    for pod in (queued("b", 100, 10), queued("a", 100, 10), queued("c", 500, 20)):
        queue.add(pod)
    assert [p.name for p in queue.ordered(PLAIN, 30)] == ["c", "a", "b"]
    assert [queue.position(f"uid-{n}", PLAIN, 30) for n in "cab"] == [1, 2, 3]


def test_aging_lets_an_old_low_pod_overtake_once_its_boost_exceeds_the_gap() -> None:
    queue = TenantQueue("t")
    queue.add(queued("low", 100, 0))
    queue.add(queued("high", 300, 120))
    # At 120 s: low 100 + 200 = 300 ties high's 300; the older goes first.
    assert [p.name for p in queue.ordered(AGING, 120)] == ["low", "high"]
    # At 119 s low has 100 + 100 = 200: high goes first.
    assert [p.name for p in queue.ordered(AGING, 119)] == ["high", "low"]


def test_remove_and_park_keep_positions_right() -> None:
    queue = TenantQueue("t")
    for index in range(5):
        queue.add(queued(f"p{index}", 100, index))
    queue.park("uid-p1")
    assert queue.position("uid-p3", PLAIN, 10) == 4  # parked pods keep their place
    queue.remove("uid-p0")
    assert queue.position("uid-p3", PLAIN, 10) == 3
    assert len(queue) == 4
    queue.unpark("uid-p1")
    assert [p.name for p in queue.ordered(PLAIN, 10)] == ["p1", "p2", "p3", "p4"]


def test_ledger_position_counts_entries_at_least_as_high() -> None:
    ledger = TenantLedger("t")
    for name, priority, at in (("a", 100, 0.0), ("b", 500, 50.0), ("c", 100, 100.0)):
        ledger = enqueue(ledger, entry_id=name, priority=priority, now=at, ttl=None)
    # A new 300 at 120 s: b (500) is ahead, a (100 + 200 = 300) too (older), c (100) is not.
    assert ledger_position(ledger.queued.values(), priority=300, policy=AGING, now=120) == 3


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.integers(min_value=-100, max_value=1500),
            st.floats(min_value=0, max_value=1000),
            st.booleans(),
        ),
        max_size=30,
    ),
    priority=st.integers(min_value=-100, max_value=1500),
    now=st.floats(min_value=0, max_value=2000),
    aging=st.sampled_from(
        [PLAIN, AGING, QueuePolicy(aging_interval=30, aging_step=7, max_boost=0)]
    ),
)
def test_ledger_position_is_one_more_than_the_entries_at_or_above_the_priority(
    entries: list[tuple[int, float, bool]], priority: int, now: float, aging: QueuePolicy
) -> None:
    # The definition the counting loop shortcuts: every entry whose effective priority (its
    # own plus its aging boost) is at least the new pod's, group bookings aside.
    ledger = TenantLedger("t")
    for index, (level, at, group) in enumerate(entries):
        entry_id = f"{GROUP_ENTRY_PREFIX}{index}" if group else f"e-{index}"
        ledger = enqueue(ledger, entry_id=entry_id, priority=level, now=at, ttl=None)
    wanted = 1 + sum(
        1
        for entry in ledger.queued.values()
        if entry.priority + aging.boost(now - entry.queued_at) >= priority
        and not entry.id.startswith(GROUP_ENTRY_PREFIX)
    )
    assert ledger_position(ledger.queued.values(), priority=priority, policy=aging, now=now) == (
        wanted
    )


pods_strategy = st.lists(
    st.tuples(
        st.sampled_from([100, 300, 500]),
        st.integers(min_value=0, max_value=600),
        st.sampled_from(["1", "2", "3"]),
    ),
    min_size=0,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    specs=pods_strategy,
    now=st.integers(min_value=600, max_value=1200),
    room=st.integers(min_value=0, max_value=8),
    ordering=st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
    aging=st.booleans(),
    parked=st.sets(st.integers(min_value=0, max_value=24), max_size=4),
    limit=st.integers(min_value=1, max_value=30),
)
def test_order_positions_and_plans_match_the_definition(
    specs: list[tuple[int, int, str]],
    now: int,
    room: int,
    ordering: str,
    aging: bool,
    parked: set[int],
    limit: int,
) -> None:
    policy = QueuePolicy(
        ordering="StrictFIFO" if ordering == "StrictFIFO" else "BestEffortFIFO",
        aging_interval=60 if aging else 0,
        aging_step=100 if aging else 0,
        max_boost=300 if aging else 0,
    )
    pods = [queued(f"p{i:02d}", pr, at, amount) for i, (pr, at, amount) in enumerate(specs)]
    queue = TenantQueue("t")
    for pod in pods:
        queue.add(pod)
    parked_uids = frozenset(f"uid-p{i:02d}" for i in parked if i < len(pods))
    for uid in parked_uids:
        queue.park(uid)
    expected = brute_order(pods, policy, now)
    assert [p.name for p in queue.ordered(policy, now)] == expected
    for position, name in enumerate(expected, start=1):
        assert queue.position(f"uid-{name}", policy, now) == position
    quota = build_quota(cpu("100"))
    ledger = book(
        TenantLedger("t"), reservation_id="r", tier="guaranteed", amount=cpu(str(100 - room)),
        now=0, ttl=10_000,
    )  # fmt: skip
    plan = plan_release(queue, quota=quota, ledger=ledger, policy=policy, now=now, limit=limit)
    wanted = brute_plan(pods, policy, now, room=room * 10**9, parked=parked_uids, limit=limit)
    assert [p.name for p in plan.pods] == wanted


def test_a_release_is_booked_in_the_queue_tier_and_undone_exactly() -> None:
    quota = build_quota(cpu("4"), maximum=cpu("6"))
    pod = queued("p", 100, 0, "2")
    ledger = enqueue(TenantLedger("t"), entry_id="e-p", priority=100, now=0, ttl=None)
    ledger = book(ledger, reservation_id="r", tier="guaranteed", amount=cpu("2"), now=0, ttl=60)
    booked, outcome = book_release(ledger, quota=quota, tier="guaranteed", pod=pod, now=1, ttl=60)
    assert outcome.decision.tier == "guaranteed"
    assert booked.guaranteed == cpu("4")
    assert booked.reservation_for_pod("uid-p") is not None
    assert queued_entry_for(booked, entry_id="e-p", pod_uid="uid-p") is None
    again, repeat = book_release(booked, quota=quota, tier="guaranteed", pod=pod, now=1, ttl=60)
    assert repeat.already
    assert again is booked
    undone, _ = undo_release(booked, pod=pod, reservation_id=outcome.reservation_id)
    assert undone.guaranteed == cpu("2")
    entry = queued_entry_for(undone, entry_id="e-p", pod_uid="uid-p")
    assert entry is not None
    assert entry.expires_at is None
    # The guarantee is full now: a guaranteed-tier release does not fit, a burst one does.
    full, _ = book_release(booked, quota=quota, tier="guaranteed", pod=queued("q", 1, 0), now=1,
                           ttl=60)  # fmt: skip
    _, refused = book_release(
        full, quota=quota, tier="guaranteed", pod=queued("q", 1, 0), now=1, ttl=60
    )
    assert refused.decision.tier is None
    assert [s.resource for s in refused.decision.shortfalls] == ["cpu"]
    _, burst = book_release(full, quota=quota, tier="burst", pod=queued("q", 1, 0), now=1, ttl=60)
    assert burst.decision.tier == "burst"


def test_the_pace_is_client_go_s_default_rate_limiter() -> None:
    pace = ReleasePace(PaceSettings())
    assert pace.available(0.0) == 100  # the bucket starts full (burst 100)
    pace.take(0.0, 100)
    assert pace.available(0.0) == 0
    assert pace.next_token_in(0.0) == pytest.approx(0.1)  # 10 per second
    assert pace.available(0.5) == 5
    delays = [pace.failure("u")[0] for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])  # 5 ms doubling
    assert max(delays) == 1000.0  # capped at 1000 s
    pace.forget("u")
    assert pace.failure("u") == (0.005, False)


def test_after_eight_failures_a_pod_is_given_up() -> None:
    pace = ReleasePace(PaceSettings())
    outcomes = [pace.failure("u")[1] for _ in range(8)]
    assert outcomes == [False] * 7 + [True]
