"""Fixtures: the test API server with tenantgate's priority classes, certificates, a config."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import certs
from admission.runtime import Timings
from admission.settings import Settings
from devapi import DevAPIServer
from tests.integration.harness import (
    MANIFESTS,
    RejectingWebhook,
    Tenantgate,
    api_client,
    register_webhooks,
)

# tenant-guaranteed is 900 here and 1000 in the cluster: the cluster's value must win.
CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 900}
profiles: {general: {}}
reservationTTLSeconds: 2
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed: {cpu: "4", memory: 8Gi, pods: "20"}
      burst: {ratio: 1.5}
  team-b:
    namespaceSelector: {matchLabels: {tenant: b}}
    quota: {guaranteed: {cpu: "8"}}
  team-c:
    namespaceSelector: {matchLabels: {tenant: c}}
    quota: {guaranteed: {cpu: "8"}}
"""

# The incremental ledger is what these tests check: the recount only runs when a test asks.
QUIET = Timings(
    config_poll_seconds=0.2,
    sweep_seconds=0.2,
    recount_seconds=3600,
    watch_timeout_seconds=60,
)


@pytest.fixture
def devapi() -> Iterator[DevAPIServer]:
    with DevAPIServer(bookmark_interval=0.2, manifests=MANIFESTS) as server:
        yield server


@pytest.fixture
def kubeconfig(devapi: DevAPIServer, tmp_path: Path) -> Path:
    return devapi.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    certs.init(directory, service="tenantgate", namespace="tenantgate-system")
    return directory


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def settings(kubeconfig: Path, cert_dir: Path, config_file: Path) -> Settings:
    return Settings(
        config=config_file,
        cert_dir=cert_dir,
        host="127.0.0.1",
        port=0,
        metrics_host="127.0.0.1",
        metrics_port=0,
        kubeconfig=kubeconfig,
        shutdown_grace_seconds=1,
    )


StartTenantgate = Callable[..., Tenantgate]


@pytest.fixture
def start_tenantgate(
    settings: Settings, kubeconfig: Path, cert_dir: Path
) -> Iterator[StartTenantgate]:
    """Start tenantgate, register its webhooks, wait until ready; stopped after the test."""
    running: list[Tenantgate] = []

    def start(timings: Timings = QUIET, clock: Callable[[], float] = time.time) -> Tenantgate:
        tenantgate = Tenantgate(settings, timings=timings, clock=clock).start()
        running.append(tenantgate)
        register_webhooks(
            kubeconfig,
            url=tenantgate.url,
            ca_bundle=certs.MaterialPaths(cert_dir).ca_cert.read_bytes(),
        )
        tenantgate.wait_ready()
        return tenantgate

    yield start
    for tenantgate in running:
        tenantgate.stop()


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[Any]:
    api = api_client(kubeconfig)
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
def rejecting_webhook(kubeconfig: Path, cert_dir: Path) -> Iterator[RejectingWebhook]:
    webhook = RejectingWebhook(cert_dir).start(kubeconfig)
    yield webhook
    webhook.stop()
