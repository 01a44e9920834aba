"""tenantgate on the real control plane, through the real client and the real admission chain.

The ledger must follow the cluster exactly: what is admitted, stored, finished, failed,
deleted, rejected later, moved between tenants or missed while a watch was down.
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from classifier.quantities import Quantity
from tenants.ledger import Charge
from testcluster import Cluster
from testcluster.kubelet import STOP_SECONDS
from tests.integration.conftest import QUIET, StartTenantgate
from tests.integration.harness import (
    RejectingWebhook,
    Tenantgate,
    create_namespace,
    eventually,
    pod,
)

Used = dict[str, dict[str, str]]


def used(guaranteed: dict[str, str], burst: dict[str, str] | None = None) -> Used:
    return {"guaranteed": guaranteed, "burst": burst or {}}


def assert_no_drift(tenantgate: Tenantgate) -> None:
    """A full recount finds the incrementally kept ledger equal to the truth."""
    report = tenantgate.call(lambda: tenantgate.state.controller.recount(now=time.time()))
    assert not report.repaired, report
    assert tenantgate.state.controller.stats.drift_repairs == {}


def set_phase(core: Any, name: str, namespace: str, phase: str) -> None:
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": phase}})


def test_creates_deletes_completions_and_failures_are_reflected_exactly(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    stored = [core.create_namespaced_pod("team-a", pod(f"web-{i}")) for i in range(6)]
    # Four fit the guarantee (cpu 4), two the burst ceiling (cpu 6); the seventh is refused.
    tiers = [p.metadata.labels["tenantgate.io/tier"] for p in stored]
    assert tiers == ["guaranteed"] * 4 + ["burst"] * 2
    assert stored[0].spec.priority_class_name == "tenant-guaranteed"
    assert stored[0].spec.priority == 1000  # the cluster's value, not the config's 900
    assert stored[4].spec.priority_class_name == "tenant-burst"
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod("team-a", pod("web-6"))
    assert refused.value.status == 403
    assert "exceeded tenant quota: team-a: requested cpu=1, used cpu=6/6 (burst ceiling)" in str(
        refused.value.body
    )

    four_and_two = used(
        {"cpu": "4", "memory": "4Gi", "pods": "4"}, {"cpu": "2", "memory": "2Gi", "pods": "2"}
    )
    eventually(lambda: tenantgate.status()["tenants"]["team-a"]["pods"] == 6, "6 stored pods")
    document = tenantgate.status()["tenants"]["team-a"]
    assert document["used"] == four_and_two
    assert document["reservations"] == 0
    assert document["guaranteed"] == {"cpu": "4", "memory": "8Gi", "pods": "20"}
    assert document["ceiling"] == {"cpu": "6", "memory": "12Gi", "pods": "30"}

    set_phase(core, "web-0", "team-a", "Succeeded")
    set_phase(core, "web-4", "team-a", "Failed")
    core.delete_namespaced_pod("web-1", "team-a", grace_period_seconds=0)
    expected = used(
        {"cpu": "2", "memory": "2Gi", "pods": "2"}, {"cpu": "1", "memory": "1Gi", "pods": "1"}
    )
    eventually(lambda: tenantgate.used("team-a") == expected, "releases")
    # Deleting the finished pods later releases nothing twice.
    core.delete_namespaced_pod("web-0", "team-a", grace_period_seconds=0)
    core.delete_namespaced_pod("web-4", "team-a", grace_period_seconds=0)
    eventually(lambda: tenantgate.state.controller.pod_count == 3, "3 pods tracked")
    assert tenantgate.used("team-a") == expected

    stats = tenantgate.state.controller.stats
    assert stats.confirmed == 6
    assert stats.unadmitted == {}
    # A bound pod deleted with grace 0 is first written with its deletionTimestamp (the
    # graceful path of pkg/registry/core/pod/strategy.go), then removed: its usage goes at the
    # first, as the quota evaluator stops counting it then (QuotaV1Pod in
    # pkg/quota/v1/evaluator/core/pods.go).
    assert stats.released == {"finished": 2, "terminating": 1}
    assert_no_drift(tenantgate)


def test_a_graceful_deletion_releases_when_the_pod_is_gone(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    # Scheduled (a node name): deletion is graceful, the pod stays until the kubelet is done;
    # its containers take the whole grace period to stop.
    scheduled = pod("slow", cpu="2")
    scheduled["spec"]["nodeName"] = "node-a"
    scheduled["metadata"]["annotations"] = {STOP_SECONDS: "30"}
    created = core.create_namespaced_pod("team-a", scheduled)
    eventually(lambda: tenantgate.used("team-a")["guaranteed"].get("cpu") == "2", "charged")
    core.delete_namespaced_pod("slow", "team-a", grace_period_seconds=1)
    terminating = core.read_namespaced_pod("slow", "team-a")
    assert terminating.metadata.deletion_timestamp is not None
    eventually(lambda: tenantgate.used("team-a") == used({}), "released after the grace period")
    eventually(
        lambda: tenantgate.state.controller.tracked(created.metadata.uid) is None,
        "the kubelet to remove the pod",
    )
    assert_no_drift(tenantgate)


def test_a_restart_rebuilds_a_ledger_equal_to_the_truth(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    first = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    create_namespace(core, {"metadata": {"name": "shared", "labels": {"tenant": "b"}}})
    for i in range(5):
        core.create_namespaced_pod("team-a", pod(f"a-{i}", cpu="1", memory="512Mi"))
    for i in range(3):
        core.create_namespaced_pod("shared", pod(f"b-{i}", cpu="1500m"))
    set_phase(core, "a-0", "team-a", "Succeeded")
    eventually(lambda: first.state.controller.pod_count == 8, "8 pods tracked")
    eventually(lambda: first.status()["tenants"]["team-a"]["pods"] == 4, "4 running in team-a")
    before = first.call(first.state.ledger.snapshot)
    first.stop()

    # Changed while tenantgate was down: one pod gone, one created past the webhook.
    core.delete_namespaced_pod("a-1", "team-a", grace_period_seconds=0)
    admission: Any = client.AdmissionregistrationV1Api(core.api_client)
    admission.delete_mutating_webhook_configuration("tenantgate")
    admission.delete_validating_webhook_configuration("tenantgate")

    def sneaked_in() -> bool:
        # kube-apiserver learns of the deleted webhooks through a watch: until then the
        # validating one still fails closed (tenantgate is down).
        try:
            core.create_namespaced_pod("team-a", pod("sneaked-in", cpu="250m", memory="256Mi"))
        except client.ApiException as exc:
            if exc.status != 500:
                raise
            return False
        return True

    eventually(sneaked_in, "a create past the deleted webhooks")

    second = start_tenantgate()
    after = second.call(second.state.ledger.snapshot)
    live = {p.metadata.name: p for p in core.list_namespaced_pod("team-a").items}
    running = {p.metadata.uid for p in live.values() if p.status.phase != "Succeeded"}
    team_a = after["team-a"]
    assert set(team_a.charges) == running
    # a-2, a-3 and the pod created past the webhook are guaranteed; a-4 burst, as admitted.
    assert team_a.guaranteed == {
        "cpu": Quantity.parse("2250m"),
        "memory": Quantity.parse("1280Mi"),
        "pods": Quantity.parse("3"),
    }
    assert team_a.burst == before["team-a"].burst
    assert team_a.burst["cpu"] == Quantity.parse("1")
    assert team_a.charges[live["a-4"].metadata.uid].tier == "burst"
    assert after["team-b"].guaranteed == before["team-b"].guaranteed
    assert set(after["team-b"].charges) == set(before["team-b"].charges)
    assert second.state.controller.stats.unadmitted == {"team-a": 1}
    assert_no_drift(second)


def test_a_pod_rejected_by_a_later_admission_step_leaves_no_usage_after_the_ttl(
    start_tenantgate: StartTenantgate, core: Any, rejecting_webhook: RejectingWebhook
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", pod("kept", cpu="1"))
    with pytest.raises(client.ApiException) as rejected:
        core.create_namespaced_pod(
            "team-a", pod("doomed", cpu="2", labels={"app": "doomed", "reject": "yes"})
        )
    assert "rejected later" in str(rejected.value.body)
    assert rejecting_webhook.denied == 1
    # Booked by tenantgate's webhooks, never stored: a reservation, until its TTL (2 s).
    status = tenantgate.status()["tenants"]["team-a"]
    assert status["reservations"] == 1
    assert status["used"]["guaranteed"]["cpu"] == "3"
    eventually(lambda: tenantgate.used("team-a")["guaranteed"].get("cpu") == "1", "the TTL")
    status = tenantgate.status()["tenants"]["team-a"]
    assert status["reservations"] == 0
    assert status["used"] == used({"cpu": "1", "memory": "1Gi", "pods": "1"})
    assert tenantgate.state.controller.stats.expired == {"team-a": 1}
    assert_no_drift(tenantgate)


def test_a_dropped_watch_and_a_410_lose_nothing(
    start_tenantgate: StartTenantgate, core: Any, kube: Cluster
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    for i in range(3):
        core.create_namespaced_pod("team-a", pod(f"p-{i}", cpu="500m", memory="1Gi"))
    eventually(lambda: tenantgate.status()["tenants"]["team-a"]["pods"] == 3, "3 pods")

    kube.proxy.drop_watches()
    core.create_namespaced_pod("team-a", pod("during-drop", cpu="250m", memory="1Gi"))
    core.delete_namespaced_pod("p-0", "team-a", grace_period_seconds=0)
    expected = used({"cpu": "1250m", "memory": "3Gi", "pods": "3"})
    eventually(lambda: tenantgate.used("team-a") == expected, "the resumed watch")

    # Keep the pods watch down while things change, then forget the history: 410, relist.
    kube.proxy.add_errors(503, verb="watch", resource="pods", count=10_000)
    kube.proxy.drop_watches()
    core.create_namespaced_pod("team-a", pod("during-gap", cpu="100m", memory="1Gi"))
    core.delete_namespaced_pod("p-1", "team-a", grace_period_seconds=0)
    set_phase(core, "p-2", "team-a", "Succeeded")
    kube.proxy.compact_history()
    kube.proxy.clear()
    expected = used({"cpu": "350m", "memory": "2Gi", "pods": "2"})
    eventually(lambda: tenantgate.used("team-a") == expected, "the relist after 410")
    status = tenantgate.state.sync.status() if tenantgate.state.sync else {}
    assert status["pods"].restarts.get("expired", 0) >= 1
    assert tenantgate.status()["tenants"]["team-a"]["reservations"] == 0
    assert tenantgate.state.controller.stats.confirmed == 5
    assert_no_drift(tenantgate)


def test_a_namespace_relabel_moves_usage_between_tenants(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "shared", "labels": {"tenant": "b"}}})
    # The namespace outlives tests with other labels: a pod created before tenantgate's watch
    # shows the relabel is judged on the labels it last saw, as kube-apiserver judges a webhook's
    # namespaceSelector on its informer's copy (GetNamespaceLabels in staging/src/k8s.io/
    # apiserver/pkg/admission/plugin/webhook/predicates/namespace/matcher.go).
    eventually(
        lambda: (tenantgate.state.controller.namespace_labels("shared") or {}).get("tenant") == "b",
        "tenantgate sees the namespace labelled for team-b",
    )
    for i in range(2):
        stored = core.create_namespaced_pod("shared", pod(f"s-{i}", cpu="3", memory="1Gi"))
        assert stored.metadata.labels["tenantgate.io/tenant"] == "team-b"
    six = used({"cpu": "6", "memory": "2Gi", "pods": "2"})
    eventually(lambda: tenantgate.used("team-b") == six, "team-b charged")
    core.patch_namespace("shared", {"metadata": {"labels": {"tenant": "c"}}})
    eventually(lambda: tenantgate.used("team-c") == six, "moved to team-c")
    assert tenantgate.used("team-b") == used({})
    # New pods of the namespace now book against team-c.
    stored = core.create_namespaced_pod("shared", pod("s-2", cpu="1", memory="1Gi"))
    assert stored.metadata.labels["tenantgate.io/tenant"] == "team-c"
    seven = used({"cpu": "7", "memory": "3Gi", "pods": "3"})
    eventually(lambda: tenantgate.used("team-c") == seven, "the new pod in team-c")
    assert tenantgate.state.controller.stats.moved == 2
    assert_no_drift(tenantgate)


def test_a_namespace_not_seen_yet_is_read_under_tenantgate_s_own_service_account(
    start_tenantgate: StartTenantgate, core: Any
) -> None:
    """What admission reads when the watch has not shown a namespace yet: the shipped
    ClusterRole lets tenantgate's ServiceAccount get it; a missing one is None."""
    tenantgate = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "read-live", "labels": {"tenant": "b"}}})
    reader = tenantgate.state.namespaces
    assert reader is not None
    labels = tenantgate.run(reader("read-live"))
    assert labels is not None
    assert labels["tenant"] == "b"
    assert tenantgate.run(reader("never-created")) is None


