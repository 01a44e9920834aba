"""What kube-apiserver does to a Pod before and between admission webhooks, for the workload.

A webhook never sees the pod a controller wrote: the API server has decoded it with defaults
(``SetDefaults_Pod`` and friends), recorded ``managedFields`` for the creating manager, and run
the built-in admission plugins (ServiceAccount adds the projected ``kube-api-access-*`` volume,
DefaultTolerationSeconds the ``not-ready``/``unreachable`` tolerations, Priority the resolved
``priority`` and ``preemptionPolicy``). At validating admission ``BeforeCreate`` has also run:
the pod has a name, a uid, a creation timestamp and a reset ``status``. This module reproduces
those steps on plain JSON so the benchmark sends what a real cluster sends.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Mapping
from typing import Any, Final

import orjson

from classifier.types import JSONObject

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_MOUNT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TOLERATION_SECONDS: Final = 300
DEFAULT_TOLERATION_KEYS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# Alphabet of Kubernetes' rand.String (no vowels, no look-alike characters).
_SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"

# Associative lists of the Pod schema and their keys, as server-side apply records them.
_LIST_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "ports": ("containerPort", "protocol"),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "resourceClaims": ("name",),
}
_PROBES: Final = ("livenessProbe", "readinessProbe", "startupProbe")


def random_suffix(rng: random.Random, length: int = 5) -> str:
    """A suffix as the API server's name generator and ServiceAccount plugin make them."""
    return "".join(rng.choice(_SAFE_ALPHABET) for _ in range(length))


def image_pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or an untagged image without digest, else ``IfNotPresent``."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_probe(probe: JSONObject) -> None:
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")


def _default_container(container: JSONObject) -> None:
    image = container.get("image")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if isinstance(image, str):
        container.setdefault("imagePullPolicy", image_pull_policy(image))
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")
    for env in _dicts(container.get("env")):
        field_ref = _dict(_dict(env.get("valueFrom")).get("fieldRef"))
        if field_ref:
            field_ref.setdefault("apiVersion", "v1")
    for name in _PROBES:
        probe = container.get(name)
        if isinstance(probe, dict):
            _default_probe(probe)
    resources = container.get("resources")
    if not isinstance(resources, dict):
        resources = {}
        container["resources"] = resources
    limits = resources.get("limits")
    if isinstance(limits, dict) and limits:
        # SetDefaults_Pod: a resource limited but not requested is requested at its limit.
        requests = resources.get("requests")
        if not isinstance(requests, dict):
            requests = {}
        for name, value in limits.items():
            requests.setdefault(name, value)
        resources["requests"] = requests


def _default_volume(volume: JSONObject) -> None:
    for kind in ("configMap", "secret"):
        source = volume.get(kind)
        if isinstance(source, dict):
            source.setdefault("defaultMode", 420)
    host_path = volume.get("hostPath")
    if isinstance(host_path, dict):
        host_path.setdefault("type", "")


