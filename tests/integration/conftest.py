"""Fixtures: the real control plane with tenantgate installed from deploy/, a config, and
tenantgate started on it with the shipped ServiceAccount's token (through the fault proxy)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission.runtime import Timings
from admission.settings import Settings
from testcluster import Cluster
from tests.integration.harness import (
    RejectingWebhook,
    Tenantgate,
    api_client,
    wait_webhooks_active,
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
def kubeconfig(kube: Cluster) -> Path:
    """The cluster admin's (system:masters): what the tests act as."""
    return kube.plane.admin_kubeconfig


@pytest.fixture
def tenantgate_kubeconfig(kube: Cluster, tmp_path: Path) -> Path:
    """tenantgate's: a token of the shipped ServiceAccount, through the fault proxy."""
    return kube.tenantgate_kubeconfig(tmp_path / "tenantgate.kubeconfig")


@pytest.fixture
def cert_dir(kube_cert_dir: Path) -> Path:
    """The serving certificate the installed webhooks' caBundle trusts."""
    return kube_cert_dir


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def settings(tenantgate_kubeconfig: Path, cert_dir: Path, config_file: Path) -> Settings:
    return Settings(
        config=config_file,
        cert_dir=cert_dir,
        host="127.0.0.1",
        port=0,
        metrics_host="127.0.0.1",
        metrics_port=0,
        kubeconfig=tenantgate_kubeconfig,
        shutdown_grace_seconds=1,
    )


StartTenantgate = Callable[..., Tenantgate]


@pytest.fixture
def start_tenantgate(
    settings: Settings, kube: Cluster, kubeconfig: Path
) -> Iterator[StartTenantgate]:
    """Start tenantgate, point the webhooks at it, wait until ready and called; stopped after
    the test (the webhooks are unregistered then)."""
    running: list[Tenantgate] = []

    def start(timings: Timings = QUIET, clock: Callable[[], float] = time.time) -> Tenantgate:
        tenantgate = Tenantgate(settings, timings=timings, clock=clock).start()
        running.append(tenantgate)
        kube.serve([tenantgate.port])
        tenantgate.wait_ready()
        wait_webhooks_active(kubeconfig, [tenantgate.metrics_url])
        return tenantgate

    yield start
    kube.unregister_webhooks()
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
