"""What one container and one pod of a tenant may ask for: bounds and required limits.

A tenant's ``bounds`` are LimitRange's ``Container`` and ``Pod`` items: ``min`` and ``max`` per
resource and ``maxLimitRequestRatio``. They are checked exactly as the LimitRanger admission
plugin checks them (``minConstraint``, ``maxConstraint``, ``limitRequestRatioConstraint`` and
``PodLimitFunc`` in ``plugin/pkg/admission/limitranger/admission.go``), on the pod as stored
(requests defaulted from limits, after tenantgate's container defaults):

* ``min``: the request must be set and at least ``min``, and the limit, when set, too;
* ``max``: the limit must be set and at most ``max``, and the request, when set, too;
* ``maxLimitRequestRatio``: request and limit set and non-zero, limit / request at most it.

Containers and init containers are checked one by one; the pod level uses LimitRanger's pod
aggregates (``classifier.limits.limit_range_pod_resources``). Values are compared in
milli-units, rounded up, as upstream's ``requestLimitEnforcedValues``.

A quota on ``limits.cpu`` or ``limits.memory`` requires every container to set that limit
(ResourceQuota's ``Constraints``, ``pkg/quota/v1/evaluator/core/pods.go``):
:func:`missing_limits` says which do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from classifier import podview
from classifier.limits import container_missing_limits, limit_range_pod_resources
from classifier.quantities import Quantity
from classifier.resources import container_limits, container_requests

__all__ = [
    "Bounds",
    "BoundsLevel",
    "bounds_violations",
    "missing_limits",
]

# resource.MaxMilliValue: beyond it upstream compares whole units instead of milli-units.
_MAX_MILLI_VALUE: Final = (2**63 - 1) // 1000
# ResourceQuota's validationSet, limits half: only these limits are required of containers.
_REQUIRED_LIMITS: Final = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class BoundsLevel:
    """One level (container or pod) of a tenant's bounds."""

    min: Mapping[str, Quantity] = field(default_factory=dict)
    max: Mapping[str, Quantity] = field(default_factory=dict)
    ratio: Mapping[str, Quantity] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.min or self.max or self.ratio)


@dataclass(frozen=True, slots=True)
class Bounds:
    """A tenant's bounds; a level without any entry is None."""

    container: BoundsLevel | None = None
    pod: BoundsLevel | None = None


def _enforced(*quantities: Quantity) -> tuple[int, ...]:
    # requestLimitEnforcedValues: milli-values (rounded up) when none overflows, else values.
    values = tuple(q.value() for q in quantities)
    if all(v <= _MAX_MILLI_VALUE for v in values):
        return tuple(q.milli_value() for q in quantities)
    return values


def _ratio_text(limit: int, request: int) -> str:
    ratio = Fraction(limit, request)
    if ratio.denominator == 1:
        return str(ratio.numerator)
    return f"{float(ratio):.2f}".rstrip("0").rstrip(".")


def _level_violations(
    level: BoundsLevel,
    requests: Mapping[str, Quantity],
    limits: Mapping[str, Quantity],
    *,
    where: str,
) -> list[tuple[str, str]]:
    """Every bound of ``level`` the (requests, limits) break: (what, which bound)."""
    found: list[tuple[str, str]] = []
    zero = Quantity(0)
    for name in sorted(level.min):
        bound = level.min[name]
        request, limit = requests.get(name), limits.get(name)
        if request is None:
            found.append(
                (f"{name} request is not set; the tenant's minimum is {bound}", f"{where}.min")
            )
            continue
        req, lim, enf = _enforced(request, limit or zero, bound)
        if req < enf:
            found.append(
                (f"{name} request {request} is below the tenant's minimum {bound}", f"{where}.min")
            )
        elif limit is not None and lim < enf:
            found.append(
                (f"{name} limit {limit} is below the tenant's minimum {bound}", f"{where}.min")
            )
    for name in sorted(level.max):
        bound = level.max[name]
        request, limit = requests.get(name), limits.get(name)
        if limit is None:
            found.append(
                (f"{name} limit is not set; the tenant's maximum is {bound}", f"{where}.max")
            )
            continue
        req, lim, enf = _enforced(request or zero, limit, bound)
        if lim > enf:
            found.append(
                (f"{name} limit {limit} is above the tenant's maximum {bound}", f"{where}.max")
            )
        elif request is not None and req > enf:
            found.append(
                (f"{name} request {request} is above the tenant's maximum {bound}", f"{where}.max")
            )
    for name in sorted(level.ratio):
        bound = level.ratio[name]
        request, limit = requests.get(name), limits.get(name)
        req, lim, _ = _enforced(request or zero, limit or zero, bound)
        source = f"{where}.maxLimitRequestRatio"
        if request is None or req == 0:
            found.append(
                (
                    f"{name} request is not set or zero; the tenant's maximum "
                    f"limit-to-request ratio is {bound}",
                    source,
                )
            )
        elif limit is None or lim == 0:
            found.append(
                (
                    f"{name} limit is not set or zero; the tenant's maximum "
                    f"limit-to-request ratio is {bound}",
                    source,
                )
            )
        else:
            enforced = bound.milli_value() if bound.value() <= _MAX_MILLI_VALUE else None
            over = (
                lim * 1000 > enforced * req
                if enforced is not None
                else Fraction(lim, req) > bound.value()
            )
            if over:
                found.append(
                    (
                        f"{name} limit {limit} is {_ratio_text(lim, req)} times its request "
                        f"{request}, above the tenant's maximum ratio {bound}",
                        source,
                    )
                )
    return found


