"""The schedulers the profiles name, on the real control plane.

`tenantgate scheduler-config` renders a preset's ``schedulers:`` block; a second real
kube-scheduler runs on it with the token of the ServiceAccount that
``deploy/webhooks/components/schedulers`` installs (so the component's RBAC is what is
enforced), next to the cluster's default-scheduler. tenantgate routes each pod to its
profile's scheduler, and the binding is made by that scheduler (its ``Scheduled`` event names
it as the reporting controller), on a node the profile's tolerations and affinity allow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tenants.configfile import load_config
from tenants.schedulers import scheduler_configuration
from testcluster import Cluster, NodeSpec
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import create_namespace, eventually, pod

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "admission" / "presets"
COMPONENT = ROOT / "deploy" / "webhooks" / "components" / "schedulers"
GPU_NODES = (
    NodeSpec(
        "gpu-a",
        capacity={"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"},
        labels={"topology.kubernetes.io/zone": "zone-a", "tenantgate.io/node-class": "gpu"},
        taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    ),
    NodeSpec(
        "gpu-b",
        capacity={"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"},
        labels={"topology.kubernetes.io/zone": "zone-b", "tenantgate.io/node-class": "gpu"},
        taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    ),
)
MEMORY_NODE = NodeSpec(
    "mem-a",
    capacity={"cpu": "32", "memory": "1Ti", "pods": "110"},
    labels={
        "topology.kubernetes.io/zone": "zone-a",
        "tenantgate.io/node-class": "memory-optimized",
    },
    taints=({"key": "tenantgate.io/memory-optimized", "value": "true", "effect": "NoSchedule"},),
)


def rendered(preset: str) -> dict[str, Any]:
    return scheduler_configuration(load_config(PRESETS / f"{preset}.yaml").schedulers)


@pytest.fixture
def special_nodes(kube: Cluster) -> Iterator[None]:
    for spec in (*GPU_NODES, MEMORY_NODE):
        kube.kubelet.add_node(spec)
    kube.wait_nodes_schedulable()
    yield
    for spec in (*GPU_NODES, MEMORY_NODE):
        kube.kubelet.remove_node(spec.name)


@pytest.fixture
def second_scheduler(kube: Cluster) -> Iterator[Any]:
    started: list[str] = []

    def run(preset: str) -> None:
        kube.run_second_scheduler(rendered(preset))
        started.append(preset)

    yield run
    kube.stop_second_scheduler()


def scheduled_by(core: Any, namespace: str, name: str) -> tuple[str, str] | None:
    """(scheduler, node) of the pod's Scheduled event, once there is one."""
    events: Any = client.EventsV1Api(core.api_client)
    found = events.list_namespaced_event(
        namespace, field_selector=f"regarding.name={name},reason=Scheduled"
    ).items
    if not found:
        return None
    stored = core.read_namespaced_pod(name, namespace)
    return found[0].reporting_controller, stored.spec.node_name


def wait_scheduled(core: Any, namespace: str, name: str) -> tuple[str, str]:
    seen: list[tuple[str, str]] = []

    def bound() -> bool:
        result = scheduled_by(core, namespace, name)
        if result is not None:
            seen.append(result)
        return result is not None

    eventually(bound, f"{namespace}/{name} to be scheduled")
    return seen[-1]


def test_the_shipped_component_carries_the_scheduler_selector_rendering() -> None:
    committed = yaml.safe_load((COMPONENT / "scheduler-config.yaml").read_text())
    assert committed == rendered("scheduler-selector")


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESETS.glob("*.yaml")))
def test_every_preset_s_rendering_runs_on_the_real_kube_scheduler(
    preset: str, kube: Cluster
) -> None:
    schedulers = load_config(PRESETS / f"{preset}.yaml").schedulers
    if not any(not spec.external for spec in schedulers.values()):
        # Nothing to run: scheduler-config refuses, rather than render a profile-less
        # configuration that kube-scheduler would fill with a second default-scheduler.
        refused = subprocess.run(
            [sys.executable, "-m", "admission.cli", "scheduler-config", "--config",
             str(PRESETS / f"{preset}.yaml")],
            capture_output=True, text=True, check=False, cwd=ROOT,
        )  # fmt: skip
        assert refused.returncode == 1
        assert refused.stderr.strip().endswith(
            "has no scheduler to run: its schedulers: block is empty or only external"
        )
        return
    try:
        kube.run_second_scheduler(rendered(preset))  # waits for its /readyz
    finally:
        kube.stop_second_scheduler()


@pytest.fixture
def selector_config(config_file: Path) -> Path:
    config_file.write_text((PRESETS / "scheduler-selector.yaml").read_text())
    return config_file


