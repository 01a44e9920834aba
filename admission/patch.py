"""JSONPatch (RFC 6902) between the object a webhook received and the one it answers with.

The diff is computed by the ``jsonpatch`` library; this module adds the fast path for the common
"nothing changed" case and the base64 encoding the AdmissionReview response carries.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import orjson

from classifier.types import JSONObject

logger = logging.getLogger(__name__)


class PatchError(ValueError):
    """A patch that cannot be computed, decoded or applied."""


def make_json_patch(original: JSONObject, patched: JSONObject) -> list[JSONObject]:
    """The operations that turn ``original`` into ``patched``; empty when they are equal as JSON.

    Neither argument is modified. Object members equal on both sides are left out before the
    library diffs what remains: they cannot be in the patch, and the library would otherwise
    serialize every item of every list (``managedFields``, ``volumes``...) to compare them.
    Leaving out object members keeps every remaining path valid in the whole document.
    """
    if patched is original:
        return []
    try:
        source, target = _without_common_members(original, patched)
        if source is _EQUAL:
            return []
        diff = jsonpatch.JsonPatch.from_diff(source, target, dumps=_dumps)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise PatchError(f"object is not JSON-serializable: {exc}") from exc
    operations: list[JSONObject] = diff.patch
    return operations


_EQUAL: Any = object()


def _without_common_members(source: Any, target: Any) -> tuple[Any, Any]:
    """``source`` and ``target`` minus the object members they share, at every object level.

    Returns ``(_EQUAL, _EQUAL)`` when the two are equal JSON. Arrays and scalars are kept whole
    (an array index depends on every item before it). Values of different Python types are never
    equal, so 1 and true differ as they do in JSON. Containers are compared by their serialized
    bytes; objects whose members differ only in order are then compared member by member.
    """
    if type(source) is not type(target):
        return source, target
    if not isinstance(source, dict | list):
        return (_EQUAL, _EQUAL) if source == target else (source, target)
    if orjson.dumps(source) == orjson.dumps(target):
        return _EQUAL, _EQUAL
    if isinstance(source, list):
        return source, target
    kept_source: dict[str, Any] = {}
    kept_target: dict[str, Any] = {}
    for key, value in source.items():
        if key not in target:
            kept_source[key] = value
            continue
        pruned_source, pruned_target = _without_common_members(value, target[key])
        if pruned_source is not _EQUAL:
            kept_source[key] = pruned_source
            kept_target[key] = pruned_target
    for key, value in target.items():
        if key not in source:
            kept_target[key] = value
    if not kept_source and not kept_target:
        return _EQUAL, _EQUAL
    return kept_source, kept_target


def _dumps(value: Any) -> str:
    # The library compares values by their serialization (so 1 and true differ); orjson gives
    # the same JSON semantics as its json.dumps default, several times faster.
    return orjson.dumps(value).decode()


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
