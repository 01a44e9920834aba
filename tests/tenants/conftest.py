"""Shared helpers for the tenants tests: a small config, pods and admission requests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tenants.config import Policy
from tenants.configfile import load_text
from tenants.verdicts import AdmissionInput

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = ROOT / "examples" / "tenantgate.yaml"

# A small, self-contained config: the tests below must not depend on the example's rules.
CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  batch-low: {value: 100}
  tenant-guaranteed: {value: 1000}
  gold: {value: 5000}
  other-tenant: {value: 3000}
profiles:
  general: {}
  batch: {priorityClassName: batch-low}
  ml: {tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]}
rules:
  - name: batch
    profile: batch
    match: {restartPolicy: [OnFailure, Never]}
  - name: gpu
    profile: ml
    match: {resource: "nvidia.com/gpu > 0"}
tenants:
  team-a:
    namespaces: [team-a, team-a-dev]
    quota:
      guaranteed: {cpu: "4", memory: 8Gi, pods: "20"}
      burst: {ratio: 1.5}
    priorityClasses: {guaranteed: tenant-guaranteed, allowed: [gold, batch-low]}
    containerDefaults:
      requests: {cpu: 100m, memory: 128Mi}
  ml:
    namespaces: [ml]
    quota:
      guaranteed: {cpu: "32", memory: 128Gi, nvidia.com/gpu: "4"}
      burst: {max: {nvidia.com/gpu: "6"}}
    profiles: {allowed: [ml]}
  other:
    namespaces: [other]
    quota: {guaranteed: {cpu: "1"}}
    priorityClasses: {guaranteed: other-tenant}
"""


def make_policy(text: str = CONFIG) -> Policy:
    return load_text(text, filename="test.yaml").policy


@pytest.fixture(scope="module")
def policy() -> Policy:
    return make_policy()


def make_pod(
    *,
    cpu: str | None = "500m",
    memory: str | None = "256Mi",
    namespace: str = "team-a",
    extra: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod as the API server passes it to a mutating webhook (no name, no uid yet)."""
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    requests.update(extra or {})
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "worker-", "namespace": namespace, "labels": {"app": "w"}},
        "spec": {"containers": [container], **spec},
    }


def create(
    pod: dict[str, Any],
    *,
    uid: str = "req-1",
    namespace: str | None = None,
    dry_run: bool = False,
) -> AdmissionInput:
    ns = namespace or pod.get("metadata", {}).get("namespace", "team-a")
    return AdmissionInput(
        uid=uid,
        operation="CREATE",
        namespace=ns,
        name="",
        object=copy.deepcopy(pod),
        dry_run=dry_run,
    )


def stored(pod: dict[str, Any], *, pod_uid: str, name: str = "worker-x") -> dict[str, Any]:
    """``pod`` as validating webhooks see it: the API server has set name and uid."""
    final = copy.deepcopy(pod)
    final["metadata"]["name"] = name
    final["metadata"]["uid"] = pod_uid
    return final
