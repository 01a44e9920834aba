"""A pod's effective resource request, computed exactly as Kubernetes computes it.

Mirrors ``PodRequests`` in ``k8s.io/component-helpers/resource/helpers.go`` (used by the
scheduler, the kubelet and the ResourceQuota evaluator), applied to the pod as the API server
stores it: the defaulting of ``pkg/apis/core/v1/defaults.go`` is replayed first, so a raw
manifest (``tenantgate review``) and the already-defaulted object an admission webhook receives
give the same answer. That defaulting is:

* a container's request for a resource defaults to its limit when only the limit is set;
* every quantity is rounded up to milli precision (``SetDefaults_ResourceList``);
* pod-level ``spec.resources`` (PodLevelResources) fills its missing requests from the
  containers and from its own limits (``defaultHugePagePodLimits``, ``defaultPodRequests``).

By default the spec is read, never the status: this answers "what does this pod ask for", as a
create needs. ``use_status=True`` answers "what does this pod hold" after an in-place resize,
as the ResourceQuota evaluator and the scheduler charge a running pod (``PodRequests`` with
``UseStatusResources``, Kubernetes 1.33, ``determineContainerReqs``): for each app container
and sidecar whose status reports ``resources``, the largest of its spec request, its
``allocatedResources`` and its actual ``resources.requests``; while the resize is Infeasible
(pod condition ``PodResizePending`` with reason ``Infeasible``), only the largest of the
allocated and actual ones, since the spec will not be applied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from classifier import podview
from classifier.quantities import Quantity, QuantityError, field_path, from_nanos

logger = logging.getLogger(__name__)

__all__ = [
    "PodResourceError",
    "container_limits",
    "container_requests",
    "pod_requests",
]

# Resources that pod-level ``spec.resources`` may set (IsSupportedPodLevelResource).
_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
_HUGEPAGES_PREFIX = "hugepages-"
# Supported at pod level and overcommittable (not hugepages): the only resources whose pod-level
# request defaults from the containers' aggregate request.
_POD_LEVEL_OVERCOMMITTABLE = _POD_LEVEL_RESOURCES
_MILLI_IN_NANOS = 1_000_000
_ONE_POD = Quantity.from_int(1)


class PodResourceError(QuantityError):
    """An invalid quantity in a pod; ``path`` is its field path (``spec.containers[1]...``)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class _Container(NamedTuple):
    # A named tuple, not a dataclass: one is built per container per read, on the admission path.
    # As stored: requests defaulted from limits, then every value rounded up to milli.
    requests: dict[str, Quantity]
    limits: dict[str, Quantity]
    # As written: pod-level defaulting aggregates these, since it runs before the rounding.
    raw_requests: dict[str, Quantity]
    raw_limits: dict[str, Quantity]
    restartable: bool  # an init container with restartPolicy: Always (a native sidecar)


def pod_requests(pod: Mapping[str, Any], *, use_status: bool = False) -> dict[str, Quantity]:
    """The pod's effective request per resource, plus ``pods: 1``.

    Every resource name is kept (cpu, memory, ephemeral-storage, hugepages-*, extended
    resources), including explicit zeros, as Kubernetes does. Accepts a Pod or a pod template
    (anything with a ``spec``). Raises ``PodResourceError`` naming the field of an invalid
    quantity. ``use_status`` also reads the containers' status after an in-place resize (see
    the module docstring).
    """
    spec = podview.spec(pod)
    containers, init_containers = _read_pod_containers(pod, spec, use_status=use_status)

    result = _aggregate(containers, init_containers, limits=False, raw=False)

    pod_level = podview.obj(spec.get("resources"))
    if pod_level:
        result.update(_pod_level_requests(pod_level, containers, init_containers))

    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        for name, quantity in _round_list(_parse(overhead, "spec.overhead")).items():
            current = result.get(name)
            result[name] = quantity if current is None else current + quantity

    result["pods"] = _ONE_POD
    return result


def container_requests(
    container: Mapping[str, Any], *, path: str = "container"
) -> dict[str, Quantity]:
    """One container's requests as the API server stores them (limits fill in, milli-rounded)."""
    return _read_container(container, path).requests


def container_limits(
    container: Mapping[str, Any], *, path: str = "container"
) -> dict[str, Quantity]:
    """One container's limits, milli-rounded."""
    return _read_container(container, path).limits


