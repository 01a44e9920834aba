"""Impersonation headers, as ``kubectl --as`` sends them, decide the ``userInfo`` admission
webhooks see.

Upstream: staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go
(WithImpersonation, buildImpersonationRequests). The test server has no RBAC: impersonating
anyone is allowed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devapi.admission import UserInfo
from devapi.errors import APIError
from devapi.impersonation import impersonated
from tests.devapi.support import (
    Api,
    TLSMaterial,
    WebhookServer,
    allow,
    hook,
    pod,
    register,
)
from tests.devapi.test_kubectl import KUBECTL, Kubectl

ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))


def test_no_headers_keep_the_requester() -> None:
    assert impersonated(ADMIN, {}) is ADMIN


def test_a_user_gets_system_authenticated_unless_asked_otherwise() -> None:
    alice = impersonated(ADMIN, {"impersonate-user": ["alice"]})
    assert alice == UserInfo("alice", ("system:authenticated",))
    grouped = impersonated(
        ADMIN, {"impersonate-user": ["alice"], "impersonate-group": ["devs", "ops"]}
    )
    assert grouped.groups == ("devs", "ops", "system:authenticated")
    unauthenticated = impersonated(
        ADMIN, {"impersonate-user": ["alice"], "impersonate-group": ["system:unauthenticated"]}
    )
    assert unauthenticated.groups == ("system:unauthenticated",)
    anonymous = impersonated(ADMIN, {"impersonate-user": ["system:anonymous"]})
    assert anonymous.groups == ("system:unauthenticated",)


def test_a_service_account_gets_its_groups() -> None:
    account = impersonated(
        ADMIN, {"impersonate-user": ["system:serviceaccount:tenantgate-system:tenantgate"]}
    )
    assert account.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:tenantgate-system",
        "system:authenticated",
    )


def test_uid_and_extras_are_carried() -> None:
    user = impersonated(
        ADMIN,
        {
            "impersonate-user": ["alice"],
            "impersonate-uid": ["1234"],
            "impersonate-extra-scopes": ["view", "edit"],
            "impersonate-extra-example.com%2fteam": ["a"],
        },
    )
    assert user.as_json() == {
        "username": "alice",
        "uid": "1234",
        "groups": ["system:authenticated"],
        "extra": {"example.com/team": ["a"], "scopes": ["view", "edit"]},
    }


def test_groups_without_a_user_are_refused() -> None:
    with pytest.raises(APIError) as err:
        impersonated(ADMIN, {"impersonate-group": ["devs"]})
    assert err.value.code == 500
    assert err.value.message == (
        "Internal error occurred: requested [{Group  devs  authentication.k8s.io/v1  }] "
        "without impersonating a user"
    )


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_as_reaches_the_webhooks(
    api_client: Api,
    kubeconfig: Path,
    tmp_path: Path,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    register(
        api_client,
        "v",
        hook("all.example.com", webhooks.route("/all", allow()), webhook_tls),
        mutating=False,
    )
    kubectl = Kubectl(kubeconfig, tmp_path)
    manifest = kubectl.write("pod.yaml", json.dumps(pod("web")))
    done = kubectl(
        "apply",
        "-f",
        manifest,
        "--as",
        "system:serviceaccount:team-a:builder",
        "--as-group",
        "builders",
        "--as-group",
        "system:serviceaccounts",
    )
    assert done.code == 0, done.stderr
    (create,) = webhooks.requests("/all")
    assert create["userInfo"] == {
        "username": "system:serviceaccount:team-a:builder",
        "groups": ["builders", "system:serviceaccounts", "system:authenticated"],
    }
