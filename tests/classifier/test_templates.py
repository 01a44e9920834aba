"""Finding pod templates anywhere in a manifest, and the pod a controller would create."""

from __future__ import annotations

from typing import Any

import pytest

from classifier.facts import PodFacts
from classifier.templates import (
    find_pod_templates,
    is_pod_template,
    pod_from_template,
    template_hash,
)
from classifier.types import JSONObject

SPEC = {"containers": [{"name": "c", "image": "nginx"}]}


def template(labels: dict[str, str] | None = None) -> JSONObject:
    meta: JSONObject = {"labels": labels} if labels else {}
    return {"metadata": meta, "spec": dict(SPEC)}


def workload(kind: str, spec: JSONObject, *, api: str = "apps/v1", name: str = "w") -> JSONObject:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec}


FIND: list[tuple[str, Any, list[str]]] = [
    (
        "bare pod",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": SPEC},
        ["Pod/p@"],
    ),
    (
        "deployment",
        workload("Deployment", {"template": template()}),
        ["Deployment/w@spec.template"],
    ),
    (
        "cronjob",
        workload("CronJob", {"jobTemplate": {"spec": {"template": template()}}}, api="batch/v1"),
        ["CronJob/w@spec.jobTemplate.spec.template"],
    ),
    (
        "custom resource with map and list nesting",
        workload(
            "RayCluster",
            {
                "headGroupSpec": {"template": template()},
                "workerGroupSpecs": [
                    {"groupName": "a", "template": template()},
                    {"template": template()},
                ],
            },
            api="ray.io/v1",
        ),
        [
            "RayCluster/w@spec.headGroupSpec.template",
            "RayCluster/w@spec.workerGroupSpecs[0].template",
            "RayCluster/w@spec.workerGroupSpecs[1].template",
        ],
    ),
    (
        "list kind",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}},
                workload("Deployment", {"template": template()}, name="d"),
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": SPEC},
            ],
        },
        ["Deployment/d@items[1].spec.template", "Pod/p@items[2]"],
    ),
    (
        "typed list",
        {"kind": "DeploymentList", "items": [workload("Deployment", {"template": template()})]},
        ["Deployment/w@items[0].spec.template"],
    ),
    (
        "generateName stands in for the name",
        {"kind": "RayJob", "metadata": {"generateName": "job-"}, "spec": {"t": template()}},
        ["RayJob/job-@spec.t"],
    ),
    (
        "a custom resource's fields without containers are no template",
        workload("Thing", {"driver": {"cores": 1, "labels": {"a": "b"}}, "image": "spark"}),
        [],
    ),
    (
        "a SparkApplication's driver and executor are built by its handler",
        workload(
            "SparkApplication",
            {"driver": {"cores": 1, "labels": {"a": "b"}}, "image": "spark"},
            api="sparkoperator.k8s.io/v1beta2",
        ),
        ["SparkApplication/w@spec.driver", "SparkApplication/w@spec.executor"],
    ),
    (
        "a shape a handler does not know falls back to templates by shape",
        workload(
            "Service",
            {"runLatest": {"configuration": {"revisionTemplate": {"spec": {"containers": [{}]}}}}},
            api="serving.knative.dev/v1alpha1",
        ),
        ["Service/w@spec.runLatest.configuration.revisionTemplate"],
    ),
    (
        "handlers address their pods inside a List",
        {
            "kind": "List",
            "items": [
                workload(
                    "Workflow",
                    {"templates": [{"name": "t", "container": {"image": "busybox"}}]},
                    api="argoproj.io/v1alpha1",
                )
            ],
        },
        ["Workflow/w@items[0].spec.templates[0]"],
    ),
    (
        "containers must be a list",
        workload("X", {"template": {"spec": {"containers": "nginx"}}}),
        [],
    ),
    (
        "metadata and status are not searched",
        {
            "kind": "X",
            "metadata": {"name": "x", "annotations": {"t": template()}},
            "status": {"t": template()},
            "spec": {},
        },
        [],
    ),
    ("not an object", ["a", "b"], []),
    ("scalar", "text", []),
    (
        "service",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": []}},
        [],
    ),
]


@pytest.mark.parametrize(("document", "keys"), [c[1:] for c in FIND], ids=[c[0] for c in FIND])
def test_find_pod_templates(document: Any, keys: list[str]) -> None:
    assert [found.key for found in find_pod_templates(document)] == keys


