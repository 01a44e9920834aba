"""In-tree admission plugins that run before the webhooks, as in a default kube-apiserver.

``Priority`` resolves ``priorityClassName`` into ``spec.priority`` and ``preemptionPolicy`` (and
refuses a priority that disagrees with the class), gives a pod naming no class the globalDefault
PriorityClass (the lowest value if several), and lets only one PriorityClass be the
globalDefault (``plugin/pkg/admission/priority/admission.go``); ``DefaultTolerationSeconds``
adds the not-ready/unreachable tolerations, on create and on update. Like the real plugins, they
run again when the webhooks are reinvoked, so a webhook that changes a pod's class must also set
the matching priority.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devapi import errors
from devapi.types import JSONObject

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300

ClassLookup = Callable[[str], JSONObject | None]
DefaultClass = Callable[[], JSONObject | None]


@dataclass(frozen=True)
class PodAdmission:
    """The parts of a pod request the in-tree plugins look at."""

    operation: str
    subresource: str
    pod: JSONObject
    old_pod: JSONObject | None


def _spec(pod: JSONObject) -> dict[str, Any]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = {}
        pod["spec"] = spec
    return spec


def _subject(pod: JSONObject) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "Unknown")


def admit_priority(request: PodAdmission, *, lookup: ClassLookup, default: DefaultClass) -> None:
    if request.subresource:
        return
    spec = _spec(request.pod)
    if request.operation == "UPDATE":
        old_spec = (request.old_pod or {}).get("spec") or {}
        # Priority was set at creation; an update that drops it keeps the stored value.
        for field in ("priority", "preemptionPolicy"):
            if field not in spec and field in old_spec:
                spec[field] = old_spec[field]
        return
    if request.operation != "CREATE":
        return
    class_name = spec.get("priorityClassName")
    if not class_name:
        found = default()
        if found is None:
            priority, policy = 0, "PreemptLowerPriority"
        else:
            spec["priorityClassName"] = (found.get("metadata") or {}).get("name")
            priority = int(found.get("value") or 0)
            policy = str(found.get("preemptionPolicy") or "PreemptLowerPriority")
    else:
        found = lookup(str(class_name))
        if found is None:
            raise errors.forbidden_request(
                "",
                "pods",
                _subject(request.pod),
                f"no PriorityClass with name {class_name} was found",
            )
        priority = int(found.get("value") or 0)
        policy = str(found.get("preemptionPolicy") or "PreemptLowerPriority")
    given = spec.get("priority")
    if given is not None and given != priority:
        raise errors.forbidden_request(
            "",
            "pods",
            _subject(request.pod),
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {priority} from the given PriorityClass name",
        )
    spec["priority"] = priority
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        raise errors.forbidden_request(
            "",
            "pods",
            _subject(request.pod),
            f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod "
            f"spec; priority admission controller computed {policy} from the given "
            "PriorityClass name",
        )
    spec["preemptionPolicy"] = policy


def check_single_default(
    operation: str, priority_class: JSONObject, *, default: DefaultClass
) -> None:
    """Only one globalDefault PriorityClass (``validatePriorityClass`` of the Priority plugin)."""
    if priority_class.get("globalDefault") is not True:
        return
    name = (priority_class.get("metadata") or {}).get("name")
    current = default()
    if current is None:
        return
    current_name = (current.get("metadata") or {}).get("name")
    if operation == "CREATE" or current_name != name:
        raise errors.forbidden_request(
            "scheduling.k8s.io",
            "priorityclasses",
            str(name or "Unknown"),
            f"PriorityClass {current_name} is already marked as default. "
            "Only one default can exist",
        )


def admit_default_tolerations(request: PodAdmission) -> None:
    """``defaulttolerationseconds/admission.go`` (``Admit``): pods, on create and update."""
    if request.subresource or request.operation not in ("CREATE", "UPDATE"):
        return
    spec = _spec(request.pod)
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = []
    tolerates = {NOT_READY: False, UNREACHABLE: False}
    for toleration in tolerations:
        if not isinstance(toleration, dict):
            continue
        key = toleration.get("key") or ""
        effect = toleration.get("effect") or ""
        for taint in tolerates:
            if key in (taint, "") and effect in ("NoExecute", ""):
                tolerates[taint] = True
    added = [
        {
            "key": taint,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
        }
        for taint, covered in tolerates.items()
        if not covered
    ]
    if added:
        spec["tolerations"] = [*tolerations, *added]