def apply_defaults(pod: JSONObject) -> None:
    """The defaulting functions run when the API server decodes a Pod (in place)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for field in ("initContainers", "containers"):
        for container in _dicts(spec.get(field)):
            _default_container(container)
    for volume in _dicts(spec.get("volumes")):
        _default_volume(volume)


# --------------------------------------------------------------------------- managedFields


def fields_v1(value: Any, *, depth: int = 0) -> JSONObject:
    """The FieldsV1 set of every field in ``value``, as the field manager records a create.

    A non-empty map below ``metadata``/``spec`` owns itself too (the ``"."`` member), as does
    an associative list (except the required ``containers``); list items are keyed by their
    merge keys (``k:{"name":"web"}``), and scalars and atomic lists are leaves (``{}``).
    """
    fields: JSONObject = {}
    if not isinstance(value, dict):
        return fields
    if depth >= 2 and value:
        fields["."] = {}
    for key, item in value.items():
        entry: JSONObject
        if isinstance(item, dict):
            entry = fields_v1(item, depth=depth + 1)
        elif isinstance(item, list) and key in _LIST_KEYS:
            entry = {} if key == "containers" else {".": {}}
            for element in item:
                if not isinstance(element, dict):
                    continue
                ident = {k: element[k] for k in sorted(_LIST_KEYS[key]) if k in element}
                entry[f"k:{orjson.dumps(ident).decode()}"] = fields_v1(element, depth=depth + 2)
        else:
            entry = {}
        fields[f"f:{key}"] = entry
    return fields


def managed_fields(
    pod: Mapping[str, Any], *, manager: str, time: str, operation: str = "Update"
) -> list[JSONObject]:
    """One ``managedFields`` entry owning every field ``pod`` sets (metadata and spec)."""
    meta = {k: v for k, v in _dict(pod.get("metadata")).items() if k not in _SYSTEM_METADATA}
    owned: JSONObject = {"metadata": meta, "spec": pod.get("spec", {})}
    return [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": "v1",
            "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(owned),
        }
    ]


_SYSTEM_METADATA: Final = frozenset(
    {"namespace", "creationTimestamp", "uid", "resourceVersion", "managedFields", "generation"}
)


# --------------------------------------------------------------------------- admission plugins


def add_service_account(pod: JSONObject, *, rng: random.Random) -> None:
    """The ServiceAccount plugin: the account name and the projected token volume + mounts."""
    spec = pod["spec"]
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = account
    spec["serviceAccount"] = account  # the deprecated alias, filled by conversion
    if spec.get("automountServiceAccountToken") is False:
        return
    containers = [c for field in ("initContainers", "containers") for c in _dicts(spec.get(field))]
    if any(
        m.get("mountPath") == SERVICE_ACCOUNT_MOUNT
        for c in containers
        for m in _dicts(c.get("volumeMounts"))
    ):
        return
    name = f"kube-api-access-{random_suffix(rng)}"
    volumes = spec.get("volumes")
    if not isinstance(volumes, list):
        volumes = []
        spec["volumes"] = volumes
    volumes.append(
        {
            "name": name,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                }
                            ]
                        }
                    },
                ],
                "defaultMode": 420,
            },
        }
    )
    for container in containers:
        mounts = container.get("volumeMounts")
        if not isinstance(mounts, list):
            mounts = []
            container["volumeMounts"] = mounts
        mounts.append({"name": name, "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT})


def add_default_tolerations(pod: JSONObject) -> None:
    """DefaultTolerationSeconds: tolerate not-ready/unreachable nodes for 300 s."""
    spec = pod["spec"]
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = []
    for key in DEFAULT_TOLERATION_KEYS:
        covered = any(
            (t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))
            and t.get("effect") in (None, "", "NoExecute")
            for t in _dicts(tolerations)
        )
        if not covered:
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = tolerations


def resolve_priority(pod: JSONObject, *, classes: Mapping[str, tuple[int, str]]) -> None:
    """The Priority plugin: ``priority`` and ``preemptionPolicy`` of the pod's class.

    ``classes`` maps a PriorityClass name to (value, preemptionPolicy); a pod naming a class the
    cluster does not have would be refused, so callers drop such names first.
    """
    spec = pod["spec"]
    name = spec.get("priorityClassName")
    value, policy = classes.get(name, (0, "PreemptLowerPriority")) if name else (0, "")
    spec["priority"] = value
    spec["preemptionPolicy"] = policy or "PreemptLowerPriority"


def admitted_pod(
    pod: Mapping[str, Any],
    *,
    manager: str,
    time: str,
    classes: Mapping[str, tuple[int, str]],
    rng: random.Random,
) -> JSONObject:
    """``pod`` as the first mutating webhook receives it on CREATE (a new object)."""
    result: JSONObject = copy.deepcopy(dict(pod))
    result.setdefault("apiVersion", "v1")
    result.setdefault("kind", "Pod")
    meta = result.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "managedFields", "creationTimestamp"):
        meta.pop(key, None)
    apply_defaults(result)
    meta["managedFields"] = managed_fields(result, manager=manager, time=time)
    meta["creationTimestamp"] = None
    add_service_account(result, rng=rng)
    add_default_tolerations(result)
    resolve_priority(result, classes=classes)
    result["status"] = {}
    return _ordered(result)


def qos_class(pod: Mapping[str, Any]) -> str:
    """The pod's QoS class (Guaranteed, Burstable, BestEffort), as PrepareForCreate sets it.

    Compares quantity strings as written: the workload's pods write equal values identically.
    """
    containers = [
        c
        for field in ("initContainers", "containers")
        for c in _dicts(_dict(pod.get("spec")).get(field))
    ]
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        resources = _dict(container.get("resources"))
        requests, limits = _dict(resources.get("requests")), _dict(resources.get("limits"))
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def stored_pod(pod: Mapping[str, Any], *, name: str, uid: str, created: str) -> JSONObject:
    """``pod`` after ``BeforeCreate``, as the validating webhooks receive it (a new object).

    Shallow copies down to ``metadata`` only: the rest is shared with ``pod``.
    """
    result: JSONObject = dict(pod)
    meta: JSONObject = dict(_dict(pod.get("metadata")))
    if not meta.get("name"):
        meta["name"] = name
    meta["uid"] = uid
    meta["creationTimestamp"] = created
    result["metadata"] = meta
    result["status"] = {"phase": "Pending", "qosClass": qos_class(pod)}
    return result


def _ordered(pod: JSONObject) -> JSONObject:
    # The API server serializes Pods in Go struct field order: kind, apiVersion, metadata,
    # spec, status. Byte size is the same either way; this keeps captures comparable.
    return {key: pod[key] for key in ("kind", "apiVersion", "metadata", "spec", "status")} | {
        key: value for key, value in pod.items() if key not in _POD_KEYS
    }


_POD_KEYS: Final = frozenset({"kind", "apiVersion", "metadata", "spec", "status"})


def _dict(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[JSONObject]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
