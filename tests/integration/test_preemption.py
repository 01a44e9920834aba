"""What happens after admission, with the real kube-scheduler preempting.

A small node pool (``pool: tiny``, 4 cpu) is full: team-a runs on its guarantee and past it on
burst. tenantgate gives burst pods ``tenant-burst`` (value 10, ``preemptionPolicy: Never``) and
guaranteed ones ``tenant-guaranteed`` (1000, ``PreemptLowerPriority``), so when team-b's
guaranteed pods find no room the scheduler evicts team-a's burst pods, never its guaranteed
ones (equal priority is never preempted: ``pkg/scheduler/framework/preemption``), and the
simulated kubelet finishes them. tenantgate's ledger follows the cluster throughout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testcluster import Cluster, NodeSpec
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import Tenantgate, create_namespace, eventually, pod

GATE = "tenantgate.io/quota"
POOL = {"pool": "tiny"}
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
    quota:
      guaranteed: {cpu: "2"}
      burst: {max: {cpu: "4"}}
  team-b:
    namespaces: [team-b]
    quota:
      guaranteed: {cpu: "2"}
  team-q:
    namespaces: [team-q]
    quota:
      guaranteed: {cpu: "2"}
      burst: {max: {cpu: "4"}}
    overQuota: queue
    queue: {tier: burst}
  team-n:
    namespaces: [team-n]
    quota:
      guaranteed: {cpu: "10", limits.cpu: "3", pods: "5"}
    containerDefaults:
      limits: {cpu: "500m"}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def tiny_pool(kube: Cluster) -> Iterator[None]:
    """One node of 4 cpu that only the test's pods (nodeSelector pool=tiny) use."""
    spec = NodeSpec("tiny-1", capacity={"cpu": "4", "memory": "32Gi", "pods": "110"}, labels=POOL)
    kube.kubelet.add_node(spec)
    kube.wait_nodes_schedulable()
    yield
    kube.kubelet.remove_node(spec.name)


def on_pool(name: str, cpu: str = "1", **kwargs: Any) -> dict[str, Any]:
    body = pod(name, cpu=cpu, memory="256Mi", **kwargs)
    body["spec"]["nodeSelector"] = dict(POOL)
    body["spec"]["terminationGracePeriodSeconds"] = 1
    return body


def deployment(name: str, namespace: str, replicas: int, cpu: str = "1") -> dict[str, Any]:
    template = on_pool(name, cpu=cpu, labels={"app": name})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }


def live(core: Any, namespace: str, selector: str = "") -> list[Any]:
    items = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in items if p.metadata.deletion_timestamp is None]


def gated(stored: Any) -> bool:
    return any(gate.name == GATE for gate in stored.spec.scheduling_gates or [])


def phases(core: Any, namespace: str, selector: str = "") -> dict[str, int]:
    counted: dict[str, int] = {}
    for stored in live(core, namespace, selector):
        if gated(stored):
            state = "gated"
        elif stored.spec.node_name and stored.status.phase == "Running":
            state = f"running-{stored.metadata.labels['tenantgate.io/tier']}"
        else:
            state = f"pending-{stored.metadata.labels['tenantgate.io/tier']}"
        counted[state] = counted.get(state, 0) + 1
    return counted


def truthful(tenantgate: Tenantgate) -> bool:
    """A full recount finds nothing to repair: the ledger equals the cluster."""
    report = tenantgate.call(lambda: tenantgate.state.controller.recount(now=time.time()))
    return not report.repaired


def apply(kube: Cluster, document: dict[str, Any]) -> None:
    kube.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(document))


def test_preemption_takes_burst_pods_back_for_another_tenant_s_guarantee(
    start_tenantgate: StartTenantgate, core: Any, tiny_pool: None
) -> None:
    tenantgate = start_tenantgate()
    for namespace in ("team-a", "team-b"):
        create_namespace(core, {"metadata": {"name": namespace}})
    for index in range(4):
        core.create_namespaced_pod("team-a", on_pool(f"a-{index}"))
    eventually(
        lambda: phases(core, "team-a") == {"running-guaranteed": 2, "running-burst": 2},
        "team-a fills the pool",
    )

    for index in range(2):
        stored = core.create_namespaced_pod("team-b", on_pool(f"b-{index}"))
        assert stored.spec.priority_class_name == "tenant-guaranteed"
    eventually(
        lambda: phases(core, "team-b") == {"running-guaranteed": 2}, "team-b's guarantee runs"
    )
    # Only team-a's burst pods were taken: its guaranteed ones kept running.
    assert {p.metadata.name for p in live(core, "team-a")} == {"a-0", "a-1"}
    assert phases(core, "team-a") == {"running-guaranteed": 2}
    preempted = core.list_namespaced_event("team-a", field_selector="reason=Preempted").items
    assert {e.involved_object.name for e in preempted} == {"a-2", "a-3"}
    eventually(
        lambda: (
            tenantgate.used("team-a")
            == {"guaranteed": {"cpu": "2", "memory": "512Mi", "pods": "2"}, "burst": {}}
        ),
        "team-a's burst freed",
    )
    assert tenantgate.status()["tenants"]["team-a"]["reservations"] == 0
    assert truthful(tenantgate)


