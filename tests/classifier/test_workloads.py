"""The pods workload operators create, built offline (classifier/workloads/).

Each handler is checked on a real published manifest (tests/fixtures/manifests, sources in
SOURCES.md) and on small variants for the fields those manifests leave out. The upstream
function each behaviour mirrors is named in the handler's module docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from admission.commands.review import read_manifests
from classifier import podview
from classifier.facts import PodFacts
from classifier.resources import PodResourceError, pod_requests
from classifier.templates import find_pod_templates, pod_from_template
from classifier.types import JSONObject
from classifier.workloads.spark import SparkMemoryError, memory_mib

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def pods(name: str, namespace: str = "default") -> dict[str, JSONObject]:
    """Every pod of a fixture, by template key."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return {
        found.key: pod_from_template(found, namespace=namespace)
        for document in read_manifests(name, text)
        for found in find_pod_templates(document.body)
    }


def pods_of(document: dict[str, Any]) -> list[JSONObject]:
    return [pod_from_template(found, namespace="ns") for found in find_pod_templates(document)]


def containers(pod: JSONObject, group: str = "containers") -> list[tuple[str, str | None]]:
    return [
        (str(c["name"]), podview.string(c.get("image")))
        for c in podview.objects(podview.spec(pod).get(group))
    ]


def owners(pod: JSONObject) -> list[tuple[str, str, bool]]:
    return [
        (str(ref["kind"]), str(ref["name"]), ref.get("controller") is True)
        for ref in podview.owner_references(pod)
    ]


# --------------------------------------------------------------------------- Argo Workflows

EXECUTOR = "quay.io/argoproj/argoexec:latest"


def test_argo_container_and_script_templates_run_as_main_next_to_wait() -> None:
    found = pods("argo-workflows-scripts-python.yaml")
    assert sorted(found) == [
        "Workflow/scripts-python-@spec.templates[1]",
        "Workflow/scripts-python-@spec.templates[2]",
    ]
    script = found["Workflow/scripts-python-@spec.templates[1]"]
    assert containers(script) == [("wait", EXECUTOR), ("main", "python:alpine3.23")]
    assert containers(script, "initContainers") == [("init", EXECUTOR)]
    assert podview.spec(script)["restartPolicy"] == "Never"
    workflow = podview.labels(script)["workflows.argoproj.io/workflow"]
    assert workflow.startswith("scripts-python-")
    assert len(workflow) == len("scripts-python-") + 5  # generateName + 5 characters
    assert owners(script) == [("Workflow", workflow, True)]
    container = found["Workflow/scripts-python-@spec.templates[2]"]
    assert podview.spec(container)["containers"][1]["args"] == [
        "echo result was: {{inputs.parameters.message}}"
    ]


def test_argo_container_set_keeps_its_container_names() -> None:
    (pod,) = pods("argo-workflows-container-set-sequence.yaml").values()
    assert [name for name, _ in containers(pod)] == ["wait", "a", "b", "c"]


def test_argo_cron_workflow_and_workflow_template_pods_belong_to_a_workflow() -> None:
    (cron,) = pods("argo-workflows-cron-workflow.yaml").values()
    labels = podview.labels(cron)
    assert labels["workflows.argoproj.io/cron-workflow"] == "hello-world"
    assert owners(cron) == [("Workflow", labels["workflows.argoproj.io/workflow"], True)]
    templates = pods("argo-workflows-workflow-templates.yaml")
    assert len(templates) == 5
    first = templates["WorkflowTemplate/workflow-template-print-message@spec.templates[0]"]
    assert podview.labels(first)["workflows.argoproj.io/workflow-template"] == (
        "workflow-template-print-message"
    )
    assert owners(first)[0][0] == "Workflow"
    (cluster, *_) = pods("argo-workflows-cluster-workflow-templates.yaml").values()
    assert podview.labels(cluster)["workflows.argoproj.io/cluster-workflow-template"] == (
        "cluster-workflow-template-print-message"
    )


