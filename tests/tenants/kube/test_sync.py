"""Cluster sync against the test API server: pods, namespaces and priority classes in the ledger."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from classifier.quantities import Quantity
from devapi import DevAPIServer
from tenants.configfile import load_text
from tenants.controller import LedgerController
from tenants.kube.backoff import BackoffPolicy
from tenants.kube.connection import ClusterTarget, Connection
from tenants.kube.sync import (
    ClusterSync,
    PriorityClassTable,
    namespace_item,
    priority_class_item,
)
from tenants.ledger import MemoryLedger

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-a:
    namespaces: [team-a]
    quota: {guaranteed: {cpu: "4"}}
  team-b:
    namespaceSelector: {matchLabels: {team: b}}
    quota: {guaranteed: {cpu: "8"}}
"""
WAIT = 30.0


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds (the watch is asynchronous); fail after a generous wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]
        },
    }


def cpu(store: MemoryLedger, tenant: str) -> Quantity:
    return store.get(tenant).guaranteed.get("cpu", Quantity(0))


class Harness:
    def __init__(self, kubeconfig: Path) -> None:
        self.store = MemoryLedger()
        self.controller = LedgerController(self.store, policy=load_text(CONFIG).policy)
        self.classes: list[PriorityClassTable] = []
        self.restarts: list[tuple[str, str]] = []
        connection = Connection.open(ClusterTarget("kubeconfig", "test", str(kubeconfig)))
        self.sync = ClusterSync(
            connection,
            controller=self.controller,
            on_priority_classes=self.classes.append,
            on_restart=lambda resource, reason: self.restarts.append((resource, reason)),
            backoff=BackoffPolicy(base=0.01, cap=0.1),
            watch_timeout=30,
        )


def run(kubeconfig: Path, scenario: Callable[[Harness], Awaitable[None]]) -> Harness:
    harness = Harness(kubeconfig)

    async def main() -> None:
        harness.sync.start(asyncio.get_running_loop())
        try:
            await scenario(harness)
        finally:
            await harness.sync.stop()

    asyncio.run(main())
    return harness


def test_the_first_sync_charges_selector_tenants_and_reports_ready(
    kubeconfig: Path, core: Any
) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    core.create_namespace({"metadata": {"name": "b-one", "labels": {"team": "b"}}})
    core.create_namespaced_pod("team-a", pod("a1", "1"))
    core.create_namespaced_pod("b-one", pod("b1", "3"))

    async def scenario(h: Harness) -> None:
        ready, detail = h.sync.readiness_detail()
        assert not ready
        assert detail.startswith("waiting for the first list of")
        await eventually(lambda: h.sync.synced, "the first sync")
        ready, detail = h.sync.readiness_detail()
        assert ready
        assert "synced from http://127.0.0.1:" in detail
        assert cpu(h.store, "team-a") == Quantity.parse("1")
        assert cpu(h.store, "team-b") == Quantity.parse("3")

    harness = run(kubeconfig, scenario)
    assert harness.controller.stats.unadmitted == {"team-a": 1, "team-b": 1}


def test_pods_coming_going_and_finishing_are_followed(kubeconfig: Path, core: Any) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        await asyncio.to_thread(core.create_namespaced_pod, "team-a", pod("p1", "1"))
        await asyncio.to_thread(core.create_namespaced_pod, "team-a", pod("p2", "2"))
        await eventually(lambda: cpu(h.store, "team-a") == Quantity.parse("3"), "3 cpu")
        status = {"status": {"phase": "Succeeded"}}
        await asyncio.to_thread(core.patch_namespaced_pod_status, "p1", "team-a", status)
        await eventually(lambda: cpu(h.store, "team-a") == Quantity.parse("2"), "2 cpu")
        await asyncio.to_thread(core.delete_namespaced_pod, "p2", "team-a", grace_period_seconds=0)
        await eventually(lambda: not h.store.get("team-a").charges, "no charges")
        await asyncio.to_thread(core.delete_namespaced_pod, "p1", "team-a", grace_period_seconds=0)
        await eventually(lambda: h.controller.pod_count == 0, "no pods tracked")

    harness = run(kubeconfig, scenario)
    assert harness.controller.stats.released == {"finished": 1, "deleted": 1}
    assert harness.store.get("team-a").guaranteed == {}


