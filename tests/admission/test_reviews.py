"""Tests for admission.reviews: decoding AdmissionReview requests, encoding responses."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.reviews import (
    _WIRE_DECODERS,
    API_V1,
    API_V1BETA1,
    ObjectView,
    Review,
    ReviewError,
    _decode_document,
    _plain_request,
    _validated_request,
    _wire_review,
    decode_review,
    encode_response,
    one_line,
)
from tenants.verdicts import Verdict

FIXTURES = Path(__file__).parent.parent / "fixtures" / "reviews"


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads((FIXTURES / name).read_bytes())
    return document


def body(document: Any) -> bytes:
    return orjson.dumps(document)


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the fast decoder gives it: everything but ``metadata.managedFields``."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def review_with(**request_changes: Any) -> dict[str, Any]:
    """The v1 CREATE fixture with request fields replaced (``None`` removes a field)."""
    document = fixture("v1-create-pod.json")
    for key, value in request_changes.items():
        if value is None:
            document["request"].pop(key, None)
        else:
            document["request"][key] = value
    return document


# --- decoding real documents ----------------------------------------------------------------


def test_decodes_v1_create_from_a_controller() -> None:
    document = fixture("v1-create-pod.json")

    review = decode_review(body(document))

    assert review.api_version == API_V1
    assert review.resource == "pods"
    request = review.request
    assert request.uid == "6f4c1e2a-3b5d-4f7e-9a0b-1c2d3e4f5a6b"
    assert request.operation == "CREATE"
    assert request.namespace == "team-a"
    assert request.name == ""  # generateName: the API server names the pod after admission
    assert (request.group, request.version, request.kind) == ("", "v1", "Pod")
    assert request.sub_resource == ""
    assert request.dry_run is False
    assert request.username == "system:serviceaccount:kube-system:replicaset-controller"
    assert request.options == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert "managedFields" in document["request"]["object"]["metadata"]
    assert request.object == without_managed_fields(document["request"]["object"])
    assert request.old_object is None


def test_decodes_v1beta1_in_its_own_version() -> None:
    review = decode_review(body(fixture("v1beta1-create-pod.json")))

    assert review.api_version == API_V1BETA1
    assert review.request.uid == "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
    assert review.request.name == "toolbox"
    assert review.request.username == "kubernetes-admin"


def test_decodes_dry_run() -> None:
    review = decode_review(body(fixture("v1-create-pod-dryrun.json")))

    assert review.request.dry_run is True


def test_decodes_update_with_old_object() -> None:
    document = fixture("v1-update-pod.json")

    request = decode_review(body(document)).request

    assert request.operation == "UPDATE"
    assert request.object == without_managed_fields(document["request"]["object"])
    assert request.old_object == without_managed_fields(document["request"]["oldObject"])
    assert request.object != request.old_object


def test_decodes_delete_without_object() -> None:
    request = decode_review(body(fixture("v1-delete-pod.json"))).request

    assert request.operation == "DELETE"
    assert request.object is None
    assert request.old_object is not None


def test_keeps_sub_resource() -> None:
    document = review_with(subResource="resize", operation="UPDATE")

    assert decode_review(body(document)).request.sub_resource == "resize"


def test_tolerates_minimal_request() -> None:
    minimal = {
        "apiVersion": API_V1,
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE"},
    }

    request = decode_review(body(minimal)).request

    assert (request.uid, request.namespace, request.name, request.object) == ("u-1", "", "", None)
    assert request.username == ""


def test_object_is_passed_through_without_validation() -> None:
    # Only the envelope is checked: a pod with odd content is the decision logic's business.
    document = review_with(object={"spec": {"containers": "not-a-list"}, "x": [1, True, None]})

    request = decode_review(body(document)).request

    assert request.object == {"spec": {"containers": "not-a-list"}, "x": [1, True, None]}


def test_a_pod_keeps_every_member_but_managed_fields() -> None:
    document = fixture("v1-create-pod.json")
    pod = document["request"]["object"]
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    pod["metadata"]["finalizers"] = ["example.com/keep"]
    pod["metadata"]["labels"] = None  # nulls stay nulls, as orjson gives them
    pod["status"] = {"phase": "Pending"}

    request = decode_review(body(document)).request

    assert request.object == without_managed_fields(pod)
    assert request.object is not None
    assert request.object["metadata"]["labels"] is None


def test_an_object_with_members_a_pod_has_not_is_decoded_whole() -> None:
    document = fixture("v1-create-pod.json")
    document["request"]["object"]["metadata"]["clusterName"] = "legacy"
    document["request"]["object"]["extra"] = {"kept": True}

    request = decode_review(body(document)).request

    assert request.object == document["request"]["object"]  # managedFields included


def test_managed_fields_of_any_shape_are_skipped_unread() -> None:
    document = fixture("v1-create-pod.json")
    document["request"]["object"]["metadata"]["managedFields"] = {"not": ["a list"]}

    request = decode_review(body(document)).request

    assert request.object == without_managed_fields(document["request"]["object"])


# --- decoding bad documents -----------------------------------------------------------------


BAD_DOCUMENTS: list[tuple[str, bytes, str, str]] = [
    (
        "malformed JSON",
        b'{"apiVersion": ',
        "malformed JSON: unexpected end of data: line 1 column 16 (char 15)",
        "malformed_json",
    ),
    (
        "empty body",
        b"",
        "malformed JSON: Input is a zero-length, empty document: line 1 column 1 (char 0)",
        "malformed_json",
    ),
    (
        "array",
        b"[]",
        "AdmissionReview must be a JSON object, got a JSON array",
        "not_an_object",
    ),
    (
        "missing apiVersion",
        body({"kind": "AdmissionReview", "request": {}}),
        "apiVersion must be admission.k8s.io/v1 or admission.k8s.io/v1beta1, got nothing",
        "wrong_api_version",
    ),
    (
        "wrong apiVersion",
        body({"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {}}),
        "apiVersion must be admission.k8s.io/v1 or admission.k8s.io/v1beta1, "
        'got "admission.k8s.io/v2"',
        "wrong_api_version",
    ),
    (
        "apiVersion of the wrong type",
        body({"apiVersion": 1, "kind": "AdmissionReview", "request": {}}),
        "apiVersion must be admission.k8s.io/v1 or admission.k8s.io/v1beta1, got 1",
        "wrong_api_version",
    ),
    (
        "wrong kind",
        body({"apiVersion": API_V1, "kind": "Pod", "request": {}}),
        'kind must be AdmissionReview, got "Pod"',
        "wrong_kind",
    ),
    (
        "missing kind",
        body({"apiVersion": API_V1, "request": {}}),
        "kind must be AdmissionReview, got nothing",
        "wrong_kind",
    ),
    (
        "missing request",
        body({"apiVersion": API_V1, "kind": "AdmissionReview"}),
        "AdmissionReview has no request",
        "missing_request",
    ),
    (
        "null request",
        body({"apiVersion": API_V1, "kind": "AdmissionReview", "request": None}),
        "AdmissionReview has no request",
        "missing_request",
    ),
    (
        "request not an object",
        body({"apiVersion": API_V1, "kind": "AdmissionReview", "request": "x"}),
        'AdmissionReview request must be a JSON object, got "x"',
        "invalid_request",
    ),
    (
        "missing uid",
        body(review_with(uid=None)),
        "invalid AdmissionReview: request.uid: Field required",
        "invalid_request",
    ),
    (
        "empty uid",
        body(review_with(uid="")),
        "invalid AdmissionReview: request.uid: String should have at least 1 character",
        "invalid_request",
    ),
    (
        "uid of the wrong type",
        body(review_with(uid=7)),
        "invalid AdmissionReview: request.uid: Input should be a valid string",
        "invalid_request",
    ),
    (
        "missing kind in request",
        body(review_with(kind=None)),
        "invalid AdmissionReview: request.kind: Field required",
        "invalid_request",
    ),
    (
        "kind without version",
        body(review_with(kind={"group": "", "kind": "Pod"})),
        "invalid AdmissionReview: request.kind.version: Field required",
        "invalid_request",
    ),
    (
        "unknown operation",
        body(review_with(operation="PATCH")),
        "invalid AdmissionReview: request.operation: "
        "Input should be 'CREATE', 'UPDATE', 'DELETE' or 'CONNECT'",
        "invalid_request",
    ),
    (
        "dryRun as a string",
        body(review_with(dryRun="true")),
        "invalid AdmissionReview: request.dryRun: Input should be a valid boolean",
        "invalid_request",
    ),
    (
        "object not an object",
        body(review_with(object=[1, 2])),
        "invalid AdmissionReview: request.object: must be a JSON object or null",
        "invalid_request",
    ),
    (
        "several problems",
        body(review_with(uid=None, operation=None)),
        "invalid AdmissionReview: request.uid: Field required (and 1 more)",
        "invalid_request",
    ),
]


@pytest.mark.parametrize(
    ("raw", "message", "category"),
    [
        pytest.param(raw, message, category, id=name)
        for name, raw, message, category in BAD_DOCUMENTS
    ],
)
def test_rejects_bad_document(raw: bytes, message: str, category: str) -> None:
    with pytest.raises(ReviewError) as caught:
        decode_review(raw)

    assert caught.value.status_code == 400
    assert caught.value.reason == message
    assert caught.value.category == category
    assert str(caught.value) == message


def test_reason_never_echoes_a_whole_value() -> None:
    huge = "x" * 10_000
    with pytest.raises(ReviewError) as caught:
        decode_review(body({"apiVersion": huge, "kind": "AdmissionReview"}))

    assert len(caught.value.reason) < 200
    assert caught.value.reason.endswith('..."')


def outcome(raw: bytes) -> Review | ReviewError:
    try:
        return decode_review(raw)
    except ReviewError as exc:
        return exc


@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_review_error(raw: bytes) -> None:
    result = outcome(raw)

    if isinstance(result, ReviewError):
        assert result.status_code == 400
        assert "\n" not in result.reason


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)


# The machine running the suite is shared: generation speed says nothing about the code.
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {"apiVersion": st.sampled_from([API_V1, API_V1BETA1]), "kind": st.just("AdmissionReview")},
        optional={
            "request": st.fixed_dictionaries(
                {},
                optional={
                    "uid": JSON_VALUES,
                    "kind": JSON_VALUES,
                    "operation": st.sampled_from(["CREATE", "DELETE"]) | JSON_VALUES,
                    "object": JSON_VALUES,
                    "userInfo": JSON_VALUES,
                    "dryRun": JSON_VALUES,
                    "name": JSON_VALUES,
                },
            )
        },
    )
)
def test_arbitrary_envelopes_decode_or_raise_review_error(document: dict[str, Any]) -> None:
    result = outcome(body(document))

    if isinstance(result, ReviewError):
        assert result.status_code == 400
    else:
        assert result.request.uid == document["request"]["uid"]
        assert result.request.operation in {"CREATE", "DELETE"}


# --- encoding -------------------------------------------------------------------------------


def decoded_response(raw: bytes) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(raw)
    return document


def test_encodes_allowed_without_patch() -> None:
    raw = encode_response(api_version=API_V1, uid="u-1", verdict=Verdict.allow())

    assert decoded_response(raw) == {
        "apiVersion": API_V1,
        "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": True},
    }


@pytest.mark.parametrize("api_version", [API_V1, API_V1BETA1])
def test_encodes_in_the_requested_version(api_version: str) -> None:
    raw = encode_response(api_version=api_version, uid="u-2", verdict=Verdict.allow())

    document = decoded_response(raw)
    assert document["apiVersion"] == api_version
    assert document["response"]["uid"] == "u-2"


def test_encodes_patch_with_patch_type() -> None:
    patch = base64.b64encode(b'[{"op":"add","path":"/x","value":1}]').decode()

    response = decoded_response(
        encode_response(api_version=API_V1, uid="u", verdict=Verdict.allow(), patch=patch)
    )["response"]

    assert response["patchType"] == "JSONPatch"
    assert response["patch"] == patch


def test_encodes_denial_with_status() -> None:
    verdict = Verdict.deny("exceeded tenant quota: team-a", code=403, reason="Forbidden")

    response = decoded_response(encode_response(api_version=API_V1, uid="u", verdict=verdict))[
        "response"
    ]

    assert response == {
        "uid": "u",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "exceeded tenant quota: team-a"},
    }


def test_denial_never_carries_a_patch() -> None:
    raw = encode_response(api_version=API_V1, uid="u", verdict=Verdict.deny("no"), patch="W10=")

    response = decoded_response(raw)["response"]
    assert "patch" not in response
    assert "patchType" not in response


def test_denial_omits_empty_reason_and_message() -> None:
    verdict = Verdict(allowed=False, code=429)

    response = decoded_response(encode_response(api_version=API_V1, uid="u", verdict=verdict))[
        "response"
    ]

    assert response["status"] == {"code": 429}


def test_encodes_warnings_and_audit_annotations() -> None:
    verdict = Verdict(
        allowed=True,
        warnings=("admitted on burst capacity", "defaults applied"),
        audit_annotations={"tier": "burst"},
    )

    response = decoded_response(encode_response(api_version=API_V1, uid="u", verdict=verdict))[
        "response"
    ]

    assert response["warnings"] == ["admitted on burst capacity", "defaults applied"]
    assert response["auditAnnotations"] == {"tier": "burst"}
    assert "status" not in response


def test_denial_keeps_warnings() -> None:
    verdict = Verdict(allowed=False, code=403, message="no", warnings=("why",))

    response = decoded_response(encode_response(api_version=API_V1, uid="u", verdict=verdict))[
        "response"
    ]

    assert response["warnings"] == ["why"]


# --- one_line -------------------------------------------------------------------------------


def test_one_line_flattens_control_characters() -> None:
    assert one_line("bad\nthing\there\r") == "bad thing here"


def test_one_line_truncates() -> None:
    assert one_line("abcdefghij", limit=8) == "abcde..."
    assert one_line("abcdefgh", limit=8) == "abcdefgh"


# --- the fast path agrees with the model -------------------------------------------------------

VALID_REQUEST: dict[str, Any] = fixture("v1-create-pod.json")["request"]
ENVELOPE_FIELDS = (
    "uid",
    "kind",
    "resource",
    "subResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "object",
    "oldObject",
    "dryRun",
    "options",
)
TEXT = st.sampled_from(["", "pods"]) | st.text(max_size=5)
OBJECTS = st.none() | st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=2)
# Values of the right shape for each field (some still invalid, such as an empty uid).
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "uid": TEXT,
    "kind": st.fixed_dictionaries({"version": TEXT, "kind": TEXT}, optional={"group": TEXT}),
    "resource": st.fixed_dictionaries(
        {}, optional={"group": TEXT, "version": TEXT, "resource": TEXT}
    ),
    "subResource": TEXT,
    "name": TEXT,
    "namespace": TEXT,
    "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "create"]),
    "userInfo": st.fixed_dictionaries({}, optional={"username": TEXT, "groups": JSON_VALUES}),
    "object": OBJECTS,
    "oldObject": OBJECTS,
    "dryRun": st.booleans(),
    "options": OBJECTS,
}


@st.composite
def near_valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    """The valid fixture request with fields dropped, changed, or (rarely) of any JSON value."""
    request = dict(VALID_REQUEST)
    for key in ENVELOPE_FIELDS:
        choice = draw(st.sampled_from(["keep", "keep", "drop", "plausible", "plausible", "any"]))
        if choice == "drop":
            request.pop(key, None)
        elif choice == "plausible":
            request[key] = draw(PLAUSIBLE[key])
        elif choice == "any":
            request[key] = draw(JSON_VALUES)
    return request


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=400)
@given(near_valid_requests())
def test_plain_request_matches_the_model_whenever_it_answers(request: dict[str, Any]) -> None:
    plain = _plain_request(request)
    try:
        validated: tuple[Any, str] | ReviewError = _validated_request(request)
    except ReviewError as exc:
        validated = exc

    if plain is not None:
        assert not isinstance(validated, ReviewError)
        assert plain == validated


METADATA = st.fixed_dictionaries(
    {},
    optional={
        "name": TEXT,
        "labels": st.none() | st.dictionaries(TEXT, TEXT, max_size=2),
        "managedFields": JSON_VALUES,
        "finalizers": JSON_VALUES,
        "clusterName": TEXT,
    },
)
CONTAINERS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "name": TEXT,
            "resources": JSON_VALUES,
            "restartPolicy": TEXT,
            "image": TEXT,
            "env": JSON_VALUES,
            "ports": JSON_VALUES,
        },
    )
    | JSON_VALUES,
    max_size=2,
)
SPECS = st.fixed_dictionaries(
    {},
    optional={
        "containers": CONTAINERS | JSON_VALUES,
        "initContainers": CONTAINERS,
        "ephemeralContainers": CONTAINERS,
        "tolerations": JSON_VALUES,
        "dnsPolicy": TEXT,
        "priority": JSON_VALUES,
        "priorityClassName": TEXT,
        "volumes": JSON_VALUES,
        "overhead": JSON_VALUES,
    },
)
PODS = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": TEXT,
        "kind": TEXT,
        "metadata": st.none() | METADATA | JSON_VALUES,
        "spec": SPECS | JSON_VALUES,
        "status": JSON_VALUES,
        "other": JSON_VALUES,
    },
)
REVIEW_TOP = {
    "apiVersion": st.sampled_from([API_V1, API_V1BETA1, "v1"]) | JSON_VALUES,
    "kind": st.sampled_from(["AdmissionReview", "Review"]) | JSON_VALUES,
}


def _stripped(obj: Any) -> Any:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return without_managed_fields(obj)


def _only(value: Any, members: frozenset[str]) -> Any:
    return {k: v for k, v in value.items() if k in members} if isinstance(value, dict) else value


def _viewed(obj: Any, spec_members: frozenset[str], container_members: frozenset[str]) -> Any:
    """What a view keeps of ``obj`` (a view is its own view)."""
    if not isinstance(obj, dict):
        return obj
    viewed = _only(_stripped(obj), frozenset({"apiVersion", "kind", "metadata", "spec"}))
    spec = viewed.get("spec")
    if isinstance(spec, dict):
        spec = viewed["spec"] = _only(spec, spec_members)
        for member in ("containers", "initContainers", "ephemeralContainers"):
            if isinstance(spec.get(member), list):
                spec[member] = [_only(item, container_members) for item in spec[member]]
    return viewed


VIEWED_SPEC = frozenset(
    {"containers", "initContainers", "overhead", "resources", "priorityClassName", "priority"}
)
VIEWED_CONTAINER = frozenset({"name", "resources", "restartPolicy"})
PLANNED_SPEC = VIEWED_SPEC | {
    "ephemeralContainers",
    "preemptionPolicy",
    "schedulerName",
    "nodeSelector",
    "tolerations",
    "affinity",
    "topologySpreadConstraints",
    "restartPolicy",
    "hostNetwork",
}
PLANNED_CONTAINER = VIEWED_CONTAINER | {"image", "ports", "securityContext"}
VIEWS: dict[ObjectView, Callable[[Any], Any]] = {
    "whole": _stripped,
    "mutation": lambda obj: _viewed(obj, PLANNED_SPEC, PLANNED_CONTAINER),
    "validation": lambda obj: _viewed(obj, VIEWED_SPEC, VIEWED_CONTAINER),
}


def _decoded(
    raw: bytes, *, whole: bool = False, objects: ObjectView = "whole"
) -> Review | tuple[int, str]:
    """The decoded review with its objects as ``objects`` keeps them, or the error."""
    try:
        review = _decode_document(raw) if whole else decode_review(raw, objects=objects)
    except ReviewError as exc:
        return exc.status_code, exc.reason
    request = review.request
    kept = VIEWS[objects]
    return replace(
        review,
        request=replace(request, object=kept(request.object), old_object=kept(request.old_object)),
    )


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=400)
@given(
    near_valid_requests() | st.just(VALID_REQUEST),
    PODS,
    PODS,
    st.fixed_dictionaries({}, optional=REVIEW_TOP),
)
def test_the_fast_decoder_agrees_with_the_whole_one(
    request: dict[str, Any], pod: Any, old: Any, top: dict[str, Any]
) -> None:
    request = {**request, "object": pod, "oldObject": old}
    document = {"apiVersion": API_V1, "kind": "AdmissionReview", **top, "request": request}
    raw = body(document)

    for view in VIEWS:
        assert _decoded(raw, objects=view) == _decoded(raw, whole=True, objects=view), view


def test_plain_request_answers_for_a_real_request() -> None:
    assert _plain_request(VALID_REQUEST) == _validated_request(VALID_REQUEST)
    assert _plain_request(VALID_REQUEST) is not None


def test_the_fast_decoder_answers_for_real_reviews() -> None:
    for name in ("v1-create-pod.json", "v1beta1-create-pod.json", "v1-update-pod.json"):
        wire = _WIRE_DECODERS["whole"].decode(body(fixture(name)))

        assert _wire_review(wire) == _decoded(body(fixture(name)), whole=True), name


def test_the_mutation_view_keeps_each_environment_variable_by_its_name_only() -> None:
    """Evidence reads a container's variable names; each variable is built as the whole
    decoder would give it with only its name kept (none when it has none)."""
    env = [
        {"name": "POSTGRES_DB", "value": "app"},
        {"value": "nameless"},
        {"name": None},
        {"name": 5, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    document = review_with()
    document["request"]["object"]["spec"]["containers"][0]["env"] = env

    review = decode_review(body(document), objects="mutation")

    assert review.request.object is not None
    container = review.request.object["spec"]["containers"][0]
    whole = _decode_document(body(document)).request.object
    assert whole is not None
    assert container["env"] == [
        {key: value for key, value in variable.items() if key == "name"}
        for variable in whole["spec"]["containers"][0]["env"]
    ]
    assert container["env"] == [
        {"name": "POSTGRES_DB"},
        {},
        {"name": None},
        {"name": 5},
        {"name": "TOKEN"},
    ]


def test_the_mutation_view_keeps_the_pod_level_members_evidence_reads() -> None:
    """Evidence reads the service account, the runtime class, volumes and the devices claimed
    through dynamic resource allocation (classifier/evidence/signals.py): the view keeps them
    as the whole decoder gives them."""
    document = review_with()
    spec = document["request"]["object"]["spec"]
    spec["serviceAccountName"] = "trainer"
    spec["runtimeClassName"] = "nvidia"
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]

    review = decode_review(body(document), objects="mutation")

    assert review.request.object is not None
    whole = _decode_document(body(document)).request.object
    assert whole is not None
    for member in ("serviceAccountName", "runtimeClassName", "volumes", "resourceClaims"):
        assert review.request.object["spec"][member] == whole["spec"][member], member


# --- hostile bodies -------------------------------------------------------------------------

OBJECT_VIEWS: tuple[ObjectView, ...] = ("whole", "mutation", "validation")
CREATE_BODY = (FIXTURES / "v1-create-pod.json").read_bytes()


def invalid_utf8_at(marker: bytes) -> bytes:
    """The CREATE fixture with an invalid UTF-8 byte inside the string that follows ``marker``."""
    start = CREATE_BODY.index(marker) + len(marker)
    quote = CREATE_BODY.index(b'"', start)
    return CREATE_BODY[: quote + 1] + b"\xff\xfe" + CREATE_BODY[quote + 1 :]


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def with_member(path: tuple[str, ...], raw: bytes) -> bytes:
    """The CREATE fixture with ``raw`` JSON placed at ``request.object.<path>``."""
    document = fixture("v1-create-pod.json")
    target = document["request"]["object"]
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = "PLACEHOLDER"
    return body(document).replace(b'"PLACEHOLDER"', raw)


@pytest.mark.parametrize("view", OBJECT_VIEWS)
@pytest.mark.parametrize("marker", [b'"uid":', b'"app":', b'"image":', b'"name":'])
def test_invalid_utf8_inside_a_string_is_a_400(view: ObjectView, marker: bytes) -> None:
    """msgspec raises UnicodeDecodeError (not one of its errors) for these: it used to escape."""
    if view == "validation" and marker == b'"image":':
        # Validation skips images unbuilt (nothing reads them), invalid or not.
        assert decode_review(invalid_utf8_at(marker), objects=view).request.uid
        return
    with pytest.raises(ReviewError) as caught:
        decode_review(invalid_utf8_at(marker), objects=view)

    assert caught.value.status_code == 400
    assert caught.value.category == "malformed_json"
    assert caught.value.reason.startswith("malformed JSON: ")


@pytest.mark.parametrize("view", OBJECT_VIEWS)
@pytest.mark.parametrize(
    "path",
    [("spec", "affinity"), ("spec", "tolerations"), ("metadata", "labels"), ("status",)],
)
def test_nesting_of_a_thousand_levels_is_a_400(view: ObjectView, path: tuple[str, ...]) -> None:
    """msgspec raises RecursionError at about a thousand levels: it used to escape as a 500."""
    with pytest.raises(ReviewError) as caught:
        decode_review(with_member(path, nested(1_100)), objects=view)

    assert caught.value.status_code == 400
    assert caught.value.reason.startswith("malformed JSON: ")


def test_nesting_is_refused_even_when_the_stack_is_already_deep() -> None:
    """Deep in a caller's stack Python's recursion limit comes before orjson's own."""

    def at_depth(levels: int) -> ReviewError | Review:
        if levels:
            return at_depth(levels - 1)
        return outcome(with_member(("spec", "affinity"), nested(1_000)))

    result = at_depth(400)

    assert isinstance(result, ReviewError)
    assert result.status_code == 400


