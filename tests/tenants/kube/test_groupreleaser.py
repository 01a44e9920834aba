"""The group releaser's paths (tenants/kube/groupreleaser.py), with a pod client that fails on
purpose: all or none booked, a failed gate removal retried on the booking, the timeout."""

from __future__ import annotations

import asyncio
from typing import Any

from classifier.quantities import Quantity
from tenants.configfile import load_text
from tenants.controller import LedgerController, pod_facts
from tenants.kube.errors import KubeConflict, KubeError
from tenants.kube.releaser import PodEvent, Releaser
from tenants.ledger import MemoryLedger, Tier
from tenants.queue.line import QueuedPod

CONFIG = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  g:
    namespaces: [g]
    quota: {guaranteed: {cpu: "8"}}
    podGroups: {timeoutSeconds: 60}
"""
NOW = 1_700_000_000.0


def member(index: int, *, size: int = 4, group: str = "train") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{group}-{index}",
            "namespace": "g",
            "uid": f"uid-{group}-{index}",
            "resourceVersion": "7",
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "labels": {"tenantgate.io/tier": "queued"},
            "annotations": {
                "tenantgate.io/group": f"labels/{group}",
                "tenantgate.io/group-size": str(size),
            },
        },
        "spec": {
            "priority": 1000,
            "schedulingGates": [{"name": "tenantgate.io/quota"}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}],
        },
    }


class FakePods:
    def __init__(self, failing: dict[str, KubeError] | None = None) -> None:
        self.failing = failing or {}
        self.patches: list[str] = []
        self.events: list[PodEvent] = []

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        self.patches.append(pod.name)
        error = self.failing.get(pod.name)
        if error is not None:
            raise error

    def gated(self, pod: QueuedPod) -> bool | None:
        return True

    def record(self, event: PodEvent, *, now: float) -> None:
        self.events.append(event)


def run(
    fake: FakePods, pods: list[dict[str, Any]], *, now: float = NOW, config: str = CONFIG
) -> tuple[Releaser, MemoryLedger]:
    policy = load_text(config).policy
    store = MemoryLedger()
    controller = LedgerController(store, policy=policy)
    releaser = Releaser(controller, store, fake, clock=lambda: now)

    async def main() -> None:
        listed = [pod_facts(body) for body in pods]
        controller.replace_pods([f for f in listed if f is not None], now=now, initial=True)
        await releaser._evaluate("g")
        releaser.groups.check_timeouts(now)
        await asyncio.sleep(0.05)  # events are sent off the loop

    asyncio.run(main())
    releaser.close()
    return releaser, store


def cpu(store: MemoryLedger) -> Quantity | None:
    return store.get("g").guaranteed.get("cpu")


def test_a_complete_group_is_booked_at_once_and_every_gate_removed() -> None:
    fake = FakePods()
    releaser, store = run(fake, [member(i) for i in range(4)])
    assert sorted(fake.patches) == [f"train-{i}" for i in range(4)]
    assert cpu(store) == Quantity.parse("8")
    assert releaser.groups.stats.released == 1


def test_an_incomplete_group_books_nothing_and_is_reported_after_its_timeout() -> None:
    fake = FakePods()
    releaser, store = run(fake, [member(i) for i in range(3)], now=NOW + 61)
    assert fake.patches == []
    assert cpu(store) is None
    assert releaser.groups.stats.timed_out == {"g/labels/train": "g"}
    reasons = {(e.name, e.reason) for e in fake.events}
    assert {(f"train-{i}", "PodGroupIncomplete") for i in range(3)} <= reasons
    message = next(e.message for e in fake.events if e.reason == "PodGroupIncomplete")
    assert message == (
        "pod group train is incomplete after 60s: 3 of 4 members created; its members stay "
        "gated and nothing is booked"
    )


def test_a_group_larger_than_the_room_is_not_booked_at_all() -> None:
    fake = FakePods()
    _, store = run(fake, [member(i, size=5) for i in range(5)])
    assert fake.patches == []
    assert cpu(store) is None
    assert len(store.get("g").queued) == 5


def test_when_no_gate_comes_off_the_whole_booking_is_cancelled() -> None:
    refused: dict[str, KubeError] = {
        f"train-{i}": KubeConflict("changed", status=409) for i in range(4)
    }
    _, store = run(FakePods(refused), [member(i) for i in range(4)])
    assert cpu(store) is None
    assert len(store.get("g").queued) == 4


def test_a_member_whose_gate_stays_keeps_its_share_of_the_booking() -> None:
    fake = FakePods({"train-2": KubeError("connection reset")})
    releaser, store = run(fake, [member(i) for i in range(4)])
    assert cpu(store) == Quantity.parse("8")  # the group's room is kept for train-2's retry
    assert releaser.stats.errors == {"unavailable": 1}
    assert releaser.stats.released == {("g", "guaranteed"): 3}


# g and h lend each other their unused guarantees.
COHORT = """\
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
cohorts:
  lab: {}
tenants:
  g:
    namespaces: [g]
    cohort: lab
    quota: {guaranteed: {cpu: "8"}}
    podGroups: {timeoutSeconds: 60}
  h:
    namespaces: [h]
    cohort: lab
    quota: {guaranteed: {cpu: "8"}}
"""


def borrowed(index: int) -> dict[str, Any]:
    """A running burst pod of g, borrowed from h's idle guarantee."""
    return {
        "metadata": {
            "name": f"burst-{index}",
            "namespace": "g",
            "uid": f"uid-burst-{index}",
            "resourceVersion": "3",
            "labels": {"tenantgate.io/tier": "burst"},
        },
        "spec": {
            "priorityClassName": "tenant-burst",
            "priority": 10,
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_cohort_members_group_waits_while_its_burst_pods_take_its_guarantee() -> None:
    # The guaranteed tier of g is empty, room for the group's 8 cpu; but g's 2 cpu of burst
    # pods would take its total to 10, past its guarantee of 8: the cohort's pool counts that
    # as borrowed, and a group's booking reads no pool (tenants/cohorts/tier.py).
    fake = FakePods()
    _, store = run(fake, [member(i) for i in range(4)] + [borrowed(0), borrowed(1)], config=COHORT)
    assert fake.patches == []
    assert cpu(store) is None
    assert store.get("g").burst["cpu"] == Quantity.parse("2")
    # Without burst pods, the same group goes at once.
    fake = FakePods()
    _, store = run(fake, [member(i) for i in range(4)], config=COHORT)
    assert sorted(fake.patches) == [f"train-{i}" for i in range(4)]
    assert cpu(store) == Quantity.parse("8")
