"""Reading what ``tenantgate lint`` checks a config against from a live cluster: running pods
(for the schedulers that run), namespaces and their labels, and tenantgate's webhook
configurations. One list call each; nothing is written."""

from __future__ import annotations

import json
from typing import Any

from tenants.clustercheck import ClusterFacts, RunningPod, running_schedulers, webhook_scopes
from tenants.kube.connection import Connection
from tenants.kube.errors import KubeError, wrap
from tenants.kube.responses import drain


def read_cluster_facts(connection: Connection) -> ClusterFacts:
    """The cluster's running schedulers, namespaces and tenantgate webhooks; raises KubeError."""
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(connection.api_client)
    pods = _items(
        "list running pods",
        connection.core.list_pod_for_all_namespaces,
        field_selector="status.phase=Running",
    )
    namespaces = _items("list namespaces", connection.core.list_namespace)
    configurations = [
        {**item, "kind": kind}
        for kind, call in (
            ("MutatingWebhookConfiguration", admission.list_mutating_webhook_configuration),
            ("ValidatingWebhookConfiguration", admission.list_validating_webhook_configuration),
        )
        for item in _items(f"list {kind}s", call)
    ]
    return ClusterFacts(
        schedulers=running_schedulers(_running_pod(pod) for pod in pods),
        namespaces={
            str(ns["metadata"]["name"]): dict(ns["metadata"].get("labels") or {})
            for ns in namespaces
        },
        webhooks=webhook_scopes(configurations),
    )


def _items(action: str, call: Any, **options: Any) -> list[dict[str, Any]]:
    try:
        response = call(_preload_content=False, _request_timeout=60, **options)
        document = json.loads(drain(response))
    except KubeError:
        raise
    except Exception as exc:
        raise wrap(exc, action=action) from exc
    items: list[dict[str, Any]] = document.get("items") or []
    return items


def _running_pod(pod: dict[str, Any]) -> RunningPod:
    spec = pod.get("spec") or {}
    return RunningPod(
        scheduler=str(spec.get("schedulerName") or ""),
        node=str(spec.get("nodeName") or ""),
        labels=dict((pod.get("metadata") or {}).get("labels") or {}),
    )


__all__ = ["read_cluster_facts"]
