"""Shared fixtures for the whole suite.

``kube_cluster`` is the real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler v1.37 from ``make kube``) with simulated nodes and tenantgate installed from
deploy/: one for the whole run, started by the first test that asks for it. Tests take it
through ``kube``, which puts the cluster back (no webhooks, no test objects, no faults) after
each test; they isolate themselves by namespace and tenant, and start their own tenantgate.
Tests that use it are marked ``kube``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

import certs
from testcluster import Cluster

_CLUSTER_FIXTURES = frozenset({"kube", "kube_cluster"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("kube")
    with Cluster(workdir) as cluster:
        cert_dir = workdir / "tenantgate-certs"
        certs.init(cert_dir, service="tenantgate", namespace="tenantgate-system")
        cluster.install(ca_bundle=certs.MaterialPaths(cert_dir).ca_cert.read_bytes())
        yield cluster


@pytest.fixture
def kube(kube_cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, put back after the test."""
    yield kube_cluster
    kube_cluster.reset()


@pytest.fixture(scope="session")
def kube_cert_dir(kube_cluster: Cluster) -> Path:
    """tenantgate's TLS material: the installed webhooks' caBundle trusts it."""
    return kube_cluster.workdir / "tenantgate-certs"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and "kube" in getattr(item, "fixturenames", ()):
        cluster = getattr(item, "funcargs", {}).get("kube")
        if isinstance(cluster, Cluster):
            report.sections.append(("control plane logs", cluster.plane.log_tails(25)))
    return report
