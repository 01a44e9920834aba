"""What a pod holds after an in-place resize: ``pod_requests(pod, use_status=True)``.

Mirrors ``PodRequests`` with ``UseStatusResources`` in
``k8s.io/component-helpers/resource/helpers.go`` (Kubernetes 1.33, ``determineContainerReqs``
and ``IsPodResizeInfeasible``), as ``pkg/quota/v1/evaluator/core/pods.go`` charges pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from classifier.limits import pod_limits
from classifier.quantities import Quantity
from classifier.resources import PodResourceError, pod_requests


def q(value: str) -> Quantity:
    return Quantity.parse(value)


def container(name: str, cpu: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": {"cpu": cpu}}, **extra}


def status(name: str, *, allocated: str | None, actual: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"name": name}
    if allocated is not None:
        item["allocatedResources"] = {"cpu": allocated}
    if actual is not None:
        item["resources"] = {"requests": {"cpu": actual}}
    return item


def pod(
    spec_cpu: str,
    *,
    allocated: str | None = None,
    actual: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"spec": {"containers": [container("app", spec_cpu)]}}
    if allocated is not None or actual is not None:
        result["status"] = {
            "containerStatuses": [status("app", allocated=allocated, actual=actual)]
        }
        if reason is not None:
            result["status"]["conditions"] = [
                {"type": "PodResizePending", "status": "True", "reason": reason}
            ]
    return result


@pytest.mark.parametrize(
    ("spec", "allocated", "actual", "reason", "expected"),
    [
        # A shrink requested: nothing is freed until the kubelet has applied it.
        ("1", "2", "2", None, "2"),
        # A grow requested: charged at the new spec at once.
        ("3", "2", "2", None, "3"),
        # Allocated but not yet actuated: the larger of the two.
        ("1", "1", "2", None, "2"),
        # A grow the node can never fit: the spec is not charged, what is held is.
        ("3", "2", "2", "Infeasible", "2"),
        ("3", "1", "2", "Infeasible", "2"),
        # Deferred (it may fit later): the spec is charged as usual.
        ("3", "2", "2", "Deferred", "3"),
    ],
)
def test_charge_is_the_largest_of_spec_allocated_and_actual(
    spec: str, allocated: str, actual: str, reason: str | None, expected: str
) -> None:
    result = pod_requests(
        pod(spec, allocated=allocated, actual=actual, reason=reason), use_status=True
    )
    assert result["cpu"] == q(expected)
    # Without the status, what the pod asks for: its spec.
    assert pod_requests(pod(spec, allocated=allocated, actual=actual))["cpu"] == q(spec)


def test_a_status_without_resources_leaves_the_spec() -> None:
    # determineContainerReqs runs only when the status has resources (cs.Resources != nil).
    assert pod_requests(pod("1", allocated="2"), use_status=True)["cpu"] == q("1")


def test_statuses_match_containers_by_name_and_skip_regular_init_containers() -> None:
    item = {
        "spec": {
            "initContainers": [
                container("init", "4"),
                container("sidecar", "100m", restartPolicy="Always"),
            ],
            "containers": [container("a", "1"), container("b", "1")],
        },
        "status": {
            "initContainerStatuses": [
                status("init", allocated="8", actual="8"),
                status("sidecar", allocated="500m", actual="500m"),
            ],
            "containerStatuses": [
                status("b", allocated="2", actual="2"),
                status("a", allocated="1", actual="1"),
            ],
        },
    }
    # Running: a 1 + b 2 + sidecar 500m = 3.5; the init container (before the sidecar) runs
    # alone on its spec's 4, never on its status' 8.
    assert pod_requests(item, use_status=True)["cpu"] == q("4")
    item["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m"
    assert pod_requests(item, use_status=True)["cpu"] == q("4")
    item["status"]["containerStatuses"][1]["allocatedResources"]["cpu"] = "2"
    assert pod_requests(item, use_status=True)["cpu"] == q("4.5")


def test_an_invalid_status_quantity_names_its_field() -> None:
    bad = pod("1", allocated="2", actual="lots")
    with pytest.raises(PodResourceError, match=r"status\.containerStatuses\[0\]\.resources"):
        pod_requests(bad, use_status=True)


@pytest.mark.parametrize(
    ("spec", "actual", "reason", "expected"),
    [
        ("1", "2", None, "2"),  # a lowered limit not applied yet
        ("3", "2", None, "3"),  # a raised limit: the spec
        ("3", "2", "Infeasible", "2"),  # never applied: the actual limit only
    ],
)
def test_limits_are_the_larger_of_spec_and_actual(
    spec: str, actual: str, reason: str | None, expected: str
) -> None:
    """determineContainerLimits: max(spec, actual); while Infeasible, the actual limits."""
    item: dict[str, Any] = {
        "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": spec}}}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "app",
                    "allocatedResources": {"cpu": actual},
                    "resources": {"requests": {"cpu": actual}, "limits": {"cpu": actual}},
                }
            ]
        },
    }
    if reason is not None:
        item["status"]["conditions"] = [{"type": "PodResizePending", "reason": reason}]
    assert pod_limits(item, use_status=True)["cpu"] == q(expected)
    assert pod_limits(item)["cpu"] == q(spec)
