"""Reading one namespace's labels from the API server, for admission's cache misses.

Admission learns namespace labels from a watch. A namespace created a moment before its first
pod may not have reached the watch yet; without its labels, a ``namespaceSelector`` tenant
would not claim it and the pod would pass unmetered. So on a miss the admitter reads the
namespace itself, as kube-apiserver's NamespaceLifecycle plugin does when its informer has not
seen a namespace (``plugin/pkg/admission/namespace/lifecycle/admission.go``: a live GET).

RBAC: ``get`` on namespaces (``deploy/webhooks/clusterrole.yaml``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import orjson

from tenants.decisions import NamespaceUnreadable
from tenants.kube.errors import KubeNotFound, wrap
from tenants.kube.responses import drain

REQUEST_TIMEOUT: Final = (2.0, 5.0)


class KubeNamespaceReader:
    """``await reader(name)``: the namespace's labels, None when it does not exist; raises
    :class:`NamespaceUnreadable` when the API server cannot say."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._core: Any = client.CoreV1Api(api_client)
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="namespace")

    async def __call__(self, namespace: str) -> Mapping[str, str] | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: self._read(namespace))

    def _read(self, namespace: str) -> Mapping[str, str] | None:
        try:
            response = self._core.read_namespace(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            document = orjson.loads(drain(response))
        except Exception as exc:
            error = wrap(exc, action=f"read namespace {namespace}")
            if isinstance(error, KubeNotFound):
                return None
            raise NamespaceUnreadable(str(error)) from exc
        metadata = document.get("metadata") if isinstance(document, dict) else None
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        if not isinstance(labels, dict):
            return {}
        return {str(k): str(v) for k, v in labels.items()}

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["KubeNamespaceReader"]
