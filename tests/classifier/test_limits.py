"""Tests for classifier.limits: a pod's effective limits and its quota usage.

The limit tables are ported from ``staging/src/k8s.io/component-helpers/resource/helpers_test.go``
(``TestPodRequestsAndLimits`` and ``TestPodRequestsAndLimitsWithoutOverhead``, limits half;
``TestPodResourceLimits``); each case keeps its Go name. Overhead is always included here
(tenantgate has no ``ExcludeOverhead`` option), so the cases Go runs without it say what Go
expects and what is expected here. Usage follows ``podComputeUsageHelper`` in
``pkg/quota/v1/evaluator/core/pods.go``.
"""

from __future__ import annotations

from typing import Any

import pytest

from classifier.limits import (
    container_missing_limits,
    pod_limit_usage,
    pod_limits,
    pod_usage,
)
from classifier.quantities import Quantity
from classifier.resources import PodResourceError
from tests.classifier.test_resources import c, pod

JSONDict = dict[str, Any]


def q(values: dict[str, str]) -> dict[str, Quantity]:
    return {name: Quantity.parse(text) for name, text in values.items()}


LimitCase = tuple[str, JSONDict, dict[str, str]]

# TestPodRequestsAndLimits (limits half); getPod() builds one container.
POD_REQUESTS_AND_LIMITS: list[LimitCase] = [
    ("just-limit-no-overhead", pod([c(limits={"cpu": "9"})]), {"cpu": "9"}),
    ("just-overhead", pod([c()], overhead={"cpu": "5", "memory": "5"}), {}),
    (
        "req-and-overhead",
        pod([c({"cpu": "1", "memory": "10"})], overhead={"cpu": "5", "memory": "5"}),
        {},
    ),
    (
        "all-req-lim-and-overhead",
        pod(
            [c({"cpu": "1", "memory": "10"}, {"cpu": "2", "memory": "12"})],
            overhead={"cpu": "5", "memory": "5"},
        ),
        {"cpu": "7", "memory": "17"},
    ),
    (
        "req-some-lim-and-overhead",
        pod(
            [c({"cpu": "1", "memory": "10"}, {"cpu": "2"})],
            overhead={"cpu": "5", "memory": "5"},
        ),
        {"cpu": "7"},
    ),
]