def test_argo_scheduling_fields_come_from_the_template_else_the_workflow() -> None:
    document = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {
            "nodeSelector": {"pool": "wf"},
            "tolerations": [{"key": "wf", "operator": "Exists"}],
            "podPriorityClassName": "wf-class",
            "podMetadata": {"labels": {"team": "a", "tier": "x"}},
            "templates": [
                {
                    "name": "own",
                    "nodeSelector": {"pool": "own"},
                    "metadata": {"labels": {"tier": "y"}},
                    "container": {"image": "busybox", "resources": {"requests": {"cpu": "2"}}},
                },
                {"name": "inherit", "script": {"image": "python", "source": "print(1)"}},
                {"name": "k8s", "resource": {"action": "create", "manifest": "{}"}},
                {"name": "steps", "steps": [[{"name": "a", "template": "own"}]]},
                {"name": "pause", "suspend": {}},
            ],
        },
    }
    own, inherit, resource = pods_of(document)
    assert podview.spec(own)["nodeSelector"] == {"pool": "own"}
    assert podview.spec(inherit)["nodeSelector"] == {"pool": "wf"}
    assert podview.spec(own)["tolerations"] == [{"key": "wf", "operator": "Exists"}]
    assert podview.spec(own)["priorityClassName"] == "wf-class"
    assert podview.labels(own)["team"] == "a"
    assert podview.labels(own)["tier"] == "y"
    assert podview.spec(own)["containers"][1]["resources"] == {"requests": {"cpu": "2"}}
    # A resource template runs the executor alone; steps and suspend run no pod.
    assert containers(resource) == [("main", EXECUTOR)]


# --------------------------------------------------------------------------- Spark


def test_spark_driver_and_executor_from_the_published_example() -> None:
    found = pods("spark-operator-spark-pi.yaml")
    driver = found["SparkApplication/spark-pi@spec.driver"]
    executor = found["SparkApplication/spark-pi@spec.executor"]
    # cores: 1, memory: 512m, type Scala: overhead max(0.1 x 512, 384) = 384 MiB; the driver's
    # coreLimit: 1200m is its cpu limit.
    for pod, role, name, limits in (
        (driver, "driver", "spark-kubernetes-driver", {"cpu": "1200m", "memory": "896Mi"}),
        (executor, "executor", "spark-kubernetes-executor", {"memory": "896Mi"}),
    ):
        (container,) = podview.spec(pod)["containers"]
        assert container["name"] == name
        assert container["image"] == "gcr.io/spark-operator/spark:v2.4.4"
        assert container["resources"] == {
            "requests": {"cpu": "1", "memory": "896Mi"},
            "limits": limits,
        }
        assert podview.labels(pod)["spark-role"] == role
        assert podview.labels(pod)["sparkoperator.k8s.io/app-name"] == "spark-pi"
        assert podview.labels(pod)["version"] == "2.4.0"
        assert podview.spec(pod)["restartPolicy"] == "Never"
    assert owners(driver) == [("SparkApplication", "spark-pi", True)]
    assert owners(executor) == [
        ("Pod", "spark-pi-driver", True),
        ("SparkApplication", "spark-pi", False),
    ]
    assert [p["containerPort"] for p in podview.spec(driver)["containers"][0]["ports"]] == [
        7078,
        7079,
        4040,
    ]
    assert "ports" not in podview.spec(executor)["containers"][0]
    assert [o.kind for o in PodFacts(executor, namespace="default").owners] == [
        "Pod",
        "SparkApplication",
    ]


def spark(app: dict[str, Any], driver: dict[str, Any]) -> JSONObject:
    document = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "app"},
        "spec": {"image": "spark:4", **app, "driver": driver, "executor": {}},
    }
    return pods_of(document)[0]


def resources(pod: JSONObject) -> Any:
    return podview.spec(pod)["containers"][0]["resources"]


