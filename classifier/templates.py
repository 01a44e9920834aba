"""Finding pod templates in any manifest, and the pod a controller would create from one.

A pod template is recognised by shape, wherever it sits: a mapping
``{metadata?, spec: {containers: [...]}}`` (a bare Pod is one at the top level). That covers
Deployments, StatefulSets, Jobs, CronJobs and templates nested in custom resources
(PyTorchJob, RayJob, ...) without a table of kinds. A custom resource that nests a
``containers:`` list outside a template (a field holding pod spec fields inline) yields that
field's pod spec. ``*List`` objects are unpacked, their items
addressed as ``items[<i>]``.

Paths are dotted with list indexes in brackets: ``""`` for a bare Pod, ``spec.template``,
``spec.jobTemplate.spec.template``, ``items[2].spec.template``.

``pod_from_template`` synthesises what a real pod would carry (owner reference, the
controller's labels), so the classifier sees offline exactly what it sees at admission.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from classifier import podview
from classifier.podgroups import JOB_COMPLETION_INDEX
from classifier.podnames import owner_reference, template_hash, uid
from classifier.podview import POD_SPEC_FIELDS, clone
from classifier.types import JSONObject
from classifier.workloads import COUNTS, HANDLERS

logger = logging.getLogger(__name__)

# Subtrees that never hold a pod template (and can be large).
_SKIPPED_KEYS = frozenset({"metadata", "status"})
# A fixed CronJob schedule time, in minutes since the epoch (2025-02-20T13:20:00Z): the Job
# name then has the suffix the CronJob controller gives it.
_CRONJOB_SCHEDULED_MINUTES = 29_000_000
# Built-in workload kinds, served today at these versions whatever the manifest used
# (extensions/v1beta1, apps/v1beta2, batch/v1beta1...): owner references use the current one.
_BUILTIN_GROUPS = frozenset({"", "apps", "extensions", "batch"})
_CURRENT_API_VERSIONS: Mapping[str, str] = {
    "ReplicationController": "v1",
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}
__all__ = [
    "PodTemplate",
    "find_pod_templates",
    "is_pod_template",
    "pod_from_template",
    "template_hash",
]


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A pod template found in a manifest, with the object that holds it."""

    kind: str
    name: str
    api_version: str
    namespace: str | None
    path: str
    template: Mapping[str, Any]
    owner: Mapping[str, Any]
    # The whole pod, when a workload's handler built it the way its operator does (Argo,
    # Spark, Tekton, Knative, Argo Rollouts); None: synthesise it from ``template``.
    pod: Mapping[str, Any] | None = None
    # How many pods the controller creates from this template at once, where that makes
    # them one group: a training job's replicas, an Indexed Job's parallelism. Else 1.
    count: int = 1
    # The object whose controller creates the pods, when the template sits in an object
    # embedded in this one (a PyTorchJob in a Kueue AppWrapper, a Pod in an Argo Events
    # trigger): its kind, name and API version. Empty: this object's.
    owner_kind: str = ""
    owner_name: str = ""
    owner_api: str = ""

    @property
    def key(self) -> str:
        """``<Kind>/<name>@<path>``, as in the fixtures' expected.yaml."""
        return f"{self.kind}/{self.name}@{self.path}"


