"""The real control plane (the session's ``kube`` cluster) and connections to it, for the tests
of ``tenants.kube``.

The code under test talks as tenantgate does in a cluster: with a token of the shipped
ServiceAccount, so the shipped RBAC is enforced, and through the fault proxy, so a test can
arm faults (``kube.proxy``). What a test does itself to set the scene (create namespaces and
pods, read what was stored) it does as the cluster admin, straight to the API server.

The cluster serves the whole run: namespaces stay between tests (emptied), so tests name
theirs after themselves; ledgers, leases and faults are cleared after each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tenants.kube.connection import ClusterTarget, Connection
from testcluster import Cluster


@pytest.fixture
def kubeconfig(kube: Cluster) -> Path:
    """The cluster admin's (system:masters), straight to the API server: what tests act as."""
    return kube.plane.admin_kubeconfig


@pytest.fixture
def tenantgate_kubeconfig(kube: Cluster, tmp_path: Path) -> Path:
    """tenantgate's: a token of the shipped ServiceAccount, through the fault proxy."""
    return kube.tenantgate_kubeconfig(tmp_path / "tenantgate.kubeconfig")


@pytest.fixture
def connection(tenantgate_kubeconfig: Path) -> Iterator[Connection]:
    """The code under test's connection: tenantgate's ServiceAccount, through the proxy."""
    opened = Connection.open(ClusterTarget("kubeconfig", "test", str(tenantgate_kubeconfig)))
    yield opened
    opened.close()


def new_api_client(kubeconfig: Path) -> Any:
    """An official client for ``kubeconfig`` (typed Any: tests pass plain dicts as bodies)."""
    factory: Any = config.new_client_from_config
    return factory(config_file=str(kubeconfig))


@pytest.fixture
def admin_client(kubeconfig: Path) -> Iterator[Any]:
    """The admin's official client, for setting the scene and reading what was stored."""
    api_client = new_api_client(kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture
def tenantgate_client(tenantgate_kubeconfig: Path) -> Iterator[Any]:
    """tenantgate's official client (ServiceAccount token, through the fault proxy)."""
    api_client = new_api_client(tenantgate_kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture
def core(admin_client: Any) -> Any:
    return client.CoreV1Api(admin_client)


def create_namespace(core: Any, name: str, labels: dict[str, str] | None = None) -> None:
    """Create namespace ``name``, or give the existing one exactly ``labels``.

    Namespaces outlive a test (deleting one takes seconds), so a test that creates one may find
    it left, emptied, by an earlier test or an earlier run of itself.
    """
    wanted = dict(labels or {})
    try:
        core.create_namespace({"metadata": {"name": name, "labels": wanted}})
        return
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    existing = core.read_namespace(name)
    patch: dict[str, str | None] = {
        key: None
        for key in existing.metadata.labels or {}
        if key not in wanted and key != "kubernetes.io/metadata.name"
    }
    patch.update(wanted)
    core.patch_namespace(name, {"metadata": {"labels": patch}})
