"""Kubernetes ``Status`` errors, with the texts, reasons and codes the real API server uses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devapi.types import JSONObject

OPTIMISTIC_LOCK_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

# Field error types as k8s.io/apimachinery/pkg/util/validation/field names them.
REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
FORBIDDEN = "FieldValueForbidden"
NOT_SUPPORTED = "FieldValueNotSupported"
DUPLICATE = "FieldValueDuplicate"

_TYPE_TEXT = {
    REQUIRED: "Required value",
    INVALID: "Invalid value",
    FORBIDDEN: "Forbidden",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
}
_NO_VALUE = object()


@dataclass(frozen=True)
class FieldError:
    """One validation failure on one field, printed like ``field.Error`` in Go."""

    type: str
    field: str
    detail: str = ""
    value: Any = _NO_VALUE

    def body(self) -> str:
        text = _TYPE_TEXT[self.type]
        if self.type in (INVALID, NOT_SUPPORTED, DUPLICATE) and self.value is not _NO_VALUE:
            text = f"{text}: {_go_value(self.value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, field, detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, field, detail, value)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, field, detail)


def not_supported(field: str, value: Any, supported: Sequence[str]) -> FieldError:
    allowed = ", ".join(f'"{s}"' for s in supported)
    return FieldError(NOT_SUPPORTED, field, f"supported values: {allowed}", value)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(DUPLICATE, field, "", value)


def _go_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


class APIError(Exception):
    """A failed request, answered with a ``Status`` body and its HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JSONObject | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> JSONObject:
        # metav1.Status: message and reason are omitempty.
        body: JSONObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
        }
        if self.message:
            body["message"] = self.message
        if self.reason:
            body["reason"] = self.reason
        body["code"] = self.code
        if self.details is not None:
            body["details"] = self.details
        return body

    @classmethod
    def from_status(cls, status: JSONObject) -> APIError:
        """An error carrying a ``Status`` produced elsewhere (a webhook's denial)."""
        code = status.get("code")
        details = status.get("details")
        return cls(
            code if isinstance(code, int) else 500,
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            details=details if isinstance(details, dict) else None,
        )


def qualified(group: str, plural: str) -> str:
    """``pods`` or ``leases.coordination.k8s.io``: how messages name a resource."""
    return f"{plural}.{group}" if group else plural


def _resource_details(group: str, plural: str, name: str) -> JSONObject:
    details: JSONObject = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def not_found(group: str, plural: str, name: str) -> APIError:
    return APIError(
        404,
        "NotFound",
        f'{qualified(group, plural)} "{name}" not found',
        details=_resource_details(group, plural, name),
    )


def already_exists(group: str, plural: str, name: str) -> APIError:
    return APIError(
        409,
        "AlreadyExists",
        f'{qualified(group, plural)} "{name}" already exists',
        details=_resource_details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str, why: str = OPTIMISTIC_LOCK_MESSAGE) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": {why}',
        details=_resource_details(group, plural, name),
    )


def forbidden_request(group: str, plural: str, name: str, why: str) -> APIError:
    resource = qualified(group, plural)
    prefix = f'{resource} "{name}"' if name else resource
    return APIError(
        403,
        "Forbidden",
        f"{prefix} is forbidden: {why}",
        details=_resource_details(group, plural, name),
    )


def invalid_object(group: str, kind: str, name: str, errors: Sequence[FieldError]) -> APIError:
    qualified_kind = f"{kind}.{group}" if group else kind
    if len(errors) == 1:
        aggregate = str(errors[0])
    else:
        aggregate = "[" + ", ".join(str(e) for e in errors) + "]"
    details: JSONObject = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors]
    return APIError(
        422, "Invalid", f'{qualified_kind} "{name}" is invalid: {aggregate}', details=details
    )


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def method_not_allowed() -> APIError:
    return APIError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        details={},
    )


def path_not_found() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource", details={})


PROTOBUF = "application/vnd.kubernetes.protobuf"
PROTOBUF_HINT = (
    "; this API server reads no protobuf, which kubectl's typed commands (kubectl create "
    "namespace, kubectl create deployment, ...) send: write the object in YAML and use "
    "kubectl apply -f FILE"
)


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> APIError:
    """``negotiation.errUnsupportedMediaType`` (apiserver/pkg/endpoints/handlers/negotiation/
    errors.go): 415, its text, no details. A protobuf body gets a hint at the JSON way."""
    message = (
        "the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}"
    )
    if content_type == PROTOBUF:
        message += PROTOBUF_HINT
    return APIError(415, "UnsupportedMediaType", message)


def internal_error(cause: str) -> APIError:
    return APIError(
        500,
        "InternalError",
        f"Internal error occurred: {cause}",
        details={"causes": [{"message": cause}]},
    )


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def too_old_resource_version(requested: int, oldest: int) -> APIError:
    return expired(f"too old resource version: {requested} ({oldest})")


CONTINUE_EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
