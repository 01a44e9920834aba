"""The production namespace of a ResourceQuota + LimitRange cluster, moved to tenantgate.

``examples/production-limits.yaml``: requests 100 CPU / 200Gi, limits 200 CPU / 400Gi,
100 pods, 10 GPUs; container defaults 100m/128Mi requests and 500m/512Mi limits; container
min 50m/64Mi and max 2 CPU/4Gi, memory limit at most 4 times the request; pod max 4 CPU/8Gi.

One scenario, three ways in, one expected outcome: ``tenantgate review`` (offline, with a
usage snapshot for the late steps), the server over real HTTPS (AdmissionReviews as the API
server sends them), and the real control plane with the real ``kubernetes`` client and
tenantgate registered as its webhooks. Every step's verdict and message, the defaults filled
and the usage after the fill are the same in all three.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import jsonpatch
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from admission.cli import main
from admission.commands.usage import render
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import (
    WAIT,
    Tenantgate,
    create_namespace,
    eventually,
    offline_tenantgate,
)
from tests.tlsclient import client_context

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION: Final = ROOT / "examples" / "production-limits.yaml"
NAMESPACE: Final = "production"
TENANT: Final = "production"


def container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "registry.example.com/app:1", "resources": resources}


def pod(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"containers": list(containers)},
    }


_WITHIN_CPU = {"cpu": "500m"}
# Two containers at the container maximum: the pod's limits are exactly the pod maximum.
FILLER_REQUESTS = {"cpu": "500m", "memory": "1Gi"}
FILLER_LIMITS = {"cpu": "2", "memory": "4Gi"}
FILLERS: Final = 49


def filler(index: int) -> dict[str, Any]:
    return pod(
        f"fill-{index}",
        container("a", FILLER_REQUESTS, FILLER_LIMITS),
        container("b", FILLER_REQUESTS, FILLER_LIMITS),
    )


# (pod, allowed, message) at no usage; the defaults pod is admitted last, then the fill.
DENIED_AT_START: Final = [
    (
        pod(
            "web-1",
            container("web", {"cpu": "500m", "memory": "2Gi"}, {"cpu": "1", "memory": "8Gi"}),
        ),
        "container web in pod production/web-1: memory limit 8Gi is above the tenant's maximum "
        "4Gi (tenant production, bounds.container.max)",
    ),
    (
        pod(
            "web-1",
            *(
                container(n, {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"})
                for n in "abc"
            ),
        ),
        "pod production/web-1: cpu limit 6 is above the tenant's maximum 4 "
        "(tenant production, bounds.pod.max)",
    ),
    (
        pod(
            "web-1",
            container("web", {"cpu": "500m", "memory": "128Mi"}, {"cpu": "1", "memory": "1Gi"}),
        ),
        "container web in pod production/web-1: memory limit 1Gi is 8 times its request 128Mi, "
        "above the tenant's maximum ratio 4 "
        "(tenant production, bounds.container.maxLimitRequestRatio)",
    ),
    (
        pod(
            "web-1",
            container("web", {"cpu": "10m", "memory": "128Mi"}, {"cpu": "40m", "memory": "256Mi"}),
        ),
        "container web in pod production/web-1: cpu request 10m is below the tenant's minimum 50m "
        "(tenant production, bounds.container.min)",
    ),
    (
        pod(
            "trainer",
            container(
                "train",
                {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "11"},
                {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "11"},
            ),
        ),
        "exceeded tenant quota: production: requested nvidia.com/gpu=11, used nvidia.com/gpu=0/10 "
        "(burst ceiling), guaranteed nvidia.com/gpu=10",
    ),
]
DEFAULTED = pod("web-0", container("web"))
DEFAULTED_RESOURCES: Final = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}
DEFAULTS_WARNING: Final = (
    "tenant production container defaults applied: web requests cpu=100m,memory=128Mi, "
    "limits cpu=500m,memory=512Mi"
)
# After the defaulted pod and the fillers: the limits are nearly exhausted, the requests not.
USED_AFTER_FILL: Final = {
    "cpu": "49100m",
    "memory": "100480Mi",
    "limits.cpu": "196500m",
    "limits.memory": "401920Mi",
    "pods": "50",
}
OVER_LIMITS: Final = (
    "exceeded tenant quota: production: requested limits.cpu=4,limits.memory=8Gi, used "
    "limits.cpu=196500m/200,limits.memory=401920Mi/400Gi (burst ceiling), guaranteed "
    "limits.cpu=200,limits.memory=400Gi"
)


# --------------------------------------------------------------------------- review


def review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any], *extra: str
) -> dict[str, Any]:
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(manifest))
    main(["review", "-f", str(path), "--config", str(PRODUCTION), "-o", "json", *extra])
    (row,) = json.loads(capsys.readouterr().out)
    assert isinstance(row, dict)
    return row


def test_review(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for manifest, message in DENIED_AT_START:
        row = review(tmp_path, capsys, manifest)
        assert (row["allowed"], row["message"]) == (False, message)
    row = review(tmp_path, capsys, DEFAULTED)
    assert row["allowed"] is True
    assert row["tier"] == "guaranteed"
    assert row["mutated"]["spec"]["containers"][0]["resources"] == DEFAULTED_RESOURCES
    assert DEFAULTS_WARNING in row["warnings"]
    usage = tmp_path / "usage.json"
    usage.write_text(
        json.dumps(
            {"tenants": {"production": {"used": {"guaranteed": USED_AFTER_FILL, "burst": {}}}}}
        )
    )
    row = review(tmp_path, capsys, filler(FILLERS), "--usage", str(usage))
    assert (row["allowed"], row["message"]) == (False, OVER_LIMITS)
    # One filler less would still fit: 196.5 + 4 > 200 is what denies.
    row = review(
        tmp_path,
        capsys,
        pod("small", container("a", FILLER_REQUESTS, {"cpu": "2", "memory": "4Gi"})),
        "--usage",
        str(usage),
    )
    assert row["allowed"] is True


# --------------------------------------------------------------------------- real HTTPS


def admission_review(
    manifest: dict[str, Any], *, name: str, dry_run: bool = False
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE,
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": manifest,
            "oldObject": None,
            "dryRun": dry_run,
        },
    }


async def send(
    http: httpx.AsyncClient, manifest: dict[str, Any], *, dry_run: bool = False
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """mutate, apply the patch, validate: (mutate response, validate response, final pod)."""
    name = manifest["metadata"]["name"]
    answer = (
        await http.post("/mutate", json=admission_review(manifest, name=name, dry_run=dry_run))
    ).json()["response"]
    if not answer["allowed"]:
        return answer, None, manifest
    final = copy.deepcopy(manifest)
    if "patch" in answer:
        final = jsonpatch.apply_patch(final, json.loads(base64.b64decode(answer["patch"])))
    final["metadata"]["uid"] = str(uuid.uuid4())
    validated = (
        await http.post("/validate", json=admission_review(final, name=name, dry_run=dry_run))
    ).json()["response"]
    return answer, validated, final


@pytest.fixture
def server(tmp_path: Path, cert_dir: Path) -> Iterator[Tenantgate]:
    with offline_tenantgate(PRODUCTION, cert_dir) as running:
        yield running


def test_server_over_https(server: Tenantgate) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(
            base_url=server.url,
            verify=client_context(server.settings.cert_dir / "ca.crt"),
            timeout=httpx.Timeout(WAIT),
            trust_env=False,
        ) as http:
            for manifest, message in DENIED_AT_START:
                mutated, _, _ = await send(http, manifest)
                assert (mutated["allowed"], mutated["status"]["message"]) == (False, message)
            # Dry-run: the same answer, nothing booked.
            mutated, validated, final = await send(http, DEFAULTED, dry_run=True)
            assert mutated["allowed"]
            assert validated is not None
            assert validated["allowed"]
            assert server.used(TENANT) == {"guaranteed": {}, "burst": {}}
            mutated, validated, final = await send(http, DEFAULTED)
            assert (validated or {}).get("allowed") is True
            assert DEFAULTS_WARNING in mutated["warnings"]
            assert final["spec"]["containers"][0]["resources"] == DEFAULTED_RESOURCES
            for index in range(FILLERS):
                mutated, validated, _ = await send(http, filler(index))
                assert (validated or {}).get("allowed") is True, mutated
            mutated, _, _ = await send(http, filler(FILLERS))
            assert (mutated["allowed"], mutated["status"]["message"]) == (False, OVER_LIMITS)

    asyncio.run(run())
    assert server.used(TENANT) == {"guaranteed": USED_AFTER_FILL, "burst": {}}
    status = server.status()
    document = status["tenants"][TENANT]
    assert document["guaranteed"]["limits.cpu"] == "200"
    assert document["guaranteed"]["cpu"] == "100"
    # `tenantgate usage` and the metrics carry the limits names too.
    (row,) = [line.split() for line in render(status).splitlines() if " limits.cpu " in line]
    # RESOURCE GUARANTEED CEILING USED IN-GUARANTEE ON-BURST
    assert row[:6] == ["limits.cpu", "200", "200", "196500m", "196500m", "0"]
    with urllib.request.urlopen(f"{server.metrics_url}/metrics", timeout=WAIT) as response:
        text = response.read().decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    key = (("resource", "limits.cpu"), ("tenant", TENANT), ("tier", "guaranteed"))
    assert samples[("tenantgate_tenant_used", key)] == 196.5
    ceiling = (("resource", "limits.memory"), ("tenant", TENANT))
    assert samples[("tenantgate_tenant_ceiling", ceiling)] == 400 * 2**30


# ------------------------------------------------------------------- the real control plane


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(PRODUCTION.read_text())
    return path


def test_through_the_real_control_plane(start_tenantgate: StartTenantgate, core: Any) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": NAMESPACE}})
    for manifest, message in DENIED_AT_START:
        with pytest.raises(client.ApiException) as refused:
            core.create_namespaced_pod(NAMESPACE, manifest)
        assert refused.value.status == 403
        assert json.loads(refused.value.body or "{}")["message"].endswith(message)
    core.create_namespaced_pod(NAMESPACE, DEFAULTED, dry_run="All")
    assert tenantgate.used(TENANT) == {"guaranteed": {}, "burst": {}}
    stored = core.create_namespaced_pod(NAMESPACE, DEFAULTED)
    resources = stored.spec.containers[0].resources
    assert (resources.requests, resources.limits) == (
        DEFAULTED_RESOURCES["requests"],
        DEFAULTED_RESOURCES["limits"],
    )
    for index in range(FILLERS):
        core.create_namespaced_pod(NAMESPACE, filler(index))
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(NAMESPACE, filler(FILLERS))
    assert json.loads(refused.value.body or "{}")["message"].endswith(OVER_LIMITS)
    eventually(lambda: tenantgate.status()["tenants"][TENANT]["pods"] == FILLERS + 1, "stored")
    assert tenantgate.used(TENANT) == {"guaranteed": USED_AFTER_FILL, "burst": {}}
    report = tenantgate.call(lambda: tenantgate.state.controller.recount(now=time.time()))
    assert not report.repaired, report