@pytest.mark.parametrize(
    ("app", "driver", "expected"),
    [
        # Python: overhead factor 0.4 -> 4096 + 1638.
        ({"type": "Python"}, {"memory": "4g"}, {"memory": "5734Mi", "cpu": "1"}),
        # Java: 0.1 -> 4096 + 409.
        ({"type": "Java"}, {"memory": "4096m", "cores": 2}, {"memory": "4505Mi", "cpu": "2"}),
        # The minimum overhead is 384 MiB; no memory means Spark's 1g.
        ({"type": "Scala"}, {}, {"memory": "1408Mi", "cpu": "1"}),
        # memoryOverhead wins over any factor; memoryOverheadFactor over the type's.
        (
            {"type": "Python"},
            {"memory": "2g", "memoryOverhead": "1g"},
            {"memory": "3072Mi", "cpu": "1"},
        ),
        (
            {"type": "Scala", "memoryOverheadFactor": "0.25"},
            {"memory": "8g"},
            {"memory": "10240Mi", "cpu": "1"},
        ),
        # coreRequest is the cpu request; cores is then only Spark's task slots.
        (
            {"type": "Scala"},
            {"cores": 4, "coreRequest": "500m"},
            {"memory": "1408Mi", "cpu": "500m"},
        ),
    ],
)
def test_spark_requests(
    app: dict[str, Any], driver: dict[str, Any], expected: dict[str, str]
) -> None:
    found = resources(spark(app, driver))
    assert found["requests"] == expected
    assert found["limits"]["memory"] == expected["memory"]


def test_spark_limits_and_gpu() -> None:
    found = resources(
        spark(
            {"type": "Scala"},
            {"coreLimit": "1200m", "gpu": {"name": "nvidia.com/gpu", "quantity": 1}},
        )
    )
    assert found["limits"] == {"cpu": "1200m", "memory": "1408Mi", "nvidia.com/gpu": "1"}


@pytest.mark.parametrize(
    ("text", "mib"),
    [("512m", 512), ("2g", 2048), ("1024", 1024), ("1t", 1048576), ("2048k", 2), ("1G", 1024)],
)
def test_spark_memory_strings(text: str, mib: int) -> None:
    assert memory_mib(text) == mib


@pytest.mark.parametrize("text", ["1.5g", "lots", "-1g", "2x"])
def test_memory_spark_refuses_is_an_invalid_pod(text: str) -> None:
    with pytest.raises(SparkMemoryError):
        memory_mib(text)
    pod = spark({"type": "Scala"}, {"memory": text})
    with pytest.raises(PodResourceError) as caught:
        pod_requests(pod)
    assert "not a Spark memory size" in str(caught.value)


def test_spark_template_seeds_the_pod() -> None:
    found = pods("spark-operator-spark-pi-pod-template.yaml")
    driver = found["SparkApplication/spark-pi-pod-template@spec.driver"]
    names = [name for name, _ in containers(driver)]
    assert "spark-kubernetes-driver" in names


# --------------------------------------------------------------------------- Tekton


def test_tekton_steps_become_step_containers() -> None:
    (pod,) = pods("tekton-taskrun-step-script.yaml").values()
    names = [name for name, _ in containers(pod)]
    assert names[0].startswith("step-")
    assert all(name.startswith("step-") for name in names)
    assert containers(pod, "initContainers")[0][0] == "prepare"
    run = podview.labels(pod)["tekton.dev/taskRun"]
    assert owners(pod) == [("TaskRun", run, True)]
    assert podview.metadata(pod)["name"] == f"{run}-pod"
    assert podview.labels(pod)["app.kubernetes.io/managed-by"] == "tekton-pipelines"


def test_tekton_sidecar_resources_and_step_template() -> None:
    (pod,) = pods("tekton-taskrun-dind-sidecar.yaml").values()
    sidecars = [c for c in podview.spec(pod)["containers"] if c["name"].startswith("sidecar-")]
    assert sidecars
    assert all("computeResources" not in c for c in sidecars)
    document = {
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"name": "run", "labels": {"team": "a"}},
        "spec": {
            "podTemplate": {"nodeSelector": {"pool": "ci"}},
            "taskSpec": {
                "stepTemplate": {"computeResources": {"requests": {"memory": "1Gi"}}},
                "steps": [
                    {"name": "build", "image": "golang"},
                    {"image": "alpine", "computeResources": {"requests": {"memory": "2Gi"}}},
                ],
            },
        },
    }
    (built,) = pods_of(document)
    steps = podview.spec(built)["containers"]
    assert [c["name"] for c in steps] == ["step-build", "step-unnamed-1"]
    assert [c["resources"]["requests"]["memory"] for c in steps] == ["1Gi", "2Gi"]
    assert podview.spec(built)["nodeSelector"] == {"pool": "ci"}
    assert podview.labels(built)["team"] == "a"


