"""tenantgate inside kube-apiserver's admission chain, as users meet it.

* 200 concurrent creates through the API server admit exactly the ceiling.
* ``kubectl apply --dry-run=server`` (the built kubectl v1.37.2) prints tenantgate's warnings
  and books nothing.
* Next to a real LimitRange and ResourceQuota in the same namespace: LimitRanger (before the
  webhooks) defaults the requests tenantgate then counts, the RuntimeClass plugin adds the
  overhead, and where tenantgate and ResourceQuota (after the webhooks) judge the same pods
  their numbers are equal, pod for pod (``pkg/quota/v1/evaluator/core/pods.go``).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from classifier.quantities import Quantity
from testcluster import Cluster
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import api_client, create_namespace, eventually, pod

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-race:
    namespaces: [team-race]
    quota:
      guaranteed: {cpu: "40"}
      burst: {max: {cpu: "60"}}
  team-dry:
    namespaces: [team-dry]
    quota:
      guaranteed: {cpu: "2"}
      burst: {ratio: 2}
  team-rq:
    namespaces: [team-rq]
    quota:
      guaranteed: {cpu: "3", memory: 3Gi, pods: "10"}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


def test_200_concurrent_creates_admit_exactly_the_ceiling(
    start_tenantgate: StartTenantgate, core: Any, kubeconfig: Path
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-race"}})

    def attempt(index: int) -> str:
        api = api_client(kubeconfig)
        try:
            mine: Any = client.CoreV1Api(api)
            mine.create_namespaced_pod("team-race", pod(f"r-{index:03d}", memory="64Mi"))
        except client.ApiException as exc:
            refused = exc.status == 403 and "exceeded tenant quota: team-race" in str(exc.body)
            return "denied" if refused else f"{exc.status}: {exc.body}"
        finally:
            api.close()
        return "created"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(attempt, range(200)))
    assert outcomes.count("created") == 60, [o for o in outcomes if o not in ("created", "denied")]
    assert outcomes.count("denied") == 140
    stored = core.list_namespaced_pod("team-race").items
    tiers = [p.metadata.labels["tenantgate.io/tier"] for p in stored]
    assert (tiers.count("guaranteed"), tiers.count("burst")) == (40, 20)
    eventually(lambda: tenantgate.status()["tenants"]["team-race"]["pods"] == 60, "60 charged")
    document = tenantgate.status()["tenants"]["team-race"]
    assert document["used"]["guaranteed"]["cpu"] == "40"
    assert document["used"]["burst"]["cpu"] == "20"
    assert document["reservations"] == 0


def test_kubectl_server_dry_run_prints_the_warnings_and_books_nothing(
    start_tenantgate: StartTenantgate, core: Any, kube: Cluster, tmp_path: Path
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-dry"}})
    for index in range(2):
        core.create_namespaced_pod("team-dry", pod(f"base-{index}"))
    eventually(lambda: tenantgate.status()["tenants"]["team-dry"]["pods"] == 2, "2 charged")
    before = tenantgate.status()["tenants"]["team-dry"]
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump({**pod("web"), "metadata": {"name": "web"}}))

    shown = kube.plane.kubectl("apply", "--dry-run=server", "-n", "team-dry", "-f", str(manifest))

    assert shown.stdout.strip() == "pod/web created (server dry run)"
    warnings = [line for line in shown.stderr.splitlines() if line.startswith("Warning: ")]
    assert any(
        "team-dry is above its guarantee: admitted on burst capacity" in line for line in warnings
    ), shown.stderr
    after = tenantgate.status()["tenants"]["team-dry"]
    assert after == before
    assert "web" not in {p.metadata.name for p in core.list_namespaced_pod("team-dry").items}
    # The real apply is told the same and books.
    real = kube.plane.kubectl("apply", "-n", "team-dry", "-f", str(manifest))
    assert real.stdout.strip() == "pod/web created"
    assert [line for line in real.stderr.splitlines() if line.startswith("Warning: ")] == warnings


# --------------------------------------------------------------------------- ResourceQuota


def container(name: str, **resources: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": "registry.example.com/app:1", "resources": dict(resources)}


def shaped(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


# Pods whose requests follow different rules; LimitRange defaults fill what they leave out.
SHAPES = [
    # No resources at all: LimitRange's defaultRequest (500m, 256Mi).
    shaped("defaulted", {"containers": [container("app")]}),
    # An init container larger than the app: the larger counts.
    shaped(
        "init-heavy",
        {
            "initContainers": [container("setup", requests={"cpu": "1", "memory": "128Mi"})],
            "containers": [container("app", requests={"cpu": "250m", "memory": "128Mi"})],
        },
    ),
    # A sidecar (restartable init container) adds to the app.
    shaped(
        "with-sidecar",
        {
            "initContainers": [
                {
                    **container("proxy", requests={"cpu": "200m", "memory": "64Mi"}),
                    "restartPolicy": "Always",
                }
            ],
            "containers": [container("app", requests={"cpu": "300m", "memory": "192Mi"})],
        },
    ),
    # Limits only: the API server's defaulting makes them the requests.
    shaped(
        "limits-only", {"containers": [container("app", limits={"cpu": "700m", "memory": "1Gi"})]}
    ),
    # A RuntimeClass with overhead: the RuntimeClass plugin adds it to the pod.
    shaped(
        "sandboxed",
        {
            "runtimeClassName": "sandboxed",
            "containers": [container("app", requests={"cpu": "100m", "memory": "64Mi"})],
        },
    ),
]


def rq_used(core: Any) -> dict[str, str]:
    status = core.read_namespaced_resource_quota("team-rq", "team-rq").status
    return dict(status.used or {})


def same(left: str | None, right: str | None) -> bool:
    return Quantity.parse(left or "0") == Quantity.parse(right or "0")


def test_next_to_a_limit_range_and_a_resource_quota_the_numbers_agree(
    start_tenantgate: StartTenantgate, core: Any, kubeconfig: Path
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-rq"}})
    api = api_client(kubeconfig)
    node: Any = client.NodeV1Api(api)
    try:
        node.create_runtime_class(
            {
                "metadata": {"name": "sandboxed"},
                "handler": "sandboxed",
                "overhead": {"podFixed": {"cpu": "100m", "memory": "32Mi"}},
            }
        )
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    api.close()
    core.create_namespaced_limit_range(
        "team-rq",
        {
            "metadata": {"name": "defaults"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "defaultRequest": {"cpu": "500m", "memory": "256Mi"},
                        "default": {"cpu": "1", "memory": "512Mi"},
                    }
                ]
            },
        },
    )
    core.create_namespaced_resource_quota(
        "team-rq",
        {
            "metadata": {"name": "team-rq"},
            "spec": {"hard": {"requests.cpu": "3", "requests.memory": "3Gi", "pods": "10"}},
        },
    )
    eventually(lambda: rq_used(core) != {}, "the quota controller to count the namespace")

    for body in SHAPES:
        stored = core.create_namespaced_pod("team-rq", body)
        name = stored.metadata.name
        assert stored.metadata.labels["tenantgate.io/tier"] == "guaranteed", name

        def agree() -> bool:
            ours = tenantgate.used("team-rq")["guaranteed"]
            theirs = rq_used(core)
            return (
                same(ours.get("cpu"), theirs.get("requests.cpu"))
                and same(ours.get("memory"), theirs.get("requests.memory"))
                and same(ours.get("pods"), theirs.get("pods"))
            )

        eventually(agree, f"tenantgate and ResourceQuota to agree after {name}")

    # 2.9 of 3 cpu used: one more defaulted pod (500m) is over both. tenantgate, first in the
    # chain, refuses it; without tenantgate's webhooks, ResourceQuota refuses it at the same
    # numbers (a server dry-run runs the quota check and persists nothing).
    one_more = shaped("one-more", {"containers": [container("app")]})
    with pytest.raises(client.ApiException) as ours:
        core.create_namespaced_pod("team-rq", one_more)
    message = json.loads(ours.value.body or "{}")["message"]
    assert "exceeded tenant quota: team-rq: requested cpu=500m, used cpu=2900m/3" in message
    admission: Any = client.AdmissionregistrationV1Api(core.api_client)
    admission.delete_validating_webhook_configuration("tenantgate")
    admission.delete_mutating_webhook_configuration("tenantgate")
    expected = (
        'pods "one-more" is forbidden: exceeded quota: team-rq, requested: requests.cpu=500m, '
        "used: requests.cpu=2900m, limited: requests.cpu=3"
    )
    seen: list[str] = []

    def quota_answers() -> bool:
        # kube-apiserver learns of the deleted webhooks through a watch: until then tenantgate
        # still answers first.
        with pytest.raises(client.ApiException) as theirs:
            core.create_namespaced_pod("team-rq", one_more, dry_run="All")
        seen.append(json.loads(theirs.value.body or "{}")["message"])
        return "tenantgate" not in seen[-1]

    eventually(quota_answers, "the webhooks to be gone")
    assert seen[-1] == expected
