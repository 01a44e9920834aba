"""Pods claimed by the shipped ``podGroup`` rules at admission (Policy.group_rules):
/mutate gates them with their group, /validate knows them when /mutate was skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from classifier.podgroups import SizeRef
from classifier.templates import find_pod_templates, pod_from_template
from tenants.config import Policy
from tenants.configfile import load_policy
from tenants.groups.sizes import SizeAnswer
from tests.tenants.conftest import EXAMPLE_CONFIG
from tests.tenants.test_decisions import Chain

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"
GATE = {"name": "tenantgate.io/quota"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(EXAMPLE_CONFIG)


def pytorchjob() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        (FIXTURES / "kubeflow-pytorchjob-simple.yaml").read_text()
    )
    document["metadata"]["namespace"] = "ml"
    return document


class ObjectSizes:
    """Reads a size from the objects it holds, as the cluster reader would from the cluster."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = objects
        self.asked: list[SizeRef] = []

    async def read(self, ref: SizeRef) -> SizeAnswer:
        self.asked.append(ref)
        for item in self.objects:
            if (item["kind"], item["metadata"]["name"]) == (ref.kind, ref.name):
                return SizeAnswer(ref.size_of(item))
        return SizeAnswer(None, f"{ref.describe()} was not found")


def members(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [pod_from_template(found, namespace="ml") for found in find_pod_templates(job)]


def test_a_pytorchjob_pod_is_gated_as_a_member_of_its_job(policy: Policy) -> None:
    job = pytorchjob()
    chain = Chain(policy)
    sizes = ObjectSizes(job)
    chain.admitter.sizes = sizes
    master, _ = members(job)
    mutated, validated, final = chain.admit(master, uid="m", pod_uid="m")
    assert mutated.allowed
    assert validated is not None
    assert validated.allowed
    assert final["spec"]["schedulingGates"] == [GATE]
    annotations = final["metadata"]["annotations"]
    assert annotations["tenantgate.io/group"] == "pytorchjob/pytorch-simple"
    assert annotations["tenantgate.io/group-size"] == "2"
    assert [(ref.kind, ref.name, ref.fields) for ref in sizes.asked] == [
        ("PyTorchJob", "pytorch-simple", ("spec.pytorchReplicaSpecs.*.replicas",))
    ]
    assert "waiting for pod group pytorch-simple: 1 of 2 members created" in mutated.warnings[-1]


def test_a_pytorchjob_pod_mutate_did_not_gate_is_refused_at_validation(policy: Policy) -> None:
    # The mutating webhook fails open: a member it skipped must not run before its group.
    _, worker = members(pytorchjob())
    worker["metadata"]["uid"] = "w-0"
    for container in worker["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    denied = Chain(policy).validate(worker, uid="skipped")
    assert not denied.allowed
    assert denied.code == 409
    assert "member of pod group pytorch-simple" in denied.message