# -- reading ----------------------------------------------------------------------------------


def _read_containers(spec: Mapping[str, Any], field: str) -> list[_Container]:
    items = spec.get(field)
    if not isinstance(items, list):
        return []
    # Indexes count every list item, so an error path points at the right element even when
    # a malformed entry is skipped.
    return [
        _read_container(item, f"spec.{field}[{index}]")
        for index, item in enumerate(items)
        if isinstance(item, dict)
    ]


def _read_container(container: Mapping[str, Any], path: str) -> _Container:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return _Container({}, {}, {}, {}, container.get("restartPolicy") == "Always")
    requests = _parse(resources.get("requests"), path, ".resources.requests")
    limits = _parse(resources.get("limits"), path, ".resources.limits")
    for name, limit in limits.items():
        requests.setdefault(name, limit)
    return _Container(
        _round_list(requests),
        _round_list(limits),
        requests,
        limits,
        container.get("restartPolicy") == "Always",
    )


def _parse(value: object, where: str, field: str = "") -> dict[str, Quantity]:
    """A JSON resource list; anything but an object reads as empty, like other podview reads.

    An error names ``where + field``; the path is only built then.
    """
    if not isinstance(value, dict):
        return {}
    from_json = Quantity.from_json
    result: dict[str, Quantity] = {}
    for name, raw in value.items():
        try:
            result[name] = from_json(raw)
        except QuantityError as exc:
            path = field_path(where + field, str(name))
            raise PodResourceError(f"{path}: {exc}", path=path) from exc
    return result


# -- status after an in-place resize (helpers.go, UseStatusResources) -------------------------


def _resize_infeasible(status: Mapping[str, Any]) -> bool:
    """IsPodResizeInfeasible: the first ``PodResizePending`` condition has reason Infeasible."""
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, dict) and condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def _container_names(spec: Mapping[str, Any], field: str) -> list[Any]:
    items = spec.get(field)
    if not isinstance(items, list):
        return []
    return [item.get("name") for item in items if isinstance(item, dict)]


def _read_pod_containers(
    pod: Mapping[str, Any], spec: Mapping[str, Any], *, use_status: bool
) -> tuple[list[_Container], list[_Container]]:
    """The pod's app and init containers, with what their status says they hold if asked."""
    containers = _read_containers(spec, "containers")
    init_containers = _read_containers(spec, "initContainers")
    if use_status:
        status = podview.obj(pod.get("status"))
        if status.get("containerStatuses") or status.get("initContainerStatuses"):
            return _with_status(spec, status, containers, init_containers)
    return containers, init_containers


def _with_status(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    containers: list[_Container],
    init_containers: list[_Container],
) -> tuple[list[_Container], list[_Container]]:
    """The containers with the requests and limits their status makes them hold
    (determineContainerReqs, determineContainerLimits).

    Only app containers and sidecars are read from their status, and only when it has
    ``resources`` (a kubelet that reports them); regular init containers keep their spec.
    Limits: the larger of the spec's and the actual ones; while Infeasible, the actual ones.
    """
    statuses: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for field in ("containerStatuses", "initContainerStatuses"):
        items = status.get(field)
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                statuses[item["name"]] = (f"status.{field}[{index}]", item)
    if not statuses:
        return containers, init_containers
    infeasible = _resize_infeasible(status)

    def held(container: _Container, name: Any) -> _Container:
        found = statuses.get(name) if isinstance(name, str) else None
        if found is None or found[1].get("resources") is None:
            return container
        where, item = found
        applied = podview.obj(item.get("resources"))
        actual = _parse(applied.get("requests"), where, ".resources.requests")
        allocated = _parse(item.get("allocatedResources"), where, ".allocatedResources")
        requests: dict[str, Quantity] = {} if infeasible else dict(container.requests)
        _max_into(requests, actual)
        _max_into(requests, allocated)
        limits: dict[str, Quantity] = {} if infeasible else dict(container.limits)
        _max_into(limits, _parse(applied.get("limits"), where, ".resources.limits"))
        return container._replace(requests=requests, limits=limits)

    return (
        [held(c, n) for c, n in zip(containers, _container_names(spec, "containers"), strict=True)],
        [
            held(c, n) if c.restartable else c
            for c, n in zip(init_containers, _container_names(spec, "initContainers"), strict=True)
        ],
    )


