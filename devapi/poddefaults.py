"""Pod defaulting that touches resources: canonical quantities, pod-level requests and limits.

Follows ``pkg/apis/core/v1/defaults.go``:

* ``SetDefaults_ResourceList`` rounds every quantity of every resource list up to milli
  (``1.5m`` -> ``2m``); the stored text is the quantity's canonical form (``0.1`` -> ``100m``,
  ``1024Mi`` -> ``1Gi``), as encoding a ``resource.Quantity`` writes it;
* ``SetDefaults_Pod``: containers' requests default to their limits, then, when the pod has
  pod-level resources (``PodLevelResources``, on by default), ``defaultHugePagePodLimits``,
  ``defaultPodRequests`` and ``defaultPodLimits``, which read the containers' effective requests
  and limits (``component-helpers/resource``, ``AggregateContainerRequests``/``Limits``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from classifier.quantities import Quantity, QuantityError
from devapi.jsonvalues import obj as _obj
from devapi.jsonvalues import objects as _objects
from devapi.types import JSONObject

_MILLI = 1_000_000  # nanos per milli-unit
_HUGEPAGES = "hugepages-"


def canonical_quantity(value: Any) -> Any:
    """A quantity rounded up to milli, written canonically; an invalid one is left as is
    (decoding refuses it before defaulting matters)."""
    try:
        quantity = Quantity.from_json(value)
    except QuantityError:
        return value
    nanos = quantity.nanos
    remainder = abs(nanos) % _MILLI
    if remainder:
        # RoundUp(-3): away from zero.
        nanos += (_MILLI - remainder) if nanos > 0 else -(_MILLI - remainder)
    return str(Quantity(nanos, quantity.format))


def _canonical_list(resources: Any) -> None:
    if isinstance(resources, dict):
        for name, value in resources.items():
            resources[name] = canonical_quantity(value)


def resource_lists(spec: JSONObject) -> Iterator[Any]:
    """Every resource list of a pod spec that ``SetDefaults_ResourceList`` visits."""
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for container in _objects(spec.get(field)):
            resources = _obj(container.get("resources"))
            yield resources.get("requests")
            yield resources.get("limits")
    pod_resources = _obj(spec.get("resources"))
    yield pod_resources.get("requests")
    yield pod_resources.get("limits")
    yield spec.get("overhead")


def default_pod_resources(pod: JSONObject) -> None:
    """The resource part of ``SetDefaults_Pod`` and ``SetDefaults_ResourceList``."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for field in ("containers", "initContainers"):
        for container in _objects(spec.get(field)):
            resources = container.setdefault("resources", {})
            if not isinstance(resources, dict):
                continue
            limits = resources.get("limits")
            if isinstance(limits, dict):
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, value in limits.items():
                        requests.setdefault(name, value)
    for resources in resource_lists(spec):
        _canonical_list(resources)
    if isinstance(spec.get("resources"), dict):
        _default_hugepage_pod_limits(spec)
        _default_pod_requests(spec)
        _default_pod_limits(spec)


def quantities(values: Any) -> dict[str, Quantity]:
    """The parsable quantities of a resource list (an invalid one is refused elsewhere)."""
    result: dict[str, Quantity] = {}
    for name, value in _obj(values).items():
        try:
            result[name] = Quantity.from_json(value)
        except QuantityError:
            continue
    return result


def _restartable(container: JSONObject) -> bool:
    return container.get("restartPolicy") == "Always"


def aggregate(spec: JSONObject, kind: str) -> dict[str, Quantity]:
    """``AggregateContainerRequests``/``Limits``: the sum over app containers and sidecars,
    raised to what each init container needs on top of the sidecars started before it."""
    total: dict[str, Quantity] = {}
    for container in _objects(spec.get("containers")):
        for name, value in quantities(_obj(container.get("resources")).get(kind)).items():
            total[name] = total.get(name, Quantity.zero(value.format)) + value
    sidecars: dict[str, Quantity] = {}
    init_peak: dict[str, Quantity] = {}
    for container in _objects(spec.get("initContainers")):
        own = quantities(_obj(container.get("resources")).get(kind))
        if _restartable(container):
            for name, value in own.items():
                sidecars[name] = sidecars.get(name, Quantity.zero(value.format)) + value
                total[name] = total.get(name, Quantity.zero(value.format)) + value
            need = dict(sidecars)
        else:
            need = dict(sidecars)
            for name, value in own.items():
                need[name] = need.get(name, Quantity.zero(value.format)) + value
        for name, value in need.items():
            if name not in init_peak or value > init_peak[name]:
                init_peak[name] = value
    for name, value in init_peak.items():
        if name not in total or value > total[name]:
            total[name] = value
    return total


def _supported(name: str) -> bool:
    """``IsSupportedPodLevelResource``: cpu, memory and hugepages."""
    return name in ("cpu", "memory") or name.startswith(_HUGEPAGES)


def _overcommittable(name: str) -> bool:
    """``IsOvercommitAllowed``: a native resource that is not hugepages."""
    native = "/" not in name or name.startswith("kubernetes.io/")
    return native and not name.startswith(_HUGEPAGES)


def _text(quantity: Quantity) -> str:
    return str(quantity)


def _default_hugepage_pod_limits(spec: JSONObject) -> None:
    resources = _obj(spec.get("resources"))
    if not resources.get("limits") and not resources.get("requests"):
        return
    limits = dict(_obj(resources.get("limits")))
    requests = _obj(resources.get("requests"))
    for name, value in aggregate(spec, "limits").items():
        if not name.startswith(_HUGEPAGES) or name in requests:
            continue
        limits.setdefault(name, _text(value))
    if limits:
        resources["limits"] = limits


def _default_pod_requests(spec: JSONObject) -> None:
    resources = _obj(spec.get("resources"))
    if not resources.get("limits"):
        return
    requests = dict(_obj(resources.get("requests")))
    for name, value in aggregate(spec, "requests").items():
        if name not in requests and _supported(name) and _overcommittable(name):
            requests[name] = _text(value)
    for name, value in _obj(resources.get("limits")).items():
        if name not in requests and _supported(name):
            requests[name] = value
    if requests:
        resources["requests"] = requests


def _default_pod_limits(spec: JSONObject) -> None:
    resources = _obj(spec.get("resources"))
    if resources.get("limits") or not resources.get("requests"):
        return
    limits: dict[str, Any] = {}
    containers = [*_objects(spec.get("containers")), *_objects(spec.get("initContainers"))]
    for name, value in aggregate(spec, "limits").items():
        if not _supported(name) or not _overcommittable(name):
            continue
        if all(name in _obj(_obj(c.get("resources")).get("limits")) for c in containers):
            limits[name] = _text(value)
    if limits:
        resources["limits"] = limits
