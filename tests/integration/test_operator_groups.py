"""A PyTorchJob and a JobSet admitted as pod groups, on the real control plane, by the shipped
``podGroup`` rules, with tenantgate's own ServiceAccount and the shipped RBAC.

The operators' CRDs are their projects' own (tests/fixtures/crds/SOURCES.md) and the objects
their published examples (tests/fixtures/manifests/SOURCES.md). No operator runs, so the
test does what each would do, through the real API server:

* the training-operator creates one pod per replica, labelled and owned by the PyTorchJob
  (``createNewPod`` in pkg/controller.v1/common/pod.go): built here by
  :mod:`classifier.workloads.training`, the code ``tenantgate review`` uses;
* the JobSet controller creates one Indexed Job per replicated job replica, labelled and
  owned by the JobSet (``constructJob`` / ``labelAndAnnotateObject`` in
  pkg/controllers/jobset_controller.go); the real Job controller then creates the pods.

tenantgate reads each group's size from the PyTorchJob or the JobSet, keeps every member
behind ``tenantgate.io/quota`` until the whole group exists, then releases all of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from admission.commands.review import read_manifests
from classifier.templates import find_pod_templates, pod_from_template
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import (
    Tenantgate,
    api_client,
    create_namespace,
    eventually,
    installed_crds,
)

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "tests" / "fixtures" / "manifests"
GATE = "tenantgate.io/quota"
NAMESPACE = "team-train"
JOBSET = "jobset.sigs.k8s.io"


def config_text() -> str:
    """The shipped config (its profiles and pod group rules) with one tenant for the test."""
    config = yaml.safe_load((ROOT / "examples" / "tenantgate.yaml").read_text())
    config["reservationTTLSeconds"] = 3600
    config["tenants"] = {
        "train": {
            "namespaces": [NAMESPACE],
            "quota": {"guaranteed": {"cpu": "16", "memory": "64Gi"}},
            "containerDefaults": {"requests": {"cpu": "500m", "memory": "256Mi"}},
        }
    }
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(config_text())
    return path


@pytest.fixture
def operator_crds(kubeconfig: Path) -> Iterator[None]:
    with installed_crds(
        kubeconfig, "kubeflow.org_pytorchjobs.yaml", "jobset.x-k8s.io_jobsets.yaml"
    ):
        yield


@pytest.fixture
def tenantgate(start_tenantgate: StartTenantgate, core: Any, operator_crds: None) -> Tenantgate:
    started = start_tenantgate()
    create_namespace(core, {"metadata": {"name": NAMESPACE}})
    return started


def published(name: str) -> dict[str, Any]:
    (document,) = [
        d.body
        for d in read_manifests(name, (MANIFESTS / name).read_text())
        if isinstance(d.body, dict)
    ]
    body: dict[str, Any] = document
    body["metadata"]["namespace"] = NAMESPACE
    return body


def gated(stored: Any) -> bool:
    return any(gate.name == GATE for gate in stored.spec.scheduling_gates or [])


def members(core: Any, selector: str) -> list[Any]:
    return list(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)


def wait_released_together(core: Any, selector: str, size: int) -> None:
    """Every member ungated, the first and the last within moments of each other."""
    first: float | None = None

    def all_released() -> bool:
        nonlocal first
        pods = members(core, selector)
        free = [p for p in pods if not gated(p)]
        if free and first is None:
            first = time.monotonic()
        return len(pods) == size and len(free) == size

    eventually(all_released, f"the {size} members of {selector} to be released")
    assert first is not None
    assert time.monotonic() - first < 3.0  # one PATCH per pod: no call does several


def test_a_published_pytorchjob_is_admitted_as_one_group(
    tenantgate: Tenantgate, core: Any, kubeconfig: Path
) -> None:
    job = published("kubeflow-pytorchjob-simple.yaml")
    custom: Any = client.CustomObjectsApi(api_client(kubeconfig))
    created = custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job
    )
    uid = created["metadata"]["uid"]
    # The pods the training-operator would create: one per replica (Master 1, Worker 1).
    pods = []
    for found in find_pod_templates(job):
        body = pod_from_template(found, namespace=NAMESPACE)
        for reference in body["metadata"]["ownerReferences"]:
            reference["uid"] = uid  # the real PyTorchJob's, or the garbage collector deletes it
        pods.append(body)
    assert [p["metadata"]["name"] for p in pods] == [
        "pytorch-simple-master-0",
        "pytorch-simple-worker-0",
    ]
    selector = "training.kubeflow.org/job-name=pytorch-simple"
    first = core.create_namespaced_pod(NAMESPACE, pods[0])
    assert gated(first)
    assert first.metadata.annotations["tenantgate.io/group"] == "pytorchjob/pytorch-simple"
    assert first.metadata.annotations["tenantgate.io/group-size"] == "2"
    time.sleep(1.0)  # nothing releases an incomplete group
    assert all(gated(p) for p in members(core, selector))
    core.create_namespaced_pod(NAMESPACE, pods[1])
    wait_released_together(core, selector, 2)
    used = tenantgate.state.ledger.get("train").guaranteed
    assert (str(used["cpu"]), str(used["pods"])) == ("1", "2")


def child_job(jobset: dict[str, Any], uid: str, index: int) -> dict[str, Any]:
    """The Job the JobSet controller creates for replica 0 of replicated job ``index``."""
    name = jobset["metadata"]["name"]
    replicated = jobset["spec"]["replicatedJobs"][index]
    replicas = replicated.get("replicas", 1)  # the CRD's default
    job_name = f"{name}-{replicated['name']}-0"
    marks = {
        f"{JOBSET}/jobset-name": name,
        f"{JOBSET}/replicatedjob-name": replicated["name"],
        f"{JOBSET}/restart-attempt": "0",
        f"{JOBSET}/replicatedjob-replicas": str(replicas),
        f"{JOBSET}/global-replicas": str(
            sum(r.get("replicas", 1) for r in jobset["spec"]["replicatedJobs"])
        ),
        f"{JOBSET}/job-index": "0",
        f"{JOBSET}/job-global-index": str(index),
    }
    spec = dict(replicated["template"]["spec"])
    template = dict(spec["template"])
    template["metadata"] = {"labels": dict(marks), "annotations": dict(marks)}
    # The JobSet webhook makes child Jobs Indexed; the simulated kubelet runs each pod 600 s.
    template["metadata"]["annotations"]["testcluster.tenantgate.io/run-seconds"] = "600"
    template["spec"] = {**template["spec"], "restartPolicy": "Never"}
    spec.update(template=template, completionMode="Indexed")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "labels": dict(marks),
            "annotations": dict(marks),
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def test_a_published_jobset_is_admitted_as_one_group_across_its_child_jobs(
    tenantgate: Tenantgate, core: Any, kubeconfig: Path
) -> None:
    jobset = published("jobset-paralleljobs.yaml")
    custom: Any = client.CustomObjectsApi(api_client(kubeconfig))
    created = custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", jobset
    )
    # The CRD defaults every replicated job's replicas to 1: 4 workers + 1 driver.
    assert [r["replicas"] for r in created["spec"]["replicatedJobs"]] == [1, 1]
    uid = created["metadata"]["uid"]
    batch: Any = client.BatchV1Api(core.api_client)
    selector = f"{JOBSET}/jobset-name=paralleljobs"
    # The workers' Job first: the Job controller creates its 4 pods; they wait for the driver.
    batch.create_namespaced_job(NAMESPACE, child_job(jobset, uid, 0))
    eventually(lambda: len(members(core, selector)) == 4, "the workers' 4 pods")
    stored = members(core, selector)
    assert all(gated(p) for p in stored)
    assert {p.metadata.annotations["tenantgate.io/group"] for p in stored} == {
        "jobset/paralleljobs"
    }
    assert {p.metadata.annotations["tenantgate.io/group-size"] for p in stored} == {"5"}
    time.sleep(1.0)
    assert all(gated(p) for p in members(core, selector))
    batch.create_namespaced_job(NAMESPACE, child_job(jobset, uid, 1))
    wait_released_together(core, selector, 5)
    used = tenantgate.state.ledger.get("train").guaranteed
    assert (str(used["cpu"]), str(used["pods"])) == ("2500m", "5")
