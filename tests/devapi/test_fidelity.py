"""The test API server behaves as the real kube-apiserver where tenantgate can tell.

Each test drives the server with the real ``kubernetes`` client (or kubectl) and names, in its
docstring, the upstream file and function whose behaviour it checks.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from kubernetes import client

from tests.devapi.support import (
    Api,
    TLSMaterial,
    WebhookServer,
    allow,
    hook,
    json_patch,
    pod,
    register,
    status_of,
    warnings_of,
)


def mutating(
    api_client: Api,
    webhooks: WebhookServer,
    tls: TLSMaterial,
    name: str,
    handler: Any,
    **fields: Any,
) -> None:
    register(
        api_client,
        name,
        hook(
            f"{name}.example.com", webhooks.route(f"/{name}", handler), tls, mutating=True, **fields
        ),
        mutating=True,
    )


def validating(
    api_client: Api,
    webhooks: WebhookServer,
    tls: TLSMaterial,
    name: str,
    handler: Any,
    **fields: Any,
) -> None:
    register(
        api_client,
        name,
        hook(f"{name}.example.com", webhooks.route(f"/{name}", handler), tls, **fields),
        mutating=False,
    )


def raw(response: Any) -> dict[str, Any]:
    """The JSON body of a call made with ``_preload_content=False``."""
    loaded: dict[str, Any] = orjson.loads(response.data)
    return loaded


def raw_pod(core: Api, name: str) -> dict[str, Any]:
    """The stored pod as the server sends it (the client's typed models would drop unknown
    fields themselves)."""
    response = core.read_namespaced_pod(name, "default", _preload_content=False)
    loaded: dict[str, Any] = orjson.loads(response.data)
    return loaded


def utf8_warnings(headers: Any) -> list[str]:
    """Warning texts, as UTF-8 (the client library reads header bytes as Latin-1)."""
    return [text.encode("latin-1").decode("utf-8") for text in warnings_of(headers)]


# --- the patched object is decoded into the typed Pod ------------------------------------------


def test_a_patch_adding_an_unknown_field_is_pruned(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """mutating/dispatcher.go (callAttrMutatingHook): the patched JSON is decoded with the
    non-strict serializer (runtime/serializer/json/json.go, Serializer.Decode), which drops
    fields the Pod type does not have, silently, also ones that differ only in case."""
    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "prune",
        allow(
            **json_patch(
                {"op": "add", "path": "/spec/priorityClassNme", "value": "typo"},
                {"op": "add", "path": "/spec/containers/0/Image", "value": "other:1"},
                {"op": "add", "path": "/metadata/labels", "value": {"kept": "yes"}},
            )
        ),
    )
    _, _, headers = core.create_namespaced_pod_with_http_info("default", pod("web"))
    stored = raw_pod(core, "web")
    assert "priorityClassNme" not in stored["spec"]
    assert "Image" not in stored["spec"]["containers"][0]
    assert stored["spec"]["containers"][0]["image"] == "registry.example/app:1.0"
    assert stored["metadata"]["labels"] == {"kept": "yes"}
    assert warnings_of(headers) == []


def test_a_patch_with_a_mistyped_field_is_refused_as_an_internal_error(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """mutating/dispatcher.go (callAttrMutatingHook): a decoding error of the patched object is
    apierrors.NewInternalError(err); the text is encoding/json's UnmarshalTypeError as
    sigs.k8s.io/json reports it (decode.go, addErrorContext: the struct, the JSON field path,
    the Go type). Unknown fields in the same patch do not matter."""
    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "mistyped",
        allow(
            **json_patch(
                {"op": "add", "path": "/spec/unknownField", "value": {"a": 1}},
                {"op": "add", "path": "/spec/priority", "value": "high"},
            )
        ),
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 500
    status = status_of(raised.value)
    cause = "json: cannot unmarshal string into Go struct field PodSpec.spec.priority of type int32"
    assert status["reason"] == "InternalError"
    assert status["message"] == f"Internal error occurred: {cause}"
    assert status["details"] == {"causes": [{"message": cause}]}
    assert core.list_namespaced_pod("default").items == []


@pytest.mark.parametrize(
    ("path", "value", "cause"),
    [
        (
            "/spec/containers/0/resources",
            {"requests": {"cpu": True}},
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            "/spec/terminationGracePeriodSeconds",
            1.5,
            "json: cannot unmarshal number 1.5 into Go struct field "
            "PodSpec.spec.terminationGracePeriodSeconds of type int64",
        ),
        (
            "/spec/containers/0/ports",
            {"containerPort": 80},
            "json: cannot unmarshal object into Go struct field Container.spec.containers.ports "
            "of type []v1.ContainerPort",
        ),
        (
            "/spec/tolerations",
            [{"key": "dedicated", "operator": "Exists", "effect": 1}],
            "json: cannot unmarshal number into Go struct field Toleration.spec.tolerations.effect "
            "of type v1.TaintEffect",
        ),
        (
            "/metadata/labels",
            {"a": 1},
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of "
            "type string",
        ),
    ],
)
def test_mistyped_values_are_refused_with_the_decoders_text(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
    path: str,
    value: Any,
    cause: str,
) -> None:
    """Quantity.UnmarshalJSON (api/resource/quantity.go) returns ErrFormatWrong for a value
    that is not a quantity; encoding/json's literalStore reports a fraction for an integer as
    ``number 1.5``, a JSON object for a list as ``object``, with the field path of
    decodeState.errorContext (JSON names, no list indexes)."""
    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "mistyped",
        allow(**json_patch({"op": "add", "path": path, "value": value})),
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 500
    assert status_of(raised.value)["message"] == f"Internal error occurred: {cause}"


# --- reinvocation: did a webhook change the object? ---------------------------------------------


def first_calls_after_a_patch(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    tls: TLSMaterial,
    *operations: dict[str, Any],
) -> int:
    """How often an IfNeeded webhook is called when a later one patches a pod asking for
    ``cpu: 100m`` with ``operations``."""
    mutating(api_client, webhooks, tls, "a-first", allow(), reinvocationPolicy="IfNeeded")
    mutating(api_client, webhooks, tls, "b-second", allow(**json_patch(*operations)))
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    core.create_namespaced_pod("default", body)
    assert len(webhooks.received("/b-second")) == 1
    return len(webhooks.received("/a-first"))


CPU_REQUEST = "/spec/containers/0/resources/requests/cpu"


def test_a_patch_that_changes_nothing_semantically_triggers_no_reinvocation(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """mutating/dispatcher.go (callAttrMutatingHook): ``changed`` is
    !apiequality.Semantic.DeepEqual(old, new) (apimachinery/pkg/api/equality/semantic.go):
    quantities compare by value, and third_party/forked/golang/reflect/deep_equal.go takes an
    empty map or slice as equal to a missing one. So rewriting ``100m`` as ``0.1`` and adding
    empty maps changes nothing, and no IfNeeded webhook is called again."""
    calls = first_calls_after_a_patch(
        api_client,
        core,
        webhooks,
        webhook_tls,
        {"op": "replace", "path": CPU_REQUEST, "value": "0.1"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {}},
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/spec/unknownField", "value": "x"},
    )
    assert calls == 1


def test_a_semantic_change_still_reinvokes(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """mutating/dispatcher.go (Dispatch): a real change (here a quantity's value) makes the
    IfNeeded webhooks invoked before it run once more."""
    calls = first_calls_after_a_patch(
        api_client,
        core,
        webhooks,
        webhook_tls,
        {"op": "replace", "path": CPU_REQUEST, "value": "0.2"},
    )
    assert calls == 2


# --- admissionReviewVersions ---------------------------------------------------------------------


def test_the_first_supported_review_version_is_sent(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """webhook/request/admissionreview.go (CreateAdmissionObjects): the first version of
    admissionReviewVersions the server knows (v1, v1beta1) is sent; VerifyAdmissionResponse
    checks neither uid, apiVersion nor patchType of a v1beta1 answer and takes its patch as a
    JSONPatch."""

    def v1beta1(review: dict[str, Any]) -> dict[str, Any]:
        patch = json_patch({"op": "add", "path": "/metadata/labels", "value": {"seen": "beta"}})
        return {"allowed": True, "patch": patch["patch"]}  # no patchType, as old webhooks did

    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "beta",
        v1beta1,
        admissionReviewVersions=["v2", "v1beta1", "v1"],
    )
    mutating(api_client, webhooks, webhook_tls, "v1", allow(), admissionReviewVersions=["v1"])
    created = core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.labels == {"seen": "beta"}
    (beta,) = webhooks.received("/beta")
    assert beta["apiVersion"] == "admission.k8s.io/v1beta1"
    (v1,) = webhooks.received("/v1")
    assert v1["apiVersion"] == "admission.k8s.io/v1"


# --- denials -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mutating", "validating"])
@pytest.mark.parametrize(("given", "expected"), [(None, 400), (200, 400), (399, 400), (429, 429)])
def test_a_denial_code_below_400_becomes_400(
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
    kind: str,
    given: int | None,
    expected: int,
) -> None:
    """webhook/errors/statuserror.go (ToStatusErr): a rejection with a code below 400 (a
    missing code is 0) is answered 400, with status Failure; the message is prefixed."""
    status: dict[str, Any] = {"message": "no room"}
    if given is not None:
        status["code"] = given
    denial = allow(allowed=False, status=status)
    if kind == "mutating":
        mutating(api_client, webhooks, webhook_tls, "deny", denial)
    else:
        validating(api_client, webhooks, webhook_tls, "deny", denial)
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == expected
    answer = status_of(raised.value)
    assert answer["code"] == expected
    assert answer["status"] == "Failure"
    assert "reason" not in answer  # metav1.Status.Reason is omitempty
    assert answer["message"] == 'admission webhook "deny.example.com" denied the request: no room'


# --- warnings ------------------------------------------------------------------------------------


def test_warnings_are_truncated_in_characters_and_capped(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """endpoints/filters/warning.go (recorder.AddWarning): once the warnings pass 4096
    characters (runes, not bytes) in total, every warning is cut to 256 characters and
    replayed; later ones are added while the total is below 4096. util/net/http.go
    (NewWarningHeader) refuses a text with a control character: a warning with a newline is
    dropped."""
    long = [f"{i:02d}" + "é" * 998 for i in range(5)]  # 1000 characters, 2000 bytes each
    dropped = "two\nlines"
    mutating(api_client, webhooks, webhook_tls, "warn", allow(warnings=[dropped, "short", *long]))
    _, _, headers = core.create_namespaced_pod_with_http_info("default", pod("web"))
    texts = utf8_warnings(headers)
    # Four long ones fit (4005 characters with "short"); the fifth starts the truncation.
    assert texts == ["short", *(text[:256] for text in long)]


def test_warnings_within_the_limit_are_sent_whole(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """endpoints/filters/warning.go (recorder.AddWarning): below 4096 characters nothing is
    truncated, whatever the byte length."""
    texts = [f"{i}" + "é" * 1500 for i in range(2)]  # 3002 characters, about 6000 bytes
    mutating(api_client, webhooks, webhook_tls, "warn", allow(warnings=texts))
    _, _, headers = core.create_namespaced_pod_with_http_info("default", pod("web"))
    assert utf8_warnings(headers) == texts


# --- validating webhooks run in parallel ---------------------------------------------------------


def test_validating_webhooks_answer_the_first_failure_to_arrive(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """validating/dispatcher.go (Dispatch): every webhook is called in its own goroutine; the
    error returned is the first one sent to the channel, not the first in webhook order. The
    first webhook here never answers (its call fails at its timeout); the second denies at
    once."""

    def silent(review: dict[str, Any]) -> dict[str, Any]:
        webhooks.release.wait(60)
        return {"allowed": True}

    validating(api_client, webhooks, webhook_tls, "a-silent", silent, timeoutSeconds=3)
    validating(
        api_client,
        webhooks,
        webhook_tls,
        "b-deny",
        allow(allowed=False, status={"code": 403, "message": "no"}),
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert status_of(raised.value)["message"] == (
        'admission webhook "b-deny.example.com" denied the request: no'
    )
    assert len(webhooks.received("/a-silent")) == 1


# --- in-tree admission ---------------------------------------------------------------------------


def limit_range(core: Api, **item: Any) -> None:
    core.create_namespaced_limit_range(
        "default",
        {"metadata": {"name": "limits"}, "spec": {"limits": [{"type": "Container", **item}]}},
    )


def test_limit_ranger_defaults_containers_before_the_webhooks(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """plugin/pkg/admission/limitranger/admission.go (PodMutateLimitFunc,
    mergeContainerResources) fills missing limits from ``default`` and requests from
    ``defaultRequest``, and says so in the kubernetes.io/limit-ranger annotation; defaults.go
    (SetDefaults_LimitRangeItem) defaults ``default`` from ``max`` and ``defaultRequest`` from
    ``default``. It runs before MutatingAdmissionWebhook (plugins.go, AllOrderedPlugins)."""
    limit_range(
        core, default={"cpu": "500m"}, defaultRequest={"cpu": "100m"}, max={"memory": "1Gi"}
    )
    stored = core.read_namespaced_limit_range("limits", "default")
    assert stored.spec.limits[0].default == {"cpu": "500m", "memory": "1Gi"}
    assert stored.spec.limits[0].default_request == {"cpu": "100m", "memory": "1Gi"}
    mutating(api_client, webhooks, webhook_tls, "seen", allow())
    body = pod("web")
    body["spec"]["initContainers"] = [
        {"name": "init", "image": "init:1", "resources": {"requests": {"cpu": "50m"}}}
    ]
    created = core.create_namespaced_pod("default", body)
    app = created.spec.containers[0].resources
    assert (app.requests, app.limits) == (
        {"cpu": "100m", "memory": "1Gi"},
        {"cpu": "500m", "memory": "1Gi"},
    )
    assert created.metadata.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for "
        "container app; memory request for init container init; cpu, memory limit for init "
        "container init"
    )
    (review,) = webhooks.requests("/seen")
    assert review["object"]["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "500m",
        "memory": "1Gi",
    }


def test_limit_ranger_refuses_what_exceeds_the_maximum(core: Api) -> None:
    """limitranger/admission.go (PodValidateLimitFunc, maxConstraint): a limit above ``max`` is
    refused with admission.NewForbidden (403), in the plugin's words."""
    limit_range(core, max={"memory": "1Gi"})
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {"limits": {"memory": "2Gi"}}
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", body)
    assert raised.value.status == 403
    assert status_of(raised.value)["message"] == (
        'pods "web" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi'
    )


def test_limit_ranger_checks_the_pod_after_the_mutating_webhooks(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """The validating half of LimitRanger (Validate) runs after the mutating webhooks, so a
    webhook that raises a limit past the maximum is refused."""
    limit_range(core, max={"cpu": "1"})
    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "raise",
        allow(
            **json_patch(
                {"op": "replace", "path": "/spec/containers/0/resources/limits/cpu", "value": "2"},
                {
                    "op": "replace",
                    "path": "/spec/containers/0/resources/requests/cpu",
                    "value": "2",
                },
            )
        ),
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 403
    # maxConstraint reports the limit first and stops there.
    assert status_of(raised.value)["message"] == (
        'pods "web" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    )


def runtime_class(api_client: Api, **fields: Any) -> None:
    node: Api = client.NodeV1Api(api_client)
    node.create_runtime_class({"metadata": {"name": "kata"}, "handler": "kata", **fields})


def test_runtime_class_sets_the_overhead(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """plugin/pkg/admission/runtimeclass/admission.go (Admit, setOverhead, setScheduling):
    the pod gets the class's overhead, node selector and tolerations before the webhooks."""
    runtime_class(
        api_client,
        overhead={"podFixed": {"cpu": "250m", "memory": "120Mi"}},
        scheduling={
            "nodeSelector": {"sandbox": "kata"},
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        },
    )
    mutating(api_client, webhooks, webhook_tls, "seen", allow())
    created = core.create_namespaced_pod("default", pod("web", runtimeClassName="kata"))
    assert created.spec.overhead == {"cpu": "250m", "memory": "120Mi"}
    assert created.spec.node_selector == {"sandbox": "kata"}
    assert ("sandbox", "NoSchedule") in {(t.key, t.effect) for t in created.spec.tolerations}
    (review,) = webhooks.requests("/seen")
    assert review["object"]["spec"]["overhead"] == {"cpu": "250m", "memory": "120Mi"}


@pytest.mark.parametrize(
    ("runtime", "overhead", "message"),
    [
        ("kata", {"cpu": "1"}, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined "
         "Overhead"),
        ("missing", None, 'pod rejected: RuntimeClass "missing" not found'),
        (None, {"cpu": "1"}, "pod rejected: Pod Overhead set without corresponding RuntimeClass "
         "defined Overhead"),
    ],
)  # fmt: skip
def test_runtime_class_refuses_a_mismatching_overhead(
    api_client: Api,
    core: Api,
    runtime: str | None,
    overhead: dict[str, str] | None,
    message: str,
) -> None:
    """runtimeclass/admission.go (setOverhead, prepareObjects, validateOverhead): a pod whose
    overhead differs from its class's, a missing class, or an overhead without a class that
    defines one are refused with 403."""
    runtime_class(api_client, overhead={"podFixed": {"cpu": "250m"}})
    spec: dict[str, Any] = {}
    if runtime is not None:
        spec["runtimeClassName"] = runtime
    if overhead is not None:
        spec["overhead"] = overhead
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web", **spec))
    assert raised.value.status == 403
    assert status_of(raised.value)["message"] == f'pods "web" is forbidden: {message}'


def test_runtime_class_refuses_a_webhook_that_changes_the_overhead(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """runtimeclass/admission.go (Validate, validateOverhead) runs after the mutating
    webhooks."""
    runtime_class(api_client, overhead={"podFixed": {"cpu": "250m"}})
    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "overhead",
        allow(**json_patch({"op": "replace", "path": "/spec/overhead", "value": {"cpu": "1"}})),
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web", runtimeClassName="kata"))
    assert raised.value.status == 403


def test_service_account_defaults_and_token_volume(core: Api) -> None:
    """plugin/pkg/admission/serviceaccount/admission.go (Admit, mountServiceAccountToken,
    TokenVolumeSource): serviceAccountName defaults to ``default``, a projected
    kube-api-access-xxxxx volume is added and mounted read-only in every container; not when
    the pod opts out."""
    body = pod("web")
    body["spec"]["initContainers"] = [{"name": "init", "image": "init:1"}]
    created = raw(core.create_namespaced_pod("default", body, _preload_content=False))
    spec = created["spec"]
    assert spec["serviceAccountName"] == "default"
    (volume,) = spec["volumes"]
    assert volume["name"].startswith("kube-api-access-")
    assert len(volume["name"]) == len("kube-api-access-") + 5
    assert volume["projected"]["defaultMode"] == 420
    assert [s for source in volume["projected"]["sources"] for s in source] == [
        "serviceAccountToken",
        "configMap",
        "downwardAPI",
    ]
    mount = {
        "name": volume["name"],
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }
    assert spec["containers"][0]["volumeMounts"] == [mount]
    assert spec["initContainers"][0]["volumeMounts"] == [mount]

    opted_out = core.create_namespaced_pod(
        "default", pod("quiet", automountServiceAccountToken=False)
    )
    assert opted_out.spec.volumes is None
    assert opted_out.spec.service_account_name == "default"


def test_default_toleration_seconds_also_runs_on_update(core: Api) -> None:
    """plugin/pkg/admission/defaulttolerationseconds/admission.go: the plugin handles Create and
    Update, so an update that drops the not-ready/unreachable tolerations gets them back (and
    passes the update validation that only allows added tolerations)."""
    created = core.create_namespaced_pod("default", pod("web"))
    assert {t.key for t in created.spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    added = {"key": "dedicated", "operator": "Exists"}
    updated = core.patch_namespaced_pod("web", "default", {"spec": {"tolerations": [added]}})
    assert [t.key for t in updated.spec.tolerations] == [
        "dedicated",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]


def test_defaulting_rounds_quantities_to_milli_and_writes_them_canonically(core: Api) -> None:
    """pkg/apis/core/v1/defaults.go (SetDefaults_ResourceList): every quantity of a resource
    list is rounded up to milli; api/resource/quantity.go (Quantity.String, CanonicalizeBytes)
    writes it in canonical form."""
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1.5m", "memory": "1024Mi", "ephemeral-storage": "0.5Gi"},
        "limits": {"cpu": "0.1", "memory": "1Gi"},
    }
    created = raw(core.create_namespaced_pod("default", body, _preload_content=False))
    resources = created["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "2m", "memory": "1Gi", "ephemeral-storage": "512Mi"},
        "limits": {"cpu": "100m", "memory": "1Gi"},
    }


def test_pod_level_requests_default_from_the_containers_and_the_limits(core: Api) -> None:
    """pkg/apis/core/v1/defaults.go (defaultPodRequests): with pod-level limits, a missing
    pod-level request is the containers' aggregate request (AggregateContainerRequests:
    sidecars included) where containers ask for it, else the pod-level limit."""
    body = pod("web")
    body["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m"}}
    body["spec"]["initContainers"] = [
        {
            "name": "sidecar",
            "image": "proxy:1",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "250m"}},
        }
    ]
    created = raw(core.create_namespaced_pod("default", body, _preload_content=False))
    assert created["spec"]["resources"] == {
        "limits": {"cpu": "2", "memory": "1Gi"},
        "requests": {"cpu": "750m", "memory": "1Gi"},
    }


# --- resize --------------------------------------------------------------------------------------


def pod_with_init_containers() -> dict[str, Any]:
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    body["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "image": "proxy:1",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "100m"}},
        },
        {"name": "setup", "image": "setup:1", "resources": {"requests": {"cpu": "100m"}}},
    ]
    return body


def test_a_sidecar_can_be_resized(core: Api) -> None:
    """pkg/registry/core/pod/strategy.go (dropNonResizeUpdates) keeps the new resources of
    restartable init containers on pods/resize, as of containers."""
    core.create_namespaced_pod("default", pod_with_init_containers())
    resized = core.patch_namespaced_pod_resize(
        "web",
        "default",
        {
            "spec": {
                "initContainers": [
                    {"name": "proxy", "resources": {"requests": {"cpu": "300m"}}},
                    {"name": "setup"},
                ]
            }
        },
    )
    assert resized.spec.init_containers[0].resources.requests == {"cpu": "300m"}
    assert resized.spec.init_containers[1].resources.requests == {"cpu": "100m"}


def test_a_plain_init_container_cannot_be_resized(core: Api) -> None:
    """pkg/apis/core/validation/validation.go (ValidatePodResize): the resources of a
    non-sidecar init container are immutable."""
    core.create_namespaced_pod("default", pod_with_init_containers())
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_pod_resize(
            "web",
            "default",
            {
                "spec": {
                    "initContainers": [
                        {"name": "proxy"},
                        {"name": "setup", "resources": {"requests": {"cpu": "300m"}}},
                    ]
                }
            },
        )
    assert raised.value.status == 422
    assert status_of(raised.value)["message"] == (
        'Pod "web" is invalid: spec.initContainers[1].resources: Forbidden: resources for '
        "non-sidecar init containers are immutable"
    )


def test_a_patch_adding_empty_optional_maps_and_lists_leaves_them_out(
    api_client: Api, core: Api, webhooks: WebhookServer, webhook_tls: TLSMaterial
) -> None:
    """The patched pod is decoded into the typed Pod and encoded again: an empty map or list
    of an ``omitempty`` field (k8s.io/api/core/v1/types.go: nodeSelector, tolerations, labels)
    is not written, while an empty struct (securityContext) is."""
    mutating(
        api_client,
        webhooks,
        webhook_tls,
        "empty",
        allow(
            **json_patch(
                {"op": "add", "path": "/spec/nodeSelector", "value": {}},
                {"op": "add", "path": "/spec/readinessGates", "value": []},
                {"op": "add", "path": "/metadata/labels", "value": {}},
                {"op": "add", "path": "/spec/containers/0/securityContext", "value": {}},
            )
        ),
    )
    core.create_namespaced_pod("default", pod("web"))
    stored = raw_pod(core, "web")
    assert "nodeSelector" not in stored["spec"]
    assert "readinessGates" not in stored["spec"]
    assert "labels" not in stored["metadata"]
    assert stored["spec"]["containers"][0]["securityContext"] == {}