def is_pod_template(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(
        podview.obj(value.get("spec")).get("containers"), list
    )


def is_inline_pod_spec(value: Any) -> bool:
    """A mapping with a ``containers`` list of containers that each name an image."""
    containers = podview.obj(value).get("containers")
    return (
        isinstance(containers, list)
        and bool(containers)
        and all(isinstance(c, dict) and isinstance(c.get("image"), str) for c in containers)
    )


def find_pod_templates(document: Any, *, prefix: str = "") -> Iterator[PodTemplate]:
    """Every pod template in one parsed manifest document (a ``*List`` is unpacked)."""
    if not isinstance(document, dict):
        return
    kind = podview.string(document.get("kind")) or ""
    items = document.get("items")
    if kind.endswith("List") and isinstance(items, list):
        for index, item in enumerate(items):
            yield from find_pod_templates(item, prefix=f"{prefix}items[{index}]")
        return
    name = podview.name(document)
    api_version = podview.string(document.get("apiVersion")) or ""
    namespace = podview.namespace(document)
    group = api_version.rpartition("/")[0]
    handler = HANDLERS.get((group, kind))
    if handler is not None:
        built = False
        counter = COUNTS.get((group, kind))
        counts = counter(document) if counter is not None else {}
        for path, pod in handler(document):
            built = True
            where = f"{prefix}.{path}" if prefix and path else prefix or path
            yield PodTemplate(
                kind, name, api_version, namespace, where, pod, document, pod, counts.get(path, 1)
            )
        if built:
            return
        # A shape the handler does not know (an older API version): templates by shape.
    for path, template, holder in _walk(document, prefix, top=True):
        if holder is None:
            yield PodTemplate(
                kind, name, api_version, namespace, path, template, document, count=_count(document)
            )
            continue
        yield PodTemplate(
            kind,
            name,
            api_version,
            podview.namespace(holder) or namespace,
            path,
            template,
            holder,
            count=_count(holder),
            owner_kind=podview.string(holder.get("kind")) or "",
            owner_name=podview.name(holder) or name,
            owner_api=podview.string(holder.get("apiVersion")) or "",
        )


def _count(owner: Mapping[str, Any]) -> int:
    """How many pods ``owner`` creates from its template at once, as one group: an Indexed
    Job's min(parallelism, completions), parallelism 1 unset; else 1."""
    api_version = podview.string(owner.get("apiVersion")) or ""
    if (api_version.rpartition("/")[0], owner.get("kind")) != ("batch", "Job"):
        return 1
    spec = podview.spec(owner)
    if spec.get("completionMode") != "Indexed":
        return 1
    parallelism = spec.get("parallelism")
    completions = spec.get("completions")
    pods = parallelism if isinstance(parallelism, int) and parallelism >= 0 else 1
    if isinstance(completions, int) and completions >= 0:
        pods = min(pods, completions)
    return pods


def _walk(
    value: Any, path: str, *, top: bool = False, holder: Mapping[str, Any] | None = None
) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any] | None]]:
    """(path, template, the embedded object holding it or None) of each template in ``value``."""
    if isinstance(value, dict):
        if not top and _is_object(value):
            # An object embedded whole (a PyTorchJob an AppWrapper wraps, a Pod an Argo Events
            # trigger creates): its controller, not the outer one's, makes the pods.
            holder = value
        if is_pod_template(value):
            yield path, value, holder
            return
        if not top and is_inline_pod_spec(value):
            # A custom resource's own field holding a pod spec inline, next to fields of its
            # own (``spec.predictor.containers``): the pod spec is its PodSpec fields.
            yield path, {"spec": {k: v for k, v in value.items() if k in POD_SPEC_FIELDS}}, holder
            return
        for key, child in value.items():
            if not isinstance(key, str) or (top and key in _SKIPPED_KEYS):
                continue
            yield from _walk(child, f"{path}.{key}" if path else key, holder=holder)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, f"{path}[{index}]", holder=holder)


def _is_object(value: Mapping[str, Any]) -> bool:
    """Whether ``value`` is a Kubernetes object of its own: it names its API version and kind."""
    api_version, kind = value.get("apiVersion"), value.get("kind")
    return isinstance(api_version, str) and isinstance(kind, str) and bool(api_version and kind)


# --------------------------------------------------------------------------- synthesis


