"""Fixtures: a test API server per test, clients for it, and in-test HTTPS webhooks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devapi import DevAPIServer
from tests.devapi.support import Api, TLSMaterial, WebhookServer, make_tls, new_client


@pytest.fixture
def devapi() -> Iterator[DevAPIServer]:
    with DevAPIServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def kubeconfig(devapi: DevAPIServer, tmp_path: Path) -> Path:
    return devapi.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api = new_client(kubeconfig)
    yield api
    api.close()


@pytest.fixture
def core(api_client: Api) -> Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def webhook_tls(tmp_path: Path) -> TLSMaterial:
    return make_tls(tmp_path / "webhook-tls", dns_names=("localhost", "hook.webhooks.svc"))


@pytest.fixture
def webhooks(webhook_tls: TLSMaterial) -> Iterator[WebhookServer]:
    server = WebhookServer(webhook_tls).start()
    yield server
    server.stop()
