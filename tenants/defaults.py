"""A tenant's container defaults: the requests and limits filled where a container sets none.

As LimitRanger's ``mergeContainerResources`` (``plugin/pkg/admission/limitranger/admission.go``)
does with a LimitRange's ``default`` and ``defaultRequest``: a container without a limit for a
defaulted resource gets the default limit; one without a request gets the default request,
unless it sets a limit for it (the API server has already made that limit its request). A
resource set at pod level (``spec.resources``) is left alone, since pod-level values must
cover the containers'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from classifier import podview
from classifier.quantities import Quantity, format_list
from classifier.records import record
from classifier.types import JSONObject

__all__ = ["Filled", "apply_defaults", "describe_filled", "lacks_defaults"]


@record
class Filled:
    """What one container was given."""

    container: str
    requests: dict[str, Quantity]
    limits: dict[str, Quantity]


def _wanted(spec: Mapping[str, Any], defaults: Mapping[str, Quantity]) -> Mapping[str, Quantity]:
    """``defaults`` minus the resources set at pod level."""
    if not defaults:
        return {}
    pod_level = podview.obj(spec.get("resources"))
    if not pod_level:
        return defaults  # the usual pod: nothing set at pod level, every default wanted
    requests = podview.obj(pod_level.get("requests"))
    limits = podview.obj(pod_level.get("limits"))
    return {n: q for n, q in defaults.items() if n not in requests and n not in limits}


def _missing(
    container: Mapping[str, Any],
    requests_wanted: Mapping[str, Quantity],
    limits_wanted: Mapping[str, Quantity],
) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    resources = podview.obj(container.get("resources"))
    requests = podview.obj(resources.get("requests"))
    limits = podview.obj(resources.get("limits"))
    return (
        {n: q for n, q in requests_wanted.items() if n not in requests and n not in limits},
        {n: q for n, q in limits_wanted.items() if n not in limits},
    )


def apply_defaults(
    pod: JSONObject,
    *,
    requests: Mapping[str, Quantity],
    limits: Mapping[str, Quantity],
) -> list[Filled]:
    """Fill every container's missing defaults; writes copies into ``pod``, never shared trees.

    Returns what each changed container got, in pod order (init containers first).
    """
    if not requests and not limits:
        return []
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return []
    requests_wanted, limits_wanted = _wanted(spec, requests), _wanted(spec, limits)
    filled: list[Filled] = []
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not isinstance(items, list):
            continue
        new_items: list[Any] | None = None
        for index, container in enumerate(items):
            if not isinstance(container, dict):
                continue
            add_requests, add_limits = _missing(container, requests_wanted, limits_wanted)
            if not add_requests and not add_limits:
                continue
            resources = dict(podview.obj(container.get("resources")))
            for key, added in (("requests", add_requests), ("limits", add_limits)):
                if added:
                    merged = dict(podview.obj(resources.get(key)))
                    merged.update({name: str(amount) for name, amount in added.items()})
                    resources[key] = merged
            new_container = dict(container)
            new_container["resources"] = resources
            if new_items is None:
                new_items = list(items)
            new_items[index] = new_container
            name = podview.string(container.get("name")) or f"{field}[{index}]"
            filled.append(Filled(name, add_requests, add_limits))
        if new_items is not None:
            spec[field] = new_items
    return filled


def lacks_defaults(
    spec: Mapping[str, Any],
    *,
    requests: Mapping[str, Quantity],
    limits: Mapping[str, Quantity],
) -> bool:
    """Whether :func:`apply_defaults` would change a pod with this ``spec``."""
    requests_wanted, limits_wanted = _wanted(spec, requests), _wanted(spec, limits)
    if not requests_wanted and not limits_wanted:
        return False
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if not isinstance(items, list):
            continue
        for container in items:
            if isinstance(container, dict) and any(
                _missing(container, requests_wanted, limits_wanted)
            ):
                return True
    return False


def describe_filled(tenant: str, filled: list[Filled]) -> str:
    """The /mutate warning listing what was filled.

    Requests only (the only defaults before limits existed) keep their original wording:
    ``tenant team-a default requests applied: web cpu=100m,memory=128Mi``; with limits:
    ``tenant team-a container defaults applied: web requests cpu=100m, limits cpu=500m``.
    """
    if not any(item.limits for item in filled):
        containers = "; ".join(f"{item.container} {format_list(item.requests)}" for item in filled)
        return f"tenant {tenant} default requests applied: {containers}"
    parts = []
    for item in filled:
        given = []
        if item.requests:
            given.append(f"requests {format_list(item.requests)}")
        if item.limits:
            given.append(f"limits {format_list(item.limits)}")
        parts.append(f"{item.container} {', '.join(given)}")
    return f"tenant {tenant} container defaults applied: {'; '.join(parts)}"
