"""The simulated kubelet's pod status, and the Priority plugin's one globalDefault class.

The kubelet (``canResizePod`` and the status it reports, Kubernetes 1.33): a bound pod is
started with ``allocatedResources`` and actual ``resources`` per container; an in-place resize
is applied, or reported Infeasible (``PodResizePending``) when it exceeds the node's
allocatable cpu or memory. The Priority plugin (``validatePriorityClass`` in
``plugin/pkg/admission/priority/admission.go``) refuses a second globalDefault class.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devapi import DevAPIServer
from tests.devapi.support import Api, new_client, status_of


@pytest.fixture
def devapi() -> Iterator[DevAPIServer]:
    with DevAPIServer(bookmark_interval=0.2, node_allocatable={"cpu": "4", "memory": "8Gi"}) as s:
        yield s


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def bound_pod(name: str, cpu: str, *, node: str | None = "node-1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "busybox",
                "resources": {"requests": {"cpu": cpu}, "limits": {"memory": "1Gi"}},
            }
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def raw_pod(core: Api, name: str) -> dict[str, Any]:
    response = core.read_namespaced_pod(name, "default", _preload_content=False)
    try:
        document: dict[str, Any] = json.loads(response.data)
    finally:
        response.release_conn()
    return document


def container_status(core: Api, name: str) -> dict[str, Any]:
    statuses = raw_pod(core, name).get("status", {}).get("containerStatuses") or [{}]
    status: dict[str, Any] = statuses[0]
    return status


def resize(core: Api, name: str, cpu: str) -> None:
    core.patch_namespaced_pod_resize(
        name,
        "default",
        {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}},
    )


def test_a_bound_pod_is_started_with_its_allocated_and_actual_resources(core: Api) -> None:
    core.create_namespaced_pod("default", bound_pod("runs", "2"))
    core.create_namespaced_pod("default", bound_pod("waits", "2", node=None))
    until(lambda: bool(container_status(core, "runs")), "the kubelet to start it")
    pod = raw_pod(core, "runs")
    assert pod["status"]["phase"] == "Running"
    status = pod["status"]["containerStatuses"][0]
    assert status["allocatedResources"] == {"cpu": "2", "memory": "1Gi"}
    assert status["resources"] == {
        "requests": {"cpu": "2", "memory": "1Gi"},
        "limits": {"memory": "1Gi"},
    }
    assert status["state"]["running"]["startedAt"]
    # Not bound to a node: no kubelet runs it.
    assert raw_pod(core, "waits").get("status", {}).get("containerStatuses") is None


def test_a_feasible_resize_is_allocated_and_applied(core: Api) -> None:
    core.create_namespaced_pod("default", bound_pod("grows", "2"))
    until(lambda: bool(container_status(core, "grows")), "the kubelet to start it")
    resize(core, "grows", "3")
    until(
        lambda: container_status(core, "grows")["allocatedResources"]["cpu"] == "3",
        "the kubelet to apply the resize",
    )
    assert container_status(core, "grows")["resources"]["requests"]["cpu"] == "3"
    assert not [
        c
        for c in raw_pod(core, "grows")["status"].get("conditions") or []
        if c["type"] == "PodResizePending"
    ]


def test_a_resize_beyond_the_node_is_infeasible_until_reverted(core: Api) -> None:
    core.create_namespaced_pod("default", bound_pod("greedy", "2"))
    until(lambda: bool(container_status(core, "greedy")), "the kubelet to start it")
    resize(core, "greedy", "5")

    def pending() -> list[dict[str, Any]]:
        conditions = raw_pod(core, "greedy")["status"].get("conditions") or []
        return [c for c in conditions if c["type"] == "PodResizePending"]

    until(lambda: bool(pending()), "the kubelet to refuse the resize")
    [condition] = pending()
    assert (condition["status"], condition["reason"]) == ("True", "Infeasible")
    assert condition["message"] == (
        "Node didn't have enough capacity: cpu, requested: 5000, capacity: 4000"
    )
    assert container_status(core, "greedy")["allocatedResources"]["cpu"] == "2"
    version = raw_pod(core, "greedy")["metadata"]["resourceVersion"]
    time.sleep(0.3)  # several kubelet rounds: an unchanged answer is not written again
    assert raw_pod(core, "greedy")["metadata"]["resourceVersion"] == version

    resize(core, "greedy", "2")
    until(lambda: not pending(), "the condition to go once the spec fits again")


def test_only_one_priority_class_is_the_global_default(kubeconfig: Path) -> None:
    api = new_client(kubeconfig)
    try:
        scheduling: Api = client.SchedulingV1Api(api)
        scheduling.create_priority_class(
            {"metadata": {"name": "first"}, "value": 5, "globalDefault": True}
        )
        with pytest.raises(client.ApiException) as second:
            scheduling.create_priority_class(
                {"metadata": {"name": "second"}, "value": 1, "globalDefault": True}
            )
        assert second.value.status == 403
        assert status_of(second.value)["message"] == (
            'priorityclasses.scheduling.k8s.io "second" is forbidden: PriorityClass first is '
            "already marked as default. Only one default can exist"
        )
        # The default itself may be updated; another class may be created without the flag.
        scheduling.patch_priority_class("first", {"description": "everyone"})
        scheduling.create_priority_class({"metadata": {"name": "third"}, "value": 1})
    finally:
        api.close()