def bounds_violations(
    pod: Mapping[str, Any], bounds: Bounds, *, tenant: str, pod_name: str
) -> list[str]:
    """Every bound the pod breaks, one sentence each, in container then resource order.

    ``container web in pod team-a/web-1: memory limit 8Gi is above the tenant's maximum 4Gi
    (tenant team-a, bounds.container.max)``. Raises ``PodResourceError`` for an invalid
    quantity.
    """
    found: list[str] = []
    level = bounds.container
    if level is not None:
        spec = podview.spec(pod)
        for field_name in ("containers", "initContainers"):
            items = spec.get(field_name)
            if not isinstance(items, list):
                continue
            for index, container in enumerate(items):
                if not isinstance(container, dict):
                    continue
                path = f"spec.{field_name}[{index}]"
                name = podview.string(container.get("name")) or f"{field_name}[{index}]"
                kind = "init container" if field_name == "initContainers" else "container"
                found.extend(
                    f"{kind} {name} in pod {pod_name}: {text} (tenant {tenant}, {source})"
                    for text, source in _level_violations(
                        level,
                        container_requests(container, path=path),
                        container_limits(container, path=path),
                        where="bounds.container",
                    )
                )
    level = bounds.pod
    if level is not None:
        requests, limits = limit_range_pod_resources(pod)
        found.extend(
            f"pod {pod_name}: {text} (tenant {tenant}, {source})"
            for text, source in _level_violations(level, requests, limits, where="bounds.pod")
        )
    return found


def _pod_level_set(pod: Mapping[str, Any]) -> bool:
    """IsPodLevelResourcesSet: cpu, memory or hugepages-* requested or limited at pod level."""
    level = podview.obj(podview.spec(pod).get("resources"))
    names = (*podview.obj(level.get("requests")), *podview.obj(level.get("limits")))
    return any(n in ("cpu", "memory") or str(n).startswith("hugepages-") for n in names)


def missing_limits(
    pod: Mapping[str, Any], capped: tuple[str, ...], *, tenant: str, pod_name: str
) -> str | None:
    """The denial for containers without a limit the tenant's quota caps, or None.

    ``capped`` are the plain names of the tenant's ``limits.*`` quotas. Only cpu and memory
    are required, as in ResourceQuota; an unlimited ephemeral-storage simply counts nothing.
    """
    required = tuple(name for name in _REQUIRED_LIMITS if name in capped)
    if not required or _pod_level_set(pod):
        # With pod-level resources set the containers need not set their own (Constraints
        # skips them then: TestPodConstraintsFunc, pod-level case, in pods_test.go).
        return None
    missing = container_missing_limits(pod, required)
    if not missing:
        return None
    # As upstream: resources and container names sorted (sets.String.List).
    parts = "; ".join(
        f"limits.{name} for: {','.join(sorted(set(missing[name])))}" for name in sorted(missing)
    )
    return (
        f"pod {pod_name}: must specify {parts} "
        f"(tenant {tenant} caps {', '.join(f'limits.{n}' for n in sorted(missing))})"
    )
