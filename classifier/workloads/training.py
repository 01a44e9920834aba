"""Distributed training jobs: the pods of a PyTorchJob, an MPIJob, a JobSet and a RayCluster.

Each operator creates its pods from the templates of the resource, with labels and owners of
its own; pods are built here as they do (one per template: ``counts`` says how many each
template gives), so that ``review`` and the pod group rules see what the cluster will see.

* PyTorchJob (kubeflow/training-operator, ``createNewPod`` in
  pkg/controller.v1/common/pod.go, constants in pkg/apis/kubeflow.org/v1/common_types.go):
  ``<job>-<type>-<index>`` owned by the PyTorchJob, labelled
  ``training.kubeflow.org/operator-name: pytorchjob-controller``, ``job-name``,
  ``replica-type`` (lower case), ``replica-index``, and ``job-role: master`` on the master.
* MPIJob v2beta1 (kubeflow/mpi-operator, ``newWorker`` / ``newLauncherJob`` and
  ``defaultLabels`` in pkg/controller/mpi_job_controller.go): workers ``<job>-worker-<i>``
  owned by the MPIJob; the launcher is a Job ``<job>-launcher`` owned by the MPIJob, whose pod
  the Job controller creates. Both carry ``training.kubeflow.org/operator-name: mpi-operator``,
  ``job-name`` and ``job-role`` (launcher / worker); workers also ``replica-index``. Each has
  its name as hostname (``<job>-launcher`` for the launcher) and the job as subdomain.
* JobSet (kubernetes-sigs/jobset, ``constructJob`` and ``labelAndAnnotateObject`` in
  pkg/controllers/jobset_controller.go): one Indexed Job ``<jobset>-<replicatedJob>-<i>``
  per replica, owned by the JobSet, its pod template labelled and annotated with
  ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``replicatedjob-replicas``,
  ``job-index`` ...; the Job controller creates ``parallelism`` pods owned by the Job.
* RayCluster (ray-project/kuberay, ``labelPod`` in ray-operator/controllers/ray/common/pod.go):
  head and worker pods owned by the RayCluster, labelled ``ray.io/cluster``,
  ``ray.io/node-type`` (head / worker), ``ray.io/group``, ``ray.io/identifier``,
  ``ray.io/is-ray-node: yes`` and ``app.kubernetes.io/{name: kuberay, created-by:
  kuberay-operator}``; a worker group gives ``replicas`` x ``numOfHosts`` pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podnames import template_hash
from classifier.podview import clone
from classifier.types import JSONObject
from classifier.workloads.pods import make_pod, object_name, reference, string_map

KUBEFLOW = "training.kubeflow.org"
JOB_NAME_LABEL = f"{KUBEFLOW}/job-name"
JOBSET = "jobset.sigs.k8s.io"
# The Job controller's own labels and annotation on an Indexed Job's pod
# (pkg/controller/job/job_controller.go, indexed_job_utils.go).
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def _count(value: Any, default: int = 1) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
    )


def _template_parts(
    template: Mapping[str, Any],
) -> tuple[dict[str, str], dict[str, str], JSONObject]:
    meta = podview.metadata(template)
    spec: JSONObject = clone(dict(podview.spec(template)))
    return string_map(meta.get("labels")), string_map(meta.get("annotations")), spec


# --------------------------------------------------------------------------- Kubeflow


def _replica_specs(
    document: Mapping[str, Any], field: str
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for replica_type, replica in podview.obj(podview.spec(document).get(field)).items():
        if isinstance(replica_type, str) and isinstance(replica, dict):
            yield replica_type, replica


def _restart_policy(spec: JSONObject, replica: Mapping[str, Any]) -> None:
    # setRestartPolicy: the replica's policy, ExitCode meaning Never for the pod.
    policy = podview.string(replica.get("restartPolicy"))
    if policy:
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy


def pytorch_job_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    api_version = podview.string(document.get("apiVersion")) or "kubeflow.org/v1"
    for replica_type, replica in _replica_specs(document, "pytorchReplicaSpecs"):
        labels, annotations, spec = _template_parts(podview.obj(replica.get("template")))
        kind = replica_type.lower()
        labels.update(
            {
                f"{KUBEFLOW}/operator-name": "pytorchjob-controller",
                JOB_NAME_LABEL: name,
                f"{KUBEFLOW}/replica-type": kind,
                f"{KUBEFLOW}/replica-index": "0",
            }
        )
        if replica_type == "Master":
            labels[f"{KUBEFLOW}/job-role"] = "master"
        _restart_policy(spec, replica)
        yield (
            f"spec.pytorchReplicaSpecs.{replica_type}.template",
            make_pod(
                name=f"{name}-{kind}-0",
                labels=labels,
                annotations=annotations,
                owners=[reference(api_version, "PyTorchJob", name)],
                spec=spec,
            ),
        )


def mpi_job_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    api_version = podview.string(document.get("apiVersion")) or "kubeflow.org/v2beta1"
    for replica_type, replica in _replica_specs(document, "mpiReplicaSpecs"):
        labels, annotations, spec = _template_parts(podview.obj(replica.get("template")))
        role = replica_type.lower()
        labels.update(
            {
                f"{KUBEFLOW}/operator-name": "mpi-operator",
                JOB_NAME_LABEL: name,
                f"{KUBEFLOW}/job-role": role,
            }
        )
        _restart_policy(spec, replica)
        if replica_type == "Launcher":
            launcher = f"{name}-launcher"
            labels.update({JOB_NAME: launcher, "job-name": launcher})
            owners = [reference("batch/v1", "Job", launcher)]
            pod_name = f"{launcher}-{template_hash(replica, length=5)}"
            spec["hostname"] = launcher
        else:
            labels[f"{KUBEFLOW}/replica-index"] = "0"
            owners = [reference(api_version, "MPIJob", name)]
            pod_name = f"{name}-{role}-0"
            spec["hostname"] = pod_name
        # Each pod is reachable as <hostname>.<job>, the MPIJob's headless Service.
        spec["subdomain"] = name
        yield (
            f"spec.mpiReplicaSpecs.{replica_type}.template",
            make_pod(
                name=pod_name, labels=labels, annotations=annotations, owners=owners, spec=spec
            ),
        )


def kubeflow_counts(field: str) -> Callable[[Mapping[str, Any]], dict[str, int]]:
    def counts(document: Mapping[str, Any]) -> dict[str, int]:
        return {
            f"spec.{field}.{replica_type}.template": _count(replica.get("replicas"))
            for replica_type, replica in _replica_specs(document, field)
        }

    return counts


# --------------------------------------------------------------------------- JobSet


def _replicated_jobs(document: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    yield from enumerate(podview.objects(podview.spec(document).get("replicatedJobs")))


def _job_pods(job_spec: Mapping[str, Any]) -> int:
    # The Job controller runs min(parallelism, completions) pods at once (parallelism: 1 unset).
    parallelism = _count(job_spec.get("parallelism"))
    completions = job_spec.get("completions")
    return min(parallelism, _count(completions)) if completions is not None else parallelism


def jobset_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    jobset_annotations = string_map(podview.metadata(document).get("annotations"))
    global_replicas = sum(_count(item.get("replicas")) for _, item in _replicated_jobs(document))
    for index, replicated in _replicated_jobs(document):
        rjob = podview.string(replicated.get("name")) or str(index)
        job_template = podview.obj(replicated.get("template"))
        pod_template = podview.obj(podview.spec(job_template).get("template"))
        labels, annotations, spec = _template_parts(pod_template)
        job = f"{name}-{rjob}-0"
        added = {
            f"{JOBSET}/jobset-name": name,
            f"{JOBSET}/replicatedjob-name": rjob,
            f"{JOBSET}/restart-attempt": "0",
            f"{JOBSET}/replicatedjob-replicas": str(_count(replicated.get("replicas"))),
            f"{JOBSET}/global-replicas": str(global_replicas),
            f"{JOBSET}/job-index": "0",
            f"{JOBSET}/job-global-index": str(index),
        }
        labels.update(added)
        annotations.update(added)
        exclusive = jobset_annotations.get("alpha.jobset.sigs.k8s.io/exclusive-topology")
        if exclusive is not None:
            annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = exclusive
        # The JobSet webhook makes every child Job Indexed: its pods carry the index.
        labels.update({JOB_NAME: job, "job-name": job, JOB_COMPLETION_INDEX: "0"})
        annotations[JOB_COMPLETION_INDEX] = "0"
        yield (
            f"spec.replicatedJobs[{index}].template.spec.template",
            make_pod(
                name=f"{job}-0-{template_hash(replicated, length=5)}",
                labels=labels,
                annotations=annotations,
                owners=[reference("batch/v1", "Job", job)],
                spec=spec,
            ),
        )


def jobset_counts(document: Mapping[str, Any]) -> dict[str, int]:
    return {
        f"spec.replicatedJobs[{index}].template.spec.template": _count(replicated.get("replicas"))
        * _job_pods(podview.spec(podview.obj(replicated.get("template"))))
        for index, replicated in _replicated_jobs(document)
    }


# --------------------------------------------------------------------------- RayCluster


def _ray_labels(cluster: str, node_type: str, group: str) -> dict[str, str]:
    return {
        "ray.io/is-ray-node": "yes",
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster}-{node_type}",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }


def ray_cluster_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    api_version = podview.string(document.get("apiVersion")) or "ray.io/v1"
    owner = [reference(api_version, "RayCluster", name)]
    spec = podview.spec(document)
    head = podview.obj(spec.get("headGroupSpec"))
    groups: list[tuple[str, str, str, Mapping[str, Any]]] = []
    if head:
        groups.append(("spec.headGroupSpec.template", "head", "headgroup", head))
    for index, worker in enumerate(podview.objects(spec.get("workerGroupSpecs"))):
        group = podview.string(worker.get("groupName")) or f"group-{index}"
        groups.append((f"spec.workerGroupSpecs[{index}].template", "worker", group, worker))
    for path, node_type, group, group_spec in groups:
        labels, annotations, pod_spec = _template_parts(podview.obj(group_spec.get("template")))
        # Labels of the template may add to the operator's, never change these three.
        labels = {**labels, **_ray_labels(name, node_type, group)}
        suffix = template_hash(group_spec, length=5)
        pod_name = (
            f"{name}-head-{suffix}" if node_type == "head" else f"{name}-{group}-worker-{suffix}"
        )
        yield (
            path,
            make_pod(
                name=pod_name,
                labels=labels,
                annotations=annotations,
                owners=[dict(o) for o in owner],
                spec=pod_spec,
            ),
        )


def ray_cluster_counts(document: Mapping[str, Any]) -> dict[str, int]:
    spec = podview.spec(document)
    counts = {"spec.headGroupSpec.template": 1}
    for index, worker in enumerate(podview.objects(spec.get("workerGroupSpecs"))):
        # replicas: +kubebuilder:default:=0 (ray-operator/apis/ray/v1/raycluster_types.go).
        counts[f"spec.workerGroupSpecs[{index}].template"] = _count(
            worker.get("replicas"), 0
        ) * _count(worker.get("numOfHosts"))
    return counts
