"""The releaser's failure paths, with a pod client that fails on purpose.

A refused PATCH cancels the booking; a PATCH whose answer was lost (no HTTP status) keeps it
unless the pod, read again, shows the gate gone: the PATCH may still apply, and a cancelled
booking under a released pod would over-admit. After eight failures a pod is given up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from classifier.quantities import Quantity
from tenants.configfile import load_text
from tenants.controller import LedgerController, pod_facts
from tenants.kube.errors import KubeConflict, KubeError, KubeForbidden
from tenants.kube.releaser import PodEvent, Releaser, ungate_patch
from tenants.ledger import MemoryLedger, TenantLedger, Tier, book, cancel
from tenants.queue.gate import owner_rule
from tenants.queue.line import QueuedPod
from tenants.queue.release import PaceSettings

CONFIG = """\
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
NOW = 1_700_000_000.0
T = TypeVar("T")


def gated_pod(name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "q",
            "uid": uid,
            "resourceVersion": "7",
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "labels": {"tenantgate.io/tier": "queued"},
        },
        "spec": {
            "priority": 1000,
            "schedulingGates": [{"name": "tenantgate.io/quota"}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


class FakePods:
    def __init__(self, error: KubeError | None, *, gated: bool | None) -> None:
        self.error = error
        self.still_gated = gated
        self.patches: list[str] = []
        self.events: list[PodEvent] = []

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        self.patches.append(pod.name)
        if self.error is not None:
            raise self.error

    def gated(self, pod: QueuedPod) -> bool | None:
        return self.still_gated

    def record(self, event: PodEvent, *, now: float) -> None:
        self.events.append(event)


def run(fake: FakePods, *, rounds: int = 1) -> tuple[LedgerController, Releaser, MemoryLedger]:
    policy = load_text(CONFIG).policy
    store = MemoryLedger()
    controller = LedgerController(store, policy=policy)
    releaser = Releaser(controller, store, fake, clock=lambda: NOW, pace=PaceSettings())

    async def main() -> None:
        facts = pod_facts(gated_pod("p", "uid-p"))
        assert facts is not None
        controller.replace_pods([facts], now=NOW, initial=True)
        for _ in range(rounds):
            await releaser._evaluate("q")
            queue = controller.queues.queues["q"]
            queue.unpark("uid-p")  # as the backoff timer would

    asyncio.run(main())
    releaser.close()
    return controller, releaser, store


def cpu(ledger: MemoryLedger) -> Quantity | None:
    return ledger.get("q").guaranteed.get("cpu")


def test_a_refused_patch_cancels_the_booking_and_keeps_the_pod_in_line() -> None:
    fake = FakePods(KubeConflict("changed", status=409), gated=True)
    _, releaser, store = run(fake)
    assert fake.patches == ["p"]
    assert cpu(store) is None
    assert len(store.get("q").queued) == 1
    assert releaser.stats.errors == {"conflict": 1}


def test_a_lost_answer_keeps_the_booking_while_the_pod_may_be_released() -> None:
    fake = FakePods(KubeError("connection reset"), gated=True)
    _, releaser, store = run(fake)
    assert cpu(store) == Quantity.parse("1")  # held: the PATCH may still apply
    assert releaser.stats.errors == {"unavailable": 1}


def test_a_lost_answer_with_the_gate_gone_counts_as_released() -> None:
    fake = FakePods(KubeError("connection reset"), gated=False)
    _, releaser, store = run(fake)
    assert cpu(store) == Quantity.parse("1")
    assert releaser.stats.released == {("q", "guaranteed"): 1}
    assert not releaser.stats.errors


def test_after_eight_failures_the_pod_is_reported_and_skipped() -> None:
    fake = FakePods(KubeForbidden("forbidden", status=403), gated=True)
    _, releaser, _ = run(fake, rounds=10)
    assert len(fake.patches) == 10  # the test unparks it; the real timer would not
    assert list(releaser.stats.given_up) == ["q/p"]
    assert releaser.stats.errors == {"forbidden": 10}


def test_a_denial_by_tenantgate_s_own_webhook_holds_the_line_and_never_gives_up() -> None:
    # tenantgate runs as another user than its webhook's gate owner: every release would be
    # denied alike. The pod is not at fault, so it is never given up and nobody passes it.
    denial = KubeForbidden(
        'admission webhook "validate.tenantgate.io" denied the request: pod q/p: '
        f"{owner_rule('system:serviceaccount:tenantgate-system:tenantgate')}",
        status=403,
    )
    fake = FakePods(denial, gated=True)
    policy = load_text(CONFIG).policy
    store = MemoryLedger()
    controller = LedgerController(store, policy=policy)
    releaser = Releaser(controller, store, fake, clock=lambda: NOW, pace=PaceSettings())

    async def main() -> None:
        facts = pod_facts(gated_pod("p", "uid-p"))
        assert facts is not None
        controller.replace_pods([facts], now=NOW, initial=True)
        await releaser._evaluate("q")
        await releaser._evaluate("q")  # held: nobody is tried until the backoff ends
        assert fake.patches == ["p"]
        for _ in range(9):  # as the backoff timer would, past the eight failures of give-up
            controller.queues.queues["q"].unpark("uid-p")
            releaser._unhold("q", "uid-p")
            await releaser._evaluate("q")

    asyncio.run(main())
    releaser.close()
    assert len(fake.patches) == 10
    assert releaser.stats.given_up == {}
    assert releaser.stats.errors == {"self_denied": 10}
    assert releaser._held == {"q": "uid-p"}
    assert cpu(store) is None
    assert releaser.status()["deniedByOwnWebhook"] is not None
    assert "system:serviceaccount:tenantgate-system:tenantgate" in str(
        releaser.status()["deniedByOwnWebhook"]
    )
    assert [e.reason for e in fake.events if e.reason == "ReleaseFailed"] == []


class FailingFirst(FakePods):
    """The first PATCH fails with ``error``; the later ones go through."""

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        self.patches.append(pod.name)
        if len(self.patches) == 1 and self.error is not None:
            raise self.error


def test_a_release_failing_for_a_reason_not_the_pods_own_holds_the_whole_line() -> None:
    # The webhook or the API server failed the head's PATCH: the next pod would fail the
    # same way, or, once it is back, be released ahead of the head. Neither may happen.
    fake = FailingFirst(KubeError("webhook unreachable", status=500), gated=True)
    policy = load_text(CONFIG).policy
    store = MemoryLedger()
    controller = LedgerController(store, policy=policy)
    releaser = Releaser(controller, store, fake, clock=lambda: NOW, pace=PaceSettings())
    head, younger = gated_pod("p", "uid-p"), gated_pod("p2", "uid-p2")
    younger["metadata"]["creationTimestamp"] = "2023-11-14T22:13:21Z"

    async def main() -> None:
        listed = [pod_facts(head), pod_facts(younger)]
        controller.replace_pods([f for f in listed if f is not None], now=NOW, initial=True)
        await releaser._evaluate("q")
        assert fake.patches == ["p"]
        await releaser._evaluate("q")  # room_changed fired meanwhile: the line still waits
        assert fake.patches == ["p"]
        for _ in range(500):  # the head's backoff timer retries it first
            if len(fake.patches) > 1:
                break
            await asyncio.sleep(0.01)
            if "q" in releaser._dirty:
                releaser._dirty.discard("q")
                await releaser._evaluate("q")

    asyncio.run(main())
    releaser.close()
    assert fake.patches == ["p", "p"]
    assert releaser.stats.released == {("q", "guaranteed"): 1}


def test_the_patch_deletes_only_tenantgate_s_gate_under_a_precondition() -> None:
    pod = QueuedPod("u", "q", "p", 1000, 0.0, {}, "e", resource_version="42")
    assert ungate_patch(pod, tier="guaranteed") == {
        "metadata": {
            "resourceVersion": "42",
            "labels": {"tenantgate.io/tier": "guaranteed"},
            # Within its guarantee a pod borrows nothing: a stale annotation is deleted.
            "annotations": {"tenantgate.io/borrowed-from": None},
        },
        "spec": {"schedulingGates": [{"$patch": "delete", "name": "tenantgate.io/quota"}]},
    }


def test_the_patch_of_a_borrowed_release_names_the_cohort() -> None:
    pod = QueuedPod("u", "q", "p", 10, 0.0, {}, "e", resource_version="42")
    patch = ungate_patch(pod, tier="burst", borrowed_from="pool")
    assert patch["metadata"]["labels"] == {"tenantgate.io/tier": "burst"}
    assert patch["metadata"]["annotations"] == {"tenantgate.io/borrowed-from": "pool"}


COHORT_CONFIG = """\
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
cohorts:
  root: {quota: {cpu: "4"}}
  pool: {parent: root}
tenants:
  borrower:
    namespaces: [borrower]
    cohort: pool
    overQuota: queue
    queue: {tier: burst}
    quota: {guaranteed: {cpu: "1"}}
  keeper:
    namespaces: [keeper]
    cohort: pool
    overQuota: queue
    quota: {guaranteed: {cpu: "1"}}
"""


class RecordingPods(FakePods):
    """Records the tier and the borrowed-from cohort of each release."""

    def __init__(self) -> None:
        super().__init__(None, gated=False)
        self.released: dict[str, tuple[Tier, str | None]] = {}

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        self.released[f"{pod.namespace}/{pod.name}"] = (tier, borrowed_from)


def test_a_cohort_member_released_onto_borrowed_room_records_the_tree_s_root() -> None:
    # Each member's guarantee is 1 cpu; the borrower's second pod takes room past it, from
    # the tree (root's own 4 cpu): borrowed from the root, as admission names it
    # (tenants.decisions, BORROWED_ANNOTATION). The keeper queues for its guarantee only.
    policy = load_text(COHORT_CONFIG).policy
    store = MemoryLedger()
    controller = LedgerController(store, policy=policy)
    fake = RecordingPods()
    releaser = Releaser(controller, store, fake, clock=lambda: NOW, pace=PaceSettings())
    listed = []
    for namespace, names in (("borrower", ("b0", "b1")), ("keeper", ("k0",))):
        for index, name in enumerate(names):
            body = gated_pod(name, f"uid-{name}")
            body["metadata"]["namespace"] = namespace
            body["metadata"]["creationTimestamp"] = f"2023-11-14T22:13:2{index}Z"
            listed.append(pod_facts(body))

    async def main() -> None:
        controller.replace_pods([f for f in listed if f is not None], now=NOW, initial=True)
        await releaser._evaluate_cohort("borrower")

    asyncio.run(main())
    releaser.close()
    assert fake.released == {
        "borrower/b0": ("burst", None),  # within its guarantee: borrows nothing
        "borrower/b1": ("burst", "root"),
        "keeper/k0": ("guaranteed", None),
    }


class ViewBehind(MemoryLedger):
    """A store whose ledgers hold what this replica's view does not show yet: a hold another
    replica took. It goes later without a room change this replica hears of, as a cohort's
    pending booking that expires or is settled."""

    HOLD = "another-replica"

    def __init__(self) -> None:
        super().__init__()
        self.bookings = 0

    def hold(self, tenant: str) -> None:
        self._ledgers[tenant] = book(
            self.get(tenant),
            reservation_id=self.HOLD,
            tier="guaranteed",
            amount={"cpu": Quantity.parse("1")},
            now=NOW,
            ttl=3600,
        )

    def drop_hold(self, tenant: str) -> None:
        self._ledgers[tenant] = cancel(self._ledgers[tenant], reservation_id=self.HOLD)

    def get(self, tenant: str) -> TenantLedger:
        return cancel(super().get(tenant), reservation_id=self.HOLD)

    async def transact(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
    ) -> T:
        self.bookings += 1
        return await super().transact(tenant, change, commit=commit)


@pytest.mark.parametrize("group", [False, True], ids=["pod", "pod group"])
def test_a_release_the_stored_ledger_refuses_is_looked_at_again_without_a_room_change(
    group: bool,
) -> None:
    # The view shows q's 1 cpu free, the stored ledger holds it: the booking is refused. The
    # hold then goes with no room change heard of; the releaser looks again and releases.
    policy = load_text(CONFIG + ("    podGroups: {timeoutSeconds: 60}\n" if group else "")).policy
    store = ViewBehind()
    controller = LedgerController(store, policy=policy)
    fake = FakePods(None, gated=False)
    releaser = Releaser(controller, store, fake, clock=lambda: NOW, pace=PaceSettings())

    async def until(check: Callable[[], bool]) -> bool:
        for _ in range(1000):
            if check():
                return True
            await asyncio.sleep(0.01)
        return check()

    async def main() -> tuple[bool, bool, int]:
        store.hold("q")
        body = gated_pod("p", "uid-p")
        if group:
            body["metadata"]["annotations"] = {
                "tenantgate.io/group": "labels/train",
                "tenantgate.io/group-size": "1",
            }
        facts = pod_facts(body)
        assert facts is not None
        controller.replace_pods([facts], now=NOW, initial=True)
        task = asyncio.create_task(releaser.run())
        refused = await until(lambda: store.bookings >= 1)
        patched_while_held = bool(fake.patches)
        store.drop_hold("q")
        released = await until(lambda: fake.patches == ["p"])
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return refused and not patched_while_held, released, store.bookings

    refused, released, bookings = asyncio.run(main())
    releaser.close()
    assert refused
    assert released, "the refused release was never looked at again"
    assert bookings >= 2
    assert cpu(store) == Quantity.parse("1")


def test_looking_again_backs_off_while_the_refusals_go_on_and_starts_over_later() -> None:
    policy = load_text(CONFIG).policy
    store = MemoryLedger()
    releaser = Releaser(
        LedgerController(store, policy=policy),
        store,
        FakePods(None, gated=False),
        clock=lambda: NOW,
    )

    async def main() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()

        def refused() -> float:
            releaser._recheck("q")
            refusals, at, handle = releaser._rechecks["q"]
            assert handle is not None
            handle.cancel()
            releaser._rechecks["q"] = (refusals, at, None)  # as when it fires
            return round(handle.when() - loop.time(), 2)

        delays = [refused() for _ in range(9)]
        refusals, _, _ = releaser._rechecks["q"]
        releaser._rechecks["q"] = (refusals, loop.time() - 31, None)  # the last one, long ago
        return delays, refused()

    delays, after_a_while = asyncio.run(main())
    releaser.close()
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert after_a_while == 0.25


def test_a_released_pod_unschedulable_too_long_is_reported_once() -> None:
    fake = FakePods(None, gated=False)
    controller, releaser, _ = run(fake)
    assert releaser.stats.released == {("q", "guaranteed"): 1}
    stored = gated_pod("p", "uid-p")
    del stored["spec"]["schedulingGates"]
    stored["metadata"]["labels"]["tenantgate.io/tier"] = "guaranteed"
    stored["status"] = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": "2023-11-14T22:00:00Z",  # 800 s before NOW
            }
        ]
    }
    facts = pod_facts(stored)
    assert facts is not None
    assert facts.unschedulable_since is not None
    releaser._events = ThreadPoolExecutor(max_workers=1)  # closed by run(): a fresh one
    controller.apply_pod(facts, now=NOW)
    releaser._check_released(NOW)
    releaser._check_released(NOW + 1)
    releaser.close()
    assert list(releaser.stats.unschedulable) == ["q/p"]
    assert [e.reason for e in fake.events].count("ReleasedUnschedulable") == 1
    assert releaser.status()["releasedUnschedulable"]["q/p"]["tenant"] == "q"