def test_found_template_keeps_its_object() -> None:
    document = workload("StatefulSet", {"template": template()}, api="apps/v1beta1")
    document["metadata"]["namespace"] = "db"
    (found,) = find_pod_templates(document)
    assert (found.kind, found.name, found.api_version, found.namespace) == (
        "StatefulSet",
        "w",
        "apps/v1beta1",
        "db",
    )
    assert found.template is document["spec"]["template"]
    assert found.owner is document


def test_is_pod_template() -> None:
    assert is_pod_template({"spec": {"containers": []}})
    assert not is_pod_template({"spec": {"template": {}}})
    assert not is_pod_template(None)


def synthesize(document: JSONObject, namespace: str = "default") -> JSONObject:
    (found,) = find_pod_templates(document)
    return pod_from_template(found, namespace=namespace)


def owner_of(pod: JSONObject) -> tuple[str, str, str]:
    (ref,) = pod["metadata"]["ownerReferences"]
    assert ref["controller"] is True
    assert len(ref["uid"]) == 36
    return ref["apiVersion"], ref["kind"], ref["name"]


def test_deployment_pod_is_owned_by_a_replicaset_with_a_template_hash() -> None:
    document = workload(
        "Deployment", {"template": template({"app": "web"})}, api="extensions/v1beta1"
    )
    pod = synthesize(document)
    labels = pod["metadata"]["labels"]
    hash_ = labels["pod-template-hash"]
    assert len(hash_) == 10
    assert labels["app"] == "web"
    assert owner_of(pod) == ("apps/v1", "ReplicaSet", f"w-{hash_}")
    assert pod["metadata"]["generateName"] == f"w-{hash_}-"
    assert pod["metadata"]["namespace"] == "default"
    assert [o.kind for o in PodFacts(pod, namespace="default").owners] == [
        "ReplicaSet",
        "Deployment",
    ]
    assert synthesize(document) == pod, "synthesis must be deterministic"
    assert document["spec"]["template"]["metadata"] == {"labels": {"app": "web"}}, "input untouched"


def test_template_hash_changes_with_the_template() -> None:
    assert template_hash(template({"app": "a"})) != template_hash(template({"app": "b"}))


def test_cronjob_pod_is_owned_by_a_job_that_reads_as_a_cronjob() -> None:
    pod = synthesize(
        workload(
            "CronJob",
            {"jobTemplate": {"spec": {"template": template()}}},
            api="batch/v1beta1",
            name="hello",
        )
    )
    assert owner_of(pod) == ("batch/v1", "Job", "hello-29000000")
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "hello-29000000"
    kinds = [o.kind for o in PodFacts(pod, namespace="default").owners]
    assert kinds == ["Job", "CronJob"]


def test_statefulset_pod_has_an_ordinal_name_and_its_labels() -> None:
    pod = synthesize(workload("StatefulSet", {"template": template({"app": "db"})}, name="db"))
    assert pod["metadata"]["name"] == "db-0"
    assert pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "db-0"
    assert owner_of(pod) == ("apps/v1", "StatefulSet", "db")


def test_daemonset_and_job_pods() -> None:
    daemon = synthesize(workload("DaemonSet", {"template": template()}, api="extensions/v1beta1"))
    assert owner_of(daemon) == ("apps/v1", "DaemonSet", "w")
    assert daemon["metadata"]["labels"]["pod-template-generation"] == "1"
    job = synthesize(workload("Job", {"template": template()}, api="batch/v1", name="pi"))
    assert owner_of(job) == ("batch/v1", "Job", "pi")
    assert job["metadata"]["labels"]["job-name"] == "pi"


def test_custom_resource_owns_its_pods() -> None:
    document = workload(
        "PyTorchJob", {"replicas": {"Worker": {"template": template()}}}, api="kubeflow.org/v1"
    )
    pod = synthesize(document)
    assert owner_of(pod) == ("kubeflow.org/v1", "PyTorchJob", "w")
    assert pod["spec"] == SPEC
    assert pod["spec"] is not document["spec"]["replicas"]["Worker"]["template"]["spec"]