def test_each_scheduler_selector_profile_is_bound_by_its_own_scheduler(
    selector_config: Path,
    start_tenantgate: StartTenantgate,
    core: Any,
    special_nodes: None,
    second_scheduler: Any,
) -> None:
    second_scheduler("scheduler-selector")
    start_tenantgate()
    for namespace in ("team-a", "ml"):
        create_namespace(core, {"metadata": {"name": namespace}})
    gpu = pod("trainer", cpu="2", memory="8Gi")
    gpu["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    realtime = pod("ticker", labels={"workload.kubernetes.io/priority": "realtime"})
    batch = pod("crunch", labels={"workload.kubernetes.io/type": "batch"})
    big = pod("cache", memory="12Gi")
    plain = pod("web")
    expected = {
        ("ml", "trainer"): ("gpu-scheduler", {"gpu-a", "gpu-b"}),
        ("team-a", "ticker"): ("realtime-scheduler", {"node-a", "node-b"}),
        ("team-a", "crunch"): ("batch-scheduler", {"node-a", "node-b"}),
        ("team-a", "cache"): ("memory-optimized-scheduler", {"node-a", "node-b"}),
        ("team-a", "web"): ("default-scheduler", {"node-a", "node-b"}),
    }
    for namespace, body in (
        ("ml", gpu),
        ("team-a", realtime),
        ("team-a", batch),
        ("team-a", big),
        ("team-a", plain),
    ):
        stored = core.create_namespaced_pod(namespace, body)
        want = expected[(namespace, body["metadata"]["name"])][0]
        assert stored.spec.scheduler_name == want
    for (namespace, name), (scheduler, nodes) in expected.items():
        by, node = wait_scheduled(core, namespace, name)
        assert by == scheduler, (name, by)
        assert node in nodes, (name, node)


def test_memory_heavy_pods_go_to_the_memory_nodes_through_their_scheduler(
    config_file: Path,
    start_tenantgate: StartTenantgate,
    core: Any,
    special_nodes: None,
    second_scheduler: Any,
) -> None:
    config_file.write_text((PRESETS / "memory.yaml").read_text())
    second_scheduler("memory")
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", pod("analytics", memory="20Gi"))
    core.create_namespaced_pod("team-a", pod("web"))
    assert wait_scheduled(core, "team-a", "analytics") == ("memory-optimized-scheduler", "mem-a")
    by, node = wait_scheduled(core, "team-a", "web")
    assert by == "default-scheduler"
    assert node in {"node-a", "node-b"}  # the memory node's taint keeps the rest away


SPREAD_PRESETS = ("default", "production", "microservices", "multitenant")


def profile_of(preset: str, body: dict[str, Any]) -> str:
    """What `tenantgate review` says the preset makes of ``body`` in team-a."""
    reviewed = subprocess.run(
        [sys.executable, "-m", "admission.cli", "review", "-f", "-", "-n", "team-a", "-o", "json",
         "--config", str(PRESETS / f"{preset}.yaml")],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )  # fmt: skip
    (review,) = json.loads(reviewed.stdout)
    profile: str = review["profile"]
    return profile


@pytest.mark.parametrize("preset", SPREAD_PRESETS)
def test_replicas_spread_as_the_preset_s_profile_says(
    preset: str, config_file: Path, start_tenantgate: StartTenantgate, core: Any, kube: Cluster
) -> None:
    config_file.write_text((PRESETS / f"{preset}.yaml").read_text())
    web = yaml.safe_load((ROOT / "examples" / "pods" / "web.yaml").read_text())
    labels = {**web["metadata"]["labels"], "app": "spread"}
    template = {"metadata": {"labels": labels}, "spec": web["spec"]}
    profile = profile_of(preset, {**web, "metadata": {"name": "spread", "labels": labels}})
    spec = load_config(PRESETS / f"{preset}.yaml").profiles[profile]
    keys = {c.topologyKey for c in spec.topologySpreadConstraints or []}
    assert keys & {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, (preset, profile)
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "spread", "namespace": "team-a"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "spread"}},
            "template": template,
        },
    }
    kube.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(deployment))

    def placed() -> dict[str, int]:
        pods = core.list_namespaced_pod("team-a", label_selector="app=spread").items
        counted: dict[str, int] = {}
        for stored in pods:
            if stored.spec.node_name and stored.status.phase == "Running":
                counted[stored.spec.node_name] = counted.get(stored.spec.node_name, 0) + 1
        return counted

    eventually(lambda: sum(placed().values()) == 4, f"{preset}: 4 replicas running")
    # node-a is in zone-a, node-b in zone-b: two replicas in each node and each zone.
    assert placed() == {"node-a": 2, "node-b": 2}, (preset, profile, placed())
    stored = core.list_namespaced_pod("team-a", label_selector="app=spread").items[0]
    assert stored.metadata.annotations["tenantgate.io/profile"] == profile
    assert {c.topology_key for c in stored.spec.topology_spread_constraints} == keys
