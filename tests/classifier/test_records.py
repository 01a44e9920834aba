"""classifier.records.record: the value a frozen dataclass is, built without its __init__."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
from mypy import api as mypy_api

from classifier.records import record


@record
class _Point:
    x: int
    y: int = 0
    note: Mapping[str, str] | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True, slots=True)
class _FrozenPoint:
    x: int
    y: int = 0
    note: Mapping[str, str] | None = dataclasses.field(default=None, compare=False)


def test_a_record_compares_hashes_and_prints_as_the_frozen_dataclass_it_stands_for() -> None:
    point, frozen = _Point(1, y=2, note={"a": "b"}), _FrozenPoint(1, y=2, note={"a": "b"})
    assert point == _Point(1, 2)
    assert point != _Point(2, 2)
    assert hash(point) == hash(_Point(1, 2, note={"c": "d"})) == hash(frozen)
    assert {point, _Point(1, 2)} == {point}
    assert repr(point) == repr(frozen).replace("_FrozenPoint", "_Point")
    assert dataclasses.astuple(point) == dataclasses.astuple(frozen)
    assert dataclasses.replace(point, y=5) == _Point(1, 5)
    assert _Point.__match_args__ == ("x", "y", "note")


def test_a_record_has_slots_and_no_dict() -> None:
    point = _Point(1)
    assert not hasattr(point, "__dict__")
    with pytest.raises(AttributeError):
        object.__setattr__(point, "z", 1)


def test_a_record_holding_a_dict_is_unhashable_as_a_frozen_dataclass_is() -> None:
    @record
    class Holder:
        members: dict[str, int]

    with pytest.raises(TypeError, match="unhashable"):
        hash(Holder({"a": 1}))


def test_the_type_checker_refuses_to_assign_a_field_of_a_record() -> None:
    """What makes a record a value: mypy checks it as frozen (no field can be assigned)."""
    source = (
        "from classifier.records import record\n@record\nclass Point:\n    x: int\nPoint(1).x = 2\n"
    )
    out, _, status = mypy_api.run(["--strict", "--no-incremental", "-c", source])
    assert status == 1, out
    assert 'Property "x" defined in "Point" is read-only' in out
