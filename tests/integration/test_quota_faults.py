"""Quota faults a user hits, end to end: the real client, the real control plane, tenantgate.

* A globalDefault PriorityClass: the Priority plugin writes it into every pod naming none
  (``admitPod`` in ``plugin/pkg/admission/priority/admission.go``); such a pod asked for
  nothing, through /mutate or, when /mutate was skipped, through /validate alone.
* Creates refused after /mutate (object validation) hold quota for ``holdTTLSeconds`` only.
* A dry-run is judged at /validate as its /mutate judged it, even when a real pod took the
  room in between.
* In-place resize is charged as ``PodRequests`` with ``UseStatusResources`` charges it
  (``k8s.io/component-helpers/resource/helpers.go``, ``pkg/quota/v1/evaluator/core/pods.go``):
  a shrink frees nothing until the kubelet applied it, an Infeasible grow is not charged.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import certs
from testcluster import Cluster, NodeSpec
from tests.integration.conftest import CONFIG, StartTenantgate
from tests.integration.harness import (
    WAIT,
    HTTPSApp,
    api_client,
    create_namespace,
    eventually,
    pod,
    serve_https,
    wait_mutate_skipped,
)


class Clock:
    """tenantgate's clock, moved forward by the test (the core takes ``now``)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


SMALL_NODE = "node-small"


@pytest.fixture
def small_node(kube: Cluster) -> Iterator[str]:
    """A simulated node of 4 cpu (for resizes the kubelet refuses), removed afterwards."""
    kube.kubelet.add_node(
        NodeSpec(SMALL_NODE, capacity={"cpu": "4", "memory": "16Gi", "pods": "110"})
    )
    yield SMALL_NODE
    kube.kubelet.remove_node(SMALL_NODE)


def api_error(raised: pytest.ExceptionInfo[client.ApiException]) -> tuple[int, str]:
    body = json.loads(raised.value.body or "{}")
    return int(raised.value.status), str(body.get("message", ""))


# --------------------------------------------------------------------------- global default


def test_a_global_default_class_is_no_request(
    start_tenantgate: StartTenantgate, core: Any, kubeconfig: Path
) -> None:
    tenantgate = start_tenantgate()
    scheduling: Any = client.SchedulingV1Api(core.api_client)
    # Above the tenant's own class: taken as the pod's request it would be an escalation.
    scheduling.create_priority_class(
        {"metadata": {"name": "cluster-default"}, "value": 2000, "globalDefault": True}
    )
    eventually(
        lambda: tenantgate.state.policy.global_default == "cluster-default",
        "the cluster's global default class",
    )
    assert tenantgate.status()["config"]["globalDefaultPriorityClass"] == "cluster-default"
    create_namespace(core, {"metadata": {"name": "team-a"}})
    created = core.create_namespaced_pod("team-a", pod("plain"))
    assert created.spec.priority_class_name == "tenant-guaranteed"
    assert created.spec.priority == 1000
    assert created.metadata.labels["tenantgate.io/tier"] == "guaranteed"

    # With /mutate skipped, the pod reaches /validate with the default class: not denied.
    admission: Any = client.AdmissionregistrationV1Api(core.api_client)
    admission.delete_mutating_webhook_configuration("tenantgate")
    wait_mutate_skipped(core, "team-a")
    skipped = core.create_namespaced_pod("team-a", pod("skipped"))
    assert skipped.spec.priority_class_name == "cluster-default"
    eventually(lambda: tenantgate.status()["tenants"]["team-a"]["pods"] == 2, "both charged")
    assert tenantgate.used("team-a")["guaranteed"]["cpu"] == "2"


# --------------------------------------------------------------------------- holds


