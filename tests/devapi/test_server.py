"""``DevAPIServer`` itself: HTTPS, manifests loaded at start (the repo's deploy/webhooks),
shutdown."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devapi import DevAPIServer
from devapi.manifests import ManifestError
from tests.devapi.support import (
    Api,
    TLSMaterial,
    WebhookServer,
    allow,
    api,
    make_tls,
    new_client,
    pod,
)

REPO = Path(__file__).resolve().parents[2]
DEPLOY_WEBHOOKS = REPO / "deploy" / "webhooks"


def test_https_with_a_generated_certificate(tmp_path: Path) -> None:
    with DevAPIServer(tls=True) as devserver:
        assert devserver.url.startswith("https://127.0.0.1:")
        assert devserver.ca_pem is not None
        assert b"BEGIN CERTIFICATE" in devserver.ca_pem
        api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            assert (
                api(client.CoreV1Api, api_client).read_namespace("default").status.phase == "Active"
            )
        finally:
            api_client.close()


def test_https_with_given_files(tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "serving")
    with DevAPIServer(tls_cert_file=tls.cert_file, tls_key_file=tls.key_file) as devserver:
        configuration = client.Configuration(host=devserver.url)
        configuration.ssl_ca_cert = str(tmp_path / "ca.crt")
        (tmp_path / "ca.crt").write_bytes(tls.ca_pem)
        api_client: Api = client.ApiClient(configuration)
        try:
            assert api(client.CoreV1Api, api_client).list_namespace().items
        finally:
            api_client.close()


def test_stop_releases_the_port() -> None:
    devserver = DevAPIServer().start()
    port = devserver.port
    devserver.stop()
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe,
        pytest.raises(ConnectionRefusedError),
    ):
        probe.connect(("127.0.0.1", port))


def test_invalid_manifests_fail_at_construction(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    with pytest.raises(ManifestError, match=r"broken\.yaml: invalid YAML"):
        DevAPIServer(webhooks_dir=tmp_path)
    (tmp_path / "broken.yaml").write_text(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"
        "metadata: {name: x}\nwebhooks: [{name: short}]\n"
    )
    with pytest.raises(
        ManifestError, match=r'broken.yaml: .*webhooks\[0\]\.name: Invalid value: "short"'
    ):
        DevAPIServer(webhooks_dir=tmp_path)


def tenantgate_like(name: str) -> Any:
    """A stand-in for tenantgate's endpoints: it allows and says who it is."""
    return allow(warnings=[f"{name} saw the pod"])


@pytest.mark.skipif(not DEPLOY_WEBHOOKS.is_dir(), reason="deploy/webhooks is not in this checkout")
def test_the_repository_webhooks_run_in_the_admission_chain(
    tmp_path: Path, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    webhooks.route("/mutate", tenantgate_like("mutate"))
    webhooks.route("/validate", tenantgate_like("validate"))
    server_tls = make_tls(tmp_path / "tenantgate", dns_names=("tenantgate.tenantgate-system.svc",))
    hooks = WebhookServer(server_tls).start()
    hooks.route("/mutate", tenantgate_like("mutate"))
    hooks.route("/validate", tenantgate_like("validate"))
    try:
        with DevAPIServer(
            webhooks_dir=DEPLOY_WEBHOOKS,
            webhook_ca=server_tls.ca_pem,
            webhook_services={"tenantgate.tenantgate-system": f"127.0.0.1:{hooks.port}"},
        ) as devserver:
            api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
            try:
                registration: Api = client.AdmissionregistrationV1Api(api_client)
                assert registration.list_mutating_webhook_configuration().items
                assert registration.list_validating_webhook_configuration().items
                core: Api = client.CoreV1Api(api_client)
                _, _, headers = core.create_namespaced_pod_with_http_info("default", pod("web"))
                assert "saw the pod" in (headers.get("Warning") or "")
                mutated = hooks.requests("/mutate")
                validated = hooks.requests("/validate")
                assert [r["name"] for r in validated] == ["web"]
                assert len(mutated) >= 1
                assert mutated[0]["resource"] == {"group": "", "version": "v1", "resource": "pods"}
                # The configurations exclude kube-system: nothing is called for it.
                core.create_namespaced_pod("kube-system", pod("system"))
                assert [r["name"] for r in hooks.requests("/validate")] == ["web"]
            finally:
                api_client.close()
    finally:
        hooks.stop()


def test_kustomize_patches_are_not_loaded_as_manifests(tmp_path: Path) -> None:
    base = tmp_path / "webhooks"
    (base / "overlays" / "strict").mkdir(parents=True)
    (base / "validating.yaml").write_text(
        "apiVersion: admissionregistration.k8s.io/v1\n"
        "kind: ValidatingWebhookConfiguration\n"
        "metadata: {name: tenantgate}\n"
        "webhooks:\n"
        "- name: validate.example.com\n"
        "  admissionReviewVersions: [v1]\n"
        "  sideEffects: None\n"
        "  failurePolicy: Ignore\n"
        "  clientConfig: {url: 'https://127.0.0.1:1/validate'}\n"
    )
    (base / "overlays" / "strict" / "kustomization.yaml").write_text(
        "resources: [../..]\npatches:\n- path: fail-closed.yaml\n"
    )
    # A partial object: loading it as a manifest would replace (and break) the base's.
    (base / "overlays" / "strict" / "fail-closed.yaml").write_text(
        "apiVersion: admissionregistration.k8s.io/v1\n"
        "kind: ValidatingWebhookConfiguration\n"
        "metadata: {name: tenantgate}\n"
        "webhooks:\n- name: validate.example.com\n  failurePolicy: Fail\n"
    )
    with DevAPIServer(webhooks_dir=base) as devserver:
        api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            registration = api(client.AdmissionregistrationV1Api, api_client)
            (configuration,) = registration.list_validating_webhook_configuration().items
            assert [w.failure_policy for w in configuration.webhooks] == ["Ignore"]
        finally:
            api_client.close()
