"""Reading a group's size from the cluster (tenants/kube/groupsizes.py)."""

from __future__ import annotations

import pytest

from tenants.kube.groupsizes import resource_of


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("Job", "jobs"),
        ("PodGroup", "podgroups"),
        ("PyTorchJob", "pytorchjobs"),
        ("Policy", "policies"),
        ("Ingress", "ingresses"),
        ("RayCluster", "rayclusters"),
    ],
)
def test_the_resource_is_guessed_as_kubernetes_guesses_it(kind: str, resource: str) -> None:
    """``UnsafeGuessKindToResource`` in k8s.io/apimachinery/pkg/api/meta/restmapper.go."""
    assert resource_of(kind) == resource