def test_a_relabelled_namespace_moves_to_its_new_tenant(kubeconfig: Path, core: Any) -> None:
    core.create_namespace({"metadata": {"name": "x"}})
    core.create_namespaced_pod("x", pod("p", "2"))

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        assert cpu(h.store, "team-b") == Quantity(0)
        labels = {"metadata": {"labels": {"team": "b"}}}
        await asyncio.to_thread(core.patch_namespace, "x", labels)
        await eventually(lambda: cpu(h.store, "team-b") == Quantity.parse("2"), "moved in")
        assert h.controller.namespace_labels("x") == {
            "team": "b",
            "kubernetes.io/metadata.name": "x",
        }
        await asyncio.to_thread(core.patch_namespace, "x", {"metadata": {"labels": {"team": "c"}}})
        await eventually(lambda: cpu(h.store, "team-b") == Quantity(0), "moved out")

    run(kubeconfig, scenario)


def test_dropped_watches_and_expired_history_lose_nothing(
    devapi: DevAPIServer, kubeconfig: Path, core: Any
) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    for index in range(3):
        core.create_namespaced_pod("team-a", pod(f"old-{index}", "1"))

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        devapi.faults.drop_watches()
        await asyncio.to_thread(core.create_namespaced_pod, "team-a", pod("new-0", "500m"))
        await asyncio.to_thread(
            core.delete_namespaced_pod, "old-0", "team-a", grace_period_seconds=0
        )
        await eventually(
            lambda: cpu(h.store, "team-a") == Quantity.parse("2500m"), "the dropped watch resumed"
        )
        # Stop the pods watch from catching up, change things, and forget the history.
        devapi.faults.add_errors(503, verb="watch", resource="pods", count=1000)
        devapi.faults.drop_watches()
        await asyncio.to_thread(core.create_namespaced_pod, "team-a", pod("new-1", "250m"))
        await asyncio.to_thread(
            core.delete_namespaced_pod, "old-1", "team-a", grace_period_seconds=0
        )
        status = {"status": {"phase": "Failed"}}
        await asyncio.to_thread(core.patch_namespaced_pod_status, "old-2", "team-a", status)
        devapi.faults.compact_history()
        devapi.faults.clear()
        await eventually(
            lambda: cpu(h.store, "team-a") == Quantity.parse("750m"), "the relist after 410"
        )
        live = await asyncio.to_thread(core.list_namespaced_pod, "team-a")
        running = {p.metadata.uid for p in live.items if p.status.phase != "Failed"}
        assert set(h.store.get("team-a").charges) == running
        assert len(running) == 2
        assert h.controller.recount(now=0).repaired is False

    harness = run(kubeconfig, scenario)
    assert ("pods", "expired") in harness.restarts
    assert harness.sync.status()["pods"].lists >= 2


def test_priority_classes_are_reported_as_a_table(kubeconfig: Path) -> None:
    from kubernetes import client

    from tests.tenants.kube.conftest import new_api_client

    api_client = new_api_client(kubeconfig)
    scheduling: Any = client.SchedulingV1Api(api_client)

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        assert set(h.sync.priority_classes) == {"system-cluster-critical", "system-node-critical"}
        body = {
            "metadata": {"name": "tenant-burst"},
            "value": 10,
            "preemptionPolicy": "Never",
        }
        await asyncio.to_thread(scheduling.create_priority_class, body)
        await eventually(lambda: "tenant-burst" in h.sync.priority_classes, "the new class")
        burst = h.sync.priority_classes["tenant-burst"]
        assert (burst.value, burst.preemptionPolicy) == (10, "Never")
        await asyncio.to_thread(scheduling.delete_priority_class, "tenant-burst")
        await eventually(lambda: "tenant-burst" not in h.sync.priority_classes, "deleted")

    harness = run(kubeconfig, scenario)
    api_client.close()
    assert len(harness.classes) == 3
    assert "tenant-burst" in harness.classes[1]
    assert "tenant-burst" not in harness.classes[2]


def test_converters_ignore_what_they_cannot_use() -> None:
    assert namespace_item({"metadata": {}}) is None
    item = namespace_item({"metadata": {"name": "a", "labels": {"x": "1", "bad": 2}}})
    assert item is not None
    assert item.labels == {"x": "1"}
    assert priority_class_item({"metadata": {}}) is None
    broken = priority_class_item({"metadata": {"name": "p"}, "value": "high"})
    assert broken is not None
    assert broken.spec is None
    fine = priority_class_item({"metadata": {"name": "p"}, "value": 7})
    assert fine is not None
    assert fine.spec is not None
    assert fine.spec.preemptionPolicy == "PreemptLowerPriority"
