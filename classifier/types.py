"""Shared type aliases for parsed JSON objects."""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = Any
JSONObject: TypeAlias = dict[str, Any]