HOSTILE_VALUES = [
    b'"\xff"',
    b'"\xed\xa0\x80"',  # an encoded surrogate
    b'"\\ud800"',
    b"1" * 5000,
    b"1e999",
    b"-1e400",
    b"NaN",
    b"18446744073709551616",
    nested(1_100),
    b"[" * 1_100 + b"]" * 1_100,
    b'{"a":1,"a":2}',
    b'"' + b"\\u0000" * 10 + b'"',
    b"\x00",
    b"",
]


def hostile_variants(raw: bytes) -> st.SearchStrategy[bytes]:
    """``raw`` with a hostile value in place of a value, or cut, or with bytes flipped."""
    spots = [i for i, byte in enumerate(raw) if byte in b":,["]

    def replace_value(spot: int, value: bytes) -> bytes:
        end = spot + 1
        depth = 0
        while end < len(raw):  # skip the next JSON value, roughly: good enough to break it
            byte = raw[end]
            if byte in b"[{":
                depth += 1
            elif byte in b"]}":
                if depth == 0:
                    break
                depth -= 1
            elif byte == ord(",") and depth == 0:
                break
            end += 1
        return raw[: spot + 1] + value + raw[end:]

    def flip(position: int, byte: int) -> bytes:
        return raw[:position] + bytes([byte]) + raw[position + 1 :]

    return st.one_of(
        st.builds(replace_value, st.sampled_from(spots), st.sampled_from(HOSTILE_VALUES)),
        st.builds(flip, st.integers(0, len(raw) - 1), st.integers(0, 255)),
        st.builds(lambda cut: raw[:cut], st.integers(0, len(raw))),
    )


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(
    view=st.sampled_from(OBJECT_VIEWS),
    raw=st.sampled_from(sorted(FIXTURES.glob("*.json"))).flatmap(
        lambda path: hostile_variants(path.read_bytes())
    ),
)
def test_mutated_real_reviews_decode_or_raise_review_error(view: ObjectView, raw: bytes) -> None:
    result: Review | ReviewError
    try:
        result = decode_review(raw, objects=view)
    except ReviewError as exc:
        result = exc
    if isinstance(result, ReviewError):
        assert result.status_code == 400
        assert "\n" not in result.reason
