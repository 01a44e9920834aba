"""tenantgate's webhooks through AdmissionReview v1beta1, end to end.

kube-apiserver sends each webhook the first version of its ``admissionReviewVersions`` that
it speaks (webhook/request/admissionreview.go, CreateAdmissionObjects); configurations written
for older API servers list v1beta1 first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import StartTenantgate
from tests.integration.harness import api_client, create_namespace, pod


def list_v1beta1_first(kubeconfig: Path) -> None:
    api = api_client(kubeconfig)
    registration: Any = client.AdmissionregistrationV1Api(api)
    try:
        for read, replace in (
            (
                registration.read_mutating_webhook_configuration,
                registration.replace_mutating_webhook_configuration,
            ),
            (
                registration.read_validating_webhook_configuration,
                registration.replace_validating_webhook_configuration,
            ),
        ):
            name = "tenantgate"
            configuration = api.sanitize_for_serialization(read(name))
            for webhook in configuration["webhooks"]:
                webhook["admissionReviewVersions"] = ["v1beta1", "v1"]
            replace(name, configuration)
    finally:
        api.close()


def test_tenantgate_admits_and_denies_through_admission_review_v1beta1(
    start_tenantgate: StartTenantgate, kubeconfig: Path, core: Any
) -> None:
    """webhook/request/admissionreview.go (CreateAdmissionObjects, VerifyAdmissionResponse):
    v1beta1 reviews reach tenantgate, and its v1beta1 answers (patch, burst tier, denial) are
    applied."""
    start_tenantgate()
    list_v1beta1_first(kubeconfig)
    create_namespace(core, {"metadata": {"name": "team-a"}})
    created = core.create_namespaced_pod("team-a", pod("web", cpu="3", memory="1Gi"))
    assert created.metadata.labels["tenantgate.io/tenant"] == "team-a"
    assert created.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    assert (created.spec.priority_class_name, created.spec.priority) == ("tenant-guaranteed", 1000)
    burst = core.create_namespaced_pod("team-a", pod("batch", cpu="2", memory="1Gi"))
    assert burst.metadata.labels["tenantgate.io/tier"] == "burst"
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("team-a", pod("big", cpu="2", memory="1Gi"))
    assert raised.value.status == 403
    assert "exceeded tenant quota: team-a" in str(raised.value.body)
