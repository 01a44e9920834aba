"""Cluster sync against the real control plane: pods, namespaces and priority classes in the
ledger, watched as tenantgate's ServiceAccount through the fault proxy.

The scene is set as the admin. Pods are real: the scheduler binds them to the simulated nodes
and the simulated kubelet runs them. Namespaces outlive tests, so this module's are its own
(``sync-*``); the cluster's own priority classes (the system ones, and tenantgate's from
deploy/) are there from the start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from classifier.quantities import Quantity
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
from testcluster import Cluster
from tests.tenants.kube.conftest import create_namespace

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-a:
    namespaces: [sync-team-a]
    quota: {guaranteed: {cpu: "4"}}
  team-b:
    namespaceSelector: {matchLabels: {team: b}}
    quota: {guaranteed: {cpu: "8"}}
"""
WAIT = 60.0
TEAM_A = "sync-team-a"


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
        self.host = connection.host  # the fault proxy
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
    tenantgate_kubeconfig: Path, core: Any
) -> None:
    create_namespace(core, TEAM_A)
    create_namespace(core, "sync-b-one", {"team": "b"})
    core.create_namespaced_pod(TEAM_A, pod("a1", "1"))
    core.create_namespaced_pod("sync-b-one", pod("b1", "3"))

    async def scenario(h: Harness) -> None:
        ready, detail = h.sync.readiness_detail()
        assert not ready
        assert detail.startswith("waiting for the first list of")
        await eventually(lambda: h.sync.synced, "the first sync")
        ready, detail = h.sync.readiness_detail()
        assert ready
        assert f"synced from {h.host}" in detail
        assert cpu(h.store, "team-a") == Quantity.parse("1")
        assert cpu(h.store, "team-b") == Quantity.parse("3")

    harness = run(tenantgate_kubeconfig, scenario)
    assert harness.controller.stats.unadmitted == {"team-a": 1, "team-b": 1}


def test_pods_coming_going_and_finishing_are_followed(
    tenantgate_kubeconfig: Path, core: Any
) -> None:
    create_namespace(core, TEAM_A)

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        await asyncio.to_thread(core.create_namespaced_pod, TEAM_A, pod("p1", "1"))
        await asyncio.to_thread(core.create_namespaced_pod, TEAM_A, pod("p2", "2"))
        await eventually(lambda: cpu(h.store, "team-a") == Quantity.parse("3"), "3 cpu")
        status = {"status": {"phase": "Succeeded"}}
        await asyncio.to_thread(core.patch_namespaced_pod_status, "p1", TEAM_A, status)
        await eventually(lambda: cpu(h.store, "team-a") == Quantity.parse("2"), "2 cpu")
        await asyncio.to_thread(core.delete_namespaced_pod, "p2", TEAM_A, grace_period_seconds=0)
        await eventually(lambda: not h.store.get("team-a").charges, "no charges")
        await asyncio.to_thread(core.delete_namespaced_pod, "p1", TEAM_A, grace_period_seconds=0)
        await eventually(lambda: h.controller.pod_count == 0, "no pods tracked")

    harness = run(tenantgate_kubeconfig, scenario)
    # Even with grace 0, the API server first writes the pod with its deletionTimestamp, then
    # removes it (CheckGracefulDelete in pkg/registry/core/pod/strategy.go always takes the
    # graceful path; updateForGracefulDeletionAndFinalizers in staging/src/k8s.io/apiserver/
    # pkg/registry/generic/registry/store.go deletes at once after that update when the period
    # is 0): the usage goes at that first event, as the quota evaluator stops counting a pod
    # then (QuotaV1Pod in pkg/quota/v1/evaluator/core/pods.go).
    assert harness.controller.stats.released == {"finished": 1, "terminating": 1}
    assert harness.store.get("team-a").guaranteed == {}


