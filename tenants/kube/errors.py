"""tenantgate's own errors for talking to the Kubernetes API, wrapping the client library's.

Nothing above ``tenants.kube`` sees a ``kubernetes`` or ``urllib3`` exception: :func:`wrap` turns
them into a :class:`KubeError` carrying the HTTP status, the Kubernetes ``reason`` and a short
message. Messages are cut to one short line and scrubbed of credentials (URL userinfo, bearer
tokens), because they end up in logs and in ``/readyz``. The original exception stays chained
as ``__cause__`` for debugging, never formatted into the message.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Final

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS: Final = 200

_USERINFO_RE: Final = re.compile(r"(?<=://)[^/@\s]+@")
_BEARER_RE: Final = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_TOKEN_FIELD_RE: Final = re.compile(
    r"(?i)\b(token|password|secret)([\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"
)
_SPACE_RE: Final = re.compile(r"\s+")


class KubeError(Exception):
    """A failed call to the Kubernetes API.

    ``status`` is the HTTP status (0 when no response arrived), ``reason`` the Kubernetes
    StatusReason (``Expired``, ``Conflict``...) or the kind of transport failure, and
    ``message`` a short, scrubbed text. ``retryable`` says whether trying again later may help.
    """

    retryable: bool = True

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = scrub(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        parts = [str(self.status) if self.status else "", self.reason]
        head = " ".join(part for part in parts if part)
        return f"{head}: {self.message}" if head else self.message


class KubeConfigError(KubeError):
    """No usable cluster configuration (unreadable kubeconfig, missing in-cluster token...)."""

    retryable = False


class KubeGone(KubeError):
    """410 Gone: a resourceVersion or continue token is too old; list again."""


class KubeConflict(KubeError):
    """409 Conflict: the object changed since it was read."""


class KubeNotFound(KubeError):
    """404 Not Found (a resource type the server does not serve, or a missing object)."""


class KubeForbidden(KubeError):
    """401/403: the credentials are refused or lack RBAC permission (fixable without restart)."""


class KubeUnavailable(KubeError):
    """The server could not be reached or answered 429/5xx: try again after a backoff."""


def scrub(text: str, *, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of at most ``limit`` characters, without credentials."""
    text = _USERINFO_RE.sub("***@", text)
    text = _BEARER_RE.sub(r"\1 ***", text)
    text = _TOKEN_FIELD_RE.sub(r"\1\2***", text)
    text = _SPACE_RE.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..."
    return text


def _status_body(body: Any) -> dict[str, Any]:
    """The Kubernetes ``Status`` object in an error response body, if it holds one."""
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.lstrip().startswith("{"):
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def from_status(status: dict[str, Any], *, action: str) -> KubeError:
    """The error for a Kubernetes ``Status`` object (an error response, or a watch ERROR event)."""
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    reason = status.get("reason")
    message = status.get("message")
    return _classify(
        code,
        reason if isinstance(reason, str) else "",
        f"{action}: {message}" if isinstance(message, str) and message else action,
    )


def _classify(status: int, reason: str, message: str) -> KubeError:
    cls: type[KubeError]
    if status == 410:
        cls = KubeGone
    elif status == 409:
        cls = KubeConflict
    elif status == 404:
        cls = KubeNotFound
    elif status in (401, 403):
        cls = KubeForbidden
    else:
        # 429, 5xx, and anything unexpected: the informers retry all of them with a backoff.
        cls = KubeUnavailable
    return cls(message, status=status, reason=reason)


def wrap(exc: BaseException, *, action: str) -> KubeError:
    """Our error for anything the client library raised while doing ``action``.

    The caller raises it ``from exc`` so the cause stays chained.
    """
    # Imported here: this module must stay importable (and testable) without network setup.
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        status = exc.status if isinstance(exc.status, int) else 0
        body = _status_body(exc.body)
        reason = body.get("reason") if isinstance(body.get("reason"), str) else None
        detail = body.get("message") if isinstance(body.get("message"), str) else None
        if status == 0:
            # The client reports transport failures it catches itself (TLS) with status 0.
            return KubeUnavailable(
                f"{action}: {exc.reason or type(exc).__name__}", reason="ConnectionError"
            )
        return _classify(
            status,
            reason or str(exc.reason or ""),
            f"{action}: {detail or exc.reason or 'no message'}",
        )
    if isinstance(exc, ConfigException):
        return KubeConfigError(f"{action}: {exc}", reason="ConfigError")
    # urllib3 transport errors (refused, reset, timeouts, protocol errors) and plain OS errors.
    return KubeUnavailable(f"{action}: {type(exc).__name__}: {exc}", reason=type(exc).__name__)


__all__ = [
    "KubeConfigError",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeGone",
    "KubeNotFound",
    "KubeUnavailable",
    "from_status",
    "scrub",
    "wrap",
]