def pod_from_template(found: PodTemplate, *, namespace: str) -> JSONObject:
    """The pod a controller would create from ``found``, as the API server would send it.

    ``namespace`` applies when neither the object nor the template names one. A bare Pod is
    returned as it is (a copy). Owners: Deployment -> ReplicaSet ``<name>-<hash>`` and the
    ``pod-template-hash`` label; CronJob -> Job ``<name>-<minutes>``; a Job, StatefulSet,
    DaemonSet, ReplicaSet, ReplicationController or custom resource owns its pods directly.
    """
    template_meta = podview.obj(found.template.get("metadata"))
    ns = podview.namespace(found.template) or found.namespace or namespace
    kind = found.owner_kind or found.kind
    if found.pod is not None or (found.template is found.owner and kind == "Pod"):
        # Built by a workload handler, or a bare Pod (maybe a List item): already a pod.
        pod: JSONObject = clone(dict(found.pod if found.pod is not None else found.template))
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        meta = podview.ensure_object(pod, "metadata")
        meta["namespace"] = ns
        for reference in podview.objects(meta.get("ownerReferences")):
            # A handler does not know the namespace, on which the owner's uid depends.
            if isinstance(reference, dict) and "uid" not in reference:
                reference["uid"] = uid(
                    str(reference.get("apiVersion")),
                    str(reference.get("kind")),
                    ns,
                    str(reference.get("name")),
                )
        return pod

    meta = {
        k: clone(v)
        for k, v in template_meta.items()
        if k not in ("name", "generateName", "namespace", "ownerReferences", "uid")
        and v is not None
    }
    labels: dict[str, Any] = dict(podview.labels(found.template))
    owner_kind = kind
    owner_name = (found.owner_name or found.name).rstrip("-")
    owner_api = found.owner_api or found.api_version
    group = owner_api.rpartition("/")[0] if "/" in owner_api else ""
    if group in _BUILTIN_GROUPS and owner_kind in _CURRENT_API_VERSIONS:
        owner_api = _CURRENT_API_VERSIONS[owner_kind]
    pod_name: str | None = None
    if kind == "Deployment":
        hash_ = labels.get("pod-template-hash") or template_hash(found.template)
        labels["pod-template-hash"] = hash_
        owner_kind, owner_name, owner_api = "ReplicaSet", f"{owner_name}-{hash_}", "apps/v1"
    elif kind == "CronJob":
        owner_kind, owner_name, owner_api = (
            "Job",
            f"{owner_name}-{_CRONJOB_SCHEDULED_MINUTES}",
            "batch/v1",
        )
    if owner_kind == "Job":
        labels.setdefault("batch.kubernetes.io/job-name", owner_name)
        labels.setdefault("job-name", owner_name)
        if podview.spec(found.owner).get("completionMode") == "Indexed":
            # pkg/controller/job/indexed_job_utils.go: the index as annotation and label.
            labels.setdefault(JOB_COMPLETION_INDEX, "0")
            meta["annotations"] = {
                **podview.obj(meta.get("annotations")),
                JOB_COMPLETION_INDEX: "0",
            }
    elif owner_kind == "StatefulSet":
        pod_name = f"{owner_name}-0"
        labels.setdefault("statefulset.kubernetes.io/pod-name", pod_name)
        labels.setdefault("apps.kubernetes.io/pod-index", "0")
        labels.setdefault(
            "controller-revision-hash", f"{owner_name}-{template_hash(found.template)}"
        )
    elif owner_kind == "DaemonSet":
        labels.setdefault("controller-revision-hash", template_hash(found.template))
        labels.setdefault("pod-template-generation", "1")
    if labels:
        meta["labels"] = labels
    if pod_name is not None:
        meta["name"] = pod_name
    else:
        meta["generateName"] = f"{owner_name}-"
    meta["namespace"] = ns
    meta["ownerReferences"] = [owner_reference(owner_api, owner_kind, owner_name, namespace=ns)]
    spec: JSONObject = dict(podview.spec(found.template))
    if found.template is found.owner:
        # A custom resource shaped like a pod (a serving runtime's spec.containers): its pods
        # are its controller's, with the pod spec's own fields of its spec.
        spec = {k: v for k, v in spec.items() if k in POD_SPEC_FIELDS}
    spec = clone(spec)
    if owner_kind == "StatefulSet" and pod_name is not None:
        _stateful_identity(spec, found.owner, owner_name, pod_name)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _stateful_identity(spec: JSONObject, owner: Mapping[str, Any], name: str, pod: str) -> None:
    """What the StatefulSet controller adds to pod ordinal 0: hostname, subdomain, and one
    claim volume per volume claim template (``initIdentity`` and ``updateStorage`` in
    pkg/controller/statefulset/stateful_set_utils.go: volume named after the template, claim
    ``<template>-<set>-<ordinal>``, replacing a pod volume of the same name)."""
    owner_spec = podview.spec(owner)
    spec["hostname"] = pod
    service = podview.string(owner_spec.get("serviceName"))
    if service:
        spec["subdomain"] = service
    claims = [
        claim_name
        for claim in podview.objects(owner_spec.get("volumeClaimTemplates"))
        if (claim_name := podview.name(claim))
    ]
    if not claims:
        return
    volumes: list[Any] = [
        {"name": claim, "persistentVolumeClaim": {"claimName": f"{claim}-{name}-0"}}
        for claim in claims
    ]
    current = spec.get("volumes")
    if isinstance(current, list):
        volumes.extend(v for v in current if not (isinstance(v, dict) and v.get("name") in claims))
    spec["volumes"] = volumes
