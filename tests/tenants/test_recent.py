"""The rings of recent denials and releases behind ``/status``'s ``recent``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenants.configfile import load_text
from tenants.controller import LedgerController, pod_facts
from tenants.kube.errors import KubeError, KubeForbidden
from tenants.kube.releaser import PodEvent, Releaser
from tenants.ledger import MemoryLedger, Tier
from tenants.queue.line import QueuedPod
from tenants.queue.release import PaceSettings
from tenants.recent import MESSAGE_LIMIT, RecentDecisions


def deny(recent: RecentDecisions, index: int, message: str = "over quota") -> None:
    recent.denied(
        at=float(index),
        tenant="team-a",
        pod=f"team-a/pod-{index}",
        operation="CREATE",
        endpoint="mutate",
        cause="over_quota",
        message=message,
    )


def test_each_ring_keeps_only_the_latest_entries_newest_first() -> None:
    recent = RecentDecisions(limit=3)
    for index in range(5):
        deny(recent, index)
    recent.released(
        at=9.0,
        tenant="team-q",
        pod="team-q/job-1",
        outcome="released",
        tier="guaranteed",
        waited_seconds=12.34567,
        message="released onto tenant team-q's guaranteed room after waiting 12.3s",
    )

    document = recent.to_json()

    assert document["limit"] == 3
    assert [entry["pod"] for entry in document["denials"]] == [
        "team-a/pod-4",
        "team-a/pod-3",
        "team-a/pod-2",
    ]
    assert document["denials"][0] == {
        "at": 4.0,
        "tenant": "team-a",
        "pod": "team-a/pod-4",
        "operation": "CREATE",
        "endpoint": "mutate",
        "reason": "over_quota",
        "message": "over quota",
    }
    # A flood of denials never pushes the releases out: one ring each.
    assert document["releases"] == [
        {
            "at": 9.0,
            "tenant": "team-q",
            "pod": "team-q/job-1",
            "outcome": "released",
            "tier": "guaranteed",
            "waitedSeconds": 12.346,
            "message": "released onto tenant team-q's guaranteed room after waiting 12.3s",
        }
    ]


def test_messages_are_one_line_and_cut_to_the_limit() -> None:
    recent = RecentDecisions()
    deny(recent, 1, message="first line\nsecond   line")
    deny(recent, 2, message="x" * (MESSAGE_LIMIT * 3))

    long, short = recent.to_json()["denials"]

    assert short["message"] == "first line second line"
    assert len(long["message"]) == MESSAGE_LIMIT
    assert long["message"].endswith("...")


def test_a_ring_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecentDecisions(limit=0)


# --------------------------------------------------------------------------- the releaser feeds it

QUEUE_CONFIG = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  q:
    namespaces: [q]
    quota: {guaranteed: {cpu: "1"}}
    overQuota: queue
"""
NOW = 1_700_000_000.0  # the gated pod below was created 100 s before


def gated_pod() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "q",
            "uid": "uid-p",
            "resourceVersion": "7",
            "creationTimestamp": "2023-11-14T22:11:40Z",
            "labels": {"tenantgate.io/tier": "queued"},
        },
        "spec": {
            "priority": 1000,
            "schedulingGates": [{"name": "tenantgate.io/quota"}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


class Pods:
    """A pod client whose PATCH fails with ``error`` (None: succeeds)."""

    def __init__(self, error: KubeError | None) -> None:
        self.error = error

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        if self.error is not None:
            raise self.error

    def gated(self, pod: QueuedPod) -> bool | None:
        return True

    def record(self, event: PodEvent, *, now: float) -> None:
        pass


def release(error: KubeError | None, *, attempts: int) -> RecentDecisions:
    recent = RecentDecisions()
    store = MemoryLedger()
    controller = LedgerController(store, policy=load_text(QUEUE_CONFIG).policy)
    releaser = Releaser(
        controller, store, Pods(error), clock=lambda: NOW, pace=PaceSettings(), recent=recent
    )

    async def main() -> None:
        facts = pod_facts(gated_pod())
        assert facts is not None
        controller.replace_pods([facts], now=NOW, initial=True)
        for _ in range(attempts):
            await releaser._evaluate("q")
            controller.queues.queues["q"].unpark("uid-p")  # as the backoff timer would

    asyncio.run(main())
    releaser.close()
    return recent


def test_a_release_is_remembered_with_its_wait() -> None:
    (entry,) = release(None, attempts=1).to_json()["releases"]

    assert entry == {
        "at": NOW,
        "tenant": "q",
        "pod": "q/p",
        "outcome": "released",
        "tier": "guaranteed",
        "waitedSeconds": 100.0,
        "message": "released onto tenant q's guaranteed room after waiting 1m40s",
    }


def test_a_pod_given_up_on_is_remembered_and_the_failures_before_are_not() -> None:
    recent = release(KubeForbidden("pods is forbidden", status=403), attempts=8)

    (entry,) = recent.to_json()["releases"]
    assert entry["outcome"] == "given up"
    assert entry["pod"] == "q/p"
    assert entry["message"].startswith(
        "tenantgate could not remove the scheduling gate tenantgate.io/quota after 8 attempts"
    )
    assert recent.to_json()["denials"] == []
