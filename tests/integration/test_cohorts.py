"""Cohorts on the real control plane: a member borrows a peer's idle guarantee, the lender's
guaranteed pods arrive on a full node, and the real kube-scheduler preempts the borrower
above its fair share first (``pkg/scheduler/framework/plugins/defaultpreemption``: victims
are picked lowest priority first); the ledger then equals the pods left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from classifier.quantities import Quantity
from testcluster import Cluster, NodeSpec
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import Tenantgate, create_namespace, eventually, pod

NODE_LABEL = "tenantgate.io/test-node"
NODE = NodeSpec(
    "cohort-node",
    capacity={"cpu": "14", "memory": "64Gi", "pods": "110"},
    labels={NODE_LABEL: "cohorts"},
)

# One node of 14 cpu = the three guarantees: team-b's 8 idle at first, team-c weighs twice.
CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
reservationTTLSeconds: 3600
cohorts:
  research: {}
tenants:
  team-a:
    namespaces: [coh-a]
    cohort: research
    quota: {guaranteed: {cpu: "4"}}
  team-b:
    namespaces: [coh-b]
    cohort: research
    quota: {guaranteed: {cpu: "8"}}
  team-c:
    namespaces: [coh-c]
    cohort: research
    fairSharing: {weight: 2}
    quota: {guaranteed: {cpu: "2"}}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def node(kube: Cluster) -> Iterator[None]:
    kube.kubelet.add_node(NODE)
    kube.wait_nodes_schedulable()
    yield
    kube.kubelet.remove_node(NODE.name)


@pytest.fixture
def tenantgate(start_tenantgate: StartTenantgate, core: Any, node: None) -> Tenantgate:
    started = start_tenantgate()
    for namespace in ("coh-a", "coh-b", "coh-c"):
        create_namespace(core, {"metadata": {"name": namespace}})
    return started


def on_node(name: str, cpu: str) -> dict[str, Any]:
    body = pod(name, cpu=cpu, memory="1Gi")
    body["spec"]["nodeSelector"] = {NODE_LABEL: "cohorts"}
    return body


def create_running(core: Any, namespace: str, name: str, cpu: str) -> Any:
    core.create_namespaced_pod(namespace, on_node(name, cpu))

    def bound() -> bool:
        return bool(core.read_namespaced_pod(name, namespace).spec.node_name)

    eventually(bound, f"{namespace}/{name} to be scheduled")
    return core.read_namespaced_pod(name, namespace)


def gone(core: Any, namespace: str, name: str) -> bool:
    found = core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}").items
    return not found or found[0].metadata.deletion_timestamp is not None


def test_the_scheduler_preempts_the_over_share_borrower_when_a_lender_reclaims(
    tenantgate: Tenantgate, core: Any
) -> None:
    create_running(core, "coh-a", "a1", "4")  # team-a's guarantee
    create_running(core, "coh-c", "c1", "2")  # team-c's guarantee
    c2 = create_running(core, "coh-c", "c2", "2")  # borrows 2 of team-b's 8
    a2 = create_running(core, "coh-a", "a2", "6")  # borrows 6: 6/14 > its fair 1/3
    assert c2.spec.priority_class_name == "tenant-burst"
    assert a2.spec.priority_class_name == "tenant-burst-over-share"
    assert a2.spec.priority == 5
    assert a2.metadata.labels["tenantgate.io/tier"] == "burst"
    assert a2.metadata.annotations["tenantgate.io/borrowed-from"] == "research"

    # The node is full (14 of 14). team-b takes 4 of its guarantee back.
    core.create_namespaced_pod("coh-b", on_node("b1", "4"))
    eventually(lambda: gone(core, "coh-a", "a2"), "the over-share borrower to be preempted")
    eventually(
        lambda: bool(core.read_namespaced_pod("b1", "coh-b").spec.node_name),
        "team-b's pod to be scheduled",
    )
    assert not gone(core, "coh-c", "c2"), "the borrower within its share stays"
    assert core.read_namespaced_pod("b1", "coh-b").spec.priority_class_name == ("tenant-guaranteed")

    def ledger_is_the_truth() -> bool:
        tenants = tenantgate.status()["tenants"]
        used = {
            name: Quantity.parse(tenants[name]["used"]["guaranteed"].get("cpu", "0"))
            + Quantity.parse(tenants[name]["used"]["burst"].get("cpu", "0"))
            for name in ("team-a", "team-b", "team-c")
        }
        return used == {
            "team-a": Quantity.parse("4"),
            "team-b": Quantity.parse("4"),
            "team-c": Quantity.parse("4"),
        }

    eventually(ledger_is_the_truth, "the ledger to count only the pods left")
    cohort = tenantgate.status()["cohorts"]["research"]
    assert cohort["borrowed"] == {"team-a": {}, "team-b": {}, "team-c": {"cpu": "2"}}
