"""Type aliases for parsed JSON, the test API server's own: it stands for Kubernetes and imports
nothing of tenantgate's policy code."""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = Any
JSONObject: TypeAlias = dict[str, Any]