def test_preempted_replicas_come_back_and_run_once_room_frees(
    start_tenantgate: StartTenantgate, core: Any, kube: Cluster, tiny_pool: None
) -> None:
    tenantgate = start_tenantgate()
    for namespace in ("team-a", "team-b"):
        create_namespace(core, {"metadata": {"name": namespace}})
    apply(kube, deployment("work", "team-a", 4))
    eventually(
        lambda: phases(core, "team-a") == {"running-guaranteed": 2, "running-burst": 2},
        "4 replicas running",
    )
    apply(kube, deployment("urgent", "team-b", 2))
    eventually(lambda: phases(core, "team-b") == {"running-guaranteed": 2}, "team-b runs")
    # The ReplicaSet recreates the 2 preempted replicas; team-a has burst room again, so they
    # are admitted, and wait Pending for the scheduler to find room.
    eventually(
        lambda: phases(core, "team-a") == {"running-guaranteed": 2, "pending-burst": 2},
        "replacements admitted, Pending",
    )
    for stored in live(core, "team-a"):
        if stored.status.phase == "Pending":
            (scheduled,) = [c for c in stored.status.conditions if c.type == "PodScheduled"]
            assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    assert truthful(tenantgate)
    kube.plane.kubectl("scale", "-n", "team-b", "deployment/urgent", "--replicas=0")
    eventually(
        lambda: phases(core, "team-a") == {"running-guaranteed": 2, "running-burst": 2},
        "the replacements run",
    )
    assert truthful(tenantgate)


def test_in_queue_mode_replacements_wait_gated_and_released_pods_are_bound_once_there_is_room(
    start_tenantgate: StartTenantgate, core: Any, kube: Cluster, tiny_pool: None
) -> None:
    tenantgate = start_tenantgate()
    for namespace in ("team-q", "team-b"):
        create_namespace(core, {"metadata": {"name": namespace}})
    apply(kube, deployment("work", "team-q", 6))
    eventually(
        lambda: phases(core, "team-q") == {"running-guaranteed": 2, "running-burst": 2, "gated": 2},
        "4 replicas running, 2 waiting at the ceiling",
    )
    for stored in live(core, "team-q"):
        if gated(stored):
            assert stored.spec.node_name is None  # never bound while gated
            (scheduled,) = [c for c in stored.status.conditions if c.type == "PodScheduled"]
            assert (scheduled.status, scheduled.reason) == ("False", "SchedulingGated")
    apply(kube, deployment("urgent", "team-b", 2))
    eventually(lambda: phases(core, "team-b") == {"running-guaranteed": 2}, "team-b runs")
    # The preempted burst room goes to the two that waited; the ReplicaSet's two
    # replacements find team-q at its ceiling again and wait gated, in line behind nobody.
    eventually(
        lambda: phases(core, "team-q") == {"running-guaranteed": 2, "pending-burst": 2, "gated": 2},
        "released pods Pending for room, replacements gated",
    )
    assert truthful(tenantgate)
    kube.plane.kubectl("scale", "-n", "team-b", "deployment/urgent", "--replicas=0")
    eventually(
        lambda: phases(core, "team-q") == {"running-guaranteed": 2, "running-burst": 2, "gated": 2},
        "the released pods bound and running",
    )
    assert truthful(tenantgate)


def test_a_pod_count_and_a_limits_ceiling_hold_while_the_scheduler_places_pods(
    start_tenantgate: StartTenantgate, core: Any, kube: Cluster
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-n"}})
    work = deployment("many", "team-n", 10, cpu="250m")
    del work["spec"]["template"]["spec"]["nodeSelector"]
    apply(kube, work)

    def settled() -> bool:
        pods = live(core, "team-n")
        return len(pods) == 5 and all(p.status.phase == "Running" for p in pods)

    eventually(settled, "5 running pods: the pods ceiling")
    time.sleep(2)  # the controller keeps retrying; nothing more gets in
    assert len(live(core, "team-n")) == 5
    used = tenantgate.used("team-n")["guaranteed"]
    assert used["pods"] == "5"
    assert used["limits.cpu"] == "2500m"  # 5 x the 500m default limit, under limits.cpu 3
    assert truthful(tenantgate)
