"""The ``scale`` subresource of Deployments and ReplicaSets (``kubectl scale``): an
``autoscaling/v1`` Scale read from and written to ``spec.replicas``
(``pkg/registry/apps/deployment/storage/storage.go``, ``ScaleREST``). The write goes through
admission as an update of the parent object.
"""

from __future__ import annotations

from typing import Any

from devapi import errors
from devapi.patching import GENERIC_PATCH_META, apply_patch
from devapi.registry import Registry, RequestContext
from devapi.resources import ResourceType
from devapi.types import JSONObject
from devapi.workloads.kinds import scale_of, scaled


def _check(name: str, scale: Any) -> None:
    replicas = (scale.get("spec") or {}).get("replicas", 0) if isinstance(scale, dict) else None
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise errors.bad_request('Scale in version "v1" cannot be handled as a Scale')
    if replicas < 0:
        raise errors.invalid_object(
            "autoscaling",
            "Scale",
            name,
            [errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
        )


async def serve_scale(
    registry: Registry,
    rt: ResourceType,
    version: str,
    namespace: str,
    name: str,
    *,
    verb: str,
    body: Any,
    content_type: str,
    ctx: RequestContext,
) -> JSONObject:
    current = registry.get(rt, version, namespace, name)
    if verb == "get":
        return scale_of(current)
    if verb == "patch":
        body = apply_patch(content_type, scale_of(current), body, meta=GENERIC_PATCH_META)
    elif verb != "update":
        raise errors.method_not_allowed()
    _check(name, body)
    updated = await registry.update(rt, version, namespace, name, scaled(current, body), ctx)
    return scale_of(updated)