def invalid_pod(name: str) -> dict[str, Any]:
    """A pod tenantgate's /mutate admits and the API server's validation then refuses."""
    refused = pod(name)
    refused["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "500m"}
    return refused


def test_creates_refused_after_mutate_release_their_hold(
    start_tenantgate: StartTenantgate, core: Any, config_file: Path
) -> None:
    config_file.write_text(
        CONFIG.replace("reservationTTLSeconds: 2", "reservationTTLSeconds: 120\nholdTTLSeconds: 10")
    )
    clock = Clock()
    tenantgate = start_tenantgate(clock=clock)
    create_namespace(core, {"metadata": {"name": "team-a"}})
    for index in range(6):  # the burst ceiling: 6 cpu
        with pytest.raises(client.ApiException) as refused:
            core.create_namespaced_pod("team-a", invalid_pod(f"bad-{index}"))
        assert refused.value.status == 422
    with pytest.raises(client.ApiException) as locked:
        core.create_namespaced_pod("team-a", pod("good"))
    status, message = api_error(locked)
    assert status == 403
    assert "exceeded tenant quota: team-a" in message
    assert tenantgate.status()["tenants"]["team-a"]["holds"] == 6

    clock.offset += 11  # past holdTTLSeconds, far from reservationTTLSeconds
    created = core.create_namespaced_pod("team-a", pod("good"))
    assert created.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    eventually(lambda: tenantgate.status()["tenants"]["team-a"]["pods"] == 1, "good charged")
    document = tenantgate.status()["tenants"]["team-a"]
    assert document["holds"] == 0
    assert document["used"]["guaranteed"] == {"cpu": "1", "memory": "1Gi", "pods": "1"}


# --------------------------------------------------------------------------- dry-run


# Where the racing webhook's probes go: no tenant claims it, so tenantgate leaves them alone.
PROBE_NAMESPACE = "default"


class RacingWebhook:
    """A mutating webhook after tenantgate's: on a dry-run create it stores a real pod first,
    as another user's create landing between the dry-run's /mutate and its /validate."""

    def __init__(self, cert_dir: Path, kubeconfig: Path) -> None:
        self._paths = certs.MaterialPaths(cert_dir)
        self._kubeconfig = kubeconfig
        self._served: HTTPSApp | None = None
        self.raced = 0
        self.probed = 0

    def _create_racer(self, namespace: str) -> None:
        api = api_client(self._kubeconfig)
        try:
            core: Any = client.CoreV1Api(api)
            core.create_namespaced_pod(namespace, pod("racer"))
        finally:
            api.close()

    async def _review(self, request: Request) -> Response:
        req = orjson.loads(await request.body())["request"]
        if req.get("namespace") == PROBE_NAMESPACE:
            self.probed += 1
        elif req.get("dryRun") and req.get("operation") == "CREATE":
            self.raced += 1
            await asyncio.to_thread(self._create_racer, req["namespace"])
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": req["uid"], "allowed": True},
        }
        return Response(orjson.dumps(body), media_type="application/json")

    def start(self) -> RacingWebhook:
        self._served = serve_https(
            Starlette(routes=[Route("/race", self._review, methods=["POST"])]),
            self._paths,
            what="the racing webhook",
        )
        port = self._served.port
        api = api_client(self._kubeconfig)
        registration: Any = client.AdmissionregistrationV1Api(api)
        registration.create_mutating_webhook_configuration(
            {
                "metadata": {"name": "zz-racer"},
                "webhooks": [
                    {
                        "name": "race.example.com",
                        "admissionReviewVersions": ["v1"],
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}/race",
                            "caBundle": base64.b64encode(self._paths.ca_cert.read_bytes()).decode(
                                "ascii"
                            ),
                        },
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods"],
                            }
                        ],
                        "objectSelector": {"matchLabels": {"race": "yes"}},
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "timeoutSeconds": 10,
                    }
                ],
            }
        )
        try:
            self._wait_until_called(client.CoreV1Api(api))
        finally:
            api.close()
        return self

    def _wait_until_called(self, core: Any) -> None:
        """The API server reads webhook registrations from a watch: dry-run a labelled pod in
        another namespace until the webhook sees one, so the race is run, not skipped."""
        deadline = time.monotonic() + WAIT
        while not self.probed:
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for the racing webhook to be called")
            probe = pod("racer-probe", labels={"race": "yes"})
            core.create_namespaced_pod(PROBE_NAMESPACE, probe, dry_run="All")
            time.sleep(0.2)

    def stop(self) -> None:
        if self._served is not None:
            self._served.stop()


def test_a_dry_run_is_judged_as_its_mutate_judged_it(
    start_tenantgate: StartTenantgate, core: Any, kubeconfig: Path, cert_dir: Path
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    for index in range(5):
        core.create_namespaced_pod("team-a", pod(f"web-{index}"))
    racer = RacingWebhook(cert_dir, kubeconfig).start()
    try:
        # 5 of the 6 cpu are used: the dry-run's /mutate admits it on burst, then the racer
        # stores a real pod taking the last cpu before the dry-run reaches /validate.
        checked = core.create_namespaced_pod(
            "team-a", pod("what-if", labels={"race": "yes"}), dry_run="All"
        )
    finally:
        racer.stop()
    assert racer.raced == 1
    assert checked.metadata.labels["tenantgate.io/tier"] == "burst"
    assert checked.spec.priority_class_name == "tenant-burst"
    names = {p.metadata.name for p in core.list_namespaced_pod("team-a").items}
    assert names == {"web-0", "web-1", "web-2", "web-3", "web-4", "racer"}
    eventually(lambda: tenantgate.status()["tenants"]["team-a"]["pods"] == 6, "6 charged")


# --------------------------------------------------------------------------- resize


RESIZE_CONFIG = CONFIG.replace(
    'guaranteed: {cpu: "4", memory: 8Gi, pods: "20"}\n      burst: {ratio: 1.5}',
    'guaranteed: {cpu: "6", memory: 8Gi, pods: "20"}\n      burst: {ratio: 1}',
)


def resize(core: Any, name: str, cpu: str) -> None:
    core.patch_namespaced_pod_resize(
        name,
        "team-a",
        {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}},
    )


