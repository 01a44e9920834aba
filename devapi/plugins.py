"""The in-tree admission plugins a default kube-apiserver runs on pods, in its order.

``pkg/kubeapiserver/options/plugins.go`` (``AllOrderedPlugins``) orders them; of those enabled by
default and visible to a pod, the mutating ones run LimitRanger, ServiceAccount, Priority,
DefaultTolerationSeconds, RuntimeClass (all before the mutating webhooks, and again when the
webhooks are reinvoked), and the validating ones LimitRanger, Priority (which keeps
PriorityClasses to one globalDefault) and RuntimeClass (before the validating webhooks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devapi import limitranger, runtimeclass, serviceaccount
from devapi.admission import AdmissionRequest
from devapi.intree import (
    PodAdmission,
    admit_default_tolerations,
    admit_priority,
    check_single_default,
)
from devapi.types import JSONObject

Plugin = Callable[[AdmissionRequest], None]


@dataclass(frozen=True)
class PodPlugins:
    """What the plugins read from the store."""

    priority_class: Callable[[str], JSONObject | None]
    default_priority_class: Callable[[], JSONObject | None]
    limit_ranges: Callable[[str], list[JSONObject]]
    runtime_class: Callable[[str], JSONObject | None]

    def mutating(self) -> list[Plugin]:
        return [
            _pods(self._limit_ranger_admit),
            _pods(_service_account),
            _pods(self._priority),
            _pods(admit_default_tolerations),
            _pods(self._runtime_class_admit),
        ]

    def validating(self) -> list[Plugin]:
        return [
            _pods(self._limit_ranger_validate),
            self._single_default_priority_class,
            _pods(self._runtime_class_validate),
        ]

    def _single_default_priority_class(self, request: AdmissionRequest) -> None:
        """The Priority plugin's ``Validate`` of PriorityClasses: one globalDefault at most."""
        if (
            (request.group, request.plural) != ("scheduling.k8s.io", "priorityclasses")
            or request.subresource
            or request.object is None
            or request.operation not in ("CREATE", "UPDATE")
        ):
            return
        check_single_default(request.operation, request.object, default=self.default_priority_class)

    def _priority(self, pod: PodAdmission) -> None:
        admit_priority(pod, lookup=self.priority_class, default=self.default_priority_class)

    def _limit_ranges_for(self, pod: PodAdmission) -> list[JSONObject] | None:
        """``SupportsAttributes``: pods on create, and resizes; nothing being deleted."""
        supported = (pod.operation == "CREATE" and not pod.subresource) or (
            pod.operation == "UPDATE" and pod.subresource == "resize"
        )
        if not supported:
            return None
        if pod.old_pod is not None and (pod.old_pod.get("metadata") or {}).get("deletionTimestamp"):
            return None
        namespace = str((pod.pod.get("metadata") or {}).get("namespace") or "")
        return self.limit_ranges(namespace)

    def _limit_ranger_admit(self, pod: PodAdmission) -> None:
        ranges = self._limit_ranges_for(pod)
        if ranges:
            limitranger.mutate_pod(pod.pod, ranges)

    def _limit_ranger_validate(self, pod: PodAdmission) -> None:
        ranges = self._limit_ranges_for(pod)
        if ranges:
            limitranger.check_pod(pod.pod, ranges)

    def _runtime_class_admit(self, pod: PodAdmission) -> None:
        if pod.operation == "CREATE" and not pod.subresource:
            runtimeclass.admit(pod.pod, self.runtime_class)

    def _runtime_class_validate(self, pod: PodAdmission) -> None:
        if pod.operation == "CREATE" and not pod.subresource:
            runtimeclass.validate(pod.pod, self.runtime_class)


def _service_account(pod: PodAdmission) -> None:
    if pod.operation == "CREATE" and not pod.subresource:
        serviceaccount.admit(pod.pod)


def _pods(plugin: Callable[[PodAdmission], None]) -> Plugin:
    def run(request: AdmissionRequest) -> None:
        if (request.group, request.plural) != ("", "pods") or request.object is None:
            return
        if request.kind != "Pod":
            return  # pods/binding carries a Binding
        plugin(
            PodAdmission(request.operation, request.subresource, request.object, request.old_object)
        )

    return run
