"""Cohorts on the real control plane: a member borrows a peer's idle guarantee, the lender's
guaranteed pods arrive on a full node, and the real kube-scheduler preempts the borrower
above its fair share first (``pkg/scheduler/framework/plugins/defaultpreemption``: victims
are picked lowest priority first); the ledger then equals the pods left. With queue mode,
the borrower's ReplicaSet pods that replace the preempted ones wait behind the gate for
borrowed room and run once the lender scales down."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from classifier.quantities import Quantity
from testcluster import Cluster, NodeSpec
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import Tenantgate, api_client, create_namespace, eventually, pod

NODE_LABEL = "tenantgate.io/test-node"
NODE = NodeSpec(
    "cohort-node",
    capacity={"cpu": "14", "memory": "64Gi", "pods": "110"},
    labels={NODE_LABEL: "cohorts"},
)

# One node of 14 cpu = the three guarantees: team-b's 8 idle at first, team-c weighs twice.
# Cohort lab, on a node of its own of 10 cpu = its three guarantees: lab-a queues for
# borrowed room, lab-c weighs three times (lab-a's fair share is 1/4 while both borrow).
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
  lab: {}
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
  lab-a:
    namespaces: [lab-a]
    cohort: lab
    overQuota: queue
    queue: {tier: burst}
    quota: {guaranteed: {cpu: "2"}}
  lab-b:
    namespaces: [lab-b]
    cohort: lab
    quota: {guaranteed: {cpu: "6"}}
  lab-c:
    namespaces: [lab-c]
    cohort: lab
    fairSharing: {weight: 3}
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


def on_node(name: str, cpu: str, *, node: str = "cohorts") -> dict[str, Any]:
    body = pod(name, cpu=cpu, memory="1Gi")
    body["spec"]["nodeSelector"] = {NODE_LABEL: node}
    return body


def create_running(core: Any, namespace: str, name: str, cpu: str, *, node: str = "cohorts") -> Any:
    core.create_namespaced_pod(namespace, on_node(name, cpu, node=node))

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


LAB_LABEL = "lab"
LAB_NODE = NodeSpec(
    "lab-node",
    capacity={"cpu": "10", "memory": "64Gi", "pods": "110"},
    labels={NODE_LABEL: LAB_LABEL},
)
LAB = ("lab-a", "lab-b", "lab-c")


@pytest.fixture
def apps(kubeconfig: Path) -> Iterator[Any]:
    api = api_client(kubeconfig)
    yield client.AppsV1Api(api)
    api.close()


@pytest.fixture(params=["memory", "kubernetes"])
def lab(
    request: pytest.FixtureRequest,
    config_file: Path,
    kube: Cluster,
    start_tenantgate: StartTenantgate,
    core: Any,
) -> Iterator[Tenantgate]:
    """tenantgate with cohort lab on its node; with either ledger backend (the kubernetes one
    books members through their tree's TenantCohortLedger)."""
    config_file.write_text(CONFIG + f"ledger: {{backend: {request.param}}}\n")
    kube.kubelet.add_node(LAB_NODE)
    kube.wait_nodes_schedulable()
    started = start_tenantgate()
    for namespace in LAB:
        create_namespace(core, {"metadata": {"name": namespace}})
    yield started
    kube.kubelet.remove_node(LAB_NODE.name)


def replica_set(name: str, replicas: int) -> dict[str, Any]:
    template = pod(name, cpu="1", memory="1Gi")
    template["spec"]["nodeSelector"] = {NODE_LABEL: LAB_LABEL}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }


def live(core: Any, namespace: str) -> list[Any]:
    """The pods of ``namespace`` not being deleted."""
    return [
        p
        for p in core.list_namespaced_pod(namespace).items
        if p.metadata.deletion_timestamp is None
    ]


def gated(item: Any) -> bool:
    return any(g.name == "tenantgate.io/quota" for g in item.spec.scheduling_gates or [])


def running(core: Any, namespace: str) -> list[Any]:
    return [p for p in live(core, namespace) if p.spec.node_name and not gated(p)]


def cpu_of(items: list[Any]) -> Quantity:
    total = Quantity(0)
    for item in items:
        for container in item.spec.containers:
            total += Quantity.parse(container.resources.requests["cpu"])
    return total