def test_a_taskrun_referring_to_a_task_has_no_pod_offline() -> None:
    document = {
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"name": "r"},
        "spec": {"taskRef": {"name": "t"}},
    }
    assert pods_of(document) == []


# --------------------------------------------------------------------------- Knative, Rollouts


def test_knative_service_pod_has_the_queue_proxy_and_a_user_port() -> None:
    (pod,) = pods("knative-docs-helloworld-go-service.yaml").values()
    user, queue = podview.spec(pod)["containers"]
    assert user["name"] == "user-container"
    assert user["ports"] == [{"name": "user-port", "containerPort": 8080, "protocol": "TCP"}]
    assert queue["name"] == "queue-proxy"
    assert [p["containerPort"] for p in queue["ports"]] == [8022, 9090, 9091, 8012]
    labels = podview.labels(pod)
    assert labels["serving.knative.dev/service"] == "helloworld-go"
    assert labels["serving.knative.dev/revision"] == "helloworld-go-00001"
    facts = PodFacts(pod, namespace="default")
    assert [(o.kind, o.name) for o in facts.owners] == [
        ("ReplicaSet", f"helloworld-go-00001-deployment-{labels['pod-template-hash']}"),
        ("Deployment", "helloworld-go-00001-deployment"),
    ]


def test_knative_probe_without_a_port_probes_the_user_port() -> None:
    (pod,) = pods("knative-docs-bentoml-iris-service.yaml").values()
    user = podview.spec(pod)["containers"][0]
    port = user["ports"][0]["containerPort"]
    assert user["livenessProbe"]["httpGet"]["port"] == port
    assert user["readinessProbe"]["httpGet"]["port"] == port


def test_rollout_pods_belong_to_its_replicaset_and_imply_the_rollout() -> None:
    (pod,) = pods("argo-rollouts-rollout-canary.yaml").values()
    pod_hash = podview.labels(pod)["rollouts-pod-template-hash"]
    facts = PodFacts(pod, namespace="default")
    assert [(o.kind, o.name) for o in facts.owners] == [
        ("ReplicaSet", f"rollout-canary-{pod_hash}"),
        ("Rollout", "rollout-canary"),
    ]


# --------------------------------------------------------------------------- StatefulSet


def test_statefulset_pod_gets_its_claims_hostname_and_subdomain() -> None:
    (pod,) = pods("k8s-examples-cockroachdb-statefulset.yaml").values()
    spec = podview.spec(pod)
    assert spec["hostname"] == "cockroachdb-0"
    assert spec["subdomain"] == "cockroachdb"
    assert spec["volumes"][0] == {
        "name": "datadir",
        "persistentVolumeClaim": {"claimName": "datadir-cockroachdb-0"},
    }
    assert PodFacts(pod, namespace="default").template_claim() == (
        "datadir",
        "datadir-cockroachdb-0",
        "cockroachdb",
    )


def test_a_claim_template_replaces_a_pod_volume_of_its_name() -> None:
    document: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "serviceName": "db",
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "x"}],
                    "volumes": [{"name": "data", "emptyDir": {}}, {"name": "conf", "emptyDir": {}}],
                }
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
        },
    }
    (pod,) = pods_of(document)
    assert podview.spec(pod)["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
        {"name": "conf", "emptyDir": {}},
    ]
    # The manifest itself is left alone.
    assert document["spec"]["template"]["spec"]["volumes"][0] == {"name": "data", "emptyDir": {}}


# --------------------------------------------------------------------------- KServe


