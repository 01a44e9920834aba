"""The ``LimitRanger`` admission plugin: container defaults from the namespace's LimitRanges,
then their minimums, maximums and limit/request ratios.

Follows ``plugin/pkg/admission/limitranger/admission.go``: pods only, on create only (an
update cannot change containers), never for subresources. The mutating half
(``PodMutateLimitFunc``) fills each container's and init container's missing limits from the
``Container`` items' ``default`` and missing requests from their ``defaultRequest``, and records
what it set in the ``kubernetes.io/limit-ranger`` annotation; the validating half
(``PodValidateLimitFunc``) checks ``min``, ``max`` and ``maxLimitRequestRatio`` per container
and per pod, and refuses with 403 Forbidden. LimitRange objects are defaulted as
``SetDefaults_LimitRangeItem`` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from classifier.quantities import Quantity, QuantityError
from devapi import errors
from devapi.errors import APIError, FieldError
from devapi.jsonvalues import obj as _obj
from devapi.jsonvalues import objects as _objects
from devapi.poddefaults import aggregate, quantities
from devapi.types import JSONObject

ANNOTATION = "kubernetes.io/limit-ranger"
LIMIT_TYPES = ("Container", "Pod", "PersistentVolumeClaim")
_MAX_MILLI_VALUE = (2**63 - 1) // 1000


def _items(limit_range: JSONObject) -> Iterator[JSONObject]:
    return _objects(_obj(limit_range.get("spec")).get("limits"))


def default_limit_range(obj: JSONObject) -> None:
    """``SetDefaults_LimitRangeItem``: for Container items, ``default`` from ``max``, then
    ``defaultRequest`` from ``default``, then from ``min``."""
    for item in _items(obj):
        if item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        if not isinstance(default, dict) or not isinstance(request, dict):
            continue
        for name, value in _obj(item.get("max")).items():
            default.setdefault(name, value)
        for name, value in default.items():
            request.setdefault(name, value)
        for name, value in _obj(item.get("min")).items():
            request.setdefault(name, value)


def validate_limit_range(obj: JSONObject) -> list[FieldError]:
    """The parts of ``ValidateLimitRange`` a test can trip over: the type, parsable values,
    and min <= max."""
    problems: list[FieldError] = []
    for i, item in enumerate(_items(obj)):
        path = f"spec.limits[{i}]"
        if item.get("type") not in LIMIT_TYPES:
            problems.append(errors.not_supported(f"{path}.type", item.get("type"), LIMIT_TYPES))
        parsed: dict[str, dict[str, Quantity]] = {}
        for field in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
            parsed[field] = {}
            for name, value in _obj(item.get(field)).items():
                try:
                    parsed[field][name] = Quantity.from_json(value)
                except QuantityError:
                    problems.append(
                        errors.invalid(f"{path}.{field}[{name}]", value, "must be a quantity")
                    )
        for name, low in sorted(parsed["min"].items()):
            high = parsed["max"].get(name)
            if high is not None and low > high:
                problems.append(
                    errors.invalid(
                        f"{path}.min[{name}]",
                        str(low),
                        f"min value {low} is greater than max value {high}",
                    )
                )
    return problems


def _container_lists(pod: JSONObject) -> Iterator[tuple[str, JSONObject]]:
    spec = _obj(pod.get("spec"))
    for container in _objects(spec.get("containers")):
        yield "container", container
    for container in _objects(spec.get("initContainers")):
        yield "init container", container


def mutate_pod(pod: JSONObject, limit_ranges: list[JSONObject]) -> None:
    """``PodMutateLimitFunc`` for every LimitRange of the namespace, in turn."""
    for limit_range in limit_ranges:
        defaults: dict[str, Any] = {}
        default_requests: dict[str, Any] = {}
        for item in _items(limit_range):
            if item.get("type") == "Container":
                default_requests.update(_obj(item.get("defaultRequest")))
                defaults.update(_obj(item.get("default")))
        notes: list[str] = []
        for noun, container in _container_lists(pod):
            resources = container.setdefault("resources", {})
            if not isinstance(resources, dict):
                continue
            limits = _obj(resources.get("limits"))
            requests = _obj(resources.get("requests"))
            set_limits = [n for n in defaults if n not in limits]
            set_requests = [n for n in default_requests if n not in requests]
            # The plugin leaves empty maps behind; they are omitted when the pod is encoded.
            if set_limits:
                resources["limits"] = {**limits, **{n: defaults[n] for n in set_limits}}
            if set_requests:
                resources["requests"] = {
                    **requests,
                    **{n: default_requests[n] for n in set_requests},
                }
            who = f"{noun} {container.get('name')}"
            if set_requests:
                notes.append(f"{', '.join(sorted(set_requests))} request for {who}")
            if set_limits:
                notes.append(f"{', '.join(sorted(set_limits))} limit for {who}")
        if notes:
            metadata = pod.setdefault("metadata", {})
            annotations = metadata.get("annotations")
            if not isinstance(annotations, dict):
                annotations = {}
                metadata["annotations"] = annotations
            annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _enforced_values(
    request: Quantity | None, limit: Quantity | None, enforced: Quantity
) -> tuple[int, int, int]:
    """``requestLimitEnforcedValues``: milli-units when nothing overflows, else units."""
    zero = Quantity.zero()
    req, lim = request or zero, limit or zero
    if max(req.value(), lim.value(), enforced.value()) <= _MAX_MILLI_VALUE:
        return req.milli_value(), lim.milli_value(), enforced.milli_value()
    return req.value(), lim.value(), enforced.value()


def _min(kind: str, name: str, enforced: Quantity, requests: Mapping[str, Quantity],
         limits: Mapping[str, Quantity]) -> str | None:  # fmt: skip
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, value = _enforced_values(req, lim, enforced)
    if req is None:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified"
    if observed_req < value:
        return f"minimum {name} usage per {kind} is {enforced}, but request is {req}"
    if lim is not None and observed_lim < value:
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {lim}"
    return None


def _max(kind: str, name: str, enforced: Quantity, requests: Mapping[str, Quantity],
         limits: Mapping[str, Quantity]) -> str | None:  # fmt: skip
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, value = _enforced_values(req, lim, enforced)
    if lim is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified"
    if observed_lim > value:
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {lim}"
    if req is not None and observed_req > value:
        return f"maximum {name} usage per {kind} is {enforced}, but request is {req}"
    return None


def _ratio(kind: str, name: str, enforced: Quantity, requests: Mapping[str, Quantity],
           limits: Mapping[str, Quantity]) -> str | None:  # fmt: skip
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, _ = _enforced_values(req, lim, enforced)
    if req is None or observed_req == 0:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but no request is "
            "specified or request is 0"
        )
    if lim is None or observed_lim == 0:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but no limit is "
            "specified or limit is 0"
        )
    observed = observed_lim / observed_req
    shown = observed
    maximum = float(enforced.value())
    if enforced.value() <= _MAX_MILLI_VALUE:
        observed *= 1000
        maximum = float(enforced.milli_value())
    if observed > maximum:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but provided ratio "
            f"is {shown:f}"
        )
    return None


def _pod_totals(pod: JSONObject, kind: str) -> dict[str, Quantity]:
    """``podRequests``/``podLimits``: the containers' aggregate (sidecars included, overhead
    excluded), overridden by pod-level cpu and memory."""
    spec = _obj(pod.get("spec"))
    total = aggregate(spec, kind)
    for name, value in quantities(_obj(spec.get("resources")).get(kind)).items():
        if name in ("cpu", "memory"):
            total[name] = value
    return total


_CHECKS = (("min", _min), ("max", _max), ("maxLimitRequestRatio", _ratio))


def validate_pod(pod: JSONObject, limit_range: JSONObject) -> list[str]:
    """``PodValidateLimitFunc`` for one LimitRange: what the pod violates, in its words."""
    problems: list[str] = []
    for item in _items(limit_range):
        kind = item.get("type")
        subjects: list[tuple[dict[str, Quantity], dict[str, Quantity]]] = []
        if kind == "Container":
            for _, container in _container_lists(pod):
                resources = _obj(container.get("resources"))
                subjects.append(
                    (quantities(resources.get("requests")), quantities(resources.get("limits")))
                )
        elif kind == "Pod":
            subjects.append((_pod_totals(pod, "requests"), _pod_totals(pod, "limits")))
        for requests, limits in subjects:
            for field, check in _CHECKS:
                for name, enforced in sorted(quantities(item.get(field)).items()):
                    problem = check(str(kind), name, enforced, requests, limits)
                    if problem is not None:
                        problems.append(problem)
    return problems


def check_pod(pod: JSONObject, limit_ranges: list[JSONObject]) -> None:
    """``runLimitFunc`` with ``ValidateLimit``: the first LimitRange the pod violates is
    answered ``admission.NewForbidden`` with that range's aggregate error."""
    for limit_range in limit_ranges:
        problems = validate_pod(pod, limit_range)
        if problems:
            raise forbidden(pod, problems)


def forbidden(pod: JSONObject, problems: list[str]) -> APIError:
    """``admission.NewForbidden`` with the plugin's aggregate error."""
    metadata = _obj(pod.get("metadata"))
    name = str(metadata.get("name") or metadata.get("generateName") or "Unknown")
    why = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    return errors.forbidden_request("", "pods", name, why)
