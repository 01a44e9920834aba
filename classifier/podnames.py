"""Names, uids and hashes that controllers give the objects they create, made stable offline.

``tenantgate review`` builds the pod a controller would create from a manifest; these helpers
give it the same kind of generated names (``web-6c5f8d7b9x``), owner references and uids,
derived from the manifest itself so that one manifest always gives the same pod.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from classifier.types import JSONObject

# Alphabet of Kubernetes' rand.SafeEncodeString (no vowels, no look-alike characters).
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(parts).encode()).digest()


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return sorted((str(k), _sorted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def template_hash(template: Mapping[str, Any], *, salt: str = "", length: int = 10) -> str:
    """A stable stand-in for a controller's generated suffix (safe characters)."""
    raw = _digest(repr(_sorted(template)), salt)
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in raw[:length])


def uid(*parts: str) -> str:
    """A stable uid for an object named by ``parts``."""
    return str(uuid.UUID(bytes=_digest(*parts)[:16], version=5))


def owner_reference(
    api_version: str, kind: str, name: str, *, namespace: str, controller: bool = True
) -> JSONObject:
    """An owner reference as a controller writes it (``controller`` and ``blockOwnerDeletion``
    only on the controlling owner)."""
    reference: JSONObject = {
        "apiVersion": api_version or "v1",
        "kind": kind,
        "name": name,
        "uid": uid(api_version, kind, namespace, name),
    }
    if controller:
        reference["controller"] = True
        reference["blockOwnerDeletion"] = True
    return reference
