"""The resource types the test API server serves: built-in ones and those CRDs add."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

MAIN_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = {
    "status": ("get", "patch", "update"),
    "resize": ("get", "patch", "update"),
    "binding": ("create",),
    "finalize": ("update",),
    "scale": ("get", "patch", "update"),
}
SUBRESOURCE_KINDS = {"binding": ("", "v1", "Binding"), "scale": ("autoscaling", "v1", "Scale")}

ResourceKey = tuple[str, str]  # (group, plural): the same objects whatever the version


@dataclass(frozen=True)
class PrinterColumn:
    """One column of ``kubectl get``, as in a CRD's ``additionalPrinterColumns``."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True)
class ResourceType:
    """One resource (``pods``, ``leases.coordination.k8s.io``) and how it is served."""

    group: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    versions: tuple[str, ...]  # served versions, preferred first
    storage_version: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    tracks_generation: bool = False
    printer_columns: tuple[PrinterColumn, ...] = ()
    custom: bool = False
    list_kind_name: str = ""
    verbs: tuple[str, ...] = MAIN_VERBS
    field_labels: frozenset[str] = field(default_factory=frozenset)
    # The columns of ``kubectl get`` (definition, cell) for kinds not in ``devapi.tables``.
    columns: Callable[[], list[tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]]] | None = (
        field(default=None, compare=False)
    )

    @property
    def key(self) -> ResourceKey:
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return self.list_kind_name or f"{self.kind}List"

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str | None = None) -> str:
        v = version or self.storage_version
        return f"{self.group}/{v}" if self.group else v

    def has_status(self) -> bool:
        return "status" in self.subresources


def _core(
    plural: str,
    kind: str,
    *,
    namespaced: bool,
    group: str = "",
    short_names: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    subresources: frozenset[str] = frozenset(),
    tracks_generation: bool = False,
    verbs: tuple[str, ...] = MAIN_VERBS,
    field_labels: frozenset[str] = frozenset(),
) -> ResourceType:
    return ResourceType(
        group=group,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        namespaced=namespaced,
        versions=("v1",),
        storage_version="v1",
        short_names=short_names,
        categories=categories,
        subresources=subresources,
        tracks_generation=tracks_generation,
        verbs=verbs,
        field_labels=field_labels,
    )


PODS = _core(
    "pods",
    "Pod",
    namespaced=True,
    short_names=("po",),
    categories=("all",),
    subresources=frozenset({"status", "resize", "binding"}),
    tracks_generation=True,
    field_labels=frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
)
NAMESPACES = _core(
    "namespaces",
    "Namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=frozenset({"status", "finalize"}),
    # Namespaces cannot be deleted as a collection.
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    field_labels=frozenset({"status.phase"}),
)
PRIORITY_CLASSES = _core(
    "priorityclasses",
    "PriorityClass",
    namespaced=False,
    group="scheduling.k8s.io",
    short_names=("pc",),
)
LEASES = _core("leases", "Lease", namespaced=True, group="coordination.k8s.io")
CRDS = _core(
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
    group="apiextensions.k8s.io",
    short_names=("crd", "crds"),
    categories=("api-extensions",),
    subresources=frozenset({"status"}),
    tracks_generation=True,
)
MUTATING_WEBHOOKS = _core(
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
    group="admissionregistration.k8s.io",
    categories=("api-extensions",),
    tracks_generation=True,
)
VALIDATING_WEBHOOKS = _core(
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
    group="admissionregistration.k8s.io",
    categories=("api-extensions",),
    tracks_generation=True,
)

LIMIT_RANGES = _core("limitranges", "LimitRange", namespaced=True, short_names=("limits",))
RUNTIME_CLASSES = _core("runtimeclasses", "RuntimeClass", namespaced=False, group="node.k8s.io")

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    PODS,
    LIMIT_RANGES,
    RUNTIME_CLASSES,
    NAMESPACES,
    PRIORITY_CLASSES,
    LEASES,
    CRDS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
)
WEBHOOK_CONFIGURATION_KEYS = frozenset({MUTATING_WEBHOOKS.key, VALIDATING_WEBHOOKS.key})


class ResourceCatalog:
    """Every served resource type; CRDs add and remove theirs while the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[ResourceKey, ResourceType] = {rt.key: rt for rt in BUILTIN_TYPES}

    def get(self, key: ResourceKey) -> ResourceType | None:
        with self._lock:
            return self._types.get(key)

    def resolve(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self.get((group, plural))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def by_kind(self, group: str, version: str, kind: str) -> ResourceType | None:
        for rt in self.all():
            if rt.group == group and rt.kind == kind and version in rt.versions:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        with self._lock:
            return sorted(self._types.values(), key=lambda rt: (rt.group, rt.plural))

    def add(self, rt: ResourceType) -> None:
        with self._lock:
            self._types[rt.key] = rt

    def remove(self, key: ResourceKey) -> None:
        with self._lock:
            existing = self._types.get(key)
            if existing is not None and existing.custom:
                del self._types[key]

    def group_versions(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """Each non-core group with its served versions, preferred first."""
        groups: dict[str, list[str]] = {}
        for rt in self.all():
            if not rt.group:
                continue
            known = groups.setdefault(rt.group, [])
            for v in rt.versions:
                if v not in known:
                    known.append(v)
        for group in sorted(groups):
            yield group, tuple(by_priority(groups[group]))


def by_priority(versions: list[str]) -> list[str]:
    """Kubernetes version priority: GA > beta > alpha, higher numbers first."""

    def rank(v: str) -> tuple[int, int, int, str]:
        m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
        if not m:
            return (3, 0, 0, v)
        stability = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
        return (stability, -int(m.group(1)), -int(m.group(3) or 0), v)

    return sorted(versions, key=rank)
