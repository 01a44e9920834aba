"""Pod scheduling gates (``spec.schedulingGates``): what the API server allows and what it sets.

Follows the real server: ``pkg/apis/core/validation/validation.go`` (``validateSchedulingGates``
in ``ValidatePodSpec``: qualified names, no duplicates; ``ValidatePodCreate``: a pod naming its
node cannot carry gates; ``ValidatePodUpdate`` / ``validateOnlyDeletedSchedulingGates``: gates
can only be removed), ``pkg/registry/core/pod/strategy.go`` (``applySchedulingGatedCondition``:
a gated pod is created with ``PodScheduled=False``, reason ``SchedulingGated``) and
``pkg/registry/core/pod/storage/storage.go`` (``setPodNodeAndMetadata``: a gated pod cannot be
bound). A simulated scheduler never binds a gated pod (see ``devapi.workloads.kubelet``).
"""

from __future__ import annotations

import re
from typing import Any

from devapi import errors, meta
from devapi.errors import APIError, FieldError
from devapi.types import JSONObject

SCHEDULING_GATED = "SchedulingGated"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"

_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# k8s.io/apimachinery/pkg/util/validation: IsQualifiedName's texts.
_NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def gate_names(pod: JSONObject) -> list[str]:
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    if not isinstance(gates, list):
        return []
    return [str(g.get("name") or "") for g in gates if isinstance(g, dict)]


def is_gated(pod: JSONObject) -> bool:
    return bool(gate_names(pod))


def _qualified_name_problems(name: str) -> list[str]:
    """``IsQualifiedName``: an optional DNS-1123 subdomain prefix, ``/``, a name part."""
    problems: list[str] = []
    parts = name.split("/")
    if len(parts) == 1:
        short = parts[0]
    elif len(parts) == 2:
        prefix, short = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            why = meta.check_dns1123_subdomain(prefix)
            if why:
                problems.append(f"prefix part {why}")
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
            "or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
            "[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. "
            "'example.com/MyName')"
        ]
    if not short:
        problems.append("name part must be non-empty")
    elif len(short) > 63:
        problems.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.fullmatch(short):
        problems.append(_NAME_PART)
    return problems


def spec_errors(pod: JSONObject) -> list[FieldError]:
    """``validateSchedulingGates``: on create and on every update."""
    problems: list[FieldError] = []
    seen: set[str] = set()
    for i, name in enumerate(gate_names(pod)):
        path = f"spec.schedulingGates[{i}]"
        for why in _qualified_name_problems(name):
            problems.append(errors.invalid(path, name, why))
        if name in seen:
            problems.append(errors.duplicate(path, name))
        seen.add(name)
    return problems


def create_errors(pod: JSONObject) -> list[FieldError]:
    """``ValidatePodCreate``: a pod created on a node cannot wait for anything."""
    spec = pod.get("spec")
    if isinstance(spec, dict) and spec.get("nodeName") and is_gated(pod):
        return [
            errors.forbidden(
                "spec.nodeName", "cannot be set until all schedulingGates have been cleared"
            )
        ]
    return []


def update_errors(new: JSONObject, old: JSONObject) -> list[FieldError]:
    """``validateOnlyDeletedSchedulingGates``: one error per gate the old pod did not have."""
    before = set(gate_names(old))
    return [
        errors.forbidden(
            f"spec.schedulingGates[{i}].name",
            f"only deletion is allowed, but found new scheduling gate '{name}'",
        )
        for i, name in enumerate(gate_names(new))
        if name not in before
    ]


def apply_gated_condition(pod: JSONObject) -> None:
    """``applySchedulingGatedCondition``, on create: unless a PodScheduled condition exists."""
    if not is_gated(pod):
        return
    status = pod.get("status")
    if not isinstance(status, dict):
        status = {}
        pod["status"] = status
    conditions: list[Any] = list(status.get("conditions") or [])
    if any(isinstance(c, dict) and c.get("type") == "PodScheduled" for c in conditions):
        return
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": meta.now_timestamp(),
            "reason": SCHEDULING_GATED,
            "message": SCHEDULING_GATED_MESSAGE,
        }
    )
    status["conditions"] = conditions


def check_bindable(pod: JSONObject, name: str) -> None:
    """``setPodNodeAndMetadata``: binding a gated pod is a conflict."""
    if is_gated(pod):
        raise binding_conflict(name, f"pod {name} has non-empty .spec.schedulingGates")


def binding_conflict(name: str, why: str) -> APIError:
    return errors.conflict("", "pods/binding", name, why)
