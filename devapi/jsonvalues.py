"""Reading parsed JSON defensively: an object or a list of objects, whatever was sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from devapi.types import JSONObject


def obj(value: Any) -> JSONObject:
    """``value`` if it is a JSON object, else an empty one (not stored anywhere)."""
    return value if isinstance(value, dict) else {}


def objects(value: Any) -> Iterator[JSONObject]:
    """The JSON objects of ``value`` if it is a list, skipping anything else."""
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                yield item
