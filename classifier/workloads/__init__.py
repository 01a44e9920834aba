"""Workload resources whose pods are not plain pod templates, built the way their operators do.

Most workloads hold a pod template that :mod:`classifier.templates` finds by its shape. Some
describe their pods otherwise (Argo Workflows' ``templates[].container``, a SparkApplication's
``driver``/``executor`` fields, Tekton's steps), or their operator adds containers, labels
and owners the template does not show (Knative's queue-proxy, Argo Rollouts' ReplicaSets),
or nest containers in fields of their own (a KServe InferenceService's predictor).
Each handler here takes one manifest and yields ``(path, pod)`` for every distinct pod its
operator would create, with the labels, owners and containers that operator gives it.

``HANDLERS`` maps ``(API group, kind)`` to its handler; ``COUNTS`` maps the kinds whose
templates each give several pods (distributed training) to how many, per path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from classifier.workloads import argo, knative, kserve, rollouts, spark, tekton, training
from classifier.workloads.pods import Handler

# One manifest in, the number of pods its operator creates from each template path out.
Counter = Callable[[Mapping[str, Any]], dict[str, int]]

HANDLERS: Mapping[tuple[str, str], Handler] = {
    ("argoproj.io", "Workflow"): argo.workflow_pods,
    ("argoproj.io", "WorkflowTemplate"): argo.workflow_template_pods,
    ("argoproj.io", "ClusterWorkflowTemplate"): argo.workflow_template_pods,
    ("argoproj.io", "CronWorkflow"): argo.cron_workflow_pods,
    ("argoproj.io", "Rollout"): rollouts.rollout_pods,
    ("sparkoperator.k8s.io", "SparkApplication"): spark.spark_application_pods,
    ("sparkoperator.k8s.io", "ScheduledSparkApplication"): spark.scheduled_spark_application_pods,
    ("tekton.dev", "TaskRun"): tekton.task_run_pods,
    ("serving.knative.dev", "Service"): knative.service_pods,
    ("serving.kserve.io", "InferenceService"): kserve.inference_service_pods,
    ("kubeflow.org", "PyTorchJob"): training.pytorch_job_pods,
    ("kubeflow.org", "MPIJob"): training.mpi_job_pods,
    ("jobset.x-k8s.io", "JobSet"): training.jobset_pods,
    ("ray.io", "RayCluster"): training.ray_cluster_pods,
}

COUNTS: Mapping[tuple[str, str], Counter] = {
    ("kubeflow.org", "PyTorchJob"): training.kubeflow_counts("pytorchReplicaSpecs"),
    ("kubeflow.org", "MPIJob"): training.kubeflow_counts("mpiReplicaSpecs"),
    ("jobset.x-k8s.io", "JobSet"): training.jobset_counts,
    ("ray.io", "RayCluster"): training.ray_cluster_counts,
}

__all__ = ["COUNTS", "HANDLERS", "Counter", "Handler"]
