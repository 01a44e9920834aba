"""Tests for admission.patch: JSONPatch between two objects, base64 encoding."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.patch import (
    PatchError,
    apply_json_patch,
    decode_patch,
    encode_patch,
    encoded_json_patch,
    make_json_patch,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "reviews"


def pod() -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads((FIXTURES / "v1-create-pod.json").read_bytes())
    obj: dict[str, Any] = document["request"]["object"]
    return obj


def canonical(value: Any) -> bytes:
    # Distinguishes 1 from true and ignores member order, like JSON does.
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def test_same_object_gives_no_operations() -> None:
    original = pod()

    assert make_json_patch(original, original) == []


def test_equal_copy_gives_no_operations() -> None:
    original = pod()

    assert make_json_patch(original, copy.deepcopy(original)) == []


def test_reordered_members_give_no_operations() -> None:
    original = {"a": 1, "b": {"c": 2, "d": 3}}
    reordered = {"b": {"d": 3, "c": 2}, "a": 1}

    assert make_json_patch(original, reordered) == []


def test_mutation_round_trips_and_leaves_inputs_alone() -> None:
    original = pod()
    before = canonical(original)
    patched = copy.deepcopy(original)
    patched["spec"]["schedulerName"] = "tenantgate-scheduler"
    patched["spec"]["priorityClassName"] = "team-a-burst"
    patched["spec"]["priority"] = 1000
    patched["spec"]["tolerations"].append(
        {"key": "workload", "operator": "Equal", "value": "web", "effect": "NoSchedule"}
    )
    patched["metadata"].setdefault("annotations", {})["tenantgate.io/reservation"] = "r-1"
    patched_before = canonical(patched)

    operations = make_json_patch(original, patched)

    assert operations
    assert canonical(apply_json_patch(original, operations)) == canonical(patched)
    assert canonical(original) == before
    assert canonical(patched) == patched_before


def test_paths_escape_slash_and_tilde() -> None:
    original: dict[str, Any] = {"metadata": {"annotations": {"keep": "1"}}}
    patched = {"metadata": {"annotations": {"keep": "1", "tenantgate.io/tier": "burst", "a~b": ""}}}

    operations = make_json_patch(original, patched)

    paths = sorted(op["path"] for op in operations)
    assert paths == ["/metadata/annotations/a~0b", "/metadata/annotations/tenantgate.io~1tier"]


def test_true_and_one_differ() -> None:
    # Python says 1 == True; JSON (and the API server) do not.
    operations = make_json_patch({"x": 1}, {"x": True})

    assert operations == [{"op": "replace", "path": "/x", "value": True}]


def test_only_differing_members_are_patched() -> None:
    original = pod()
    patched = copy.deepcopy(original)
    # Same members in another order at every level: still equal JSON.
    patched["spec"] = dict(reversed(list(patched["spec"].items())))
    patched["metadata"]["labels"] = {"pod-template-hash": "7d4b9c8f5", "app": "web"}
    patched["spec"]["priority"] = 7

    assert make_json_patch(original, patched) == [
        {"op": "replace", "path": "/spec/priority", "value": 7}
    ]
    assert make_json_patch(original, dict(reversed(list(original.items())))) == []


def test_value_moved_between_objects_applies() -> None:
    original = {"a": {"keep": 1, "x": {"deep": [1, 2, 3]}}, "b": {"keep": 2}}
    patched = {"a": {"keep": 1}, "b": {"keep": 2, "y": {"deep": [1, 2, 3]}}}

    operations = make_json_patch(original, patched)

    assert rfc6902_apply(original, operations) == patched


@pytest.mark.parametrize(
    ("original", "patched"),
    [({"x": 1}, {"x": 1.0}), ({"x": 0}, {"x": False}), ({"x": None}, {"x": {}}), ({"x": []}, {})],
)
def test_values_of_different_json_types_differ(
    original: dict[str, Any], patched: dict[str, Any]
) -> None:
    operations = make_json_patch(original, patched)

    assert operations
    assert canonical(rfc6902_apply(original, operations)) == canonical(patched)


def test_unserializable_object_is_a_patch_error() -> None:
    with pytest.raises(PatchError, match="not JSON-serializable"):
        make_json_patch({"x": 1}, {"x": {1, 2}})


def test_the_encoded_patch_is_the_encoded_operations_serialized_once() -> None:
    """The response's patch (one serialization) is what encoding the operations gives; None
    when nothing changes; an unserializable value is the same PatchError."""
    original = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c"}]}}
    patched = {
        "metadata": {"labels": {"a": "1", "tenantgate.io/tier": "burst"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
    }
    assert encoded_json_patch(original, patched) == encode_patch(make_json_patch(original, patched))
    assert encoded_json_patch(original, copy.deepcopy(original)) is None
    assert encoded_json_patch(original, original) is None
    with pytest.raises(PatchError, match="not JSON-serializable"):
        encoded_json_patch({"x": 1}, {"x": {1, 2}})


def test_encode_is_base64_json() -> None:
    operations = [{"op": "add", "path": "/spec/priority", "value": 10}]

    encoded = encode_patch(operations)

    assert orjson.loads(base64.b64decode(encoded)) == operations
    assert decode_patch(encoded) == operations
    assert decode_patch(encoded.encode()) == operations


@pytest.mark.parametrize(
    ("encoded", "message"),
    [
        ("not base64!", "not a base64 JSONPatch"),
        (base64.b64encode(b"{not json").decode(), "not a base64 JSONPatch"),
        (base64.b64encode(b'{"op": "add"}').decode(), "must be a JSON array of operation objects"),
        (base64.b64encode(b"[1]").decode(), "must be a JSON array of operation objects"),
    ],
)
def test_decode_rejects_what_is_not_a_patch(encoded: str, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        decode_patch(encoded)


def test_apply_rejects_a_patch_that_does_not_fit() -> None:
    with pytest.raises(PatchError, match="patch does not apply"):
        apply_json_patch({"a": {}}, [{"op": "remove", "path": "/a/missing"}])


def test_apply_does_not_modify_the_document() -> None:
    document = {"a": [1, 2]}

    result = apply_json_patch(document, [{"op": "add", "path": "/a/-", "value": 3}])

    assert result == {"a": [1, 2, 3]}
    assert document == {"a": [1, 2]}


def rfc6902_apply(document: Any, operations: list[dict[str, Any]]) -> Any:
    """An independent, minimal RFC 6902 applier, so the library does not grade its own patches."""
    document = copy.deepcopy(document)

    def parts(pointer: str) -> list[str]:
        assert pointer == "" or pointer.startswith("/"), pointer
        return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]

    def parent_of(path: list[str]) -> Any:
        node = document
        for part in path[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def get(path: list[str]) -> Any:
        return parent_of([*path, ""]) if path else document

    def add(path: list[str], value: Any) -> None:
        nonlocal document
        if not path:
            document = value
            return
        parent, key = parent_of(path), path[-1]
        if isinstance(parent, list):
            index = len(parent) if key == "-" else int(key)
            assert 0 <= index <= len(parent), (index, len(parent))
            parent.insert(index, value)
        else:
            parent[key] = value

    def remove(path: list[str]) -> Any:
        parent, key = parent_of(path), path[-1]
        if isinstance(parent, list):
            return parent.pop(int(key))
        return parent.pop(key)

    for op in operations:
        path = parts(op["path"])
        if op["op"] == "add":
            add(path, copy.deepcopy(op["value"]))
        elif op["op"] == "remove":
            remove(path)
        elif op["op"] == "replace":
            if path:
                remove(path)
            add(path, copy.deepcopy(op["value"]))
        elif op["op"] == "move":
            source = parts(op["from"])
            assert path[: len(source)] != source or path == source, "moved into itself"
            add(path, remove(source))
        elif op["op"] == "copy":
            add(path, copy.deepcopy(get(parts(op["from"]))))
        else:
            raise AssertionError(f"not an RFC 6902 operation: {op['op']}")
    return document


KEYS = st.sampled_from(["a", "b", "c/d", "e~f"])
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.sampled_from([0.0, 1.0])
    | st.sampled_from(["", "a", "b/c", "~"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=15,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEYS, JSON), st.dictionaries(KEYS | st.text(max_size=3), JSON))
def test_patch_turns_any_document_into_any_other(
    original: dict[str, Any], patched: dict[str, Any]
) -> None:
    operations = make_json_patch(original, patched)

    assert canonical(rfc6902_apply(original, operations)) == canonical(patched)
    assert canonical(apply_json_patch(original, operations)) == canonical(patched)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_patch_round_trips_edits_of_a_real_pod(data: st.DataObject) -> None:
    original = pod()
    patched = copy.deepcopy(original)
    spec = patched["spec"]
    for _ in range(data.draw(st.integers(1, 5))):
        edit = data.draw(st.sampled_from(["toleration", "label", "drop", "reorder", "priority"]))
        if edit == "toleration":
            index = data.draw(st.integers(0, len(spec["tolerations"])))
            spec["tolerations"].insert(index, {"key": data.draw(st.text(max_size=5))})
        elif edit == "label":
            patched["metadata"]["labels"][data.draw(st.text(max_size=5))] = "x"
        elif edit == "drop" and spec["tolerations"]:
            spec["tolerations"].pop(data.draw(st.integers(0, len(spec["tolerations"]) - 1)))
        elif edit == "reorder":
            spec["tolerations"].reverse()
        else:
            spec["priority"] = data.draw(st.integers(0, 10**9))

    operations = make_json_patch(original, patched)

    assert canonical(apply_json_patch(original, operations)) == canonical(patched)
    assert canonical(rfc6902_apply(original, operations)) == canonical(patched)
