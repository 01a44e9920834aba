"""tenantgate as any identity: the gate owner is who the API server says tenantgate is.

Queue mode releases a pod by removing the scheduling gate, and tenantgate's own validating
webhook lets only the gate owner do that. tenantgate asks kube-apiserver who it is
(SelfSubjectReview, authentication.k8s.io/v1) and owns the gate as that user, so it releases
its own queue whether it runs with the shipped ServiceAccount, another ServiceAccount's token
or a person's client certificate. An explicit ``--gate-owner`` that differs stops the start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission.runtime import build_runtime
from admission.server import ServeError
from admission.settings import Settings
from testcluster import Cluster
from tests.integration.conftest import QUIET, StartTenantgate
from tests.integration.harness import (
    Tenantgate,
    api_client,
    create_namespace,
    eventually,
    http_json,
    pod,
    wait_webhooks_active,
)

GATE = "tenantgate.io/quota"
CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-id:
    namespaces: [team-id]
    quota: {guaranteed: {cpu: "2"}}
    overQuota: queue
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def bind_tenantgate_role(kubeconfig: Path) -> Iterator[Callable[[dict[str, str]], None]]:
    """Grant a subject the shipped ClusterRole tenantgate (cluster-wide, removed afterwards)."""
    api = api_client(kubeconfig)
    rbac: Any = client.RbacAuthorizationV1Api(api)
    names: list[str] = []

    def bind(subject: dict[str, str]) -> None:
        name = f"identity-test-{len(names)}"
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "tenantgate",
                },
                "subjects": [subject],
            }
        )
        names.append(name)

    yield bind
    for name in names:
        rbac.delete_cluster_role_binding(name)
    api.close()


def gated(stored: Any) -> bool:
    return any(gate.name == GATE for gate in stored.spec.scheduling_gates or [])


@contextmanager
def running_as(
    kube: Cluster, settings: Settings, admin: Path, kubeconfig: Path
) -> Iterator[Tenantgate]:
    """tenantgate with ``kubeconfig``'s credentials, the webhooks pointed at it."""
    tenantgate = Tenantgate(settings.model_copy(update={"kubeconfig": kubeconfig}), timings=QUIET)
    tenantgate.start()
    try:
        kube.serve([tenantgate.port])
        tenantgate.wait_ready()
        wait_webhooks_active(admin, [tenantgate.metrics_url])
        yield tenantgate
    finally:
        kube.unregister_webhooks()
        tenantgate.stop()


def released_in_order(tenantgate: Tenantgate, core: Any, user: str) -> None:
    status = tenantgate.status()
    assert status["identity"] == {"user": user, "source": "SelfSubjectReview", "problem": None}
    code, ready = http_json(f"{tenantgate.metrics_url}/readyz?verbose")
    assert code == 200
    assert f"as {user}" in str(ready)

    create_namespace(core, {"metadata": {"name": "team-id"}})
    stored = [core.create_namespaced_pod("team-id", pod(f"p-{i}")) for i in range(5)]
    assert [gated(p) for p in stored] == [False, False, True, True, True]
    for finished in ("p-0", "p-1"):
        core.delete_namespaced_pod(finished, "team-id", grace_period_seconds=0)

        def ungated() -> set[str]:
            return {
                p.metadata.name
                for p in core.list_namespaced_pod("team-id").items
                if not gated(p) and p.metadata.deletion_timestamp is None
            }

        expected = {"p-0": {"p-1", "p-2"}, "p-1": {"p-2", "p-3"}}[finished]

        def released(expected: set[str] = expected) -> bool:
            return ungated() == expected

        eventually(released, f"release after {finished}")
    assert gated(core.read_namespaced_pod("p-4", "team-id"))
    releaser = tenantgate.state.releaser
    assert releaser is not None
    assert releaser.stats.errors == {}


def test_a_person_with_a_client_certificate_releases_the_queue_in_order(
    core: Any,
    kube: Cluster,
    kubeconfig: Path,
    settings: Settings,
    bind_tenantgate_role: Callable[[dict[str, str]], None],
) -> None:
    user = "dev-oncall"
    bind_tenantgate_role({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user})
    # A client certificate ends at a TLS proxy: this identity talks to kube-apiserver directly.
    personal = kube.plane.user_kubeconfig(user, ("platform",))
    with running_as(kube, settings, kubeconfig, personal) as tenantgate:
        released_in_order(tenantgate, core, user)


def test_another_service_accounts_token_releases_the_queue_in_order(
    core: Any,
    kube: Cluster,
    kubeconfig: Path,
    settings: Settings,
    tmp_path: Path,
    bind_tenantgate_role: Callable[[dict[str, str]], None],
) -> None:
    create_namespace(core, {"metadata": {"name": "identity-sa"}})
    core.create_namespaced_service_account("identity-sa", {"metadata": {"name": "gatekeeper"}})
    bind_tenantgate_role(
        {"kind": "ServiceAccount", "name": "gatekeeper", "namespace": "identity-sa"}
    )
    assert kube.installation is not None
    token = kube.installation.service_account_token(name="gatekeeper", namespace="identity-sa")
    user = "system:serviceaccount:identity-sa:gatekeeper"
    through_proxy = kube.plane.token_kubeconfig(
        tmp_path / "gatekeeper.kubeconfig", token=token, user=user, server=kube.proxy.url
    )
    with running_as(kube, settings, kubeconfig, through_proxy) as tenantgate:
        released_in_order(tenantgate, core, user)


def test_a_gate_owner_that_is_not_tenantgate_stops_the_start(
    kube: Cluster, settings: Settings
) -> None:
    wrong = settings.model_copy(update={"gate_owner": "kubernetes-admin"})
    with pytest.raises(ServeError) as stopped:
        build_runtime(wrong)
    assert str(stopped.value) == (
        "--gate-owner kubernetes-admin is not who tenantgate is: the API server authenticates "
        "it as system:serviceaccount:tenantgate-system:tenantgate, so its webhook would deny "
        "its own releases; drop --gate-owner (it defaults to that identity) or run with its "
        "credentials"
    )


def test_the_same_gate_owner_as_the_identity_is_accepted(kube: Cluster, settings: Settings) -> None:
    same = settings.model_copy(
        update={"gate_owner": "system:serviceaccount:tenantgate-system:tenantgate"}
    )
    runtime = build_runtime(same)
    try:
        assert runtime.admitter.gate_owner == "system:serviceaccount:tenantgate-system:tenantgate"
    finally:
        if runtime.connection is not None:
            runtime.connection.close()


def test_a_configured_cluster_is_never_called_offline(
    start_tenantgate: StartTenantgate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    start_tenantgate()
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "OFFLINE" in m], messages
    assert any(
        m.startswith("cluster: kubeconfig")
        and m.endswith("as system:serviceaccount:tenantgate-system:tenantgate")
        for m in messages
    ), messages
    assert any(m.startswith("ledger: in memory, rebuilt from the cluster's pods") for m in messages)
