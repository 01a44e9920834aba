"""Reading a pod group's size from the cluster: a GET of the object a ``SizeRef`` names.

The owner Job of an Indexed Job's pod (``spec.parallelism``), a coscheduling ``PodGroup``
(``spec.minMember``), an operator's object: any namespaced object of an API group. Answers are
cached for ``ttl`` seconds, so the members of one group created together cost one read. A
missing object or field, or a read that fails, is an answer without a size that says what is
missing: the member then stays gated (tenantgate never guesses a size).

RBAC: ``get`` on each kind read (``deploy/webhooks/base/rbac.yaml``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import orjson

from classifier.podgroups import SizeRef
from tenants.groups.sizes import SizeAnswer
from tenants.kube.errors import KubeForbidden, KubeNotFound, wrap
from tenants.kube.responses import drain

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT: Final = (5.0, 5.0)
_CACHE_LIMIT: Final = 4096


def resource_of(kind: str) -> str:
    """The resource of ``kind`` as Kubernetes guesses it (``UnsafeGuessKindToResource`` in
    k8s.io/apimachinery/pkg/api/meta/restmapper.go): ``Job`` -> ``jobs``, ``PodGroup`` ->
    ``podgroups``, ``Policy`` -> ``policies``, ``Ingress`` -> ``ingresses``."""
    lower = kind.lower()
    if not lower:
        return lower
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


class KubeSizeReader:
    """:class:`tenants.groups.sizes.SizeReader` through the official client."""

    def __init__(
        self,
        api_client: Any,
        *,
        ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes import client

        self._api: Any = client.CustomObjectsApi(api_client)
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[SizeRef, tuple[float, SizeAnswer]] = {}
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="group-size")

    async def read(self, ref: SizeRef) -> SizeAnswer:
        now = self._clock()
        cached = self._cache.get(ref)
        if cached is not None and cached[0] > now:
            return cached[1]
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self._executor, lambda: self._read(ref))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[ref] = (now + self._ttl, answer)
        return answer

    def _read(self, ref: SizeRef) -> SizeAnswer:
        group, _, version = ref.api_version.rpartition("/")
        what = f"{ref.kind} {ref.namespace}/{ref.name}"
        if not group:
            return SizeAnswer(None, f"{what}: sizes are read from API groups only")
        try:
            response = self._api.get_namespaced_custom_object(
                group,
                version,
                ref.namespace,
                resource_of(ref.kind),
                ref.name,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            document = orjson.loads(drain(response))
        except Exception as exc:
            error = wrap(exc, action=f"read {what}")
            if isinstance(error, KubeNotFound):
                return SizeAnswer(None, f"{what} was not found")
            if isinstance(error, KubeForbidden):
                return SizeAnswer(None, f"tenantgate may not read {what} (RBAC)")
            logger.warning("pod group size: %s", error)
            return SizeAnswer(None, f"{what} could not be read: {error}")
        size = ref.size_of(document) if isinstance(document, dict) else None
        if size is None or size < 1:
            return SizeAnswer(None, f"{what} has no {' or '.join(ref.fields)}")
        return SizeAnswer(size)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["KubeSizeReader", "resource_of"]
