"""The AdmissionReview wire format (``admission.k8s.io/v1`` and ``v1beta1``), typed in one place.

Only the envelope is validated. ``request.object`` and ``request.oldObject`` stay the parsed JSON
the API server sent: the hot path never builds a PodSpec model, and the decision logic reads the
pod through typed accessors. Responses go back in the apiVersion of the request, echoing its uid.

A review is first decoded with msgspec against a schema of the envelope that skips, unbuilt,
every field nothing reads: the request's ``requestKind`` and friends, each object's
``metadata.managedFields`` (about half of a pod as the API server sends it), and, per endpoint,
the parts of the pod its decision neither reads nor writes (:data:`ObjectView`; the tests in
``tests/admission/test_object_views.py`` hold the admitter to that). What is kept is exactly
as sent. A document the schema does not fit in every detail (an unexpected type, an object
member the schema does not name, a value the model would refuse) is decoded again in full with
orjson and checked by the model, so errors and their messages come from one place.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Final, Literal, TypeGuard

import msgspec
import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from classifier.records import record
from tenants.verdicts import AdmissionInput, Verdict

logger = logging.getLogger(__name__)

API_V1: Final = "admission.k8s.io/v1"
API_V1BETA1: Final = "admission.k8s.io/v1beta1"
API_VERSIONS: Final = (API_V1, API_V1BETA1)
KIND: Final = "AdmissionReview"
PATCH_TYPE: Final = "JSONPatch"

_MISSING: Final = object()

NESTED_TOO_DEEPLY: Final = "malformed JSON: nested too deeply"

# Long enough for any field path and pydantic message, short enough for one log line.
_MAX_REASON_CHARS: Final = 300


class ReviewError(Exception):
    """A request the edge cannot answer with an AdmissionReview; the app turns it into HTTP 4xx.

    ``reason`` is the one-line text the caller sees; ``category`` is a short fixed label for
    metrics (never user input, so label cardinality stays bounded).
    """

    def __init__(self, status_code: int, reason: str, *, category: str = "invalid_review") -> None:
        self.status_code = status_code
        self.reason = one_line(reason)
        self.category = category
        super().__init__(self.reason)


def one_line(text: str, *, limit: int = _MAX_REASON_CHARS) -> str:
    """``text`` with control characters replaced by spaces, truncated to ``limit`` characters."""
    flat = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _json_object_or_null(value: Any) -> Any:
    if value is None or isinstance(value, dict):
        return value
    raise ValueError("must be a JSON object or null")


# Typed as Any so pydantic passes the parsed object through untouched (no copy, no walk).
_RawObject = Annotated[Any, AfterValidator(_json_object_or_null)]


class _Envelope(BaseModel):
    # strict: the API server sends exact JSON types; "true" is not a boolean.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class GroupVersionKind(_Envelope):
    group: str = ""
    version: str = Field(min_length=1)
    kind: str = Field(min_length=1)


class GroupVersionResource(_Envelope):
    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(_Envelope):
    username: str = ""


class AdmissionRequest(_Envelope):
    """``AdmissionReview.request``: identical in v1 and v1beta1 for every field read here."""

    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource = GroupVersionResource()
    sub_resource: str = Field(default="", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default=UserInfo(), alias="userInfo")
    object_: _RawObject = Field(default=None, alias="object")
    old_object: _RawObject = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")
    options: _RawObject = None


@record
class Review:
    """A decoded AdmissionReview: what to answer in (``api_version``) and what was asked."""

    api_version: str
    request: AdmissionInput
    resource: str  # e.g. "pods"; for logs


def decode_review(body: bytes, *, objects: ObjectView = "whole") -> Review:
    """Parse and check an AdmissionReview request body; raise :class:`ReviewError` if invalid.

    ``objects`` says how much of ``request.object`` and ``request.oldObject`` to build when the
    fast decoder takes the body: ``"whole"``, everything but ``metadata.managedFields``;
    ``"validation"``, only what validating a pod reads: metadata without managedFields, and
    the spec's ``containers`` and ``initContainers`` (name, resources, restartPolicy),
    ``overhead``, ``resources``, ``priorityClassName``, ``priority`` and ``schedulingGates``;
    ``"mutation"``, what classifying, planning, defaulting, booking and queueing read or
    write: the validation view plus ``ephemeralContainers``, the containers' ``image``,
    ``ports``, ``securityContext``, ``command``, ``args``, probes and the names of their
    ``env`` variables, and the spec's
    ``preemptionPolicy``, ``schedulerName``, ``nodeSelector``, ``tolerations``, ``affinity``,
    ``topologySpreadConstraints``, ``restartPolicy``, ``hostNetwork``, ``hostPID``,
    ``serviceAccountName``, ``runtimeClassName``, ``resourceClaims``, ``volumes`` and
    ``nodeName``. A body the fast
    decoder does not take comes with its objects whole, and so does an in-place resize
    (``pods/resize``), judged on what the pod holds, which its status tells.
    """
    try:
        wire = _WIRE_DECODERS[objects].decode(body)
    except (msgspec.MsgspecError, UnicodeDecodeError):
        # msgspec reports invalid UTF-8 inside a string as UnicodeDecodeError, not as one of its
        # errors: the full decoder says what is wrong.
        wire = None
    except RecursionError:
        # Nesting deeper than the stack allows (about a thousand levels; a pod has about ten):
        # refused here, not by orjson's own limit, so nothing later walks such an object.
        raise ReviewError(400, NESTED_TOO_DEEPLY, category="too_deep") from None
    if wire is not None:
        review = _wire_review(wire)
        if review is not None:
            if objects != "whole" and review.request.sub_resource == "resize":
                return decode_review(body)
            return review
    return _decode_document(body)


def _decode_document(body: bytes) -> Review:
    """:func:`decode_review` for any body: parsed whole, checked field by field."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson refuses invalid UTF-8 and nesting deeper than 1024 levels with this error too.
        raise ReviewError(400, f"malformed JSON: {exc}", category="malformed_json") from None
    except RecursionError:
        # orjson's own limit is 1024 levels; a caller deep in the stack reaches Python's first.
        raise ReviewError(400, NESTED_TOO_DEEPLY, category="too_deep") from None
    if not isinstance(document, dict):
        raise ReviewError(
            400,
            f"AdmissionReview must be a JSON object, got {_describe(document)}",
            category="not_an_object",
        )

    api_version = document.get("apiVersion", _MISSING)
    if api_version not in API_VERSIONS:
        raise ReviewError(
            400,
            f"apiVersion must be {API_V1} or {API_V1BETA1}, got {_describe(api_version)}",
            category="wrong_api_version",
        )
    kind = document.get("kind", _MISSING)
    if kind != KIND:
        raise ReviewError(400, f"kind must be {KIND}, got {_describe(kind)}", category="wrong_kind")
    raw_request = document.get("request")
    if raw_request is None:
        raise ReviewError(400, "AdmissionReview has no request", category="missing_request")
    if not isinstance(raw_request, dict):
        raise ReviewError(
            400,
            f"AdmissionReview request must be a JSON object, got {_describe(raw_request)}",
            category="invalid_request",
        )

    plain = _plain_request(raw_request)
    request, resource = plain if plain is not None else _validated_request(raw_request)
    return Review(api_version=api_version, request=request, resource=resource)


