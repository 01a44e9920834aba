"""Built-in objects as the real server holds them: decoded into the typed Go structs of the
targeted Kubernetes version, and compared with ``equality.Semantic``.

The real server decodes a webhook's patched object into the typed kind
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go``,
``callAttrMutatingHook``) with the non-strict JSON serializer
(``apimachinery/pkg/runtime/serializer/json/json.go``, which calls
``sigs.k8s.io/json.UnmarshalCaseSensitivePreserveInts``). So:

* a field the type does not have (also a field spelled in another case) is dropped silently;
* ``null`` leaves the field unset (a ``null`` map value becomes the element's zero value);
* an empty list or map of an optional field (``omitempty``) is not written back, so it is gone
  (``"nodeSelector": {}`` disappears; ``"containers": []`` stays);
* a value of the wrong JSON type is an ``UnmarshalTypeError`` (``json: cannot unmarshal string
  into Go struct field PodSpec.spec.priority of type int32``): decoding goes on and the first
  such error is returned; an unparsable quantity (``Quantity.UnmarshalJSON``) stops at once and
  its error wins.

Type names in the error text come from the schema (``schemas/kubernetes.json``, built by
:mod:`devapi.schemabuild`): the named string types of the pod's policy and scheduling fields
are listed there (``v1.RestartPolicy``, ``v1.TaintEffect``, ...), any other string field is
reported as ``string``, and every map of quantities as ``v1.ResourceList``.

Semantic equality follows ``apimachinery/pkg/api/equality`` (``Semantic.DeepEqual``) on top of
``third_party/forked/golang/reflect/deep_equal.go``: quantities compare by value (``100m`` ==
``0.1``), an empty map or list equals a missing one, ``null`` equals missing. The schema does
not say which Go fields are pointers, so a zero scalar and a missing one are taken as different
(as for a pointer field).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from classifier.quantities import Quantity, QuantityError
from devapi.types import JSONObject

SCHEMA_FILE = Path(__file__).parent / "schemas" / "kubernetes.json"
POD = "io.k8s.api.core.v1.Pod"
# apimachinery/pkg/api/resource/quantity.go: ErrFormatWrong.
QUANTITY_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class DecodeError(Exception):
    """The typed decoder refused the object; the message is the decoder's own text."""


@dataclass(frozen=True)
class Schema:
    kubernetes: str
    types: Mapping[str, Mapping[str, Any]]


@functools.cache
def schema() -> Schema:
    data = json.loads(SCHEMA_FILE.read_text())
    return Schema(str(data["kubernetes"]), data["types"])


def go_type(expr: str) -> str:
    """The Go type a field type of the schema stands for, as ``reflect.Type.String`` prints it."""
    if expr.startswith("[]"):
        return "[]" + go_type(expr[2:])
    if expr.startswith("map[string]"):
        element = expr[len("map[string]") :]
        return "v1.ResourceList" if element == "quantity" else "map[string]" + go_type(element)
    simple = {
        "string": "string",
        "bytes": "[]uint8",
        "bool": "bool",
        "int32": "int32",
        "int64": "int64",
        "float64": "float64",
        "quantity": "resource.Quantity",
        "intstr": "intstr.IntOrString",
        "time": "v1.Time",
        "any": "interface {}",
    }
    if expr in simple:
        return simple[expr]
    if expr.startswith("string:"):
        return expr[len("string:") :]
    return "v1." + str(schema().types[expr]["go"])


class _Decoder:
    def __init__(self) -> None:
        self.saved: str | None = None
        self.fields: list[str] = []
        self.struct = ""

    def type_error(self, value: str, expr: str) -> None:
        if self.saved is not None:
            return
        target = go_type(expr)
        if self.fields or self.struct:
            self.saved = (
                f"json: cannot unmarshal {value} into Go struct field "
                f"{self.struct}.{'.'.join(self.fields)} of type {target}"
            )
        else:
            self.saved = f"json: cannot unmarshal {value} into Go value of type {target}"

    def value(self, expr: str, value: Any) -> tuple[bool, Any]:
        """(keep, decoded): ``keep`` is False when the field stays unset."""
        if value is None:
            return False, None
        if expr.startswith("[]"):
            return self._list(expr, value)
        if expr.startswith("map[string]"):
            return self._map(expr, value)
        if expr in ("string", "bytes") or expr.startswith("string:"):
            if isinstance(value, str):
                return True, value
            return self._mismatch(value, expr)
        if expr == "bool":
            if isinstance(value, bool):
                return True, value
            return self._mismatch(value, expr)
        if expr in _INT_RANGES:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return self._mismatch(value, expr)
            low, high = _INT_RANGES[expr]
            if isinstance(value, float) or not low <= value <= high:
                self.type_error(f"number {_number_text(value)}", expr)
                return False, None
            return True, value
        if expr == "float64":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True, value
            return self._mismatch(value, expr)
        if expr == "quantity":
            return True, _quantity(value)
        if expr == "intstr":
            return True, _int_or_string(value)
        if expr == "time":
            return True, _time(value)
        if expr == "any":
            return True, value
        return self._struct(expr, value)

    def _mismatch(self, value: Any, expr: str) -> tuple[bool, Any]:
        self.type_error(_json_kind(value), expr)
        return False, None

    def _list(self, expr: str, value: Any) -> tuple[bool, Any]:
        if not isinstance(value, list):
            return self._mismatch(value, expr)
        element = expr[2:]
        result = []
        for item in value:
            keep, decoded = self.value(element, item)
            result.append(decoded if keep else _zero(element))
        return True, result

    def _map(self, expr: str, value: Any) -> tuple[bool, Any]:
        if not isinstance(value, dict):
            return self._mismatch(value, expr)
        element = expr[len("map[string]") :]
        result = {}
        for key, item in value.items():
            if item is None:
                result[key] = _zero(element)
                continue
            keep, decoded = self.value(element, item)
            result[key] = decoded if keep else _zero(element)
        return True, result

    def _struct(self, expr: str, value: Any) -> tuple[bool, Any]:
        if not isinstance(value, dict):
            return self._mismatch(value, expr)
        declared = schema().types[expr]
        fields: Mapping[str, str] = declared["fields"]
        required = declared.get("required") or ()
        result: JSONObject = {}
        outer_struct, depth = self.struct, len(self.fields)
        for key, item in value.items():
            field_type = fields.get(key)
            if field_type is None:
                continue  # unknown (or differently cased) field: dropped, as the decoder does
            self.fields.append(key)
            self.struct = str(declared["go"])
            keep, decoded = self.value(field_type, item)
            collection = field_type.startswith(("[]", "map[string]"))
            if keep and not (collection and not decoded and key not in required):
                result[key] = decoded
            del self.fields[depth:]
            self.struct = outer_struct
        return True, result


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object"