def test_a_relabelled_namespace_moves_to_its_new_tenant(
    tenantgate_kubeconfig: Path, core: Any
) -> None:
    create_namespace(core, "sync-x")
    core.create_namespaced_pod("sync-x", pod("p", "2"))

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        assert cpu(h.store, "team-b") == Quantity(0)
        labels = {"metadata": {"labels": {"team": "b"}}}
        await asyncio.to_thread(core.patch_namespace, "sync-x", labels)
        await eventually(lambda: cpu(h.store, "team-b") == Quantity.parse("2"), "moved in")
        assert h.controller.namespace_labels("sync-x") == {
            "team": "b",
            "kubernetes.io/metadata.name": "sync-x",
        }
        await asyncio.to_thread(
            core.patch_namespace, "sync-x", {"metadata": {"labels": {"team": "c"}}}
        )
        await eventually(lambda: cpu(h.store, "team-b") == Quantity(0), "moved out")

    run(tenantgate_kubeconfig, scenario)


def test_dropped_watches_and_expired_history_lose_nothing(
    kube: Cluster, tenantgate_kubeconfig: Path, core: Any
) -> None:
    create_namespace(core, TEAM_A)
    for index in range(3):
        core.create_namespaced_pod(TEAM_A, pod(f"old-{index}", "1"))

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        kube.proxy.drop_watches()
        await asyncio.to_thread(core.create_namespaced_pod, TEAM_A, pod("new-0", "500m"))
        await asyncio.to_thread(core.delete_namespaced_pod, "old-0", TEAM_A, grace_period_seconds=0)
        await eventually(
            lambda: cpu(h.store, "team-a") == Quantity.parse("2500m"), "the dropped watch resumed"
        )
        # Stop the pods watch from catching up, change things, and forget the history.
        kube.proxy.add_errors(503, verb="watch", resource="pods", count=1000)
        kube.proxy.drop_watches()
        await asyncio.to_thread(core.create_namespaced_pod, TEAM_A, pod("new-1", "250m"))
        await asyncio.to_thread(core.delete_namespaced_pod, "old-1", TEAM_A, grace_period_seconds=0)
        status = {"status": {"phase": "Failed"}}
        await asyncio.to_thread(core.patch_namespaced_pod_status, "old-2", TEAM_A, status)
        kube.proxy.compact_history()
        kube.proxy.clear()
        await eventually(
            lambda: cpu(h.store, "team-a") == Quantity.parse("750m"), "the relist after 410"
        )
        live = await asyncio.to_thread(core.list_namespaced_pod, TEAM_A)
        running = {p.metadata.uid for p in live.items if p.status.phase != "Failed"}
        assert set(h.store.get("team-a").charges) == running
        assert len(running) == 2
        assert h.controller.recount(now=0).repaired is False

    harness = run(tenantgate_kubeconfig, scenario)
    assert ("pods", "expired") in harness.restarts
    assert harness.sync.status()["pods"].lists >= 2


def test_priority_classes_are_reported_as_a_table(
    tenantgate_kubeconfig: Path, admin_client: Any
) -> None:
    """The cluster starts with the API server's own classes (created at startup by
    pkg/registry/scheduling/rest/storage_scheduling.go) and deploy/'s, tenant-burst included,
    so the class this test adds and removes is its own."""
    scheduling: Any = client.SchedulingV1Api(admin_client)

    async def scenario(h: Harness) -> None:
        await eventually(lambda: h.sync.synced, "the first sync")
        assert {"system-cluster-critical", "system-node-critical"} <= set(h.sync.priority_classes)
        burst = h.sync.priority_classes["tenant-burst"]  # installed from deploy/webhooks
        assert (burst.value, burst.preemptionPolicy) == (10, "Never")
        assert "sync-test-class" not in h.sync.priority_classes
        body = {
            "metadata": {"name": "sync-test-class"},
            "value": 7,
            "preemptionPolicy": "Never",
        }
        await asyncio.to_thread(scheduling.create_priority_class, body)
        await eventually(lambda: "sync-test-class" in h.sync.priority_classes, "the new class")
        added = h.sync.priority_classes["sync-test-class"]
        assert (added.value, added.preemptionPolicy) == (7, "Never")
        await asyncio.to_thread(scheduling.delete_priority_class, "sync-test-class")
        await eventually(lambda: "sync-test-class" not in h.sync.priority_classes, "deleted")

    harness = run(tenantgate_kubeconfig, scenario)
    assert len(harness.classes) == 3
    assert "sync-test-class" not in harness.classes[0]
    assert "sync-test-class" in harness.classes[1]
    assert "sync-test-class" not in harness.classes[2]


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
