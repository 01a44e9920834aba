"""The admission chain, driven through the Kubernetes client against in-test HTTPS webhooks."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devapi import DevAPIServer
from tests.devapi.support import (
    PLACEHOLDER_BUNDLE,
    POD_RULE,
    Api,
    TLSMaterial,
    WebhookServer,
    allow,
    api,
    create_crd,
    hook,
    json_patch,
    make_tls,
    new_client,
    pod,
    register,
    status_of,
    warnings_of,
)


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_mutation_is_applied_and_validation_sees_the_final_object(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    mutate = webhooks.route(
        "/mutate",
        allow(**json_patch({"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}})),
    )
    validate = webhooks.route("/validate", allow())
    register(
        api_client,
        "m",
        hook("mutate.example.com", mutate, webhook_tls, mutating=True),
        mutating=True,
    )
    register(api_client, "v", hook("validate.example.com", validate, webhook_tls), mutating=False)

    created = core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.labels == {"mutated": "yes"}
    (seen,) = webhooks.requests("/validate")
    assert seen["object"]["metadata"]["labels"] == {"mutated": "yes"}
    (mutated,) = webhooks.requests("/mutate")
    assert "labels" not in mutated["object"]["metadata"]


def test_only_validating_webhooks_see_the_generated_name_and_uid(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    register(
        api_client,
        "m",
        hook("mutate.example.com", webhooks.route("/mutate", allow()), webhook_tls, mutating=True),
        mutating=True,
    )
    register(
        api_client,
        "v",
        hook("validate.example.com", webhooks.route("/validate", allow()), webhook_tls),
        mutating=False,
    )
    created = core.create_namespaced_pod("default", pod(generate_name="web-"))

    (mutating,) = webhooks.requests("/mutate")
    assert "name" not in mutating
    assert mutating["object"]["metadata"] == {"generateName": "web-", "namespace": "default"}
    (validating,) = webhooks.requests("/validate")
    assert validating["name"] == created.metadata.name
    assert validating["object"]["metadata"]["name"] == created.metadata.name
    assert validating["object"]["metadata"]["uid"] == created.metadata.uid
    assert validating["object"]["metadata"]["creationTimestamp"]


def test_reinvocation_if_needed_reruns_an_earlier_webhook_once(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    def first(review: dict[str, Any]) -> dict[str, Any]:
        labels = review["request"]["object"]["metadata"].get("labels") or {}
        annotations = review["request"]["object"]["metadata"].get("annotations") or {}
        wanted = {"first-saw": labels.get("second", "nothing")}
        if annotations == wanted:
            return {"allowed": True}
        return {
            "allowed": True,
            **json_patch({"op": "add", "path": "/metadata/annotations", "value": wanted}),
        }

    register(
        api_client,
        "a-first",
        hook(
            "first.example.com",
            webhooks.route("/first", first),
            webhook_tls,
            mutating=True,
            reinvocationPolicy="IfNeeded",
        ),
        mutating=True,
    )
    register(
        api_client,
        "b-second",
        hook(
            "second.example.com",
            webhooks.route(
                "/second",
                allow(
                    **json_patch(
                        {"op": "add", "path": "/metadata/labels", "value": {"second": "done"}}
                    )
                ),
            ),
            webhook_tls,
            mutating=True,
        ),
        mutating=True,
    )
    created = core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.annotations == {"first-saw": "done"}
    assert len(webhooks.received("/first")) == 2
    assert len(webhooks.received("/second")) == 1


def test_never_reinvoked_without_if_needed(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    register(
        api_client,
        "a-first",
        hook("first.example.com", webhooks.route("/first", allow()), webhook_tls, mutating=True),
        mutating=True,
    )
    register(
        api_client,
        "b-second",
        hook(
            "second.example.com",
            webhooks.route(
                "/second",
                allow(**json_patch({"op": "add", "path": "/metadata/labels", "value": {"x": "y"}})),
            ),
            webhook_tls,
            mutating=True,
        ),
        mutating=True,
    )
    core.create_namespaced_pod("default", pod("web"))
    assert len(webhooks.received("/first")) == 1


def test_denial_carries_the_webhook_message_and_code(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    deny = webhooks.route(
        "/validate",
        lambda review: {
            "allowed": False,
            "status": {
                "code": 403,
                "reason": "Forbidden",
                "message": "exceeded tenant quota: team-a, requested: cpu=2",
            },
            "warnings": ["tenant team-a is at its ceiling"],
        },
    )
    register(api_client, "v", hook("validate.tenantgate.io", deny, webhook_tls), mutating=False)
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 403
    status = status_of(raised.value)
    assert status["message"] == (
        'admission webhook "validate.tenantgate.io" denied the request: exceeded tenant quota: '
        "team-a, requested: cpu=2"
    )
    assert status["reason"] == "Forbidden"
    assert warnings_of(raised.value.headers) == ["tenant team-a is at its ceiling"]
    assert core.list_namespaced_pod("default").items == []


def test_warnings_become_warning_headers(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    register(
        api_client,
        "m",
        hook(
            "mutate.example.com",
            webhooks.route("/mutate", allow(warnings=["tier: burst", "profile: web"])),
            webhook_tls,
            mutating=True,
        ),
        mutating=True,
    )
    register(
        api_client,
        "v",
        hook(
            "validate.example.com",
            webhooks.route("/validate", allow(warnings=['quoted "value"', "tier: burst"])),
            webhook_tls,
        ),
        mutating=False,
    )
    _, code, headers = core.create_namespaced_pod_with_http_info("default", pod("web"))
    assert code == 201
    assert warnings_of(headers) == ["tier: burst", "profile: web", 'quoted "value"']


def test_failure_policy_on_a_webhook_that_is_down(
    api_client: Api, core: Api, webhook_tls: TLSMaterial
) -> None:
    port = closed_port()
    url = f"https://127.0.0.1:{port}/validate"
    register(
        api_client,
        "ignored",
        hook("ignored.example.com", url, webhook_tls, failurePolicy="Ignore"),
        mutating=False,
    )
    assert core.create_namespaced_pod("default", pod("allowed")).metadata.name == "allowed"

    register(
        api_client,
        "strict",
        hook("strict.example.com", url, webhook_tls, failurePolicy="Fail"),
        mutating=False,
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("refused"))
    assert raised.value.status == 500
    status = status_of(raised.value)
    assert status["reason"] == "InternalError"
    assert status["message"] == (
        'Internal error occurred: failed calling webhook "strict.example.com": failed to call '
        f'webhook: Post "https://127.0.0.1:{port}/validate?timeout=10s": dial tcp '
        f"127.0.0.1:{port}: connect: "
        "connection refused"
    )


def test_timeouts_obey_failure_policy(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    def stuck(review: dict[str, Any]) -> dict[str, Any]:
        webhooks.release.wait()
        return {"allowed": True}

    url = webhooks.route("/slow", stuck)
    register(
        api_client,
        "slow",
        hook("slow.example.com", url, webhook_tls, timeoutSeconds=1, failurePolicy="Ignore"),
        mutating=False,
    )
    assert core.create_namespaced_pod("default", pod("ignored")).metadata.name == "ignored"
    api(client.AdmissionregistrationV1Api, api_client).patch_validating_webhook_configuration(
        "slow", [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"}]
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("refused"))
    assert raised.value.status == 500
    assert status_of(raised.value)["message"] == (
        'Internal error occurred: failed calling webhook "slow.example.com": failed to call '
        "webhook: "
        f'Post "{url}?timeout=1s": context deadline exceeded'
    )


def test_dry_run_reaches_webhooks_with_dry_run_true(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    url = webhooks.route("/validate", allow(warnings=["would be burst"]))
    register(
        api_client,
        "v",
        hook("validate.example.com", url, webhook_tls, sideEffects="NoneOnDryRun"),
        mutating=False,
    )
    _, _, headers = core.create_namespaced_pod_with_http_info(
        "default", pod("web"), dry_run="All", field_manager="kubectl"
    )
    assert warnings_of(headers) == ["would be burst"]
    (seen,) = webhooks.requests("/validate")
    assert seen["dryRun"] is True
    assert seen["options"] == {
        "kind": "CreateOptions",
        "apiVersion": "meta.k8s.io/v1",
        "dryRun": ["All"],
        "fieldManager": "kubectl",
    }
    assert core.list_namespaced_pod("default").items == []


def test_webhooks_with_side_effects_make_dry_run_fail(
    tmp_path: Path, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "effects"},
        "webhooks": [
            hook(
                "effects.example.com",
                webhooks.route("/validate", allow()),
                webhook_tls,
                sideEffects="Some",
            )
        ],
    }
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "effects.yaml").write_text(yaml.safe_dump(config))
    with DevAPIServer(webhooks_dir=tmp_path / "hooks") as devserver:
        api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            core: Api = client.CoreV1Api(api_client)
            with pytest.raises(client.ApiException) as raised:
                core.create_namespaced_pod("default", pod("web"), dry_run="All")
            assert raised.value.status == 400
            assert (
                status_of(raised.value)["message"]
                == 'admission webhook "effects.example.com" does not support dry run'
            )
            assert core.create_namespaced_pod("default", pod("web")).metadata.name == "web"
            # The v1 API itself refuses such a configuration.
            with pytest.raises(client.ApiException) as refused:
                api(
                    client.AdmissionregistrationV1Api, api_client
                ).create_validating_webhook_configuration({**config, "metadata": {"name": "other"}})
            assert refused.value.status == 422
        finally:
            api_client.close()


def test_namespace_and_object_selectors(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    url = webhooks.route("/validate", allow())
    register(
        api_client,
        "v",
        hook(
            "validate.example.com",
            url,
            webhook_tls,
            namespaceSelector={"matchLabels": {"tenant": "a"}},
            objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
        ),
        mutating=False,
    )
    core.create_namespace({"metadata": {"name": "team-a", "labels": {"tenant": "a"}}})
    core.create_namespaced_pod("default", pod("outside"))
    core.create_namespaced_pod("team-a", pod("opted-out", labels={"skip": "yes"}))
    core.create_namespaced_pod("team-a", pod("inside"))
    assert [r["name"] for r in webhooks.requests("/validate")] == ["inside"]
    # A relabelled namespace moves in and out of the selector.
    core.patch_namespace("default", {"metadata": {"labels": {"tenant": "a"}}})
    core.create_namespaced_pod("default", pod("now-inside"))
    assert [r["name"] for r in webhooks.requests("/validate")] == ["inside", "now-inside"]


def test_rules_select_subresources(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    resize_rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["UPDATE"],
        "resources": ["pods/resize"],
        "scope": "Namespaced",
    }
    register(
        api_client,
        "v",
        hook(
            "resize.example.com",
            webhooks.route("/resize", allow()),
            webhook_tls,
            rules=[resize_rule],
        ),
        mutating=False,
    )
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    core.create_namespaced_pod("default", body)
    core.patch_namespaced_pod("default" and "web", "default", {"metadata": {"labels": {"a": "1"}}})
    core.patch_namespaced_pod_status("web", "default", {"status": {"phase": "Running"}})
    assert webhooks.requests("/resize") == []
    core.patch_namespaced_pod_resize(
        "web",
        "default",
        {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "200m"}}}]}},
    )
    (seen,) = webhooks.requests("/resize")
    assert (seen["operation"], seen["subResource"], seen["requestSubResource"]) == (
        "UPDATE",
        "resize",
        "resize",
    )
    assert seen["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert seen["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert seen["oldObject"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m"}
    assert seen["object"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "200m"}
    assert seen["options"]["kind"] == "UpdateOptions"


def test_admission_review_fields_for_create_update_and_delete(
    api_client: Api,
    kubeconfig: Path,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    every = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}
    register(
        api_client,
        "v",
        hook("all.example.com", webhooks.route("/all", allow()), webhook_tls, rules=[every]),
        mutating=False,
    )
    alice_client = new_client(kubeconfig)
    alice_client.set_default_header("Impersonate-User", "alice")
    alice_client.set_default_header("Impersonate-Group", "team-a-devs")
    try:
        alice: Api = client.CoreV1Api(alice_client)
        alice.create_namespaced_pod("default", pod("web"))
        alice.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "1"}}})
        alice.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    finally:
        alice_client.close()
    create, update, delete = webhooks.requests("/all")
    # impersonation.go adds system:authenticated to an impersonated user's groups.
    assert create["userInfo"] == {
        "username": "alice",
        "groups": ["team-a-devs", "system:authenticated"],
    }
    assert (create["operation"], create["namespace"], create["name"]) == (
        "CREATE",
        "default",
        "web",
    )
    assert create["requestKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert create["requestResource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert create["oldObject"] is None
    assert create["dryRun"] is False
    assert update["operation"] == "UPDATE"
    assert update["oldObject"]["metadata"].get("labels") is None
    assert update["object"]["metadata"]["labels"] == {"a": "1"}
    assert update["options"] == {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert delete["operation"] == "DELETE"
    assert delete["object"] is None
    assert delete["oldObject"]["metadata"]["name"] == "web"
    assert delete["options"] == {
        "kind": "DeleteOptions",
        "apiVersion": "meta.k8s.io/v1",
        "gracePeriodSeconds": 0,
    }


def test_the_priority_plugin_checks_again_after_a_webhook_changes_the_class(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    api(client.SchedulingV1Api, api_client).create_priority_class(
        {"metadata": {"name": "tenant-burst"}, "value": 10, "preemptionPolicy": "Never"}
    )
    class_only = json_patch(
        {"op": "add", "path": "/spec/priorityClassName", "value": "tenant-burst"}
    )
    consistent = json_patch(
        {"op": "add", "path": "/spec/priorityClassName", "value": "tenant-burst"},
        {"op": "replace", "path": "/spec/priority", "value": 10},
        {"op": "replace", "path": "/spec/preemptionPolicy", "value": "Never"},
    )
    url = webhooks.route(
        "/mutate",
        lambda review: {
            "allowed": True,
            **(consistent if review["request"]["object"]["metadata"].get("labels") else class_only),
        },
    )
    register(
        api_client, "m", hook("mutate.example.com", url, webhook_tls, mutating=True), mutating=True
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("careless"))
    assert raised.value.status == 403
    assert (
        "the integer value of priority (0) must not be provided in pod spec; "
        "priority admission controller computed 10" in status_of(raised.value)["message"]
    )
    careful = core.create_namespaced_pod("default", pod("careful", labels={"set": "all"}))
    assert (
        careful.spec.priority_class_name,
        careful.spec.priority,
        careful.spec.preemption_policy,
    ) == ("tenant-burst", 10, "Never")


def test_validating_webhooks_all_run_and_one_denial_is_answered(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    def deny(message: str) -> Any:
        return lambda review: {"allowed": False, "status": {"code": 403, "message": message}}

    register(
        api_client,
        "b-config",
        hook("b.example.com", webhooks.route("/b", deny("second")), webhook_tls),
        mutating=False,
    )
    register(
        api_client,
        "a-config",
        hook("a.example.com", webhooks.route("/a", deny("first")), webhook_tls),
        mutating=False,
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    # Whichever denial arrives first is answered (validating/dispatcher.go, Dispatch).
    assert status_of(raised.value)["message"] in (
        'admission webhook "a.example.com" denied the request: first',
        'admission webhook "b.example.com" denied the request: second',
    )
    assert len(webhooks.received("/a")) == len(webhooks.received("/b")) == 1


def test_defaults_are_filled_again_after_a_patch(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    sidecar = {"name": "proxy", "image": "proxy:latest"}
    url = webhooks.route(
        "/mutate",
        allow(**json_patch({"op": "add", "path": "/spec/containers/-", "value": sidecar})),
    )
    register(
        api_client, "m", hook("mutate.example.com", url, webhook_tls, mutating=True), mutating=True
    )
    created = core.create_namespaced_pod("default", pod("web"))
    assert created.spec.containers[1].image_pull_policy == "Always"
    assert created.spec.containers[1].termination_message_path == "/dev/termination-log"


def test_webhooks_run_before_the_already_exists_check(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    register(
        api_client,
        "v",
        hook("validate.example.com", webhooks.route("/validate", allow()), webhook_tls),
        mutating=False,
    )
    core.create_namespaced_pod("default", pod("web"))
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 409
    assert len(webhooks.received("/validate")) == 2


def test_invalid_webhook_responses_are_call_failures(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    url = webhooks.route("/mutate", lambda review: {"allowed": True, "patch": "W10="})
    register(
        api_client, "m", hook("mutate.example.com", url, webhook_tls, mutating=True), mutating=True
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 500
    assert status_of(raised.value)["message"] == (
        'Internal error occurred: failed calling webhook "mutate.example.com": received invalid '
        "webhook response: webhook returned response.patch but not response.patchType"
    )


def test_an_untrusted_certificate_fails_the_call(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
    tmp_path: Path,
) -> None:
    stranger = make_tls(tmp_path / "stranger")
    register(
        api_client,
        "v",
        hook("validate.example.com", webhooks.route("/validate", allow()), stranger),
        mutating=False,
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 500
    assert "x509: certificate signed by unknown authority" in status_of(raised.value)["message"]
    assert webhooks.received("/validate") == []


@pytest.fixture
def service_hooks(tmp_path: Path, webhooks: WebhookServer, webhook_tls: TLSMaterial) -> Path:
    directory = tmp_path / "deploy" / "webhooks"
    (directory / "nested").mkdir(parents=True)
    webhooks.route("/validate", allow(warnings=["seen by the service webhook"]))
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "svc"},
        "webhooks": [
            {
                "name": "validate.example.com",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "service": {
                        "name": "hook",
                        "namespace": "webhooks",
                        "path": "/validate",
                        "port": 443,
                    },
                    "caBundle": PLACEHOLDER_BUNDLE,
                },
                "rules": [POD_RULE],
                "sideEffects": "None",
                "failurePolicy": "Fail",
            }
        ],
    }
    (directory / "nested" / "validating.yaml").write_text(yaml.safe_dump(configuration))
    # Not a manifest: kustomize's own file is skipped (this one would not even parse as one).
    (directory / "kustomization.yaml").write_text("resources: [nested/validating.yaml]\n")
    return directory


def test_service_references_with_a_ca_override(
    tmp_path: Path, service_hooks: Path, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    with DevAPIServer(
        webhooks_dir=service_hooks,
        webhook_ca=webhook_tls.ca_pem,
        webhook_services={"hook.webhooks": f"127.0.0.1:{webhooks.port}"},
    ) as devserver:
        api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            _, _, headers = api(client.CoreV1Api, api_client).create_namespaced_pod_with_http_info(
                "default", pod("web")
            )
            assert warnings_of(headers) == ["seen by the service webhook"]
        finally:
            api_client.close()


def test_a_placeholder_ca_bundle_without_override_fails_closed(
    tmp_path: Path, service_hooks: Path, webhooks: WebhookServer
) -> None:
    with DevAPIServer(
        webhooks_dir=service_hooks, webhook_services={"hook.webhooks": f"127.0.0.1:{webhooks.port}"}
    ) as devserver:
        api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            with pytest.raises(client.ApiException) as raised:
                api(client.CoreV1Api, api_client).create_namespaced_pod("default", pod("web"))
            assert raised.value.status == 500
            assert "unable to load root certificates" in status_of(raised.value)["message"]
        finally:
            api_client.close()


def test_an_unmapped_service_is_a_call_failure(
    tmp_path: Path, service_hooks: Path, webhook_tls: TLSMaterial
) -> None:
    with DevAPIServer(webhooks_dir=service_hooks, webhook_ca=webhook_tls.ca_pem) as devserver:
        api_client = new_client(devserver.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            with pytest.raises(client.ApiException) as raised:
                api(client.CoreV1Api, api_client).create_namespaced_pod("default", pod("web"))
            assert raised.value.status == 500
            message = status_of(raised.value)["message"]
            assert 'Post "https://hook.webhooks.svc:443/validate?timeout=10s"' in message
            assert "--webhook-service hook.webhooks=HOST:PORT" in message
        finally:
            api_client.close()


def test_match_policy_equivalent_calls_with_the_version_the_rule_names(
    api_client: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    create_crd(api_client, versions=("v1", "v1beta1"))
    rule = {
        "apiGroups": ["example.com"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["widgets"],
    }
    label = json_patch({"op": "add", "path": "/metadata/labels", "value": {"seen": "v1"}})
    register(
        api_client,
        "m",
        hook(
            "equivalent.example.com",
            webhooks.route("/equivalent", allow(**label)),
            webhook_tls,
            rules=[rule],
            mutating=True,
            matchPolicy="Equivalent",
        ),
        hook(
            "exact.example.com",
            webhooks.route("/exact", allow()),
            webhook_tls,
            rules=[rule],
            mutating=True,
            matchPolicy="Exact",
        ),
        mutating=True,
    )
    custom: Api = client.CustomObjectsApi(api_client)
    widget = {"apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "w"}}
    created = custom.create_namespaced_custom_object(
        "example.com", "v1beta1", "default", "widgets", widget
    )
    assert created["apiVersion"] == "example.com/v1beta1"
    assert created["metadata"]["labels"] == {"seen": "v1"}
    (seen,) = webhooks.requests("/equivalent")
    assert seen["kind"] == {"group": "example.com", "version": "v1", "kind": "Widget"}
    assert seen["resource"] == {"group": "example.com", "version": "v1", "resource": "widgets"}
    assert seen["requestKind"] == {"group": "example.com", "version": "v1beta1", "kind": "Widget"}
    assert seen["object"]["apiVersion"] == "example.com/v1"
    assert webhooks.requests("/exact") == []


def test_webhook_configurations_are_exempt_from_webhooks(
    api_client: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    everything = {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}
    deny = webhooks.route("/deny", lambda review: {"allowed": False, "status": {"code": 403}})
    register(
        api_client,
        "lockout",
        hook("deny.example.com", deny, webhook_tls, rules=[everything]),
        mutating=False,
    )
    registration: Api = client.AdmissionregistrationV1Api(api_client)
    # A webhook denying everything can still be removed.
    registration.delete_validating_webhook_configuration("lockout")
    assert registration.list_validating_webhook_configuration().items == []
    assert webhooks.received("/deny") == []
