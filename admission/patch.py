"""JSONPatch (RFC 6902) between the object a webhook received and the one it answers with.

The diff walks both documents together and emits operations only where they differ. It is
built for the admission hot path: a mutated pod shares every untouched subtree with the pod it
came from, so identical subtrees are skipped by identity, and lists of equal length (containers,
tolerations) are diffed item by item, so a default added to one container is one small ``add``
rather than the whole container list. This module also does the base64 encoding the
AdmissionReview response carries; applying a patch (tests, ``tenantgate review``) uses the
``jsonpatch`` library.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonpatch
import orjson

from classifier.types import JSONObject

logger = logging.getLogger(__name__)


class PatchError(ValueError):
    """A patch that cannot be computed, decoded or applied."""


def make_json_patch(original: JSONObject, patched: JSONObject) -> list[JSONObject]:
    """The operations that turn ``original`` into ``patched``; empty when they are equal as JSON.

    Neither argument is modified; operation values are taken from ``patched`` (not copied).
    Values of different Python types are never equal, so 1 and true differ as they do in JSON,
    while object members may come in any order.
    """
    operations = _operations(original, patched)
    if operations:
        # Raise here, with the reason, rather than when the response is encoded.
        _serialized(operations)
    return operations


def encoded_json_patch(original: JSONObject, patched: JSONObject) -> str | None:
    """``encode_patch(make_json_patch(original, patched))``, or None when nothing changes,
    serializing the operations once (the admission response's path)."""
    operations = _operations(original, patched)
    if not operations:
        return None
    return base64.b64encode(_serialized(operations)).decode("ascii")


def _operations(original: JSONObject, patched: JSONObject) -> list[JSONObject]:
    operations: list[JSONObject] = []
    if patched is not original:
        try:
            _diff(original, patched, "", operations)
        except TypeError as exc:
            raise PatchError(f"object is not JSON-serializable: {exc}") from exc
    return operations


def _serialized(operations: list[JSONObject]) -> bytes:
    try:
        return orjson.dumps(operations)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise PatchError(f"object is not JSON-serializable: {exc}") from exc


_MISSING: Any = object()


@lru_cache(maxsize=4096)
def _pointer(path: str, key: str) -> str:
    """``path`` extended by ``key`` (cached: pods of one workload share their member paths)."""
    return f"{path}/{key.replace('~', '~0').replace('/', '~1')}"


def _same(source: Any, target: Any) -> bool:
    """Equal as JSON: same types all the way down, members in any order."""
    if source is target:
        return True
    if type(source) is not type(target):
        return False
    if not isinstance(source, dict | list):
        return bool(source == target)
    # Python's == says 1 == true inside containers; equal serializations (member order aside)
    # settle it, and are only computed when == already holds.
    if source != target:
        return False
    options = orjson.OPT_SORT_KEYS
    return orjson.dumps(source, option=options) == orjson.dumps(target, option=options)


def _diff(source: Any, target: Any, path: str, out: list[JSONObject]) -> None:
    if source is target:
        return
    if type(source) is not type(target):
        out.append({"op": "replace", "path": path, "value": target})
    elif isinstance(source, dict):
        if _same(source, target):
            return  # an equal copy: one comparison in C instead of a walk in Python
        if not source.keys() <= target.keys():  # a set comparison in C: removals are rare
            for key in source:
                if key not in target:
                    out.append({"op": "remove", "path": _pointer(path, key)})
        get = source.get
        for key, value in target.items():
            old = get(key, _MISSING)
            if old is _MISSING:
                out.append({"op": "add", "path": _pointer(path, key), "value": value})
            elif old is not value:  # shared subtrees (most of a mutated pod) cost nothing
                _diff(old, value, _pointer(path, key), out)
    elif isinstance(source, list):
        if not _same(source, target):
            _diff_list(source, target, path, out)
    elif source != target:
        out.append({"op": "replace", "path": path, "value": target})


def _diff_list(source: list[Any], target: list[Any], path: str, out: list[JSONObject]) -> None:
    """Items both lists start and end with are kept; the middle is diffed item by item.

    Middle items at the same position are diffed in place (no index shifts), then the extra
    target items are added after them, or the extra source items removed (each removal at the
    same index, since the ones after it move up).
    """
    shorter = min(len(source), len(target))
    start = 0
    while start < shorter and _same(source[start], target[start]):
        start += 1
    end = 0
    while end < shorter - start and _same(source[-1 - end], target[-1 - end]):
        end += 1
    old = source[start : len(source) - end]
    new = target[start : len(target) - end]
    paired = min(len(old), len(new))
    for offset in range(paired):
        _diff(old[offset], new[offset], f"{path}/{start + offset}", out)
    for offset in range(paired, len(new)):
        out.append({"op": "add", "path": f"{path}/{start + offset}", "value": new[offset]})
    for _ in range(paired, len(old)):
        out.append({"op": "remove", "path": f"{path}/{start + paired}"})


def encode_patch(operations: Sequence[Mapping[str, Any]]) -> str:
    """Base64 of the JSON-serialized operations, as ``AdmissionResponse.patch`` expects."""
    return base64.b64encode(orjson.dumps(list(operations))).decode("ascii")


def decode_patch(encoded: str | bytes) -> list[JSONObject]:
    """The operations of a base64 JSONPatch; raises :class:`PatchError` if it is not one."""
    try:
        operations = orjson.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise PatchError(f"not a base64 JSONPatch: {exc}") from exc
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise PatchError("a JSONPatch must be a JSON array of operation objects")
    return operations


def apply_json_patch(document: JSONObject, operations: Sequence[Mapping[str, Any]]) -> JSONObject:
    """A new document: ``operations`` applied to a copy of ``document``."""
    try:
        result: JSONObject = jsonpatch.apply_patch(document, list(operations), in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise PatchError(f"patch does not apply: {exc}") from exc
    return result
