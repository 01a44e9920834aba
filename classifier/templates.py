"""Finding pod templates in any manifest, and the pod a controller would create from one.

A pod template is recognised by shape, wherever it sits: a mapping
``{metadata?, spec: {containers: [...]}}`` (a bare Pod is one at the top level). That covers
Deployments, StatefulSets, Jobs, CronJobs and templates nested in custom resources
(PyTorchJob, RayJob, ...) without a table of kinds. ``*List`` objects are unpacked, their items
addressed as ``items[<i>]``.

Paths are dotted with list indexes in brackets: ``""`` for a bare Pod, ``spec.template``,
``spec.jobTemplate.spec.template``, ``items[2].spec.template``.

``pod_from_template`` synthesises what a real pod would carry (owner reference, the
controller's labels), so the classifier sees offline exactly what it sees at admission.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from classifier import podview
from classifier.types import JSONObject

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
# Alphabet of Kubernetes' rand.SafeEncodeString (no vowels, no look-alike characters).
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


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

    @property
    def key(self) -> str:
        """``<Kind>/<name>@<path>``, as in the fixtures' expected.yaml."""
        return f"{self.kind}/{self.name}@{self.path}"


def is_pod_template(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(
        podview.obj(value.get("spec")).get("containers"), list
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
    for path, template in _walk(document, prefix, top=True):
        yield PodTemplate(kind, name, api_version, namespace, path, template, document)


def _walk(value: Any, path: str, *, top: bool = False) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(value, dict):
        if is_pod_template(value):
            yield path, value
            return
        for key, child in value.items():
            if not isinstance(key, str) or (top and key in _SKIPPED_KEYS):
                continue
            yield from _walk(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, f"{path}[{index}]")


# --------------------------------------------------------------------------- synthesis


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(parts).encode()).digest()


def template_hash(template: Mapping[str, Any], *, salt: str = "") -> str:
    """A stable stand-in for the controller's pod-template-hash (10 safe characters)."""
    raw = _digest(repr(_sorted(template)), salt)
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in raw[:10])


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return sorted((str(k), _sorted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _uid(*parts: str) -> str:
    return str(uuid.UUID(bytes=_digest(*parts)[:16], version=5))


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def pod_from_template(found: PodTemplate, *, namespace: str) -> JSONObject:
    """The pod a controller would create from ``found``, as the API server would send it.

    ``namespace`` applies when neither the object nor the template names one. A bare Pod is
    returned as it is (a copy). Owners: Deployment -> ReplicaSet ``<name>-<hash>`` and the
    ``pod-template-hash`` label; CronJob -> Job ``<name>-<minutes>``; a Job, StatefulSet,
    DaemonSet, ReplicaSet, ReplicationController or custom resource owns its pods directly.
    """
    template_meta = podview.obj(found.template.get("metadata"))
    ns = podview.namespace(found.template) or found.namespace or namespace
    if found.template is found.owner:  # a bare Pod (maybe a List item): already a pod
        pod: JSONObject = _clone(dict(found.template))
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        meta = podview.ensure_object(pod, "metadata")
        meta["namespace"] = ns
        return pod

    meta = {
        k: _clone(v)
        for k, v in template_meta.items()
        if k not in ("name", "generateName", "namespace", "ownerReferences", "uid")
        and v is not None
    }
    labels: dict[str, Any] = dict(podview.labels(found.template))
    owner_kind, owner_name, owner_api = found.kind, found.name.rstrip("-"), found.api_version
    group = owner_api.rpartition("/")[0] if "/" in owner_api else ""
    if group in _BUILTIN_GROUPS and owner_kind in _CURRENT_API_VERSIONS:
        owner_api = _CURRENT_API_VERSIONS[owner_kind]
    pod_name: str | None = None
    if found.kind == "Deployment":
        hash_ = labels.get("pod-template-hash") or template_hash(found.template)
        labels["pod-template-hash"] = hash_
        owner_kind, owner_name, owner_api = "ReplicaSet", f"{owner_name}-{hash_}", "apps/v1"
    elif found.kind == "CronJob":
        owner_kind, owner_name, owner_api = (
            "Job",
            f"{owner_name}-{_CRONJOB_SCHEDULED_MINUTES}",
            "batch/v1",
        )
    if owner_kind == "Job":
        labels.setdefault("batch.kubernetes.io/job-name", owner_name)
        labels.setdefault("job-name", owner_name)
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
    meta["ownerReferences"] = [
        {
            "apiVersion": owner_api or "v1",
            "kind": owner_kind,
            "name": owner_name,
            "uid": _uid(owner_api, owner_kind, ns, owner_name),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": _clone(dict(podview.spec(found.template))),
    }
