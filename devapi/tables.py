"""Alternative representations clients ask for in ``Accept``: ``meta.k8s.io/v1`` Tables
(server-side printing for ``kubectl get``) and PartialObjectMetadata (metadata-only clients)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from devapi import meta
from devapi.resources import (
    CRDS,
    LEASES,
    LIMIT_RANGES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    RUNTIME_CLASSES,
    VALIDATING_WEBHOOKS,
    ResourceType,
)
from devapi.types import JSONObject

Cell = Callable[[JSONObject], Any]
_NAME = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}


TABLE = "Table"
PARTIAL = "PartialObjectMetadata"


def representation(accept: str) -> str | None:
    """The first representation ``accept`` asks for that is served: Table, metadata-only, or
    None for the objects themselves."""
    for media_range in accept.split(","):
        parts = [p.strip() for p in media_range.split(";")]
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        as_kind = params.get("as")
        if as_kind is None:
            if parts[0] in ("application/json", "application/*", "*/*", ""):
                return None
            continue
        if params.get("g") != "meta.k8s.io":
            continue
        if as_kind == TABLE:
            return TABLE
        if as_kind in (PARTIAL, f"{PARTIAL}List"):
            return PARTIAL
    return None


def partial(obj: JSONObject) -> JSONObject:
    return {"kind": PARTIAL, "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def partial_list(listing: JSONObject) -> JSONObject:
    return {
        "kind": f"{PARTIAL}List",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": listing.get("metadata") or {},
        "items": [partial(obj) for obj in listing.get("items") or []],
    }


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 - 365 * (hours // 24 // 365)
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(obj: JSONObject) -> str:
    created = meta.parse_timestamp((obj.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return "<unknown>"
    return human_duration(time.time() - created.timestamp())


def _column(
    name: str, kind: str = "string", description: str = "", priority: int = 0
) -> JSONObject:
    return {
        "name": name,
        "type": kind,
        "format": "",
        "description": description,
        "priority": priority,
    }


def _pod_ready(pod: JSONObject) -> str:
    statuses = [
        s for s in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(s, dict)
    ]
    total = len([c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(pod: JSONObject) -> str:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    if status.get("reason"):
        return str(status["reason"])
    if status.get("phase") == "Pending" and (pod.get("spec") or {}).get("schedulingGates"):
        return "SchedulingGated"
    return str(status.get("phase") or "Unknown")


def _pod_restarts(pod: JSONObject) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict))


def _get(path: str) -> Cell:
    return lambda obj: json_path(obj, path)


def _columns(rt: ResourceType) -> list[tuple[JSONObject, Cell]]:
    if rt.columns is not None:
        return rt.columns()
    name: tuple[JSONObject, Cell] = (_NAME, lambda o: (o.get("metadata") or {}).get("name"))
    age_column: tuple[JSONObject, Cell] = (
        _column(
            "Age",
            description="CreationTimestamp is a timestamp representing the server time "
            "when this object was created.",
        ),
        age,
    )
    if rt.key == PODS.key:
        return [
            name,
            (
                _column(
                    "Ready",
                    description="The aggregate readiness state of this pod for accepting traffic.",
                ),
                _pod_ready,
            ),
            (
                _column(
                    "Status", description="The aggregate status of the containers in this pod."
                ),
                _pod_status,
            ),
            (
                _column(
                    "Restarts",
                    description="The number of times the containers in this pod have been "
                    "restarted.",
                ),
                _pod_restarts,
            ),
            age_column,
            (
                _column("IP", description="IP address allocated to the pod.", priority=1),
                lambda o: (o.get("status") or {}).get("podIP") or "<none>",
            ),
            (
                _column(
                    "Node", description="Name of the Node this pod is assigned to.", priority=1
                ),
                lambda o: (o.get("spec") or {}).get("nodeName") or "<none>",
            ),
            (
                _column(
                    "Nominated Node",
                    description="Name of the node nominated for preemption.",
                    priority=1,
                ),
                lambda o: (o.get("status") or {}).get("nominatedNodeName") or "<none>",
            ),
            (
                _column("Readiness Gates", description="Pod readiness gates.", priority=1),
                lambda o: "<none>",
            ),
        ]
    if rt.key == NAMESPACES.key:
        return [
            name,
            (_column("Status", description="The status of the namespace"), _get(".status.phase")),
            age_column,
        ]
    if rt.key == PRIORITY_CLASSES.key:
        return [
            name,
            (_column("Value", "integer"), _get(".value")),
            (_column("Global-Default", "boolean"), lambda o: bool(o.get("globalDefault"))),
            age_column,
            (_column("PreemptionPolicy"), _get(".preemptionPolicy")),
        ]
    if rt.key == LEASES.key:
        return [
            name,
            (_column("Holder"), lambda o: json_path(o, ".spec.holderIdentity") or ""),
            age_column,
        ]
    if rt.key in (MUTATING_WEBHOOKS.key, VALIDATING_WEBHOOKS.key):
        return [
            name,
            (_column("Webhooks", "integer"), lambda o: len(o.get("webhooks") or [])),
            age_column,
        ]
    if rt.key in (CRDS.key, LIMIT_RANGES.key):
        return [name, (_column("Created At", "date"), _get(".metadata.creationTimestamp"))]
    if rt.key == RUNTIME_CLASSES.key:
        return [name, (_column("Handler"), _get(".handler")), age_column]
    if rt.printer_columns:
        columns = [name]
        for c in rt.printer_columns:
            definition = _column(c.name, c.type, c.description, c.priority)
            definition["format"] = c.format
            if c.type == "date":
                columns.append((definition, _date_cell(c.json_path)))
            else:
                columns.append((definition, _get(c.json_path)))
        return columns
    return [name, age_column]


def _date_cell(path: str) -> Cell:
    return lambda obj: _date_age(json_path(obj, path))


def _date_age(value: Any) -> str | None:
    moment = meta.parse_timestamp(value)
    return human_duration(time.time() - moment.timestamp()) if moment is not None else None


def json_path(obj: Any, path: str) -> Any:
    """A simple JSONPath (``.spec.a.b``, ``.items[0]``) as printer columns use them."""
    value = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path.strip().lstrip("{").rstrip("}")):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def table(
    rt: ResourceType, objects: list[JSONObject], *, list_metadata: JSONObject, include: str
) -> JSONObject:
    columns = _columns(rt)
    rows = []
    for obj in objects:
        row: JSONObject = {"cells": [cell(obj) for _, cell in columns]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = partial(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [definition for definition, _ in columns],
        "rows": rows,
    }
