"""Shared fixtures for the whole suite.

``kube_cluster`` is the real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler v1.37 from ``make kube``) with simulated nodes and tenantgate installed from
deploy/: one for the whole run, started by the first test that asks for it. Tests take it
through ``kube``, which puts the cluster back (no webhooks, no test objects, no faults) after
each test; they isolate themselves by namespace and tenant, and start their own tenantgate.
Tests that use it are marked ``kube``.

``make test`` runs two pytest-xdist workers (``--dist loadgroup``): the tests on a control plane
(the ``kube`` ones and tests/integration, whose walkthrough starts its own) form the xdist group
``kube`` and so run on one worker, in order, with one control plane; the others run on the
second worker meanwhile. tests/xdistgroups.py does the grouping that xdist's own no longer does
under pytest 9.
"""

from __future__ import annotations

import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

import certs
from testcluster import Cluster

_CLUSTER_FIXTURES = frozenset({"kube", "kube_cluster"})
_INTEGRATION = Path(__file__).resolve().parent / "integration"
# The directory where xdist's workers write the tests' groups (tests/xdistgroups.py).
_GROUPS = "tenantgate_xdist_groups"
_GROUPS_DIRECTORY = pytest.StashKey[tempfile.TemporaryDirectory[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube)
        if item.get_closest_marker("kube") or _INTEGRATION in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("kube"))
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and _GROUPS in workerinput:
        from tests.xdistgroups import write_groups

        directory = Path(workerinput[_GROUPS])
        write_groups(directory / f"groups-{workerinput['workerid']}", items)


def _groups_directory(config: pytest.Config) -> Path:
    if _GROUPS_DIRECTORY not in config.stash:
        config.stash[_GROUPS_DIRECTORY] = tempfile.TemporaryDirectory(prefix="tenantgate-xdist-")
    return Path(config.stash[_GROUPS_DIRECTORY].name)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """On xdist's controller, for each worker: where to write the tests' groups."""
    if node.config.getvalue("dist") == "loadgroup":
        node.workerinput[_GROUPS] = str(_groups_directory(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdistgroups import GroupScheduling

    return GroupScheduling(config, log, files=_groups_directory(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GROUPS_DIRECTORY in config.stash:
        config.stash[_GROUPS_DIRECTORY].cleanup()


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
