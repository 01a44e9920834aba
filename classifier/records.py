"""Records: value classes that are frozen to the type checker and cheap to build.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, which costs
about three times a plain slot assignment, and the admission path builds a dozen such values
per pod (the request, its verdict, the classification, the booking...). :func:`record` makes a
class a slotted dataclass that mypy checks as frozen (no assignment to a field type-checks),
hashed by its fields as a frozen one is, and built by plain slot assignments at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """``cls`` as a slotted dataclass, frozen to the type checker (see the module)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
