"""The controller charges ``limits.*`` to tenants with a limits quota, and only to them.

A pod's facts carry both amounts (its requests, and its requests plus its ``PodLimits``
usage); a tenant whose quota names a ``limits.*`` resource charges the second, every other
tenant the first, exactly as /mutate and /validate book them, so the ledger of a config
without limits quotas is the same as before they existed, and a recount finds no drift.
"""

from __future__ import annotations

import copy
from typing import Any

from classifier.quantities import Quantity
from tenants.configfile import load_text
from tenants.controller import AmountInterner, LedgerController, charge_pod, pod_facts
from tenants.ledger import MemoryLedger, TenantLedger
from tests.tenants.test_controller import NOW, amounts, facts_of, make_pod

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  limited:
    namespaces: [limited]
    quota: {guaranteed: {requests.cpu: "8", limits.cpu: "16"}}
  plain:
    namespaces: [plain]
    quota: {guaranteed: {cpu: "8"}}
"""


def with_limits(pod: dict[str, Any], **limits: str) -> dict[str, Any]:
    limited = copy.deepcopy(pod)
    limited["spec"]["containers"][0]["resources"]["limits"] = limits
    return limited


def test_facts_carry_requests_and_requests_with_limits() -> None:
    facts = facts_of(with_limits(make_pod("u1"), cpu="2", memory="2Gi"))
    assert facts.amount == amounts(cpu="1", memory="1Gi", pods="1")
    assert facts.charged(limits=False) is facts.amount
    assert facts.charged(limits=True) == {
        **amounts(cpu="1", memory="1Gi", pods="1"),
        "limits.cpu": Quantity.parse("2"),
        "limits.memory": Quantity.parse("2Gi"),
    }
    unlimited = facts_of(make_pod("u2"))
    assert unlimited.limited_amount is None
    assert unlimited.charged(limits=True) is unlimited.amount


def test_the_interner_shares_the_amounts_with_limits_too() -> None:
    intern = AmountInterner()
    a = pod_facts(with_limits(make_pod("u1"), cpu="2"), intern=intern)
    b = pod_facts(with_limits(make_pod("u2"), cpu="2"), intern=intern)
    assert a is not None
    assert b is not None
    assert a.limited_amount is b.limited_amount
    assert a.amount is b.amount


def test_charge_pod_charges_limits_only_when_asked() -> None:
    facts = facts_of(with_limits(make_pod("u1", namespace="limited"), cpu="2"))
    plain, _ = charge_pod(TenantLedger("plain"), facts, burst_classes={"tenant-burst"})
    assert "limits.cpu" not in plain.guaranteed
    limited, _ = charge_pod(
        TenantLedger("limited"), facts, burst_classes={"tenant-burst"}, limits=True
    )
    assert limited.guaranteed["limits.cpu"] == Quantity.parse("2")


def test_each_tenant_is_charged_by_its_own_quota_and_a_recount_agrees() -> None:
    store = MemoryLedger()
    controller = LedgerController(store, policy=load_text(CONFIG).policy)
    controller.replace_namespaces({"limited": {}, "plain": {}}, now=NOW)
    pods = [
        with_limits(make_pod("u1", namespace="limited"), cpu="2"),
        with_limits(make_pod("u2", namespace="plain"), cpu="2"),
    ]
    controller.replace_pods([facts_of(p) for p in pods], now=NOW, initial=True)
    for number, pod in enumerate(pods, start=3):
        pod = copy.deepcopy(pod)
        pod["metadata"]["uid"] = f"u{number}"
        controller.apply_pod(facts_of(pod), now=NOW)
    assert store.get("limited").guaranteed == {
        **amounts(cpu="2", memory="2Gi", pods="2"),
        "limits.cpu": Quantity.parse("4"),
    }
    assert store.get("plain").guaranteed == amounts(cpu="2", memory="2Gi", pods="2")
    report = controller.recount(now=NOW)
    assert not report.repaired, report
    # Nothing was rewritten either: the quick comparison charges each tenant as booking does.
    assert controller.stats.drift_repairs == {}