def test_drift_behind_the_ledgers_back_is_repaired_by_the_recount(
    start_tenantgate: StartTenantgate, core: Any, rejecting_webhook: RejectingWebhook
) -> None:
    tenantgate = start_tenantgate(replace(QUIET, recount_seconds=0.5))
    create_namespace(core, {"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", pod("steady", cpu="1", memory="1Gi"))
    target = core.create_namespaced_pod(
        "team-a", pod("grows", cpu="1", memory="1Gi", labels={"app": "grows"})
    )
    two = used({"cpu": "2", "memory": "2Gi", "pods": "2"})
    eventually(lambda: tenantgate.used("team-a") == two, "both pods charged")

    # A resize that tenantgate admits (charging +1 cpu) and a later step rejects: the pod
    # never grows, the ledger did.
    core.patch_namespaced_pod("grows", "team-a", {"metadata": {"labels": {"reject": "yes"}}})
    with pytest.raises(client.ApiException):
        core.patch_namespaced_pod_resize(
            "grows",
            "team-a",
            {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}},
        )
    # And a charge for a pod that never existed, written straight into the ledger.
    tenantgate.call(
        lambda: tenantgate.state.ledger.update(
            "team-a",
            lambda ledger: (
                replace(
                    ledger,
                    burst={"cpu": Quantity.parse("5")},
                    charges=ledger.charges.set(
                        "ghost", Charge("burst", {"cpu": Quantity(5 * 10**9)})
                    ),
                ),
                None,
            ),
        )
    )
    eventually(lambda: tenantgate.used("team-a") == two, "the recount's repair")
    stats = tenantgate.state.controller.stats
    assert stats.drift_repairs.get("team-a", 0) >= 1
    assert target.metadata.uid in tenantgate.state.ledger.get("team-a").charges
    assert "ghost" not in tenantgate.state.ledger.get("team-a").charges
    metrics = metrics_text(tenantgate)
    assert 'tenantgate_ledger_drift_repairs_total{tenant="team-a"}' in metrics


def metrics_text(tenantgate: Tenantgate) -> str:
    url = f"{tenantgate.metrics_url}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
    return text
