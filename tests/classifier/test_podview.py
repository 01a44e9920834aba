"""Tests for classifier.podview: reads that treat a field of the wrong JSON type as absent, and
``clone``, which copies a JSON value."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from classifier import podview

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.sampled_from([0.0, 1.5])
    | st.sampled_from(["", "a", "b"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=4)
    ),
    max_leaves=20,
)


def containers_of(value: Any) -> list[Any]:
    """Every dict and list inside ``value``, ``value`` included."""
    if isinstance(value, dict):
        return [value, *(found for item in value.values() for found in containers_of(item))]
    if isinstance(value, list):
        return [value, *(found for item in value for found in containers_of(item))]
    return []


@given(JSON)
def test_clone_is_an_equal_value_sharing_no_dict_or_list(value: Any) -> None:
    copied = podview.clone(value)
    # Equal serializations keep 1, 1.0 and true apart, and the members' order.
    assert orjson.dumps(copied) == orjson.dumps(value)
    originals = {id(item) for item in containers_of(value)}
    assert not originals & {id(item) for item in containers_of(copied)}


def test_a_cloned_list_of_strings_can_change_alone() -> None:
    labels = {"app": "web", "tier": "front"}
    pod = {"metadata": {"labels": labels}, "spec": {"args": ["--port", "80"]}}
    copied = podview.clone(pod)
    copied["metadata"]["labels"]["team"] = "a"
    copied["spec"]["args"].append("--debug")
    assert pod == {"metadata": {"labels": labels}, "spec": {"args": ["--port", "80"]}}
    assert labels == {"app": "web", "tier": "front"}


@pytest.mark.parametrize("meta", [None, "x", 1, ["a"], {"annotations": ["a"]}])
def test_reads_of_a_malformed_metadata_find_nothing(meta: Any) -> None:
    pod = {"metadata": meta, "spec": "x"}
    assert podview.metadata(pod) == ({} if not isinstance(meta, dict) else meta)
    assert podview.spec(pod) == {}
    assert podview.annotation(pod, "a") is None


def test_annotation_reads_only_a_string() -> None:
    pod = {"metadata": {"annotations": {"a": "1", "b": 2, "c": None}}}
    assert podview.annotation(pod, "a") == "1"
    assert podview.annotation(pod, "b") is None
    assert podview.annotation(pod, "c") is None
    assert podview.annotation(pod, "d") is None
