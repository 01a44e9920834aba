"""Typed, defensive accessors over a pod (or pod template) held as parsed JSON.

The hot path never validates a whole PodSpec: it reads the few fields it needs, and treats a
field of the wrong JSON type as absent rather than crashing. (No ``from __future__ import
annotations`` here: this module defines a function named ``annotations``.)
"""

from collections.abc import Mapping, Sequence
from typing import Any

from classifier.types import JSONObject

_EMPTY: Mapping[str, Any] = {}
# Every field of a PodSpec (core/v1 types.go): what a pod spec written inline in a custom
# resource, next to fields of its own, is made of.
POD_SPEC_FIELDS = frozenset(
    {
        "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers",
        "dnsConfig", "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases",
        "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "imagePullSecrets",
        "initContainers", "nodeName", "nodeSelector", "os", "overhead", "preemptionPolicy",
        "priority", "priorityClassName", "readinessGates", "resourceClaims", "resources",
        "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
        "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
        "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations",
        "topologySpreadConstraints", "volumes",
    }
)  # fmt: skip


def obj(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty mapping."""
    return value if isinstance(value, dict) else _EMPTY


_DICTS = frozenset({dict})
_NO_OBJECTS: Sequence[Mapping[str, Any]] = ()


def objects(value: Any) -> Sequence[Mapping[str, Any]]:
    """The JSON objects inside ``value`` if it is a list; nothing otherwise.

    A list of objects only (the norm) is given back as it is, its items' types checked in C.
    """
    if not isinstance(value, list):
        return _NO_OBJECTS
    if _DICTS.issuperset(map(type, value)):
        return value
    return [item for item in value if isinstance(item, dict)]


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# metadata, spec and annotation test the types themselves rather than calling obj and string:
# the admission path reads them a few dozen times per pod.
def metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, dict) else _EMPTY


def spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    value = pod.get("spec")
    return value if isinstance(value, dict) else _EMPTY


def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _string_map(metadata(pod).get("labels"))


def annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _string_map(metadata(pod).get("annotations"))


def annotation(pod: Mapping[str, Any], key: str) -> str | None:
    """``annotations(pod).get(key)``, without copying every annotation to read one."""
    meta = pod.get("metadata")
    found = meta.get("annotations") if isinstance(meta, dict) else None
    value = found.get(key) if isinstance(found, dict) else None
    return value if isinstance(value, str) else None


def name(pod: Mapping[str, Any]) -> str:
    meta = metadata(pod)
    return string(meta.get("name")) or string(meta.get("generateName")) or ""


def namespace(pod: Mapping[str, Any]) -> str | None:
    return string(metadata(pod).get("namespace"))


def uid(pod: Mapping[str, Any]) -> str | None:
    return string(metadata(pod).get("uid"))


def owner_references(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return objects(metadata(pod).get("ownerReferences"))


def containers(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return objects(spec(pod).get("containers"))


def init_containers(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return objects(spec(pod).get("initContainers"))


def phase(pod: Mapping[str, Any]) -> str | None:
    return string(obj(pod.get("status")).get("phase"))


_STRINGS = frozenset({str})


def _string_map(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict):
        return _EMPTY
    # Labels and annotations hold only strings: their types are checked in C, and copied in
    # one call.
    if _STRINGS.issuperset(map(type, value.values())) and _STRINGS.issuperset(map(type, value)):
        return dict(value)
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


# The types a JSON parser gives a scalar: a dict or list holding only these (labels, a
# container's command) is copied in one call, its items' types checked in C.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def clone(value: Any) -> Any:
    """A copy of a JSON value (much cheaper than ``copy.deepcopy`` for plain JSON)."""
    if isinstance(value, dict):
        if _SCALARS.issuperset(map(type, value.values())):
            return dict(value)
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        if _SCALARS.issuperset(map(type, value)):
            return list(value)
        return [clone(v) for v in value]
    return value


def ensure_object(parent: JSONObject, key: str) -> JSONObject:
    """Return ``parent[key]`` as a dict, creating (or replacing a non-object) when needed."""
    child = parent.get(key)
    if not isinstance(child, dict):
        child = {}
        parent[key] = child
    return child
