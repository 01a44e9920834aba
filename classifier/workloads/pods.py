"""What every workload handler shares: its type, and building a pod's metadata and owners."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podnames import template_hash
from classifier.podview import clone
from classifier.types import JSONObject

# A handler: one manifest in, (path of what describes the pod, the pod) out.
Handler = Callable[[Mapping[str, Any]], Iterator[tuple[str, JSONObject]]]


def object_name(document: Mapping[str, Any]) -> str:
    """The object's name; with only ``generateName``, the name the API server would give
    (``generateName`` plus five generated characters, stable per manifest)."""
    meta = podview.metadata(document)
    name = podview.string(meta.get("name"))
    if name:
        return name
    prefix = podview.string(meta.get("generateName")) or "object-"
    return prefix + template_hash(document, length=5)


def reference(api_version: str, kind: str, name: str, *, controller: bool = True) -> JSONObject:
    """An owner reference; its uid is filled in once the pod's namespace is known."""
    found: JSONObject = {"apiVersion": api_version, "kind": kind, "name": name}
    if controller:
        found["controller"] = True
        found["blockOwnerDeletion"] = True
    return found


def string_map(value: Any) -> dict[str, str]:
    return {k: v for k, v in podview.obj(value).items() if isinstance(v, str)}


def make_pod(
    *,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    owners: list[JSONObject],
    spec: JSONObject,
) -> JSONObject:
    meta: JSONObject = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def copy_fields(target: JSONObject, source: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """Copy each of ``names`` that ``source`` sets (not null) into ``target``."""
    for field in names:
        value = source.get(field)
        if value is not None:
            target[field] = clone(value)