def _number_text(value: int | float) -> str:
    return json.dumps(value)


def _zero(expr: str) -> Any:
    if expr in ("string", "bytes") or expr.startswith("string:"):
        return ""
    if expr == "bool":
        return False
    if expr in ("int32", "int64", "float64", "intstr"):
        return 0
    if expr == "quantity":
        return "0"
    if expr.startswith(("[]", "map[string]")) or expr in ("any", "time"):
        return None
    return {}


def _quantity(value: Any) -> Any:
    """``Quantity.UnmarshalJSON``: any JSON value, as text, must parse as a quantity."""
    try:
        Quantity.from_json(value)
    except QuantityError as err:
        raise DecodeError(QUANTITY_FORMAT_WRONG) from err
    return value


def _int_or_string(value: Any) -> Any:
    """``IntOrString.UnmarshalJSON``: a string, else decoded as an int32 (no field context)."""
    if isinstance(value, str):
        return value
    inner = _Decoder()
    keep, decoded = inner.value("int32", value)
    if inner.saved is not None:
        raise DecodeError(inner.saved)
    return decoded if keep else 0


def _time(value: Any) -> Any:
    """``metav1.Time.UnmarshalJSON``: a string holding an RFC 3339 time."""
    if not isinstance(value, str):
        raise DecodeError(
            f"json: cannot unmarshal {_json_kind(value)} into Go value of type string"
        )
    if value and not _RFC3339.fullmatch(value):
        raise DecodeError(
            f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse "{value}" as '
            '"2006"'
        )
    return value


def decode(type_name: str, obj: JSONObject) -> JSONObject:
    """``obj`` decoded into ``type_name`` as the real server's JSON decoder does; raises
    :class:`DecodeError` with the decoder's text when a value has the wrong type."""
    decoder = _Decoder()
    _, decoded = decoder.value(type_name, obj)
    if decoder.saved is not None:
        raise DecodeError(decoder.saved)
    result: JSONObject = decoded
    return result


def semantic_equal(type_name: str, a: Any, b: Any) -> bool:
    """``equality.Semantic.DeepEqual`` of two decoded objects of ``type_name``."""
    return _equal(type_name, a, b)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (dict, list)) and not value)


def _equal(expr: str, a: Any, b: Any) -> bool:
    if expr.startswith("[]"):
        if _empty(a) or _empty(b):
            return _empty(a) and _empty(b)
        if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
            return False
        return all(_equal(expr[2:], x, y) for x, y in zip(a, b, strict=True))
    if expr.startswith("map[string]"):
        if _empty(a) or _empty(b):
            return _empty(a) and _empty(b)
        if not isinstance(a, dict) or not isinstance(b, dict) or a.keys() != b.keys():
            return False
        element = expr[len("map[string]") :]
        return all(_equal(element, a[k], b[k]) for k in a)
    if expr == "quantity":
        if a is None or b is None:
            return a is b
        try:
            return Quantity.from_json(a) == Quantity.from_json(b)
        except QuantityError:
            return bool(a == b)
    declared = schema().types.get(expr)
    if declared is None or not isinstance(a, dict) or not isinstance(b, dict):
        return bool(a == b)
    fields: Mapping[str, str] = declared["fields"]
    for key in a.keys() | b.keys():
        field_type = fields.get(key, "any")
        left, right = a.get(key), b.get(key)
        scalar_or_struct = field_type == "any" or not field_type.startswith(("[]", "map[string]"))
        if scalar_or_struct and (left is None or right is None):
            if left is not right:
                return False
            continue
        if not _equal(field_type, left, right):
            return False
    return True
