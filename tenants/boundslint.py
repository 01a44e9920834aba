"""``tenantgate lint`` checks of container defaults, bounds and limits quotas.

Errors: bounds that contradict the quota or each other, so that pods would surely be denied (a
container or pod minimum above the guarantee, a default outside [min, max], a default limit
below its default request or too many times it, a ``maxLimitRequestRatio`` below 1). Warnings:
a tenant that caps ``limits.cpu`` or ``limits.memory`` without a default limit for it, since
its pods' containers must then all set that limit themselves or be denied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from classifier.quantities import Quantity
from tenants.config import BoundsLevelSpec, PolicyProblem, TenantgateConfig, TenantSpec, field_path

__all__ = ["bounds_problems", "limits_warnings"]

_ONE = Quantity.from_int(1)
# The limits a limits quota requires of every container (ResourceQuota's validationSet).
_REQUIRED_LIMITS = ("cpu", "memory")


def bounds_problems(config: TenantgateConfig) -> list[PolicyProblem]:
    """Every contradiction between a tenant's quota, container defaults and bounds."""
    problems: list[PolicyProblem] = []
    for name, tenant in config.tenants.items():
        problems.extend(_tenant_problems(name, tenant))
    return problems


def _tenant_problems(name: str, tenant: TenantSpec) -> Iterable[PolicyProblem]:
    where = ("tenants", name)
    bounds = tenant.bounds
    container = bounds.container if bounds is not None else None
    pod = bounds.pod if bounds is not None else None
    guaranteed = tenant.quota.guaranteed
    for level_name, level in (("container", container), ("pod", pod)):
        if level is None:
            continue
        for resource, minimum in sorted(level.min.items()):
            share = guaranteed.get(resource)
            if share is not None and minimum > share:
                yield PolicyProblem(
                    field_path(*where, "bounds", level_name, "min", resource),
                    f"{level_name} minimum {resource}={minimum} is above the tenant's guarantee "
                    f"{resource}={share}: no pod could be admitted",
                )
            maximum = level.max.get(resource)
            if maximum is not None and minimum > maximum:
                yield PolicyProblem(
                    field_path(*where, "bounds", level_name, "min", resource),
                    f"{level_name} minimum {resource}={minimum} is above its maximum {maximum}",
                )
        for resource, ratio in sorted(level.maxLimitRequestRatio.items()):
            if ratio < _ONE:
                yield PolicyProblem(
                    field_path(*where, "bounds", level_name, "maxLimitRequestRatio", resource),
                    f"maxLimitRequestRatio {resource}={ratio} is below 1: a limit is never "
                    "below its request, so every pod would be denied",
                )
    defaults = tenant.containerDefaults
    if defaults is None:
        return
    for kind, values in (("requests", defaults.requests), ("limits", defaults.limits)):
        for resource, amount in sorted(values.items()):
            yield from _outside(where, kind, resource, amount, container)
    for resource, limit in sorted(defaults.limits.items()):
        request = defaults.requests.get(resource)
        if request is None:
            continue
        path = field_path(*where, "containerDefaults", "limits", resource)
        if limit < request:
            yield PolicyProblem(
                path,
                f"default limit {resource}={limit} is below the default request {request}",
            )
            continue
        bound = container.maxLimitRequestRatio.get(resource) if container is not None else None
        if bound is not None and request.nanos > 0:
            times = Fraction(limit.nanos, request.nanos)
            if times > Fraction(bound.nanos, 10**9):
                yield PolicyProblem(
                    path,
                    f"default limit {resource}={limit} is {float(times):g} times the default "
                    f"request {request}, above bounds.container.maxLimitRequestRatio "
                    f"{resource}={bound}: defaulted containers would be denied",
                )


def _outside(
    where: tuple[str, str],
    kind: str,
    resource: str,
    amount: Quantity,
    container: BoundsLevelSpec | None,
) -> Iterable[PolicyProblem]:
    if container is None:
        return
    noun = "request" if kind == "requests" else "limit"
    path = field_path(*where, "containerDefaults", kind, resource)
    minimum = container.min.get(resource)
    maximum = container.max.get(resource)
    if minimum is not None and amount < minimum:
        yield PolicyProblem(
            path,
            f"default {noun} {resource}={amount} is below bounds.container.min "
            f"{resource}={minimum}: defaulted containers would be denied",
        )
    if maximum is not None and amount > maximum:
        yield PolicyProblem(
            path,
            f"default {noun} {resource}={amount} is above bounds.container.max "
            f"{resource}={maximum}: defaulted containers would be denied",
        )


def limits_warnings(config: TenantgateConfig) -> list[PolicyProblem]:
    """Tenants capping ``limits.cpu``/``limits.memory`` without a default limit for it."""
    warnings: list[PolicyProblem] = []
    for name, tenant in config.tenants.items():
        defaults = tenant.containerDefaults.limits if tenant.containerDefaults else {}
        quota = tenant.quota
        capped: Mapping[str, Quantity] = {
            **(quota.burst.max if quota.burst is not None else {}),
            **quota.guaranteed,
        }
        for resource in _REQUIRED_LIMITS:
            key = f"limits.{resource}"
            if key in capped and resource not in defaults:
                section = "guaranteed" if key in quota.guaranteed else "burst.max"
                warnings.append(
                    PolicyProblem(
                        field_path("tenants", name, "quota", *section.split("."), key),
                        f"the quota caps {key} but containerDefaults.limits has no {resource}: "
                        f"pods with a container without a {resource} limit will be denied",
                    )
                )
    return warnings
