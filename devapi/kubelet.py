"""The simulated kubelet's pod status: containers started, and in-place resizes actuated.

A pod bound to a node (``spec.nodeName``) is started by its kubelet: phase ``Running`` and a
status per container carrying what the kubelet allocated (``allocatedResources``) and what
the container runtime applied (``resources``). An in-place resize (``pods/resize``) changes
only the spec; the kubelet then admits it against the node's allocatable cpu and memory
(``canResizePod`` in ``pkg/kubelet/kubelet.go``, Kubernetes 1.33): a resize larger than the
node is ``Infeasible`` (condition ``PodResizePending``, reason ``Infeasible``, nothing
allocated), any other is allocated and actuated at once, and the condition goes.

Pure functions of the stored pod; the registry runs them on pods it wrote (its background
controllers) and stores what changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from classifier.quantities import Quantity, QuantityError
from devapi import meta
from devapi.types import JSONObject

RESIZE_PENDING: Final = "PodResizePending"
RESIZE_IN_PROGRESS: Final = "PodResizeInProgress"
INFEASIBLE: Final = "Infeasible"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
# The resources the container runtime applies (and reports back in ``resources``).
_ACTUATED: Final = ("cpu", "memory")


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _containers(spec: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    items = spec.get(field)
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _restartable(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _running(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The containers that keep running: app containers and sidecars (restartable init)."""
    return _containers(spec, "containers") + [
        c for c in _containers(spec, "initContainers") if _restartable(c)
    ]


def _actuated(resources: Mapping[str, Any]) -> dict[str, Any]:
    """What the runtime reports of a container's resources: its cpu and memory."""
    result: dict[str, Any] = {}
    for kind in ("requests", "limits"):
        values = {n: v for n, v in _obj(resources.get(kind)).items() if n in _ACTUATED}
        if values:
            result[kind] = values
    return result


def needs_sync(pod: Mapping[str, Any]) -> bool:
    """Whether the kubelet of this pod's node has something to do (cheap, no parsing)."""
    metadata = _obj(pod.get("metadata"))
    spec = _obj(pod.get("spec"))
    status = _obj(pod.get("status"))
    if not spec.get("nodeName") or metadata.get("deletionTimestamp"):
        return False
    if status.get("phase") in TERMINAL_PHASES:
        return False
    if not status.get("containerStatuses"):
        return True
    allocated = {
        s.get("name"): s.get("allocatedResources")
        for s in _containers(status, "containerStatuses")
        + _containers(status, "initContainerStatuses")
    }
    resizing = any(
        allocated.get(c.get("name")) != _obj(_obj(c.get("resources")).get("requests"))
        for c in _running(spec)
    )
    pending = any(_obj(c).get("type") == RESIZE_PENDING for c in status.get("conditions") or [])
    return resizing or pending


def _total(containers: list[dict[str, Any]], resource: str) -> Quantity:
    total = Quantity(0)
    for container in containers:
        raw = _obj(_obj(container.get("resources")).get("requests")).get(resource)
        if raw is None:
            continue
        try:
            total = total + Quantity.from_json(raw)
        except QuantityError:
            continue  # validation refused such a pod already
    return total


def _infeasible(spec: Mapping[str, Any], allocatable: Mapping[str, Quantity] | None) -> str | None:
    """Why the node can never fit the pod's requests (canResizePod); None when it can."""
    if allocatable is None:
        return None
    running = _running(spec)
    cpu, memory = _total(running, "cpu"), _total(running, "memory")
    cpu_capacity, memory_capacity = allocatable.get("cpu"), allocatable.get("memory")
    if memory_capacity is not None and memory > memory_capacity:
        return (
            f"Node didn't have enough capacity: memory, requested: {memory.nanos // 10**9}, "
            f"capacity: {memory_capacity.nanos // 10**9}"
        )
    if cpu_capacity is not None and cpu > cpu_capacity:
        return (
            f"Node didn't have enough capacity: cpu, requested: {cpu.nanos // 10**6}, "
            f"capacity: {cpu_capacity.nanos // 10**6}"
        )
    return None