def _validated_request(raw: dict[str, Any]) -> tuple[AdmissionInput, str]:
    """``raw`` through :class:`AdmissionRequest`: the request and its resource, or the error."""
    try:
        request = AdmissionRequest.model_validate(raw)
    except ValidationError as exc:
        raise ReviewError(
            400, f"invalid AdmissionReview: {_first_problem(exc)}", category="invalid_request"
        ) from None
    admission_input = AdmissionInput(
        uid=request.uid,
        operation=request.operation,
        namespace=request.namespace,
        name=request.name,
        object=request.object_,
        old_object=request.old_object,
        kind=request.kind.kind,
        group=request.kind.group,
        version=request.kind.version,
        sub_resource=request.sub_resource,
        dry_run=request.dry_run,
        username=request.user_info.username,
        options=request.options,
    )
    return admission_input, request.resource.resource


_OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def _text(value: object, *, required: bool = False) -> TypeGuard[str]:
    """Whether ``value`` passes a strict ``str`` field (with ``min_length=1`` if required)."""
    return type(value) is str and (bool(value) or not required)


def _plain_request(raw: dict[str, Any]) -> tuple[AdmissionInput, str] | None:
    """The request the model would give for a well-formed ``raw``; None when in any doubt.

    The API server always sends a well-formed request, and validating it through the model is
    most of the cost of decoding. This accepts only values :class:`AdmissionRequest` accepts
    unchanged (exact types, no coercion); anything else (wrong types, nulls, missing required
    fields) goes through the model, so errors and their messages come from one place.
    """
    uid = raw.get("uid")
    operation = raw.get("operation")
    kind = raw.get("kind")
    if not _text(uid, required=True) or type(kind) is not dict:
        return None
    if type(operation) is not str or operation not in _OPERATIONS:
        return None
    group = kind.get("group", "")
    version = kind.get("version")
    kind_name = kind.get("kind")
    if not _text(version, required=True) or not _text(kind_name, required=True):
        return None
    if not _text(group):
        return None
    resource = raw.get("resource", _EMPTY)
    user_info = raw.get("userInfo", _EMPTY)
    if type(resource) is not dict or type(user_info) is not dict:
        return None
    resource_group = resource.get("group", "")
    resource_version = resource.get("version", "")
    resource_name = resource.get("resource", "")
    username = user_info.get("username", "")
    sub_resource = raw.get("subResource", "")
    name = raw.get("name", "")
    namespace = raw.get("namespace", "")
    if not (
        _text(resource_group)
        and _text(resource_version)
        and _text(resource_name)
        and _text(username)
        and _text(sub_resource)
        and _text(name)
        and _text(namespace)
    ):
        return None
    obj = raw.get("object")
    old_object = raw.get("oldObject")
    options = raw.get("options")
    dry_run = raw.get("dryRun", False)
    if type(dry_run) is not bool:
        return None
    for value in (obj, old_object, options):
        if value is not None and type(value) is not dict:
            return None
    request = AdmissionInput(
        uid,
        operation,
        namespace,
        name,
        obj,
        old_object,
        kind_name,
        group,
        version,
        sub_resource,
        dry_run,
        username,
        options,
    )
    return request, resource_name


