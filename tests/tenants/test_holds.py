"""Admission faults: the global default class, short holds, and dry-runs judged by their mutate.

* The Priority admission plugin (``admitPod`` in ``plugin/pkg/admission/priority/
  admission.go``) writes the globalDefault class, its value and preemption policy into every
  pod that names none, before any webhook: such a pod asked for nothing.
* A /mutate booking is a hold (``holdTTLSeconds``): creates refused after /mutate must not
  lock quota for ``reservationTTLSeconds``; /validate turns the hold into a reservation.
* A dry-run at /validate is judged as its own /mutate judged it, even when real pods took the
  room meanwhile; a real request never gets that shortcut.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tenants.config import Policy, global_default_class
from tenants.configfile import load_text
from tenants.ledger import MemoryLedger, expire
from tests.tenants.conftest import CONFIG, make_pod, stored
from tests.tenants.test_decisions import Chain, fill, patched

DEFAULT_CLASS_CONFIG = CONFIG.replace(
    "  other-tenant: {value: 3000}\n",
    "  other-tenant: {value: 3000}\n  cluster-default: {value: 500, globalDefault: true}\n",
)


def default_class_policy() -> Policy:
    return load_text(DEFAULT_CLASS_CONFIG, filename="test.yaml").policy


def with_priority_plugin(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` after the Priority plugin gave it the global default class (it named none)."""
    defaulted = copy.deepcopy(pod)
    defaulted["spec"].update(
        priorityClassName="cluster-default", priority=500, preemptionPolicy="PreemptLowerPriority"
    )
    return defaulted


@pytest.fixture
def chain(policy: Policy) -> Chain:
    return Chain(policy)


# --------------------------------------------------------------------------- global default


def test_the_lowest_of_several_global_defaults_wins() -> None:
    policy = default_class_policy()
    assert policy.global_default == "cluster-default"
    classes = dict(policy.priority_classes)
    classes["lower"] = classes["cluster-default"].model_copy(update={"value": 1})
    assert global_default_class(classes) == "lower"
    assert global_default_class({}) is None


def test_a_pod_carrying_the_global_default_is_planned_as_one_without_a_class() -> None:
    chain = Chain(default_class_policy())
    verdict = chain.mutate(with_priority_plugin(make_pod()))
    assert verdict.allowed, verdict.message
    assert verdict.patched is not None
    spec = verdict.patched["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "tenant-guaranteed",
        1000,
        "PreemptLowerPriority",
    )
    assert not any("priority class" in warning for warning in verdict.warnings), verdict.warnings


def test_a_profile_class_is_still_given_over_the_global_default() -> None:
    chain = Chain(default_class_policy())
    verdict = chain.mutate(with_priority_plugin(make_pod(restartPolicy="Never")))
    assert verdict.patched is not None
    assert verdict.patched["spec"]["priorityClassName"] == "batch-low"
    assert verdict.patched["spec"]["priority"] == 100


def test_the_global_default_on_a_burst_pod_gives_no_replacement_warning() -> None:
    chain = Chain(default_class_policy())
    fill(chain, 8)
    verdict = chain.mutate(with_priority_plugin(make_pod()), uid="burst")
    assert verdict.patched is not None
    assert verdict.patched["spec"]["priorityClassName"] == "tenant-burst"
    assert not any("replaced" in warning for warning in verdict.warnings), verdict.warnings


def test_validate_admits_the_global_default_on_a_pod_mutate_did_not_see() -> None:
    chain = Chain(default_class_policy())
    final = stored(with_priority_plugin(make_pod()), pod_uid="p-1")
    verdict = chain.validate(final)
    assert verdict.allowed, verdict.message
    assert chain.state().reservation_for_pod("p-1") is not None


def test_without_a_global_default_the_class_is_still_the_pods_own_request(
    policy: Policy,
) -> None:
    assert policy.global_default is None
    chain = Chain(policy.with_global_default(None))
    final = stored(with_priority_plugin(make_pod()), pod_uid="p-1")
    verdict = chain.validate(final)
    assert not verdict.allowed
    assert "priority class cluster-default is not allowed for tenant team-a" in verdict.message


def test_the_clusters_global_default_replaces_the_configs(policy: Policy) -> None:
    chain = Chain(policy.with_global_default("cluster-default"))
    verdict = chain.mutate(with_priority_plugin(make_pod()))
    assert verdict.allowed, verdict.message
    assert verdict.patched is not None
    assert verdict.patched["spec"]["priorityClassName"] == "tenant-guaranteed"


# --------------------------------------------------------------------------- holds


def test_a_mutate_booking_is_a_hold_until_validate_binds_it(chain: Chain) -> None:
    mutated = chain.mutate(make_pod(), uid="u-1")
    rid = mutated.audit_annotations["reservation"]
    hold = chain.state().reservations[rid]
    assert hold.held
    assert hold.expires_at == chain.now + 15
    chain.now += 3
    final = stored(patched(make_pod(), mutated), pod_uid="p-1")
    assert chain.validate(final, uid="u-1").allowed
    reservation = chain.state().reservations[rid]
    assert not reservation.held
    assert reservation.expires_at == chain.now + 120