def _container_status(container: Mapping[str, Any], started_at: str) -> dict[str, Any]:
    resources = _obj(container.get("resources"))
    status: dict[str, Any] = {
        "name": container.get("name"),
        "image": container.get("image", ""),
        "imageID": "",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": started_at}},
        "allocatedResources": dict(_obj(resources.get("requests"))),
        "resources": _actuated(resources),
    }
    return status


def _without_resize_conditions(conditions: Any) -> list[Any]:
    return [
        c
        for c in (conditions if isinstance(conditions, list) else [])
        if _obj(c).get("type") not in (RESIZE_PENDING, RESIZE_IN_PROGRESS)
    ]


def sync_pod(pod: JSONObject, *, allocatable: Mapping[str, Quantity] | None) -> JSONObject | None:
    """``pod`` with the status its kubelet writes next; None when the status is already so.

    ``allocatable`` is the node's cpu and memory (None: a node large enough for any pod).
    """
    if not needs_sync(pod):
        return None
    spec = _obj(pod.get("spec"))
    status = dict(_obj(pod.get("status")))
    now = meta.now_timestamp()
    if not status.get("containerStatuses"):
        status["phase"] = "Running"
        status.setdefault("startTime", now)
        status["containerStatuses"] = [
            _container_status(c, now) for c in _containers(spec, "containers")
        ]
        init_statuses = []
        for container in _containers(spec, "initContainers"):
            if _restartable(container):
                init_statuses.append(_container_status(container, now))
            else:
                init_statuses.append(
                    {
                        "name": container.get("name"),
                        "image": container.get("image", ""),
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                    }
                )
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
    else:
        reason = _infeasible(spec, allocatable)
        conditions = _without_resize_conditions(status.get("conditions"))
        if reason is not None:
            conditions.append(
                {
                    "type": RESIZE_PENDING,
                    "status": "True",
                    "reason": INFEASIBLE,
                    "message": reason,
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                }
            )
        else:
            by_name = {c.get("name"): c for c in _running(spec)}
            for field in ("containerStatuses", "initContainerStatuses"):
                updated = []
                for item in _containers(status, field):
                    found = by_name.get(item.get("name"))
                    if found is not None and "allocatedResources" in item:
                        resources = _obj(found.get("resources"))
                        item = dict(item)
                        item["allocatedResources"] = dict(_obj(resources.get("requests")))
                        item["resources"] = _actuated(resources)
                    updated.append(item)
                if updated:
                    status[field] = updated
        if _conditions_equal(conditions, status.get("conditions")) and reason is not None:
            return None  # already reported Infeasible for this very spec
        status["conditions"] = conditions
    synced = dict(pod)
    synced["status"] = status
    return synced


def _conditions_equal(new: list[Any], old: Any) -> bool:
    """Equal but for the transition times the kubelet writes."""

    def stripped(items: Any) -> list[Any]:
        return [
            {k: v for k, v in _obj(c).items() if k not in ("lastTransitionTime", "lastProbeTime")}
            for c in (items if isinstance(items, list) else [])
        ]

    return stripped(new) == stripped(old)


def parse_allocatable(values: Mapping[str, str]) -> dict[str, Quantity]:
    """A node's allocatable cpu and memory from ``{"cpu": "4", "memory": "8Gi"}``."""
    parsed: dict[str, Quantity] = {}
    for name, raw in values.items():
        if name not in _ACTUATED:
            raise ValueError(f"node allocatable: only cpu and memory, not {name}")
        parsed[name] = Quantity.parse(raw)
    return parsed


__all__ = [
    "INFEASIBLE",
    "RESIZE_PENDING",
    "needs_sync",
    "parse_allocatable",
    "sync_pod",
]
