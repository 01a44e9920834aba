"""tenantgate's own webhooks, end to end through the test API server, on the paths only a
faithful server exercises: AdmissionReview v1beta1.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

import certs
from admission.settings import Settings
from devapi import DevAPIServer
from tests.integration.harness import WEBHOOKS, Tenantgate, api_client, pod

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed: {cpu: "2", memory: 4Gi, pods: "10"}
      burst: {ratio: 1.5}
"""


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    manifests = [
        WEBHOOKS / "namespace.yaml",
        WEBHOOKS / "priorityclass-tenant-burst.yaml",
        WEBHOOKS / "priorityclass-tenant-guaranteed.yaml",
    ]
    with DevAPIServer(bookmark_interval=0.2, manifests=manifests) as server:
        yield server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def tenantgate(kubeconfig: Path, tmp_path: Path) -> Iterator[Tenantgate]:
    from admission.runtime import Timings

    cert_dir = tmp_path / "certs"
    certs.init(cert_dir, service="tenantgate", namespace="tenantgate-system")
    config = tmp_path / "tenantgate.yaml"
    config.write_text(CONFIG)
    settings = Settings(
        config=config,
        cert_dir=cert_dir,
        host="127.0.0.1",
        port=0,
        metrics_host="127.0.0.1",
        metrics_port=0,
        kubeconfig=kubeconfig,
        shutdown_grace_seconds=1,
    )
    timings = Timings(
        config_poll_seconds=0.2,
        sweep_seconds=0.2,
        recount_seconds=3600,
        cert_check_seconds=1,
        watch_timeout_seconds=60,
    )
    with Tenantgate(settings, timings=timings) as running:
        bundle = certs.MaterialPaths(cert_dir).ca_cert.read_bytes()
        register_v1beta1(kubeconfig, url=running.url, ca_bundle=bundle)
        running.wait_ready()
        yield running


def register_v1beta1(kubeconfig: Path, *, url: str, ca_bundle: bytes) -> None:
    """The shipped webhook configurations, listing v1beta1 first (as configurations written for
    older API servers do)."""
    api = api_client(kubeconfig)
    registration: Any = client.AdmissionregistrationV1Api(api)
    try:
        for file, create in (
            (
                "mutatingwebhookconfiguration.yaml",
                registration.create_mutating_webhook_configuration,
            ),
            (
                "validatingwebhookconfiguration.yaml",
                registration.create_validating_webhook_configuration,
            ),
        ):
            document = yaml.safe_load((WEBHOOKS / file).read_text())
            for webhook in document["webhooks"]:
                path = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {
                    "url": f"{url}{path}",
                    "caBundle": base64.b64encode(ca_bundle).decode("ascii"),
                }
                webhook["admissionReviewVersions"] = ["v1beta1", "v1"]
            create(document)
    finally:
        api.close()


def test_tenantgate_admits_and_denies_through_admission_review_v1beta1(
    tenantgate: Tenantgate, kubeconfig: Path
) -> None:
    """webhook/request/admissionreview.go (CreateAdmissionObjects, VerifyAdmissionResponse):
    a webhook listing v1beta1 first is sent v1beta1 reviews, and its v1beta1 answers (patch,
    denial) are applied. tenantgate answers in the version it was asked."""
    api = api_client(kubeconfig)
    core: Any = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": "team-a"}})
        created = core.create_namespaced_pod("team-a", pod("web", cpu="1500m", memory="1Gi"))
        assert created.metadata.labels["tenantgate.io/tenant"] == "team-a"
        assert created.metadata.labels["tenantgate.io/tier"] == "guaranteed"
        assert (created.spec.priority_class_name, created.spec.priority) == (
            "tenant-guaranteed",
            1000,
        )
        burst = core.create_namespaced_pod("team-a", pod("batch", cpu="1", memory="1Gi"))
        assert burst.metadata.labels["tenantgate.io/tier"] == "burst"
        with pytest.raises(client.ApiException) as raised:
            core.create_namespaced_pod("team-a", pod("big", cpu="2", memory="1Gi"))
        assert raised.value.status == 403
        assert "exceeded tenant quota: team-a" in str(raised.value.body)
    finally:
        api.close()