_TWO = [
    c({"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}, name="foobar"),
    c({"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"}, name="foobar2"),
]

# TestPodRequestsAndLimitsWithoutOverhead (limits half). Go excludes overhead; here it is added.
WITHOUT_OVERHEAD: list[LimitCase] = [
    (
        "two container no overhead - should just be sum of containers",
        pod(_TWO),
        {"cpu": "10", "memory": "34"},
    ),
    (
        "two container with overhead (Go excludes it: 10/34)",
        pod(_TWO, overhead={"cpu": "3", "memory": "8"}),
        {"cpu": "13", "memory": "42"},
    ),
    (
        "two container with overhead, massive init (Go excludes it: 80/240)",
        pod(
            _TWO,
            [
                c({"cpu": "1", "memory": "5"}, {"cpu": "1", "memory": "5"}, name="small-init"),
                c({"cpu": "40", "memory": "120"}, {"cpu": "80", "memory": "240"}, name="big-init"),
            ],
            overhead={"cpu": "3", "memory": "8"},
        ),
        {"cpu": "83", "memory": "248"},
    ),
]


def _lim(
    cpu: str | None = None, memory: str | None = None, *, name: str = "c", sidecar: bool = False
) -> JSONDict:
    limits = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return c(limits=limits or None, name=name, sidecar=sidecar)


# TestPodResourceLimits (the spec-only cases: tenantgate never reads status).
POD_RESOURCE_LIMITS: list[LimitCase] = [
    ("nil options, larger init container", pod([_lim("1")], [_lim("4")]), {"cpu": "4"}),
    (
        "nil options, larger containers",
        pod([_lim("2"), _lim("3")], [_lim("2")]),
        {"cpu": "5"},
    ),
    (
        "pod overhead excluded (Go: 5; included here: 6)",
        pod([_lim("2"), _lim("3")], [_lim("2")], overhead={"cpu": "1"}),
        {"cpu": "6"},
    ),
    (
        "pod overhead included (only added to non-zero limits: no memory limit)",
        pod([_lim("2"), _lim("3")], [_lim("2")], overhead={"cpu": "1", "memory": "1Gi"}),
        {"cpu": "6"},
    ),
    ("no limited containers should result in no limits for the pod", pod([c()], []), {}),
    (
        "one limited and one unlimited container",
        pod([_lim("2", "2Gi"), c()], []),
        {"cpu": "2", "memory": "2Gi"},
    ),
    (
        "one limited and one unlimited init container",
        pod([_lim("1", "1Gi")], [_lim("2", "2Gi"), c()]),
        {"cpu": "2", "memory": "2Gi"},
    ),
    (
        "restartable init container",
        pod([_lim("1", name="container-1")], [_lim("1", name="restartable-init-1", sidecar=True)]),
        {"cpu": "2"},
    ),
    (
        "multiple restartable init containers",
        pod(
            [_lim("1", name="container-1")],
            [
                _lim("5", name="init-1"),
                _lim("1", name="restartable-init-1", sidecar=True),
                _lim("2", name="restartable-init-2", sidecar=True),
                _lim("3", name="restartable-init-3", sidecar=True),
            ],
        ),
        {"cpu": "7"},
    ),
    (
        "multiple restartable and regular init containers",
        pod(
            [_lim("1", name="container-1")],
            [
                _lim("5", name="init-1"),
                _lim("1", name="restartable-init-1", sidecar=True),
                _lim("2", name="restartable-init-2", sidecar=True),
                _lim("5", name="init-2"),
                _lim("3", name="restartable-init-3", sidecar=True),
            ],
        ),
        {"cpu": "8"},
    ),
    (
        "restartable-init, init and regular",
        pod(
            [_lim("100", name="container-1")],
            [_lim("10", name="restartable-init-1", sidecar=True), _lim("200", name="init-1")],
        ),
        {"cpu": "210"},
    ),
]

# PodLimits with pod-level resources (applyPodLevelResources over the limits): the pod-level
# limits of cpu, memory and hugepages-* replace the aggregate; other resources keep it.
POD_LEVEL: list[LimitCase] = [
    (
        "pod-level limits replace the containers' cpu and memory",
        pod(
            [_lim("1", "1Gi"), _lim("1", "1Gi")],
            resources={"limits": {"cpu": "4", "memory": "3Gi"}},
        ),
        {"cpu": "4", "memory": "3Gi"},
    ),
    (
        "pod-level requests only: the containers' limits stand",
        pod([_lim("1", "1Gi")], resources={"requests": {"cpu": "500m"}}),
        {"cpu": "1", "memory": "1Gi"},
    ),
    (
        "pod-level limits of an unsupported resource are ignored",
        pod(
            [c(limits={"ephemeral-storage": "1Gi", "cpu": "1"})],
            resources={"limits": {"ephemeral-storage": "5Gi"}},
        ),
        {"ephemeral-storage": "1Gi", "cpu": "1"},
    ),
    (
        "overhead is not added to a limit of zero (PodLimits: non-zero limits only)",
        pod([c(limits={"cpu": "0", "memory": "1Gi"})], overhead={"cpu": "1", "memory": "1Gi"}),
        {"cpu": "0", "memory": "2Gi"},
    ),
    (
        "pod-level limits plus overhead",
        pod([c()], resources={"limits": {"memory": "2Gi"}}, overhead={"memory": "128Mi"}),
        {"memory": "2176Mi"},
    ),
]


@pytest.mark.parametrize(
    ("name", "spec", "expected"),
    POD_REQUESTS_AND_LIMITS + WITHOUT_OVERHEAD + POD_RESOURCE_LIMITS + POD_LEVEL,
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_pod_limits_match_upstream(name: str, spec: JSONDict, expected: dict[str, str]) -> None:
    assert pod_limits(spec) == q(expected), name


def test_limits_are_rounded_up_to_milli_as_stored() -> None:
    assert pod_limits(pod([c(limits={"cpu": "100.5u"})])) == q({"cpu": "1m"})


def test_an_invalid_limit_names_its_field() -> None:
    with pytest.raises(PodResourceError) as info:
        pod_limits(pod([c(limits={"cpu": "lots"})]))
    assert info.value.path == "spec.containers[0].resources.limits.cpu"


def test_usage_charges_limits_of_cpu_memory_and_ephemeral_storage_only() -> None:
    """podComputeUsageHelper: extended resources and hugepages have no limits.* usage."""
    spec = pod(
        [
            c(
                {"cpu": "1", "memory": "1Gi"},
                {
                    "cpu": "2",
                    "memory": "2Gi",
                    "ephemeral-storage": "1Gi",
                    "nvidia.com/gpu": "1",
                    "hugepages-2Mi": "4Mi",
                },
            )
        ]
    )
    assert pod_limit_usage(spec) == q(
        {"limits.cpu": "2", "limits.memory": "2Gi", "limits.ephemeral-storage": "1Gi"}
    )
    assert pod_usage(spec) == q(
        {
            "cpu": "1",
            "memory": "1Gi",
            "ephemeral-storage": "1Gi",
            "nvidia.com/gpu": "1",
            "hugepages-2Mi": "4Mi",
            "pods": "1",
            "limits.cpu": "2",
            "limits.memory": "2Gi",
            "limits.ephemeral-storage": "1Gi",
        }
    )


def test_a_pod_without_limits_is_charged_its_requests_only() -> None:
    assert pod_usage(pod([c({"cpu": "1"})])) == q({"cpu": "1", "pods": "1"})


def test_containers_missing_limits_are_named_per_resource() -> None:
    """enforcePodContainerConstraints: init containers count too; unnamed ones by index."""
    spec = pod(
        [c(limits={"cpu": "1"}, name="web"), c(name="log")],
        [c(limits={"memory": "1Gi"}, name="setup")],
    )
    spec["spec"]["containers"].append({"image": "x"})
    assert container_missing_limits(spec, ("cpu", "memory")) == {
        "cpu": ["log", "containers[2]", "setup"],
        "memory": ["web", "log", "containers[2]"],
    }