def test_a_custom_resource_shaped_like_a_pod_owns_its_pods() -> None:
    """A serving runtime (KServe's ClusterServingRuntime) writes ``spec.containers`` next to
    fields of its own: its pods are its controller's, with only the pod spec's fields."""
    document: JSONObject = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "nim", "labels": {"app": "nim"}},
        "spec": {
            "containers": [{"name": "kserve-container", "image": "nvcr.io/nim/llama:1"}],
            "supportedModelFormats": [{"name": "nvidia-nim-llama", "version": "1"}],
            "protocolVersions": ["v2"],
            "imagePullSecrets": [{"name": "ngc"}],
        },
    }
    (found,) = find_pod_templates(document)
    assert found.key == "ClusterServingRuntime/nim@"
    pod = pod_from_template(found, namespace="dev")
    assert pod["kind"] == "Pod"
    assert owner_of(pod) == ("serving.kserve.io/v1alpha1", "ClusterServingRuntime", "nim")
    assert pod["metadata"]["labels"] == {"app": "nim"}
    assert pod["spec"] == {
        "containers": [{"name": "kserve-container", "image": "nvcr.io/nim/llama:1"}],
        "imagePullSecrets": [{"name": "ngc"}],
    }


def test_an_embedded_object_owns_the_pods_of_its_templates() -> None:
    """A Kueue AppWrapper wraps whole objects: the PyTorchJob it creates, not the AppWrapper,
    owns the pods; the key still names the object the file holds."""
    job: JSONObject = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template()}}},
    }
    document: JSONObject = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "wrapped", "namespace": "ml"},
        "spec": {"components": [{"template": job}]},
    }
    (found,) = find_pod_templates(document)
    assert found.key == (
        "AppWrapper/wrapped@spec.components[0].template.spec.pytorchReplicaSpecs.Worker.template"
    )
    pod = pod_from_template(found, namespace="dev")
    assert owner_of(pod) == ("kubeflow.org/v1", "PyTorchJob", "mnist")
    assert pod["metadata"]["namespace"] == "ml"
    assert pod["spec"] == SPEC


def test_an_embedded_pod_is_a_bare_pod() -> None:
    """An Argo Events trigger's resource may be a whole Pod: the pod as written."""
    embedded: JSONObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "hello-"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"},
    }
    document: JSONObject = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Sensor",
        "metadata": {"name": "s"},
        "spec": {"triggers": [{"template": {"k8s": {"source": {"resource": embedded}}}}]},
    }
    (found,) = find_pod_templates(document)
    pod = pod_from_template(found, namespace="dev")
    assert "ownerReferences" not in pod["metadata"]
    assert pod["spec"] == embedded["spec"]
    assert pod["metadata"]["namespace"] == "dev"


def test_a_custom_kind_named_like_a_builtin_keeps_its_group() -> None:
    pod = synthesize(workload("Job", {"template": template()}, api="batch.volcano.sh/v1alpha1"))
    assert owner_of(pod)[0] == "batch.volcano.sh/v1alpha1"


def test_namespace_precedence() -> None:
    document = workload("Deployment", {"template": template()})
    assert synthesize(document, "dev")["metadata"]["namespace"] == "dev"
    document["metadata"]["namespace"] = "team-a"
    assert synthesize(document, "dev")["metadata"]["namespace"] == "team-a"
    document["spec"]["template"]["metadata"]["namespace"] = "inner"
    assert synthesize(document, "dev")["metadata"]["namespace"] == "inner"


def test_bare_pod_is_copied_with_its_namespace() -> None:
    document: JSONObject = {
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}]},
    }
    pod = synthesize(document, "dev")
    assert pod == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": "dev"},
        "spec": {"containers": [{"name": "c"}]},
    }
    pod["spec"]["containers"].append({})
    assert len(document["spec"]["containers"]) == 1
    assert "namespace" not in document["metadata"]


def test_template_null_fields_are_dropped() -> None:
    document = workload(
        "StatefulSet",
        {"template": {"metadata": {"annotations": None, "labels": {"app": "k"}}, "spec": SPEC}},
    )
    pod = synthesize(document)
    assert "annotations" not in pod["metadata"]


def test_a_pod_in_a_list_is_a_bare_pod() -> None:
    document: JSONObject = {
        "kind": "List",
        "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}],
    }
    (found,) = find_pod_templates(document)
    assert found.path == "items[0]"
    pod = pod_from_template(found, namespace="dev")
    assert pod["metadata"] == {"name": "p", "namespace": "dev"}
