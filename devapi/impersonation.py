"""Impersonation: ``Impersonate-User``, ``-Group``, ``-Uid`` and ``-Extra-*`` headers
(``kubectl --as USER --as-group G --as-uid U``) replace the requester's identity.

Follows ``staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go``
(``WithImpersonation``, ``buildImpersonationRequests``): a service account's username
(``system:serviceaccount:NS:NAME``) gets its fixed groups when none are given; every
non-anonymous identity gets ``system:authenticated`` unless ``system:authenticated`` or
``system:unauthenticated`` was asked for, the anonymous one ``system:unauthenticated``; groups,
a uid or extras without a user are a 500 as upstream. The identity is what admission webhooks
see in ``userInfo``.

The test server has no RBAC: every requester may impersonate anyone. A real server checks
the ``impersonate`` verb on ``users``, ``groups``, ``serviceaccounts``, ``uids`` and
``userextras`` first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import unquote

from devapi import errors
from devapi.admission import UserInfo

USER_HEADER = "impersonate-user"
GROUP_HEADER = "impersonate-group"
UID_HEADER = "impersonate-uid"
EXTRA_PREFIX = "impersonate-extra-"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
AUTHENTICATION_API = "authentication.k8s.io/v1"


def _reference(kind: str, name: str, *, namespace: str = "", field_path: str = "") -> str:
    """A ``v1.ObjectReference`` as Go's ``%v`` prints it (for the error text)."""
    api_version = "" if kind in ("User", "ServiceAccount") else AUTHENTICATION_API
    return "{" + " ".join((kind, namespace, name, "", api_version, "", field_path)) + "}"


def _service_account(username: str) -> tuple[str, str] | None:
    """``serviceaccount.SplitUsername``."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    parts = username[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def impersonated(requester: UserInfo, headers: Mapping[str, Sequence[str]]) -> UserInfo:
    """The identity a request acts as: ``requester``, or the one its headers ask for.

    ``headers`` maps lower-case header names to all their values.
    """
    user = next(iter(headers.get(USER_HEADER, ())), "")
    groups = [g for g in headers.get(GROUP_HEADER, ())]
    uid = next(iter(headers.get(UID_HEADER, ())), "")
    extra: dict[str, list[str]] = {}
    for name, values in headers.items():
        if name.startswith(EXTRA_PREFIX):
            key = unquote(name[len(EXTRA_PREFIX) :].lower())
            extra.setdefault(key, []).extend(values)
    if not user:
        if groups or extra or uid:
            requested = [_reference("Group", g) for g in groups]
            requested += [
                _reference("UserExtra", v, field_path=k)
                for k, vs in sorted(extra.items())
                for v in vs
            ]
            if uid:
                requested.append(_reference("UID", uid))
            raise errors.internal_error(
                f"requested [{' '.join(requested)}] without impersonating a user"
            )
        return requester
    service_account = _service_account(user)
    if service_account is not None and not groups:
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{service_account[0]}"]
    if user != ANONYMOUS:
        if not any(g in (AUTHENTICATED, UNAUTHENTICATED) for g in groups):
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    return UserInfo(
        username=user,
        groups=tuple(groups),
        uid=uid,
        extra=tuple((k, tuple(v)) for k, v in sorted(extra.items())),
    )