# -- aggregation (helpers.go) -----------------------------------------------------------------


def _aggregate(
    containers: list[_Container], init_containers: list[_Container], *, limits: bool, raw: bool
) -> dict[str, Quantity]:
    """aggregateContainerResourcesByFn: the running phase versus every init phase.

    The running phase needs every app container plus every sidecar. Init container ``i``
    runs next to the sidecars started before it, so its phase needs its own resources plus
    theirs; a sidecar's own start is the phase "all sidecars so far". The pod needs the
    largest of these, per resource.
    """
    result: dict[str, Quantity] = {}
    for container in containers:
        _add_into(result, _resources_of(container, limits=limits, raw=raw))

    sidecars: dict[str, Quantity] = {}
    init_peak: dict[str, Quantity] = {}
    for container in init_containers:
        own = _resources_of(container, limits=limits, raw=raw)
        if container.restartable:
            _add_into(result, own)
            _add_into(sidecars, own)
            phase = sidecars
        else:
            phase = {}
            _add_into(phase, own)
            _add_into(phase, sidecars)
        _max_into(init_peak, phase)
    _max_into(result, init_peak)
    return result


def _resources_of(container: _Container, *, limits: bool, raw: bool) -> dict[str, Quantity]:
    if limits:
        return container.raw_limits if raw else container.limits
    return container.raw_requests if raw else container.requests


def _add_into(target: dict[str, Quantity], other: Mapping[str, Quantity]) -> None:
    for name, quantity in other.items():
        current = target.get(name)
        target[name] = quantity if current is None else current + quantity


def _max_into(target: dict[str, Quantity], other: Mapping[str, Quantity]) -> None:
    # maxResourceList: on a tie the value already in target stays (it decides the format).
    for name, quantity in other.items():
        current = target.get(name)
        if current is None or quantity > current:
            target[name] = quantity


# -- pod-level resources (PodLevelResources) --------------------------------------------------


def _is_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX)


def _pod_level_requests(
    pod_level: Mapping[str, Any],
    containers: list[_Container],
    init_containers: list[_Container],
) -> dict[str, Quantity]:
    """The pod-level requests that replace the container aggregate, after API defaulting.

    Empty unless a supported resource (cpu, memory, hugepages-*) ends up requested at pod level
    (IsPodLevelRequestsSet); otherwise only those resources, never others.
    """
    requests = _parse(pod_level.get("requests"), "spec.resources.requests")
    limits = _parse(pod_level.get("limits"), "spec.resources.limits")

    # defaultHugePagePodLimits, then defaultPodRequests. Both work on the values before they
    # are rounded to milli precision, as the defaulters run first.
    if requests or limits:
        container_limits_total = _aggregate(containers, init_containers, limits=True, raw=True)
        for name, quantity in container_limits_total.items():
            if name.startswith(_HUGEPAGES_PREFIX) and name not in requests and name not in limits:
                limits[name] = quantity
    if limits:
        container_requests_total = _aggregate(containers, init_containers, limits=False, raw=True)
        for name, quantity in container_requests_total.items():
            if name in _POD_LEVEL_OVERCOMMITTABLE and name not in requests:
                requests[name] = quantity
        for name, quantity in limits.items():
            if _is_pod_level_resource(name) and name not in requests:
                requests[name] = quantity

    supported = {n: q for n, q in requests.items() if _is_pod_level_resource(n)}
    return _round_list(supported)


# -- rounding (SetDefaults_ResourceList) ------------------------------------------------------


def _round_list(resources: dict[str, Quantity]) -> dict[str, Quantity]:
    """``resources`` rounded up to milli; the same dict when nothing needs rounding (the norm).

    Callers treat the result as read-only, so sharing it with the input is safe.
    """
    for quantity in resources.values():
        if quantity.nanos % _MILLI_IN_NANOS:
            return {name: _round_up_milli(q) for name, q in resources.items()}
    return resources


def _round_up_milli(quantity: Quantity) -> Quantity:
    # Quantity.RoundUp(-3): away from zero, format kept.
    nanos = quantity.nanos
    remainder = abs(nanos) % _MILLI_IN_NANOS
    if remainder == 0:
        return quantity
    step = _MILLI_IN_NANOS - remainder
    return from_nanos(nanos + step if nanos > 0 else nanos - step, quantity.format)