def running_pod(name: str, cpu: str) -> dict[str, Any]:
    bound = pod(name, cpu=cpu)
    bound["spec"]["nodeName"] = SMALL_NODE  # started by the simulated kubelet
    return bound


def allocated_cpu(core: Any, name: str) -> str | None:
    found = core.read_namespaced_pod(name, "team-a")
    statuses = found.status.container_statuses or []
    return statuses[0].allocated_resources.get("cpu") if statuses else None


def test_a_shrink_frees_quota_only_once_the_kubelet_applied_it(
    start_tenantgate: StartTenantgate,
    core: Any,
    config_file: Path,
    kube: Cluster,
    small_node: str,
) -> None:
    config_file.write_text(RESIZE_CONFIG)
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", running_pod("big", "3"))
    core.create_namespaced_pod("team-a", running_pod("other", "3"))
    eventually(lambda: allocated_cpu(core, "big") == "3", "the kubelet to start the pod")
    eventually(lambda: tenantgate.used("team-a")["guaranteed"]["cpu"] == "6", "both charged")

    kube.kubelet.pause()
    resize(core, "big", "1")
    assert allocated_cpu(core, "big") == "3"
    # The pod still holds 3 cpu on its node: nothing is free yet.
    with pytest.raises(client.ApiException) as full:
        core.create_namespaced_pod("team-a", pod("next", cpu="2"))
    assert api_error(full)[0] == 403
    assert tenantgate.used("team-a")["guaranteed"]["cpu"] == "6"

    kube.kubelet.resume()
    eventually(lambda: allocated_cpu(core, "big") == "1", "the kubelet to apply the resize")
    eventually(lambda: tenantgate.used("team-a")["guaranteed"]["cpu"] == "4", "the charge to drop")
    created = core.create_namespaced_pod("team-a", pod("next", cpu="2"))
    assert created.metadata.labels["tenantgate.io/tier"] == "guaranteed"


def test_a_grow_past_the_node_is_refused_by_the_api_server(
    start_tenantgate: StartTenantgate, core: Any, config_file: Path, small_node: str
) -> None:
    config_file.write_text(RESIZE_CONFIG)
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", running_pod("grows", "2"))
    eventually(lambda: allocated_cpu(core, "grows") == "2", "the kubelet to start the pod")
    # Fits the tenant (6 cpu), not the node (4 cpu): kube-apiserver's PodResizeValidator
    # (plugin/pkg/admission/podresize/admission.go) refuses it before any webhook.
    with pytest.raises(client.ApiException) as refused:
        resize(core, "grows", "5")
    status, message = api_error(refused)
    assert status == 403
    assert "node didn't have enough allocatable resources: cpu" in message
    assert tenantgate.used("team-a")["guaranteed"]["cpu"] == "2"


def test_an_infeasible_grow_is_charged_at_what_the_pod_holds(
    start_tenantgate: StartTenantgate,
    core: Any,
    config_file: Path,
    kube: Cluster,
    small_node: str,
) -> None:
    config_file.write_text(RESIZE_CONFIG)
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", running_pod("grows", "2"))
    eventually(lambda: allocated_cpu(core, "grows") == "2", "the kubelet to start the pod")
    # Accepted on a node of 4 cpu; the node then reports 3 (its kubelet restarted with more
    # reserved) before its kubelet looks at the resize, which it finds infeasible.
    kube.kubelet.pause()
    resize(core, "grows", "4")
    kube.kubelet.add_node(
        NodeSpec(SMALL_NODE, capacity={"cpu": "3", "memory": "16Gi", "pods": "110"})
    )
    kube.kubelet.resume()

    def infeasible() -> bool:
        found = core.read_namespaced_pod("grows", "team-a")
        return any(
            c.type == "PodResizePending" and c.reason == "Infeasible"
            for c in found.status.conditions or []
        )

    eventually(infeasible, "the kubelet to find the resize infeasible")
    # As the quota evaluator charges it: what is allocated, not the spec
    # (IsPodResizeInfeasible in k8s.io/component-helpers/resource/helpers.go).
    eventually(lambda: tenantgate.used("team-a")["guaranteed"]["cpu"] == "2", "charged at 2")
    # The room the infeasible spec does not take is free for others.
    core.create_namespaced_pod("team-a", pod("fits", cpu="4"))
    report = tenantgate.call(lambda: tenantgate.state.controller.recount(now=time.time()))
    assert not report.repaired, report
