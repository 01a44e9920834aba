"""Tekton TaskRun: the pod the pipeline controller creates to run the task's steps.

Mirrors ``Builder.Build`` in pkg/pod/pod.go (tektoncd/pipeline): pod ``<taskrun>-pod``, owned
by the TaskRun, labelled with the TaskRun's labels plus ``tekton.dev/taskRun`` and
``app.kubernetes.io/managed-by: tekton-pipelines``; one container per step, named
``step-<name>`` (``step-unnamed-<i>`` without a name, ``StepName`` in pkg/pod/entrypoint.go),
each merged over the task's ``stepTemplate``, its ``computeResources`` (v1) or ``resources``
(v1beta1) as the container's resources; sidecars as ``sidecar-<name>``; the ``prepare`` init
container that places the entrypoint binary; ``restartPolicy: Never``; scheduling fields from
the TaskRun's ``podTemplate``. A TaskRun that refers to a Task (``taskRef``) carries no steps
of its own, so its pod cannot be built offline.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podview import clone
from classifier.types import JSONObject
from classifier.workloads.pods import copy_fields, make_pod, object_name, reference, string_map

ENTRYPOINT_IMAGE = "ghcr.io/tektoncd/pipeline/entrypoint:latest"
# Container fields of a step or sidecar (Tekton's own fields - script, workspaces, results,
# onError... - are not container fields).
_STEP_FIELDS = (
    "image",
    "ports",
    "readinessProbe",
    "command",
    "args",
    "workingDir",
    "env",
    "envFrom",
    "volumeMounts",
    "securityContext",
    "imagePullPolicy",
)
_POD_TEMPLATE_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "securityContext",
    "schedulerName",
    "hostNetwork",
    "priorityClassName",
    "topologySpreadConstraints",
    "imagePullSecrets",
    "runtimeClassName",
)


def task_run_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    spec = podview.spec(document)
    task = podview.obj(spec.get("taskSpec"))
    if not isinstance(task.get("steps"), list):
        return
    name = object_name(document)
    api_version = podview.string(document.get("apiVersion")) or "tekton.dev/v1"
    template = podview.obj(task.get("stepTemplate"))
    containers: list[Any] = []
    for index, step in enumerate(podview.objects(task.get("steps"))):
        step_name = podview.string(step.get("name"))
        name_ = f"step-{step_name}" if step_name else f"step-unnamed-{index}"
        containers.append(_container(name_, {**template, **step}))
    for sidecar in podview.objects(task.get("sidecars")):
        containers.append(
            _container(f"sidecar-{podview.string(sidecar.get('name')) or 'unnamed'}", sidecar)
        )
    pod_spec: JSONObject = {
        "restartPolicy": "Never",
        "initContainers": [{"name": "prepare", "image": ENTRYPOINT_IMAGE}],
        "containers": containers,
    }
    account = podview.string(spec.get("serviceAccountName"))
    if account:
        pod_spec["serviceAccountName"] = account
    volumes = list(podview.objects(task.get("volumes")))
    if volumes:
        pod_spec["volumes"] = clone(volumes)
    copy_fields(pod_spec, podview.obj(spec.get("podTemplate")), _POD_TEMPLATE_FIELDS)
    labels = {
        **string_map(podview.metadata(document).get("labels")),
        "tekton.dev/taskRun": name,
        "app.kubernetes.io/managed-by": "tekton-pipelines",
    }
    yield (
        "spec.taskSpec",
        make_pod(
            name=f"{name}-pod",
            labels=labels,
            annotations=string_map(podview.metadata(document).get("annotations")),
            owners=[reference(api_version, "TaskRun", name)],
            spec=pod_spec,
        ),
    )


def _container(name: str, source: Mapping[str, Any]) -> JSONObject:
    """A step or sidecar as the pod's container: its container fields, and its
    ``computeResources`` (v1) or ``resources`` (v1beta1) as the container's resources."""
    container: JSONObject = {"name": name}
    copy_fields(container, source, _STEP_FIELDS)
    resources = source.get("computeResources", source.get("resources"))
    if isinstance(resources, dict):
        container["resources"] = clone(resources)
    return container
