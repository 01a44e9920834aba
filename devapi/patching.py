"""The three PATCH formats: JSON merge patch, JSON patch, and strategic merge patch.

Strategic merge patch needs each list's merge key and strategy, which the real server reads
from the Go types. Here they come from :data:`POD_PATCH_META` and friends: the fields of pods,
namespaces and object metadata that ``kubectl apply`` and ``kubectl patch`` touch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import jsonpatch

from devapi.errors import APIError, bad_request
from devapi.types import JSON, JSONObject

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class PatchMeta:
    """How a field merges: a list merged by ``merge_key``, a primitive set, or recursion."""

    merge_key: str | None = None
    strategy: str = ""  # "merge", "merge,retainKeys", "retainKeys" or "" (replace)
    fields: Mapping[str, PatchMeta] = field(default_factory=dict)
    items: PatchMeta | None = None  # for lists of objects: the meta of each item

    def child(self, name: str) -> PatchMeta:
        return self.fields.get(name, _NO_META)

    @property
    def merges(self) -> bool:
        return "merge" in self.strategy.split(",")


_NO_META = PatchMeta()


def _list(key: str | None, item: PatchMeta | None = None, strategy: str = "merge") -> PatchMeta:
    return PatchMeta(merge_key=key, strategy=strategy, items=item or _NO_META)


_CONTAINER = PatchMeta(
    fields={
        "ports": _list("containerPort"),
        "env": _list("name"),
        "volumeMounts": _list("mountPath"),
        "volumeDevices": _list("devicePath"),
    }
)
_OBJECT_META = PatchMeta(
    fields={
        "finalizers": _list(None),
        "ownerReferences": _list("uid"),
    }
)
_POD_SPEC = PatchMeta(
    fields={
        "volumes": _list("name", PatchMeta(strategy="retainKeys"), "merge,retainKeys"),
        "initContainers": _list("name", _CONTAINER),
        "containers": _list("name", _CONTAINER),
        "ephemeralContainers": _list("name", _CONTAINER),
        "imagePullSecrets": _list("name"),
        "hostAliases": _list("ip"),
        "topologySpreadConstraints": _list("topologyKey"),
        "resourceClaims": _list("name", None, "merge,retainKeys"),
        "schedulingGates": _list("name"),
    }
)
_POD_STATUS = PatchMeta(
    fields={
        "conditions": _list("type"),
        "podIPs": _list("ip"),
        "hostIPs": _list("ip"),
        "resourceClaimStatuses": _list("name", None, "merge,retainKeys"),
    }
)
POD_PATCH_META = PatchMeta(
    fields={"metadata": _OBJECT_META, "spec": _POD_SPEC, "status": _POD_STATUS}
)
NAMESPACE_PATCH_META = PatchMeta(
    fields={"metadata": _OBJECT_META, "status": PatchMeta(fields={"conditions": _list("type")})}
)
GENERIC_PATCH_META = PatchMeta(fields={"metadata": _OBJECT_META})
WEBHOOK_CONFIGURATION_PATCH_META = PatchMeta(
    fields={"metadata": _OBJECT_META, "webhooks": _list("name")}
)


def apply_patch(
    content_type: str, current: JSONObject, patch: JSON, *, meta: PatchMeta | None
) -> JSONObject:
    """``current`` with ``patch`` applied; ``meta`` is None where strategic merge is unsupported."""
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        return json_patch(current, patch)
    if not isinstance(patch, dict):
        raise bad_request(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        )
    if content_type == MERGE_PATCH:
        merged = merge_patch(current, patch)
        if not isinstance(merged, dict):  # pragma: no cover - a dict patch yields a dict
            raise bad_request("the patch did not produce an object")
        return merged
    if meta is None:
        raise APIError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}",
            details={},
        )
    return strategic_merge(current, patch, meta)


def json_patch(current: JSONObject, operations: list[Any]) -> JSONObject:
    try:
        result = jsonpatch.apply_patch(current, operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
        raise APIError(422, "Invalid", str(err), details={}) from err
    except (TypeError, KeyError, IndexError, ValueError) as err:
        raise bad_request(f"invalid JSON patch: {err}") from err
    if not isinstance(result, dict):
        raise bad_request("the patch did not produce an object")
    return cast(JSONObject, result)


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch --------------------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def strategic_merge(current: JSONObject, patch: JSONObject, meta: PatchMeta) -> JSONObject:
    merged = _merge_map(current, patch, meta)
    if merged is None:
        raise bad_request("the patch deleted the whole object")
    return merged


def _merge_map(original: JSONObject, patch: JSONObject, meta: PatchMeta) -> JSONObject | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$")}
    if directive not in (None, "merge"):
        raise bad_request(f"Unknown patch type: {directive}")
    result = dict(original)
    retain = patch.get(_RETAIN_KEYS)
    if retain is not None:
        if not isinstance(retain, list):
            raise bad_request("invalid patch: $retainKeys must be a list")
        for key in list(result):
            if key not in retain:
                del result[key]
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise bad_request(f"invalid patch: {key} must be a list")
            orders[key[len(_SET_ORDER) :]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVES):
            name = key[len(_DELETE_PRIMITIVES) :]
            existing = result.get(name)
            if isinstance(existing, list) and isinstance(value, list):
                result[name] = [v for v in existing if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        child = meta.child(key)
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value, child)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and child.merges:
            result[key] = _merge_list(current if isinstance(current, list) else [], value, child)
        else:
            result[key] = value
    for name, order in orders.items():
        existing = result.get(name)
        if isinstance(existing, list):
            result[name] = _reorder(existing, order, meta.child(name).merge_key)
    return result


def _merge_list(original: list[Any], patch: list[Any], meta: PatchMeta) -> list[Any]:
    if any(isinstance(v, dict) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [v for v in patch if not (isinstance(v, dict) and _DIRECTIVE in v)]
    key = meta.merge_key
    if key is None:
        # A list of primitives merged as a set, keeping the original order.
        union = list(original)
        for value in patch:
            if value not in union:
                union.append(value)
        return union
    result = [dict(item) if isinstance(item, dict) else item for item in original]
    item_meta = meta.items or _NO_META
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"invalid patch: items of a list merged by {key} must be objects")
        if key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            added = _merge_map({}, item, item_meta)
            if added is not None:
                result.append(added)
        else:
            merged = _merge_map(result[index], item, item_meta)
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def identity(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    wanted = [identity(o) if isinstance(o, dict) else o for o in order]
    position = {_hashable(w): i for i, w in enumerate(wanted)}
    indexed = list(enumerate(items))
    indexed.sort(
        key=lambda pair: (position.get(_hashable(identity(pair[1])), len(wanted)), pair[0])
    )
    return [item for _, item in indexed]


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else repr(value)