def test_kserve_model_predictor_runs_its_runtime_with_the_model_resources() -> None:
    (pod,) = pods("kserve-huggingface-llama2.yaml").values()
    assert containers(pod) == [
        ("kserve-container", "kserve/huggingfaceserver:latest"),
        ("queue-proxy", "gcr.io/knative-releases/knative.dev/serving/cmd/queue:latest"),
    ]
    main = podview.spec(pod)["containers"][0]
    assert main["args"] == [
        "--model_name=llama2",
        "--model_dir=/mnt/models",
        "--backend=huggingface",
    ]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert podview.spec(pod)["serviceAccountName"] == "hfserviceacc"
    assert containers(pod, "initContainers") == [
        ("storage-initializer", "kserve/storage-initializer:latest")
    ]
    labels = podview.labels(pod)
    assert labels["serving.kserve.io/inferenceservice"] == "huggingface-llama2"
    assert labels["component"] == "predictor"
    assert labels["serving.knative.dev/service"] == "huggingface-llama2-predictor"


def test_kserve_framework_key_and_custom_containers_per_component() -> None:
    found = pods("kserve-image-transformer.yaml")
    assert sorted(found) == [
        "InferenceService/torch-transformer@spec.predictor",
        "InferenceService/torch-transformer@spec.transformer",
    ]
    predictor = found["InferenceService/torch-transformer@spec.predictor"]
    transformer = found["InferenceService/torch-transformer@spec.transformer"]
    assert containers(predictor)[0] == ("kserve-container", "pytorch/torchserve-kfs:latest")
    assert containers(transformer)[0] == ("kserve-container", "kserve/image-transformer:latest")
    assert podview.labels(transformer)["component"] == "transformer"
    assert "initContainers" not in podview.spec(transformer)  # no storageUri of its own


def test_kserve_explainer_keeps_its_containers() -> None:
    found = pods("kserve-aif-bias-explainer.yaml")
    explainer = found["InferenceService/german-credit@spec.explainer"]
    assert containers(explainer)[0] == ("explainer", "aipipeline/aifserver:latest")
    assert podview.labels(explainer)["component"] == "explainer"


def test_a_custom_resource_nesting_containers_outside_a_template_gives_its_pod() -> None:
    # KFServing's serving.kubeflow.org InferenceService: no handler, found by shape.
    (pod,) = pods("kfserving-custom-simple-v1beta1.yaml").values()
    assert podview.spec(pod) == {
        "containers": [
            {
                "image": "codait/max-object-detector",
                "ports": [{"containerPort": 5000, "protocol": "TCP"}],
            }
        ]
    }  # minReplicas, the resource's own field, is left out
    assert owners(pod) == [("InferenceService", "custom-simple", True)]


# --------------------------------------------------------------------------- distributed training


def test_pytorchjob_pods_as_the_training_operator_creates_them() -> None:
    # kubeflow/training-operator pkg/controller.v1/common/pod.go (createNewPod).
    found = pods("kubeflow-pytorchjob-simple.yaml")
    master = found["PyTorchJob/pytorch-simple@spec.pytorchReplicaSpecs.Master.template"]
    worker = found["PyTorchJob/pytorch-simple@spec.pytorchReplicaSpecs.Worker.template"]
    assert master["metadata"]["name"] == "pytorch-simple-master-0"
    assert podview.labels(master) == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "pytorch-simple",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    assert "training.kubeflow.org/job-role" not in podview.labels(worker)
    assert owners(worker) == [("PyTorchJob", "pytorch-simple", True)]
    assert podview.spec(worker)["restartPolicy"] == "OnFailure"


def test_mpijob_launcher_pod_belongs_to_its_job_and_workers_to_the_mpijob() -> None:
    # kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (newLauncherJob, newWorker).
    found = pods("mpi-operator-mpijob-pi.yaml")
    launcher = found["MPIJob/pi@spec.mpiReplicaSpecs.Launcher.template"]
    worker = found["MPIJob/pi@spec.mpiReplicaSpecs.Worker.template"]
    assert owners(launcher) == [("Job", "pi-launcher", True)]
    assert podview.labels(launcher)["training.kubeflow.org/job-role"] == "launcher"
    assert podview.labels(launcher)["batch.kubernetes.io/job-name"] == "pi-launcher"
    assert owners(worker) == [("MPIJob", "pi", True)]
    assert worker["metadata"]["name"] == "pi-worker-0"
    for pod in (launcher, worker):
        assert podview.labels(pod)["training.kubeflow.org/operator-name"] == "mpi-operator"
        assert podview.labels(pod)["training.kubeflow.org/job-name"] == "pi"


