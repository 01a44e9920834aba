"""Argo Workflows: the pod the workflow controller creates for each template that runs one.

Mirrors ``podBuilder.build`` and ``addSchedulingConstraints`` in
workflow/controller/workflowpod.go (argoproj/argo-workflows): a ``container`` or ``script``
template runs as the container ``main``, a ``containerSet`` as its own named containers, each
next to the executor's ``wait`` container and after its ``init`` container; a ``resource``
template runs the executor alone as ``main``. The pod is labelled
``workflows.argoproj.io/workflow``, owned by the Workflow, and never restarted. Scheduling
fields come from the template, else from the workflow spec (``podPriorityClassName`` at
workflow level); labels and annotations from the workflow's ``podMetadata``, then the
template's ``metadata``. Steps, DAG, suspend, HTTP and data templates run no pod of their own.

A WorkflowTemplate's (or ClusterWorkflowTemplate's) pods belong to the Workflow submitted
from it; a CronWorkflow's to the Workflow it creates on schedule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podnames import template_hash
from classifier.podview import clone
from classifier.types import JSONObject
from classifier.workloads.pods import (
    copy_fields,
    make_pod,
    object_name,
    reference,
    string_map,
)

API_VERSION = "argoproj.io/v1alpha1"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
# The executor image the controller runs next to the main container (its default config).
EXECUTOR_IMAGE = "quay.io/argoproj/argoexec:latest"
# Fields copied from a container or script template into the main container.
_CONTAINER_FIELDS = (
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "env",
    "envFrom",
    "resources",
    "volumeMounts",
    "securityContext",
    "imagePullPolicy",
    "readinessProbe",
    "livenessProbe",
    "startupProbe",
)
_POD_FIELDS = ("serviceAccountName", "hostNetwork", "imagePullSecrets", "dnsPolicy", "dnsConfig")


def workflow_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    yield from _spec_pods(podview.spec(document), "spec", workflow=name, extra_labels={})


def workflow_template_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    # `argo submit --from workflowtemplate/NAME` creates Workflow NAME-xxxxx, labelled so.
    name = object_name(document)
    label = (
        "workflows.argoproj.io/cluster-workflow-template"
        if document.get("kind") == "ClusterWorkflowTemplate"
        else "workflows.argoproj.io/workflow-template"
    )
    workflow = f"{name}-{template_hash(document, length=5)}"
    yield from _spec_pods(
        podview.spec(document), "spec", workflow=workflow, extra_labels={label: name}
    )


def cron_workflow_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    # The CronWorkflow controller names each Workflow NAME-<scheduled unix time>.
    name = object_name(document)
    spec = podview.obj(podview.spec(document).get("workflowSpec"))
    yield from _spec_pods(
        spec,
        "spec.workflowSpec",
        workflow=f"{name}-1740057600",
        extra_labels={"workflows.argoproj.io/cron-workflow": name},
    )


def _spec_pods(
    spec: Mapping[str, Any], path: str, *, workflow: str, extra_labels: Mapping[str, str]
) -> Iterator[tuple[str, JSONObject]]:
    for index, template in enumerate(podview.objects(spec.get("templates"))):
        pod = _template_pod(spec, template, workflow=workflow, extra_labels=extra_labels)
        if pod is not None:
            yield f"{path}.templates[{index}]", pod


def _template_pod(
    spec: Mapping[str, Any],
    template: Mapping[str, Any],
    *,
    workflow: str,
    extra_labels: Mapping[str, str],
) -> JSONObject | None:
    main = _main_containers(template)
    if main is None:
        return None
    containers: list[Any] = []
    if "resource" not in template:
        containers.append({"name": "wait", "image": EXECUTOR_IMAGE})
    containers.extend(main)
    containers.extend(clone(list(podview.objects(template.get("sidecars")))))
    init: list[Any] = [{"name": "init", "image": EXECUTOR_IMAGE}]
    init.extend(clone(list(podview.objects(template.get("initContainers")))))

    pod_spec: JSONObject = {"restartPolicy": "Never", "initContainers": init}
    pod_spec["containers"] = containers
    copy_fields(pod_spec, spec, _POD_FIELDS)
    copy_fields(pod_spec, template, ("serviceAccountName", "hostNetwork"))
    for field, workflow_field in (
        ("nodeSelector", "nodeSelector"),
        ("affinity", "affinity"),
        ("tolerations", "tolerations"),
        ("schedulerName", "schedulerName"),
        ("priorityClassName", "podPriorityClassName"),
        ("securityContext", "securityContext"),
    ):
        value = template.get(field)
        if value is None or value == [] or value == {}:
            value = spec.get(workflow_field)
        if value is not None:
            pod_spec[field] = clone(value)
    volumes = [*podview.objects(spec.get("volumes")), *podview.objects(template.get("volumes"))]
    if volumes:
        pod_spec["volumes"] = clone(volumes)

    pod_metadata = podview.obj(spec.get("podMetadata"))
    template_metadata = podview.obj(template.get("metadata"))
    labels = {
        **string_map(pod_metadata.get("labels")),
        **string_map(template_metadata.get("labels")),
        **extra_labels,
        WORKFLOW_LABEL: workflow,
        "workflows.argoproj.io/completed": "false",
    }
    template_name = podview.string(template.get("name")) or "main"
    annotations = {
        **string_map(pod_metadata.get("annotations")),
        **string_map(template_metadata.get("annotations")),
        "workflows.argoproj.io/node-name": workflow,
    }
    return make_pod(
        name=f"{workflow}-{template_name}-{template_hash(template, length=10)}",
        labels=labels,
        annotations=annotations,
        owners=[reference(API_VERSION, "Workflow", workflow)],
        spec=pod_spec,
    )


def _main_containers(template: Mapping[str, Any]) -> list[Any] | None:
    """The template's own containers, named as the controller names them; None: no pod."""
    container = template.get("container")
    script = template.get("script")
    container_set = template.get("containerSet")
    if isinstance(container, dict) or isinstance(script, dict):
        source = container if isinstance(container, dict) else script
        main: JSONObject = {"name": "main"}
        copy_fields(main, podview.obj(source), _CONTAINER_FIELDS)
        return [main]
    if isinstance(container_set, dict):
        found = []
        for index, member in enumerate(podview.objects(container_set.get("containers"))):
            one: JSONObject = {"name": podview.string(member.get("name")) or f"main-{index}"}
            copy_fields(one, member, _CONTAINER_FIELDS)
            found.append(one)
        return found or None
    if isinstance(template.get("resource"), dict):
        return [{"name": "main", "image": EXECUTOR_IMAGE}]
    return None
