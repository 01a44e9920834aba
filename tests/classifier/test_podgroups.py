"""Which group a pod belongs to (classifier/podgroups.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from classifier.podgroups import (
    GroupClaim,
    GroupClaimError,
    SizeRef,
    claim_group,
)


def pod(
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}


def job_owner(name: str, *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": name,
        "uid": "u",
        "controller": controller,
    }


def test_labels_give_name_and_size() -> None:
    claim = claim_group(
        pod(labels={"tenantgate.io/pod-group": "train-42", "tenantgate.io/pod-group-size": "8"})
    )
    assert claim == GroupClaim(key="labels/train-42", name="train-42", source="labels", size=8)


def test_annotations_are_read_too_and_a_label_wins() -> None:
    claim = claim_group(
        pod(
            labels={"tenantgate.io/pod-group-size": "4"},
            annotations={"tenantgate.io/pod-group": "g", "tenantgate.io/pod-group-size": "9"},
        )
    )
    assert claim is not None
    assert claim.name == "g"
    assert claim.size == 4


@pytest.mark.parametrize("raw", [None, "", "0", "-1", "8.0", "eight", "100001"])
def test_a_size_that_is_not_a_count_is_an_error_naming_the_field(raw: str | None) -> None:
    labels = {"tenantgate.io/pod-group": "g"}
    if raw is not None:
        labels["tenantgate.io/pod-group-size"] = raw
    with pytest.raises(GroupClaimError, match=r"tenantgate\.io/pod-group-size|needs"):
        claim_group(pod(labels=labels))


def test_coscheduling_label_sizes_from_the_podgroup() -> None:
    claim = claim_group(pod(labels={"scheduling.x-k8s.io/pod-group": "pg"}))
    assert claim is not None
    assert claim.size is None
    assert claim.size_from == SizeRef(
        "scheduling.x-k8s.io/v1alpha1", "PodGroup", "team-a", "pg", ("spec.minMember",)
    )
    assert claim.size_from.size_of({"spec": {"minMember": 3}}) == 3


def test_tenantgate_labels_come_before_coscheduling() -> None:
    claim = claim_group(
        pod(
            labels={
                "scheduling.x-k8s.io/pod-group": "pg",
                "tenantgate.io/pod-group": "mine",
                "tenantgate.io/pod-group-size": "2",
            }
        )
    )
    assert claim is not None
    assert claim.source == "labels"


def test_indexed_job_pod_is_grouped_by_its_job() -> None:
    # pkg/controller/job/indexed_job_utils.go sets the completion index annotation and label.
    claim = claim_group(
        pod(
            annotations={"batch.kubernetes.io/job-completion-index": "3"},
            owners=[job_owner("train")],
        )
    )
    assert claim is not None
    assert claim.source == "indexed-job"
    assert claim.key == "job/train"
    assert claim.size_from is not None
    assert claim.size_from.size_of({"spec": {"parallelism": 8}}) == 8


def test_non_indexed_job_and_non_controller_owner_are_not_groups() -> None:
    assert claim_group(pod(owners=[job_owner("train")])) is None
    assert (
        claim_group(
            pod(
                annotations={"batch.kubernetes.io/job-completion-index": "0"},
                owners=[job_owner("train", controller=False)],
            )
        )
        is None
    )


class _Rule:
    def claim(self, p: Mapping[str, Any], labels: Mapping[str, str]) -> GroupClaim | None:
        name = labels.get("op/job")
        return (
            None
            if name is None
            else GroupClaim(key=f"op/{name}", name=name, source="rule:op", size=2)
        )


def test_rules_come_before_the_indexed_job_fallback() -> None:
    p = pod(
        labels={"op/job": "x"},
        annotations={"batch.kubernetes.io/job-completion-index": "0"},
        owners=[job_owner("x-worker")],
    )
    claim = claim_group(p, [_Rule()])
    assert claim is not None
    assert claim.source == "rule:op"


def test_size_ref_sums_wildcards_and_ignores_non_integers() -> None:
    ref = SizeRef(
        "kubeflow.org/v1", "PyTorchJob", "ns", "j", ("spec.pytorchReplicaSpecs.*.replicas",)
    )
    doc = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1},
                "Worker": {"replicas": 7},
                "Odd": {"replicas": "3"},
            }
        }
    }
    assert ref.size_of(doc) == 8
    assert ref.size_of({"spec": {}}) is None


def test_size_ref_factors_multiply_each_item_and_count_one_when_missing() -> None:
    # A JobSet's pods: per replicated job, replicas x the child Job's parallelism.
    ref = SizeRef(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "ns",
        "js",
        ("spec.replicatedJobs.*.replicas",),
        ("template.spec.parallelism",),
    )
    doc = {
        "spec": {
            "replicatedJobs": [
                {"replicas": 2, "template": {"spec": {"parallelism": 8}}},
                {"replicas": 3, "template": {"spec": {}}},
            ]
        }
    }
    assert ref.size_of(doc) == 19
    # The JobSet CRD defaults replicas to 1: a replicated job without it has one Job.
    defaulted = SizeRef(
        ref.api_version, ref.kind, ref.namespace, ref.name, ref.fields, ref.factors, default=1
    )
    without = {"spec": {"replicatedJobs": [{"template": {"spec": {"parallelism": 4}}}, {}]}}
    assert defaulted.size_of(without) == 5
    assert ref.size_of(without) is None
    assert ref.describe() == (
        "JobSet ns/js (spec.replicatedJobs.*.replicas x template.spec.parallelism)"
    )
