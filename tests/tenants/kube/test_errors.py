"""Client library failures become tenantgate's own errors: status, reason, short scrubbed text."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from tenants.kube.errors import (
    MAX_MESSAGE_CHARS,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeNotFound,
    KubeUnavailable,
    from_status,
    scrub,
    wrap,
)


def api_exception(status: int, reason: str, message: str) -> ApiException:
    status_object = {"kind": "Status", "reason": reason, "message": message, "code": status}
    body = json.dumps(status_object)
    return ApiException(status=status, reason="HTTP reason", body=body)


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (410, "Expired", KubeGone),
        (409, "Conflict", KubeConflict),
        (404, "NotFound", KubeNotFound),
        (403, "Forbidden", KubeForbidden),
        (401, "Unauthorized", KubeForbidden),
        (429, "TooManyRequests", KubeUnavailable),
        (500, "InternalError", KubeUnavailable),
        (503, "ServiceUnavailable", KubeUnavailable),
    ],
)
def test_api_exceptions_map_to_our_classes(status: int, reason: str, cls: type[KubeError]) -> None:
    error = wrap(api_exception(status, reason, "something happened"), action="list pods")
    assert type(error) is cls
    assert error.status == status
    assert error.reason == reason
    assert error.message == "list pods: something happened"
    assert str(error) == f"{status} {reason}: list pods: something happened"


def test_an_api_exception_without_a_status_body_keeps_the_http_reason() -> None:
    raised = ApiException(status=502, reason="Bad Gateway", body="<html>oops</html>")
    error = wrap(raised, action="x")
    assert isinstance(error, KubeUnavailable)
    assert error.message == "x: Bad Gateway"


def test_transport_failures_are_unavailable() -> None:
    pool = urllib3.HTTPConnectionPool("127.0.0.1", 1)
    cause = urllib3.exceptions.MaxRetryError(
        pool, "/api/v1/pods", reason=ConnectionRefusedError("refused")
    )
    error = wrap(cause, action="watch pods")
    assert isinstance(error, KubeUnavailable)
    assert error.status == 0
    assert error.reason == "MaxRetryError"
    assert error.message.startswith("watch pods: MaxRetryError: ")
    assert wrap(ApiException(status=0, reason="SSLError\nbad cert"), action="x").reason == (
        "ConnectionError"
    )


def test_config_problems_are_not_retryable() -> None:
    raised = ConfigException("Invalid kube-config file. No configuration found.")
    error = wrap(raised, action="load")
    assert isinstance(error, KubeConfigError)
    assert not error.retryable
    assert error.message == "load: Invalid kube-config file. No configuration found."


def test_wrap_returns_our_errors_unchanged() -> None:
    error = KubeGone("gone", status=410)
    assert wrap(error, action="x") is error


def test_a_watch_error_event_status_becomes_an_error() -> None:
    error = from_status(
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"},
        action="watch pods",
    )
    assert isinstance(error, KubeGone)
    assert str(error) == "410 Expired: watch pods: too old resource version"
    assert isinstance(from_status({}, action="watch pods"), KubeUnavailable)


def test_messages_never_carry_credentials() -> None:
    text = (
        "GET https://admin:s3cret@10.0.0.1:6443/api failed; Authorization: Bearer eyJhbGciOi.x.y "
        'token="abc123" password=hunter2'
    )
    scrubbed = scrub(text)
    for secret in ("s3cret", "eyJhbGciOi", "abc123", "hunter2", "admin:"):
        assert secret not in scrubbed
    assert "https://***@10.0.0.1:6443/api" in scrubbed
    error = wrap(api_exception(401, "Unauthorized", f"bad Bearer {'x' * 40}"), action="list")
    assert "x" * 10 not in error.message


def test_messages_are_one_short_line() -> None:
    scrubbed = scrub("line one\n  line two\t" + "y" * 500)
    assert "\n" not in scrubbed
    assert len(scrubbed) == MAX_MESSAGE_CHARS
    assert scrubbed.startswith("line one line two y")
    assert scrubbed.endswith("...")


def _update_lease(cause: ApiException) -> None:
    try:
        raise cause
    except ApiException as exc:
        raise wrap(exc, action="update lease") from exc


def test_the_cause_stays_chained_when_raised_from() -> None:
    cause = api_exception(409, "Conflict", "the object has been modified")
    with pytest.raises(KubeConflict) as caught:
        _update_lease(cause)
    assert caught.value.__cause__ is cause