def test_jobset_pods_belong_to_an_indexed_child_job_and_carry_the_jobset_labels() -> None:
    # kubernetes-sigs/jobset pkg/controllers/jobset_controller.go (labelAndAnnotateObject).
    found = pods("gke-samples-sax-model-server-jobset-tpu.yaml")
    (pod,) = found.values()
    job = "sax-model-server-set-sax-model-server-0"
    assert owners(pod) == [("Job", job, True)]
    labels = podview.labels(pod)
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "sax-model-server-set"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "sax-model-server"
    assert labels["jobset.sigs.k8s.io/replicatedjob-replicas"] == "2"
    assert labels["batch.kubernetes.io/job-name"] == job
    annotations = podview.annotations(pod)
    assert annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    assert annotations["batch.kubernetes.io/job-completion-index"] == "0"


def test_raycluster_pods_carry_kuberay_labels_and_the_cluster_owner() -> None:
    # ray-project/kuberay ray-operator/controllers/ray/common/pod.go (labelPod).
    found = pods("kuberay-raycluster-sample.yaml")
    worker = found["RayCluster/raycluster-kuberay@spec.workerGroupSpecs[0].template"]
    head = found["RayCluster/raycluster-kuberay@spec.headGroupSpec.template"]
    assert podview.labels(worker)["ray.io/node-type"] == "worker"
    assert podview.labels(worker)["ray.io/group"] == "workergroup"
    assert podview.labels(worker)["ray.io/cluster"] == "raycluster-kuberay"
    assert podview.labels(head)["ray.io/node-type"] == "head"
    assert podview.labels(head)["ray.io/identifier"] == "raycluster-kuberay-head"
    assert owners(head) == owners(worker) == [("RayCluster", "raycluster-kuberay", True)]


def test_template_counts_are_the_pods_each_template_gives() -> None:
    counts = {
        found.key: found.count
        for name in (
            "kubeflow-pytorchjob-simple.yaml",
            "gke-samples-sax-model-server-jobset-tpu.yaml",
            "kuberay-raycluster-sample.yaml",
        )
        for document in read_manifests(name, (FIXTURES / name).read_text(encoding="utf-8"))
        for found in find_pod_templates(document.body)
    }
    assert counts == {
        "PyTorchJob/pytorch-simple@spec.pytorchReplicaSpecs.Master.template": 1,
        "PyTorchJob/pytorch-simple@spec.pytorchReplicaSpecs.Worker.template": 1,
        "JobSet/sax-model-server-set@spec.replicatedJobs[0].template.spec.template": 16,
        "RayCluster/raycluster-kuberay@spec.headGroupSpec.template": 1,
        "RayCluster/raycluster-kuberay@spec.workerGroupSpecs[0].template": 1,
    }


def test_an_indexed_job_pod_carries_its_completion_index() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 4,
            "completions": 8,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }
    (found,) = find_pod_templates(job)
    assert found.count == 4
    pod = pod_from_template(found, namespace="ns")
    assert podview.annotations(pod)["batch.kubernetes.io/job-completion-index"] == "0"
    assert podview.labels(pod)["batch.kubernetes.io/job-completion-index"] == "0"


def test_mpijob_pods_are_named_hosts_of_the_jobs_service() -> None:
    # newLauncherPodTemplate / newWorker: hostname and subdomain for the MPIJob's Service.
    found = pods("mpi-operator-mpijob-pi.yaml")
    launcher = found["MPIJob/pi@spec.mpiReplicaSpecs.Launcher.template"]
    worker = found["MPIJob/pi@spec.mpiReplicaSpecs.Worker.template"]
    assert (podview.spec(launcher)["hostname"], podview.spec(launcher)["subdomain"]) == (
        "pi-launcher",
        "pi",
    )
    assert (podview.spec(worker)["hostname"], podview.spec(worker)["subdomain"]) == (
        "pi-worker-0",
        "pi",
    )
