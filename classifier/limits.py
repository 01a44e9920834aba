"""A pod's effective limits, and the quota usage (requests plus ``limits.*``) it is charged.

``pod_limits`` mirrors ``PodLimits`` in ``k8s.io/component-helpers/resource/helpers.go``: the
containers' limits aggregated like requests (app containers and sidecars add up, each init
container runs next to the sidecars started before it, the pod needs the largest phase), then
pod-level ``spec.resources.limits`` (PodLevelResources) replacing cpu, memory and hugepages-*,
then ``overhead`` added to every non-zero limit. A resource some container does not limit is
simply the sum of those that do, as upstream.

``pod_usage`` is what ResourceQuota's pod evaluator charges (``podComputeUsageHelper`` in
``pkg/quota/v1/evaluator/core/pods.go``), in tenantgate's names: a request keeps its plain name
(``cpu``, ``memory``, ``nvidia.com/gpu``, ``pods``), as the ledger has always counted it, and a
limit of cpu, memory or ephemeral-storage is charged as ``limits.<name>``. Extended resources
and hugepages have no ``limits.`` usage in Kubernetes (they cannot be overcommitted: the limit
is the request), so none is charged here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from classifier import podview
from classifier.quantities import Quantity

# The resource helpers' own reading and aggregation, so that limits are read exactly as
# requests are (same defaulting, rounding and error paths); they stay private to the package.
from classifier.resources import (
    _aggregate,
    _is_pod_level_resource,
    _parse,
    _pod_level_requests,
    _read_containers,
    _read_pod_containers,
    _round_list,
    pod_requests,
)

__all__ = [
    "LIMITED_RESOURCES",
    "LIMITS_PREFIX",
    "container_missing_limits",
    "limit_range_pod_resources",
    "pod_limit_usage",
    "pod_limits",
    "pod_usage",
]

LIMITS_PREFIX: Final = "limits."
# The resources whose limits a ResourceQuota can cap (ResourceLimitsCPU, ...Memory,
# ...EphemeralStorage in pods.go); no other ``limits.`` name is ever charged.
LIMITED_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")


def pod_limits(pod: Mapping[str, Any], *, use_status: bool = False) -> dict[str, Quantity]:
    """The pod's effective limit per resource (PodLimits), milli-rounded as stored.

    Raises ``PodResourceError`` naming the field of an invalid quantity. ``use_status`` also
    reads the containers' actual limits after an in-place resize (UseStatusResources, as
    :func:`classifier.resources.pod_requests`).
    """
    spec = podview.spec(pod)
    containers, init_containers = _read_pod_containers(pod, spec, use_status=use_status)
    result = _aggregate(containers, init_containers, limits=True, raw=False)

    pod_level = podview.obj(spec.get("resources"))
    if pod_level:
        requests = _parse(pod_level.get("requests"), "spec.resources.requests")
        limits = _parse(pod_level.get("limits"), "spec.resources.limits")
        # IsPodLevelResourcesSet: a supported resource requested or limited at pod level.
        if any(_is_pod_level_resource(name) for name in (*requests, *limits)):
            result.update(
                _round_list({n: q for n, q in limits.items() if _is_pod_level_resource(n)})
            )

    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        for name, quantity in _round_list(_parse(overhead, "spec.overhead")).items():
            current = result.get(name)
            # Overhead is added to non-zero limits only: an unlimited resource stays unlimited.
            if current is not None and current.nanos != 0:
                result[name] = current + quantity
    return result


def pod_limit_usage(pod: Mapping[str, Any], *, use_status: bool = False) -> dict[str, Quantity]:
    """The ``limits.<name>`` part of the pod's quota usage (empty for a pod without limits)."""
    limits = pod_limits(pod, use_status=use_status)
    return {LIMITS_PREFIX + name: limits[name] for name in LIMITED_RESOURCES if name in limits}


def pod_usage(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    """Everything the pod is charged: :func:`pod_requests` plus :func:`pod_limit_usage`."""
    usage = pod_requests(pod)
    usage.update(pod_limit_usage(pod))
    return usage


def container_missing_limits(
    pod: Mapping[str, Any], resources: tuple[str, ...]
) -> dict[str, list[str]]:
    """For each of ``resources``, the containers (init containers too) that do not limit it.

    ResourceQuota's ``Constraints`` (``enforcePodContainerConstraints`` in pods.go): a quota on
    ``limits.cpu`` or ``limits.memory`` requires every container to set that limit.
    """
    spec = podview.spec(pod)
    missing: dict[str, list[str]] = {}
    for field in ("containers", "initContainers"):
        items = spec.get(field)
        if not isinstance(items, list):
            continue
        for index, container in enumerate(items):
            if not isinstance(container, dict):
                continue
            limits = podview.obj(podview.obj(container.get("resources")).get("limits"))
            for name in resources:
                if name not in limits:
                    label = podview.string(container.get("name")) or f"{field}[{index}]"
                    missing.setdefault(name, []).append(label)
    return missing


# LimitRanger overrides the aggregate with pod-level values of these only
# (isSupportedPodLevelResource in plugin/pkg/admission/limitranger/admission.go).
_LIMIT_RANGER_POD_LEVEL: Final = frozenset({"cpu", "memory"})


def limit_range_pod_resources(
    pod: Mapping[str, Any],
) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    """The pod's (requests, limits) as LimitRanger's ``podRequests``/``podLimits`` see them.

    ``plugin/pkg/admission/limitranger/admission.go``: the containers aggregated with the
    sidecar rule, of the stored (defaulted) pod, without overhead, then pod-level cpu and
    memory replacing the aggregate. No ``pods`` entry.
    """
    spec = podview.spec(pod)
    containers = _read_containers(spec, "containers")
    init_containers = _read_containers(spec, "initContainers")
    requests = _aggregate(containers, init_containers, limits=False, raw=False)
    limits = _aggregate(containers, init_containers, limits=True, raw=False)
    pod_level = podview.obj(spec.get("resources"))
    if pod_level:
        level_requests = _pod_level_requests(pod_level, containers, init_containers)
        level_limits = _round_list(_parse(pod_level.get("limits"), "spec.resources.limits"))
        for name in _LIMIT_RANGER_POD_LEVEL:
            if name in level_requests:
                requests[name] = level_requests[name]
            if name in level_limits:
                limits[name] = level_limits[name]
    return requests, limits
