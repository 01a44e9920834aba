"""What a real server exposes on ``/metrics``, for the tests of the docs, alerts and dashboard.

:func:`live_exposition` starts one real ``tenantgate serve`` process on the real control plane
with the ``kubernetes`` ledger (so the ledger store's and the leader's metrics are there too),
creates pods that are admitted on each tier, denied, and in a namespace no tenant claims, waits
for a recount, and returns the exposition text. It runs once per test run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from testcluster import Cluster
from tests.integration.harness import create_namespace, eventually
from tests.integration.test_ha import create_pod, ha_cluster, pod

UNCLAIMED_NAMESPACE = "nobody-claims-this-5f3a"


_CACHE: dict[str, str] = {}


def live_exposition(kube: Cluster, cert_dir: Path) -> str:
    """The exposition, made once per test run on the session's control plane."""
    if "text" not in _CACHE:
        _CACHE["text"] = _expose(kube, cert_dir)
    return _CACHE["text"]


def _expose(kube: Cluster, cert_dir: Path) -> str:
    with (
        tempfile.TemporaryDirectory() as directory,
        ha_cluster(
            kube, Path(directory), cert_dir=cert_dir, replicas=1, guaranteed=1, ceiling=2
        ) as cluster,
    ):
        (replica,) = cluster.replicas
        api = cluster.api_client()
        try:
            core: Any = client.CoreV1Api(api)
            outcomes = [create_pod(core, name) for name in ("first", "second", "third")]
            assert outcomes == ["created", "created", "denied"], outcomes
            create_namespace(core, {"metadata": {"name": UNCLAIMED_NAMESPACE}})
            stray = pod("stray")
            stray["metadata"]["namespace"] = UNCLAIMED_NAMESPACE
            core.create_namespaced_pod(UNCLAIMED_NAMESPACE, stray)
        finally:
            api.close()
        eventually(
            lambda: replica.metrics().get("tenantgate_ledger_recounts_total", 0) >= 1,
            "a recount",
        )
        status, body = replica.get("/metrics")
        assert status == 200
        return body.decode()


# The suffixes of a family's series, by type (what PromQL names).
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
    "unknown": ("",),
}


def exposed_series(text: str) -> set[str]:
    """Every series name the exposition holds or, for families without samples yet, will hold."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names
