"""Queue mode against the test API server, through the real client and the real admission chain.

Over-quota pods wait behind the scheduling gate ``tenantgate.io/quota`` and are released, in
order, as room frees: the facts the design rests on are the API server's (a gate can only be
removed once the pod exists, and ``priority`` never changes: ``ValidatePodUpdate`` in
pkg/apis/core/validation/validation.go), and the test API server enforces them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from admission.settings import Settings
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import Tenantgate, eventually, http_json, pod

GATE = "tenantgate.io/quota"

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
  batch-low: {value: 100}
  batch-high: {value: 500}
profiles: {general: {}}
reservationTTLSeconds: 30
tenants:
  team-q:
    namespaces: [team-q]
    quota: {guaranteed: {cpu: "12"}}
    priorityClasses: {allowed: [batch-low, batch-high]}
    overQuota: queue
    queue: {maxPending: 8}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def settings(kubeconfig: Path, cert_dir: Path, config_file: Path) -> Settings:
    # The test API server's client is kubernetes-admin: that is tenantgate's identity here.
    return Settings(
        config=config_file,
        cert_dir=cert_dir,
        host="127.0.0.1",
        port=0,
        metrics_host="127.0.0.1",
        metrics_port=0,
        kubeconfig=kubeconfig,
        shutdown_grace_seconds=1,
        gate_owner="kubernetes-admin",
    )


def gated(stored: Any) -> bool:
    gates = stored.spec.scheduling_gates or []
    return any(gate.name == GATE for gate in gates)


def create(core: Any, name: str, **kwargs: Any) -> tuple[Any, list[str]]:
    """Create a pod; returns it and the warnings the API server passed on."""
    response = core.create_namespaced_pod("team-q", pod(name, **kwargs), _preload_content=False)
    warnings = [
        value.split('"', 1)[1].rsplit('"', 1)[0]
        for key, value in response.headers.items()
        if key.lower() == "warning" and '"' in value
    ]
    stored = core.read_namespaced_pod(name, "team-q")
    return stored, warnings


def queue(tenantgate: Tenantgate) -> list[dict[str, Any]]:
    code, document = http_json(f"{tenantgate.metrics_url}/queue?tenant=team-q")
    assert code == 200, document
    pods: list[dict[str, Any]] = document["tenants"]["team-q"]["pods"]
    return pods


def waiting(tenantgate: Tenantgate) -> list[str]:
    return [row["pod"].split("/", 1)[1] for row in queue(tenantgate)]


def ungated(core: Any) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod("team-q").items if not gated(p)}


def test_over_quota_pods_wait_in_line_and_deletions_release_the_best_placed(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    tenantgate = start_tenantgate()
    core.create_namespace({"metadata": {"name": "team-q"}})
    results = [create(core, f"q-{i:02d}") for i in range(20)]
    admitted = [p.metadata.name for p, _ in results if not gated(p)]
    queued = [p for p, _ in results if gated(p)]
    assert admitted == [f"q-{i:02d}" for i in range(12)]
    assert [p.metadata.name for p in queued] == [f"q-{i:02d}" for i in range(12, 20)]
    first = queued[0]
    assert first.metadata.labels["tenantgate.io/tier"] == "queued"
    assert first.spec.priority_class_name == "tenant-guaranteed"
    assert first.spec.priority == 1000
    warnings = results[14][1]
    assert (
        "queued: team-q is at its guarantee (cpu 12/12); position 3 of 3; released when "
        "team-q's guaranteed room frees"
    ) in warnings
    eventually(lambda: len(queue(tenantgate)) == 8, "8 pods in the queue")
    rows = queue(tenantgate)
    assert [row["position"] for row in rows] == list(range(1, 9))
    assert waiting(tenantgate) == [f"q-{i:02d}" for i in range(12, 20)]

    for name in ("q-00", "q-03", "q-05", "q-07"):
        core.delete_namespaced_pod(name, "team-q", grace_period_seconds=0)
    eventually(lambda: len(queue(tenantgate)) == 4, "4 pods released")
    released = {f"q-{i:02d}" for i in range(12, 16)}
    eventually(lambda: released <= ungated(core), "the 4 best-placed pods ungated")
    assert waiting(tenantgate) == [f"q-{i:02d}" for i in range(16, 20)]
    assert len(ungated(core)) == 12
    stored = core.read_namespaced_pod("q-12", "team-q")
    assert stored.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    eventually(lambda: tenantgate.used("team-q")["guaranteed"].get("cpu") == "12", "12 cpu charged")