_EMPTY: Final[dict[str, Any]] = {}


# --------------------------------------------------------------------------- the fast decoder
#
# Every member is optional here; what is required, and which values are valid, is checked in
# _wire_review, which gives up (None) on anything the model would refuse or change.


class _WireMeta(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``ObjectMeta``: every field, ``managedFields`` kept as an unparsed slice of the body."""

    name: Any = msgspec.UNSET
    generate_name: Any = msgspec.UNSET
    namespace: Any = msgspec.UNSET
    self_link: Any = msgspec.UNSET
    uid: Any = msgspec.UNSET
    resource_version: Any = msgspec.UNSET
    generation: Any = msgspec.UNSET
    creation_timestamp: Any = msgspec.UNSET
    deletion_timestamp: Any = msgspec.UNSET
    deletion_grace_period_seconds: Any = msgspec.UNSET
    labels: Any = msgspec.UNSET
    annotations: Any = msgspec.UNSET
    owner_references: Any = msgspec.UNSET
    finalizers: Any = msgspec.UNSET
    managed_fields: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


class _WireObject(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A pod's top level (any object with no other members fits)."""

    api_version: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET
    metadata: _WireMeta | msgspec.UnsetType | None = msgspec.UNSET
    spec: Any = msgspec.UNSET
    status: Any = msgspec.UNSET


class _WireContainer(msgspec.Struct, rename="camel"):
    """What validation reads of a container (its other members are skipped)."""

    name: Any = msgspec.UNSET
    resources: Any = msgspec.UNSET
    restart_policy: Any = msgspec.UNSET


class _WireValidatedSpec(msgspec.Struct, rename="camel"):
    """What validation reads of a pod's spec: its request and its priority."""

    containers: list[_WireContainer] | msgspec.UnsetType | None = msgspec.UNSET
    init_containers: list[_WireContainer] | msgspec.UnsetType | None = msgspec.UNSET
    overhead: Any = msgspec.UNSET
    resources: Any = msgspec.UNSET
    priority_class_name: Any = msgspec.UNSET
    priority: Any = msgspec.UNSET
    scheduling_gates: Any = msgspec.UNSET


class _WireValidatedObject(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A pod as validation reads it: metadata and the spec's request (status is skipped)."""

    api_version: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET
    metadata: _WireMeta | msgspec.UnsetType | None = msgspec.UNSET
    spec: _WireValidatedSpec | msgspec.UnsetType | None = msgspec.UNSET
    status: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


class _WireEnvVar(msgspec.Struct):
    """An environment variable as evidence reads it: its name (values are skipped)."""

    name: Any = msgspec.UNSET


class _WirePlannedContainer(_WireContainer):
    """What classifying and planning read or write of a container (the rest is skipped)."""

    image: Any = msgspec.UNSET
    ports: Any = msgspec.UNSET
    security_context: Any = msgspec.UNSET
    # Weighed evidence reads what a container runs and how it is probed.
    command: Any = msgspec.UNSET
    args: Any = msgspec.UNSET
    env: list[_WireEnvVar] | msgspec.UnsetType | None = msgspec.UNSET
    liveness_probe: Any = msgspec.UNSET
    readiness_probe: Any = msgspec.UNSET
    startup_probe: Any = msgspec.UNSET


class _WirePlannedSpec(msgspec.Struct, rename="camel"):
    """What classifying, planning, defaulting and booking read or write of a pod's spec."""

    containers: list[_WirePlannedContainer] | msgspec.UnsetType | None = msgspec.UNSET
    init_containers: list[_WirePlannedContainer] | msgspec.UnsetType | None = msgspec.UNSET
    ephemeral_containers: list[_WirePlannedContainer] | msgspec.UnsetType | None = msgspec.UNSET
    overhead: Any = msgspec.UNSET
    resources: Any = msgspec.UNSET
    priority_class_name: Any = msgspec.UNSET
    priority: Any = msgspec.UNSET
    preemption_policy: Any = msgspec.UNSET
    scheduler_name: Any = msgspec.UNSET
    node_selector: Any = msgspec.UNSET
    tolerations: Any = msgspec.UNSET
    affinity: Any = msgspec.UNSET
    topology_spread_constraints: Any = msgspec.UNSET
    restart_policy: Any = msgspec.UNSET
    host_network: Any = msgspec.UNSET
    scheduling_gates: Any = msgspec.UNSET
    node_name: Any = msgspec.UNSET
    volumes: Any = msgspec.UNSET  # rules read persistent volume claims, evidence host paths
    host_pid: Any = msgspec.field(default=msgspec.UNSET, name="hostPID")
    service_account_name: Any = msgspec.UNSET
    runtime_class_name: Any = msgspec.UNSET
    resource_claims: Any = msgspec.UNSET  # evidence: devices claimed through DRA


class _WirePlannedObject(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A pod as classifying and planning read it: metadata and part of the spec."""

    api_version: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET
    metadata: _WireMeta | msgspec.UnsetType | None = msgspec.UNSET
    spec: _WirePlannedSpec | msgspec.UnsetType | None = msgspec.UNSET
    status: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


class _WireKind(msgspec.Struct):
    group: str = ""
    version: str = ""
    kind: str = ""


class _WireResource(msgspec.Struct):
    group: str = ""
    version: str = ""
    resource: str = ""


class _WireUser(msgspec.Struct):
    username: str = ""


class _WireRequestEnvelope(msgspec.Struct, rename="camel"):
    uid: str = ""
    kind: _WireKind | None = None
    resource: _WireResource = msgspec.field(default_factory=_WireResource)
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    operation: str = ""
    user_info: _WireUser = msgspec.field(default_factory=_WireUser)
    dry_run: bool = False
    options: dict[str, Any] | None = None


class _WireRequest(_WireRequestEnvelope):
    object: _WireObject | None = None
    old_object: _WireObject | None = None


class _WireValidatedRequest(_WireRequestEnvelope):
    object: _WireValidatedObject | None = None
    old_object: _WireValidatedObject | None = None


class _WirePlannedRequest(_WireRequestEnvelope):
    object: _WirePlannedObject | None = None
    old_object: _WirePlannedObject | None = None


class _WireEnvelope(msgspec.Struct, rename="camel"):
    api_version: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET


class _WireReview(_WireEnvelope):
    request: _WireRequest | None = None


class _WireValidatedReview(_WireEnvelope):
    request: _WireValidatedRequest | None = None


class _WirePlannedReview(_WireEnvelope):
    request: _WirePlannedRequest | None = None


ObjectView = Literal["whole", "mutation", "validation"]
_WIRE_DECODERS: Final[dict[ObjectView, msgspec.json.Decoder[Any]]] = {
    "whole": msgspec.json.Decoder(_WireReview),
    "mutation": msgspec.json.Decoder(_WirePlannedReview),
    "validation": msgspec.json.Decoder(_WireValidatedReview),
}


def _members_of(struct: type[msgspec.Struct], *, skip: str = "") -> tuple[str | None, ...]:
    """The JSON name of each field of ``struct``, in field order; None for the one skipped."""
    return tuple(
        None if field.name == skip else field.encode_name
        for field in msgspec.structs.fields(struct)
    )


# Per struct type, the JSON name of each field in the order ``astuple`` gives the values.
_MEMBERS: Final = {
    _WireObject: _members_of(_WireObject),
    _WireValidatedObject: _members_of(_WireValidatedObject, skip="status"),
    _WireMeta: _members_of(_WireMeta, skip="managed_fields"),
    _WireValidatedSpec: _members_of(_WireValidatedSpec),
    _WireContainer: _members_of(_WireContainer),
    _WirePlannedObject: _members_of(_WirePlannedObject, skip="status"),
    _WirePlannedSpec: _members_of(_WirePlannedSpec),
    _WirePlannedContainer: _members_of(_WirePlannedContainer),
}


def _members(struct: msgspec.Struct) -> dict[str, Any]:
    """The members ``struct`` was decoded from, by their JSON names (absent ones left out)."""
    # astuple reads every field in one call: cheaper than a getattr per field.
    return {
        key: value
        for key, value in zip(_MEMBERS[type(struct)], msgspec.structs.astuple(struct), strict=True)
        if value is not msgspec.UNSET and key is not None
    }


def _env(variables: list[_WireEnvVar]) -> list[dict[str, Any]]:
    """Environment variables as their names were sent (a container may carry dozens)."""
    return [
        {} if (name := variable.name) is msgspec.UNSET else {"name": name} for variable in variables
    ]


def _wire_object(
    wire: _WireObject | _WirePlannedObject | _WireValidatedObject | None,
) -> dict[str, Any] | None:
    """The object as orjson would give it, without the members its schema skips."""
    if wire is None:
        return None
    built = _members(wire)
    meta = built.get("metadata")
    if meta is not None:
        built["metadata"] = _members(meta)
    spec = built.get("spec")
    if isinstance(spec, _WireValidatedSpec | _WirePlannedSpec):
        spec = built["spec"] = _members(spec)
        for member in ("containers", "initContainers", "ephemeralContainers"):
            items = spec.get(member)
            if items:
                spec[member] = built_items = [_members(item) for item in items]
                for container in built_items:
                    env = container.get("env")
                    if env:
                        container["env"] = _env(env)
    return built


def _wire_review(wire: _WireReview | _WirePlannedReview | _WireValidatedReview) -> Review | None:
    """The review the full decoder would give (less what the schema skips); None when in doubt."""
    raw = wire.request
    api_version = wire.api_version
    if raw is None or wire.kind != KIND or api_version not in API_VERSIONS:
        return None
    kind = raw.kind
    if kind is None or not (raw.uid and kind.version and kind.kind):
        return None
    if raw.operation not in _OPERATIONS:
        return None
    request = AdmissionInput(
        raw.uid,
        raw.operation,
        raw.namespace,
        raw.name,
        _wire_object(raw.object),
        _wire_object(raw.old_object),
        kind.kind,
        kind.group,
        kind.version,
        raw.sub_resource,
        raw.dry_run,
        raw.user_info.username,
        raw.options,
    )
    return Review(api_version=api_version, request=request, resource=raw.resource.resource)


def encode_response(
    *, api_version: str, uid: str, verdict: Verdict, patch: str | None = None
) -> bytes:
    """Serialize ``verdict`` as an AdmissionReview response in ``api_version``, echoing ``uid``.

    ``patch`` is a base64 JSONPatch; it is sent only on an allowed verdict, together with
    ``patchType`` as the API server requires. Denials carry ``status`` {code, reason, message},
    which ``kubectl`` shows to the user.
    """
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        status: dict[str, Any] = {"code": verdict.code}
        if verdict.reason:
            status["reason"] = verdict.reason
        if verdict.message:
            status["message"] = verdict.message
        response["status"] = status
    elif patch:
        response["patchType"] = PATCH_TYPE
        response["patch"] = patch
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    if verdict.audit_annotations:
        response["auditAnnotations"] = verdict.audit_annotations
    return orjson.dumps({"apiVersion": api_version, "kind": KIND, "response": response})


def _describe(value: Any) -> str:
    """A short rendering of an unexpected envelope value; never dumps a whole object."""
    if value is _MISSING:
        return "nothing"
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return orjson.dumps(value).decode()
    if isinstance(value, str):
        return orjson.dumps(one_line(value, limit=60)).decode()
    return "a JSON array" if isinstance(value, list) else "a JSON object"


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    location = ".".join(str(part) for part in ("request", *first["loc"]))
    message = first["msg"].removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{location}: {message}{more}"