def test_creates_refused_after_mutate_lock_the_quota_only_for_the_hold(chain: Chain) -> None:
    # Eight pods of 500m fill the guarantee and four more the burst ceiling (6 cpu): each is
    # refused after /mutate (by another webhook, say), so only holds remain.
    for index in range(12):
        assert chain.mutate(make_pod(), uid=f"refused-{index}").allowed
    assert not chain.mutate(make_pod(), uid="good-early").allowed
    chain.now += 15
    good = chain.mutate(make_pod(), uid="good")
    assert good.allowed, good.message
    assert good.audit_annotations["tier"] == "guaranteed"
    # The stale holds went with the retried check; the good pod holds the only booking.
    assert list(chain.state().reservations) == [good.audit_annotations["reservation"]]


def test_a_validated_reservation_is_not_released_with_the_holds(chain: Chain) -> None:
    fill(chain, 8)
    chain.now += 20
    assert not chain.mutate(make_pod(cpu="3"), uid="big").allowed
    assert len(chain.state().reservations) == 8
    ledger, expired = expire(chain.state(), now=chain.now + 90)  # before the full TTL
    assert expired == ()
    assert ledger == chain.state()


def test_validate_books_anew_when_the_hold_expired_before_it_ran(chain: Chain) -> None:
    for index in range(12):
        chain.mutate(make_pod(), uid=f"refused-{index}")
    mutated = chain.mutate(make_pod(cpu="100m"), uid="late")
    assert not mutated.allowed
    chain.now += 15
    final = stored(make_pod(), pod_uid="p-late")
    verdict = chain.validate(final, uid="late")
    assert verdict.allowed, verdict.message


def test_a_burst_pod_whose_hold_expired_is_told_so(chain: Chain) -> None:
    fill(chain, 8)
    mutated = chain.mutate(make_pod(), uid="slow")
    assert mutated.audit_annotations["tier"] == "burst"
    chain.now += 16
    chain.ledger.expire(now=chain.now)  # the sweep
    final = stored(patched(make_pod(), mutated), pod_uid="p-slow")
    verdict = chain.validate(final, uid="slow-validate")
    assert not verdict.allowed
    assert verdict.code == 409
    assert verdict.message == (
        f"the quota hold {mutated.audit_annotations['reservation']} of pod team-a/worker-x "
        "(tenant team-a) expired before the validating webhook ran, and the pod does not fit "
        "the guarantee; retry (if this repeats, raise holdTTLSeconds)"
    )


# --------------------------------------------------------------------------- dry-run
# The API server gives every webhook call its own uid (CreateAdmissionObjects in
# staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go).


def test_a_dry_run_is_judged_as_its_mutate_judged_it(policy: Policy) -> None:
    chain = Chain(policy, MemoryLedger())
    fill(chain, 11)  # 5.5 of the 6 cpu ceiling
    dry = chain.mutate(make_pod(), uid="dry-mutate", dry_run=True)
    assert dry.allowed
    assert dry.audit_annotations["tier"] == "burst"
    assert dry.patched is not None
    assert dry.patched["metadata"]["annotations"]["tenantgate.io/dry-run-tier"] == "burst"
    # A real pod takes the last room between the dry-run's /mutate and its /validate.
    fill(chain, 1, prefix="real")
    final = stored(patched(make_pod(), dry), pod_uid="dry-pod")
    verdict = chain.validate(final, uid="dry-validate", dry_run=True)
    assert verdict.allowed, verdict.message
    assert verdict.audit_annotations["tier"] == "burst"


def test_a_dry_run_keeps_the_burst_class_check(policy: Policy) -> None:
    chain = Chain(policy)
    fill(chain, 8)
    dry = chain.mutate(make_pod(), uid="dry", dry_run=True)
    final = stored(patched(make_pod(), dry), pod_uid="dry-pod")
    final["spec"]["priorityClassName"] = "gold"
    verdict = chain.validate(final, uid="dry-validate", dry_run=True)
    assert not verdict.allowed
    assert "must use priority class tenant-burst, not gold" in verdict.message


def forged(tier: str = "burst") -> dict[str, Any]:
    pod = stored(make_pod(), pod_uid="forged")
    pod["metadata"]["labels"].update({"tenantgate.io/tier": tier, "tenantgate.io/tenant": "team-a"})
    pod["metadata"]["annotations"] = {
        "tenantgate.io/reservation": "r-0123456789abcdef0123",
        "tenantgate.io/dry-run-tier": tier,
    }
    pod["spec"]["priorityClassName"] = "tenant-burst"
    return pod


def test_a_forged_decision_on_a_real_request_is_not_trusted(policy: Policy) -> None:
    chain = Chain(policy)
    fill(chain, 12)  # the ceiling is reached
    verdict = chain.validate(forged(), uid="attacker")
    assert not verdict.allowed
    assert "exceeded tenant quota: team-a" in verdict.message
    assert "forged" not in chain.state().bound


def test_mutate_strips_the_decision_from_a_real_request(chain: Chain) -> None:
    pod = make_pod()
    pod["metadata"]["annotations"] = {"tenantgate.io/dry-run-tier": "burst"}
    verdict = chain.mutate(pod, uid="real")
    assert verdict.patched is not None
    assert "tenantgate.io/dry-run-tier" not in verdict.patched["metadata"]["annotations"]
    dry = chain.mutate(make_pod(), uid="dry", dry_run=True)
    assert dry.patched is not None
    assert dry.patched["metadata"]["annotations"]["tenantgate.io/dry-run-tier"] == "guaranteed"
