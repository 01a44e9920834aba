"""The ``RuntimeClass`` admission plugin and the ``node.k8s.io/v1`` RuntimeClass objects.

Follows ``plugin/pkg/admission/runtimeclass/admission.go``, pods on create only, never for
subresources. The mutating half (``Admit``) sets ``spec.overhead`` from the class's
``overhead.podFixed`` (``setOverhead``: a pod that already carries a different overhead is
refused) and merges the class's ``scheduling`` into the node selector and tolerations
(``setScheduling``); the validating half (``Validate``, ``validateOverhead``), after the
mutating webhooks, refuses a pod whose overhead no longer matches its class, or that has an
overhead without a class that defines one. An unknown class is refused. Each refusal is
``admission.NewForbidden``: 403.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from classifier.quantities import Quantity, QuantityError
from devapi import errors, meta
from devapi.errors import APIError, FieldError
from devapi.jsonvalues import obj as _obj
from devapi.types import JSONObject

ClassLookup = Callable[[str], JSONObject | None]

OVERHEAD_MISMATCH = "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
OVERHEAD_WITHOUT_CLASS = (
    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
)


def _subject(pod: JSONObject) -> str:
    metadata = _obj(pod.get("metadata"))
    return str(metadata.get("name") or metadata.get("generateName") or "Unknown")


def _forbidden(pod: JSONObject, why: str) -> APIError:
    return errors.forbidden_request("", "pods", _subject(pod), why)


def _runtime_class(pod: JSONObject, lookup: ClassLookup) -> JSONObject | None:
    name = _obj(pod.get("spec")).get("runtimeClassName")
    if not name:
        return None
    found = lookup(str(name))
    if found is None:
        raise _forbidden(pod, f'pod rejected: RuntimeClass "{name}" not found')
    return found


def _same_resources(a: Any, b: Any) -> bool:
    """``equality.Semantic.DeepEqual`` of two resource lists (empty == missing)."""
    left, right = _obj(a), _obj(b)
    if left.keys() != right.keys():
        return False
    try:
        return all(Quantity.from_json(left[k]) == Quantity.from_json(right[k]) for k in left)
    except QuantityError:
        return left == right


def admit(pod: JSONObject, lookup: ClassLookup) -> None:
    """``Admit``: overhead and scheduling from the pod's RuntimeClass."""
    runtime_class = _runtime_class(pod, lookup)
    if runtime_class is None:
        return
    spec = pod.setdefault("spec", {})
    fixed = _obj(runtime_class.get("overhead")).get("podFixed")
    if isinstance(fixed, dict):
        if spec.get("overhead") and not _same_resources(fixed, spec.get("overhead")):
            raise _forbidden(pod, OVERHEAD_MISMATCH)
        spec["overhead"] = dict(fixed)
    scheduling = runtime_class.get("scheduling")
    if not isinstance(scheduling, dict):
        return
    wanted = _obj(scheduling.get("nodeSelector"))
    selector = spec.get("nodeSelector")
    if not isinstance(selector, dict):
        selector = dict(wanted)
    else:
        for key, value in wanted.items():
            if key in selector and selector[key] != value:
                raise _forbidden(
                    pod,
                    f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                    f"pod.spec.nodeSelector[{key}] = {selector[key]}",
                )
            selector[key] = value
    if selector:
        spec["nodeSelector"] = selector
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    for toleration in scheduling.get("tolerations") or []:
        # util/tolerations.MergeTolerations: added unless an existing one already covers it.
        if isinstance(toleration, dict) and not any(
            _covers(existing, toleration) for existing in tolerations
        ):
            tolerations.append(toleration)
    if tolerations:
        spec["tolerations"] = tolerations


def _covers(existing: JSONObject, toleration: JSONObject) -> bool:
    """``isSuperset``: ``existing`` tolerates at least what ``toleration`` does."""
    if existing == toleration:
        return True
    if existing.get("key") and existing.get("key") != toleration.get("key"):
        return False
    if existing.get("effect") and existing.get("effect") != toleration.get("effect"):
        return False
    if existing.get("effect") == "NoExecute":
        seconds = existing.get("tolerationSeconds")
        other = toleration.get("tolerationSeconds")
        if seconds is not None and (other is None or other > seconds):
            return False
    if existing.get("operator") == "Exists":
        return True
    return bool(
        toleration.get("operator", "Equal") == "Equal"
        and existing.get("value") == toleration.get("value")
    )


def validate(pod: JSONObject, lookup: ClassLookup) -> None:
    """``Validate`` (``validateOverhead``): the overhead still matches the class."""
    runtime_class = _runtime_class(pod, lookup)
    overhead = _obj(pod.get("spec")).get("overhead")
    fixed = _obj(_obj(runtime_class).get("overhead")).get("podFixed")
    if runtime_class is not None and isinstance(fixed, dict):
        if not _same_resources(fixed, overhead):
            raise _forbidden(pod, OVERHEAD_MISMATCH)
    elif overhead is not None:
        raise _forbidden(pod, OVERHEAD_WITHOUT_CLASS)


def validate_runtime_class(obj: JSONObject) -> list[FieldError]:
    """``ValidateRuntimeClass``: a handler that is a DNS-1123 label; parsable overhead."""
    problems: list[FieldError] = []
    handler = obj.get("handler")
    if not isinstance(handler, str) or not handler:
        problems.append(errors.required("handler"))
    else:
        why = meta.check_dns1123_label(handler)
        if why:
            problems.append(errors.invalid("handler", handler, why))
    for name, value in _obj(_obj(obj.get("overhead")).get("podFixed")).items():
        try:
            if Quantity.from_json(value).sign() < 0:
                problems.append(
                    errors.invalid(
                        f"overhead.podFixed[{name}]", value, "must be greater than or equal to 0"
                    )
                )
        except QuantityError:
            problems.append(errors.invalid(f"overhead.podFixed[{name}]", value, "not a quantity"))
    return problems


def validate_runtime_class_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    problems = validate_runtime_class(new)
    if new.get("handler") != old.get("handler"):
        problems.append(errors.invalid("handler", new.get("handler"), "field is immutable"))
    return problems
