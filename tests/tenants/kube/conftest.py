"""A test API server and a connection to it, for the tests of ``tenants.kube``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from devapi import DevAPIServer
from tenants.kube.connection import ClusterTarget, Connection


@pytest.fixture
def devapi() -> Iterator[DevAPIServer]:
    with DevAPIServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def kubeconfig(devapi: DevAPIServer, tmp_path: Path) -> Path:
    return devapi.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def connection(kubeconfig: Path) -> Iterator[Connection]:
    opened = Connection.open(ClusterTarget("kubeconfig", "test", str(kubeconfig)))
    yield opened
    opened.close()


def new_api_client(kubeconfig: Path) -> Any:
    """An official client for ``kubeconfig`` (typed Any: tests pass plain dicts as bodies)."""
    factory: Any = config.new_client_from_config
    return factory(config_file=str(kubeconfig))


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[Any]:
    api_client = new_api_client(kubeconfig)
    yield client.CoreV1Api(api_client)
    api_client.close()
