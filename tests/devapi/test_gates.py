"""Scheduling gates through the real client: set at creation only, only removable, never with
a node name, ``PodScheduled=False/SchedulingGated`` on a gated pod, no binding while gated.

Upstream: pkg/apis/core/validation/validation.go (validateSchedulingGates, ValidatePodCreate,
ValidatePodUpdate / validateOnlyDeletedSchedulingGates), pkg/registry/core/pod/strategy.go
(applySchedulingGatedCondition), pkg/registry/core/pod/storage/storage.go
(setPodNodeAndMetadata).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.devapi.support import Api, status_of


def gated(name: str, *gates: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "schedulingGates": [{"name": g} for g in gates],
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
            **spec,
        },
    }


def message(err: pytest.ExceptionInfo[client.ApiException]) -> str:
    text: str = status_of(err.value)["message"]
    return text


def test_a_gated_pod_is_created_unscheduled_with_the_gated_condition(core: Api) -> None:
    pod = core.create_namespaced_pod("default", gated("web", "example.com/quota"))
    (condition,) = pod.status.conditions
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "PodScheduled",
        "False",
        "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates",
    )
    plain = core.create_namespaced_pod("default", gated("plain"))
    assert plain.status.conditions is None


def test_gates_can_only_be_removed(core: Api) -> None:
    core.create_namespaced_pod("default", gated("web", "example.com/a", "example.com/b"))
    with pytest.raises(client.ApiException) as added:
        core.patch_namespaced_pod(
            "web",
            "default",
            [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x"}}],
        )
    assert added.value.status == 422
    assert message(added) == (
        'Pod "web" is invalid: spec.schedulingGates[2].name: Forbidden: only deletion is '
        "allowed, but found new scheduling gate 'x'"
    )
    with pytest.raises(client.ApiException) as renamed:
        core.patch_namespaced_pod(
            "web",
            "default",
            [{"op": "replace", "path": "/spec/schedulingGates/0/name", "value": "example.com/c"}],
        )
    assert renamed.value.status == 422
    assert "found new scheduling gate 'example.com/c'" in message(renamed)
    one_left = core.patch_namespaced_pod(
        "web", "default", [{"op": "remove", "path": "/spec/schedulingGates/0"}]
    )
    assert [g.name for g in one_left.spec.scheduling_gates] == ["example.com/b"]
    ungated = core.patch_namespaced_pod(
        "web", "default", [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    assert ungated.spec.scheduling_gates is None
    # Once ungated, no gate may come back.
    with pytest.raises(client.ApiException) as back:
        core.patch_namespaced_pod(
            "web", "default", {"spec": {"schedulingGates": [{"name": "example.com/b"}]}}
        )
    assert back.value.status == 422


def test_a_pod_given_a_node_cannot_carry_gates(core: Api) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod("default", gated("web", "example.com/a", nodeName="node-1"))
    assert err.value.status == 422
    assert message(err) == (
        'Pod "web" is invalid: spec.nodeName: Forbidden: cannot be set until all '
        "schedulingGates have been cleared"
    )


def test_gate_names_are_qualified_and_unique(core: Api) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod("default", gated("web", "a", "a", "Bad_/x!"))
    assert err.value.status == 422
    causes = status_of(err.value)["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("spec.schedulingGates[1]", "FieldValueDuplicate"),
        ("spec.schedulingGates[2]", "FieldValueInvalid"),
        ("spec.schedulingGates[2]", "FieldValueInvalid"),
    ]


def test_a_gated_pod_cannot_be_bound(core: Api) -> None:
    core.create_namespaced_pod("default", gated("web", "example.com/a"))
    binding = {"metadata": {"name": "web"}, "target": {"kind": "Node", "name": "node-1"}}
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod_binding("web", "default", binding, _preload_content=False)
    assert err.value.status == 409
    assert message(err) == (
        'Operation cannot be fulfilled on pods/binding "web": pod web has non-empty '
        ".spec.schedulingGates"
    )
    core.patch_namespaced_pod("web", "default", {"spec": {"schedulingGates": None}})
    core.create_namespaced_pod_binding("web", "default", binding, _preload_content=False)
    assert core.read_namespaced_pod("web", "default").spec.node_name == "node-1"