def lab_state(tenantgate: Tenantgate, core: Any) -> Callable[[], str]:
    """What a stalled wait shows: the lab's pods, and tenantgate's ledgers, queues and
    releases."""

    def describe() -> str:
        lines = []
        for namespace in LAB:
            for item in core.list_namespaced_pod(namespace).items:
                lines.append(
                    f"pod {namespace}/{item.metadata.name}: node={item.spec.node_name} "
                    f"gated={gated(item)} class={item.spec.priority_class_name} "
                    f"tier={(item.metadata.labels or {}).get('tenantgate.io/tier')} "
                    f"deleting={item.metadata.deletion_timestamp is not None} "
                    f"phase={item.status.phase}"
                )
        status = tenantgate.status()
        for namespace in LAB:
            lines.append(f"tenant {namespace}: {json.dumps(status['tenants'][namespace])}")
        lines.append(f"cohorts: {json.dumps(status.get('cohorts'))}")
        lines.append(f"queue: {json.dumps(status.get('queue'))}")
        lines.append(f"recent releases: {json.dumps(status.get('recent', {}).get('releases'))}")
        return "\n".join(lines)

    return describe


def ledger_equals_truth(tenantgate: Tenantgate, core: Any) -> bool:
    """Every lab tenant's booked cpu is the cpu of its pods that are not queued; queued pods
    are entries, not usage."""
    status = tenantgate.status()["tenants"]
    for namespace in LAB:
        used = status[namespace]["used"]
        booked = Quantity.parse(used["guaranteed"].get("cpu", "0")) + Quantity.parse(
            used["burst"].get("cpu", "0")
        )
        if booked != cpu_of([p for p in live(core, namespace) if not gated(p)]):
            return False
    return True


def test_preempted_borrowers_come_back_queued_and_run_once_the_lender_scales_down(
    lab: Tenantgate, core: Any, apps: Any
) -> None:
    state = lab_state(lab, core)
    create_running(core, "lab-c", "c1", "2", node=LAB_LABEL)  # lab-c's guarantee...
    c2 = create_running(core, "lab-c", "c2", "1", node=LAB_LABEL)  # and 1 borrowed: 1/10
    assert c2.spec.priority_class_name == "tenant-burst"
    # lab-a: 2 guaranteed, then 5 borrowed of lab-b's idle 6 (lab-c borrows the sixth). Past
    # 2.5 borrowed (its fair share of 1/4 of 10), its pods get the over-share class.
    apps.create_namespaced_replica_set("lab-a", replica_set("web", 7))
    eventually(lambda: len(running(core, "lab-a")) == 7, "lab-a's 7 pods to run", describe=state)
    classes = sorted(p.spec.priority_class_name for p in running(core, "lab-a"))
    assert classes == [
        "tenant-burst",
        "tenant-burst",
        "tenant-burst-over-share",
        "tenant-burst-over-share",
        "tenant-burst-over-share",
        "tenant-guaranteed",
        "tenant-guaranteed",
    ]
    eventually(
        lambda: ledger_equals_truth(lab, core), "the ledger to equal the pods", describe=state
    )

    # The node is full. lab-b takes 3 of its guarantee back: the scheduler preempts lab-a's
    # three over-share pods (priority 5) and nothing else.
    apps.create_namespaced_replica_set("lab-b", replica_set("db", 3))
    eventually(lambda: len(running(core, "lab-b")) == 3, "lab-b's pods to run", describe=state)
    survivors = sorted(p.spec.priority_class_name for p in running(core, "lab-a"))
    assert survivors == ["tenant-burst", "tenant-burst", "tenant-guaranteed", "tenant-guaranteed"]
    assert len(running(core, "lab-c")) == 2
    # lab-a's ReplicaSet replaces them: no room to lend, so they wait behind the gate.
    eventually(
        lambda: len([p for p in live(core, "lab-a") if gated(p)]) == 3,
        "lab-a's replacement pods to be queued",
        describe=state,
    )
    assert {p.metadata.labels["tenantgate.io/tier"] for p in live(core, "lab-a") if gated(p)} == {
        "queued"
    }
    eventually(
        lambda: ledger_equals_truth(lab, core), "the ledger to equal the pods", describe=state
    )
    assert len(lab.status()["tenants"]["lab-a"]["queued"]) == 3
    waiting = {p.metadata.name for p in live(core, "lab-a") if gated(p)}

    # lab-b scales down: the room is lent again and lab-a's queued pods run.
    apps.patch_namespaced_replica_set_scale("db", "lab-b", {"spec": {"replicas": 0}})
    eventually(
        lambda: len(running(core, "lab-a")) == 7,
        "lab-a's queued pods to run",
        describe=state,
    )
    assert not [p for p in live(core, "lab-a") if gated(p)]
    # Released past lab-a's guarantee, they borrow, and say so as an admitted borrower does.
    released = [p for p in running(core, "lab-a") if p.metadata.name in waiting]
    assert len(released) == 3
    for item in released:
        assert item.metadata.labels["tenantgate.io/tier"] == "burst"
        assert item.metadata.annotations["tenantgate.io/borrowed-from"] == "lab"
    eventually(
        lambda: ledger_equals_truth(lab, core), "the ledger to equal the pods", describe=state
    )
