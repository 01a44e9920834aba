"""The admitter behind /mutate and /validate: tiers, priority, reservations, dry-run."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import Counter
from typing import Any

import jsonpatch
import pytest

from classifier.quantities import Quantity
from tenants.config import Policy
from tenants.configfile import load_policy
from tenants.decisions import (
    NamespaceUnreadable,
    PolicyAdmitter,
    apply_container_defaults,
    reservation_id_for,
)
from tenants.defaults import lacks_defaults
from tenants.ledger import MemoryLedger, TenantLedger, ledger_from_usage
from tenants.verdicts import AdmissionInput, Verdict
from tests.tenants.conftest import (
    CONFIG,
    EXAMPLE_CONFIG,
    create,
    make_pod,
    make_policy,
    stored,
)

TEAM_A_MESSAGE = (
    "exceeded tenant quota: team-a: requested cpu=500m, used cpu=6/6 (burst ceiling), "
    "guaranteed cpu=4"
)


def rl(**items: str) -> dict[str, Quantity]:
    return {name: Quantity.parse(value) for name, value in items.items()}


def patched(original: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """What the API server stores: the original with the JSONPatch of the verdict applied."""
    if verdict.patched is None:
        return copy.deepcopy(original)
    patch = jsonpatch.make_patch(original, verdict.patched)
    result: dict[str, Any] = patch.apply(copy.deepcopy(original))
    return result


class Chain:
    """Drives an admitter the way the API server does: mutate, apply the patch, validate."""

    def __init__(self, policy: Policy, ledger: MemoryLedger | None = None) -> None:
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self.admitter = PolicyAdmitter(policy, self.ledger)
        self.now = 1000.0

    def mutate(self, pod: dict[str, Any], *, uid: str = "req-1", dry_run: bool = False) -> Verdict:
        return asyncio.run(
            self.admitter.mutate(create(pod, uid=uid, dry_run=dry_run), now=self.now)
        )

    def validate(
        self, pod: dict[str, Any], *, uid: str = "req-1", dry_run: bool = False
    ) -> Verdict:
        return asyncio.run(
            self.admitter.validate(create(pod, uid=uid, dry_run=dry_run), now=self.now)
        )

    def admit(
        self,
        pod: dict[str, Any],
        *,
        uid: str = "req-1",
        pod_uid: str = "pod-1",
        dry_run: bool = False,
    ) -> tuple[Verdict, Verdict | None, dict[str, Any]]:
        mutated = self.mutate(pod, uid=uid, dry_run=dry_run)
        if not mutated.allowed:
            return mutated, None, pod
        final = stored(patched(pod, mutated), pod_uid=pod_uid)
        return mutated, self.validate(final, uid=uid, dry_run=dry_run), final

    def state(self, tenant: str = "team-a") -> TenantLedger:
        return self.ledger.get(tenant)


@pytest.fixture
def chain(policy: Policy) -> Chain:
    return Chain(policy)


def fill(chain: Chain, count: int, *, prefix: str = "fill", **pod: Any) -> list[dict[str, Any]]:
    """Admit ``count`` pods for real; returns the stored pods."""
    finals = []
    for index in range(count):
        mutated, validated, final = chain.admit(
            make_pod(**pod), uid=f"{prefix}-{index}", pod_uid=f"{prefix}-pod-{index}"
        )
        assert mutated.allowed
        assert validated is not None
        assert validated.allowed
        finals.append(final)
    return finals


# --------------------------------------------------------------------------- the scenario


def test_two_hundred_pods_into_team_a_with_the_example_config() -> None:
    chain = Chain(load_policy(EXAMPLE_CONFIG))
    outcomes: Counter[str] = Counter()
    for index in range(200):
        mutated, validated, final = chain.admit(
            make_pod(cpu="500m", memory="256Mi"), uid=f"u-{index}", pod_uid=f"p-{index}"
        )
        if not mutated.allowed:
            assert (mutated.code, mutated.reason, mutated.message) == (
                403,
                "Forbidden",
                TEAM_A_MESSAGE,
            )
            outcomes["denied"] += 1
            continue
        assert validated is not None
        assert validated.allowed, validated
        tier = final["metadata"]["labels"]["tenantgate.io/tier"]
        outcomes[tier] += 1
        spec = final["spec"]
        expected = (
            ("tenant-guaranteed", 1000, "PreemptLowerPriority")
            if tier == "guaranteed"
            else ("tenant-burst", 10, "Never")
        )
        assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == expected
    assert outcomes == {"guaranteed": 8, "burst": 4, "denied": 188}
    state = chain.state()
    assert state.guaranteed == rl(cpu="4", memory="2Gi", pods="8")
    assert state.burst == rl(cpu="2", memory="1Gi", pods="4")


def test_two_hundred_pods_in_dry_run_book_nothing() -> None:
    chain = Chain(load_policy(EXAMPLE_CONFIG))
    for index in range(200):
        mutated, validated, final = chain.admit(
            make_pod(), uid=f"u-{index}", pod_uid=f"p-{index}", dry_run=True
        )
        assert mutated.allowed
        assert validated is not None
        assert validated.allowed
        assert final["metadata"]["labels"]["tenantgate.io/tier"] == "guaranteed"
    assert chain.ledger.snapshot() == {}


def test_concurrent_admissions_never_over_admit(policy: Policy) -> None:
    chain = Chain(policy)
    results: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(10)

    def worker(worker_index: int) -> None:
        start.wait()
        for index in range(20):
            key = f"{worker_index}-{index}"
            mutated, validated, final = chain.admit(make_pod(), uid=f"u-{key}", pod_uid=f"p-{key}")
            if not mutated.allowed:
                outcome = "denied" if mutated.message == TEAM_A_MESSAGE else mutated.message
            elif validated is None or not validated.allowed:
                outcome = f"validate denied: {validated}"
            else:
                outcome = final["metadata"]["labels"]["tenantgate.io/tier"]
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(results) == {"guaranteed": 8, "burst": 4, "denied": 188}
    assert chain.state().total() == rl(cpu="6", memory="3Gi", pods="12")


# --------------------------------------------------------------------------- /mutate


def test_guaranteed_pod_gets_class_labels_and_reservation(chain: Chain) -> None:
    verdict = chain.mutate(make_pod(), uid="abc")
    assert verdict.allowed
    assert verdict.patched is not None
    meta = verdict.patched["metadata"]
    rid = reservation_id_for("abc")
    assert meta["labels"] == {
        "app": "w",
        "tenantgate.io/tenant": "team-a",
        "tenantgate.io/tier": "guaranteed",
    }
    assert meta["annotations"]["tenantgate.io/reservation"] == rid
    assert meta["annotations"]["tenantgate.io/profile"] == "general"
    spec = verdict.patched["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "tenant-guaranteed",
        1000,
        "PreemptLowerPriority",
    )
    assert verdict.warnings == ("profile general: no rule matched; no evidence",)
    assert verdict.audit_annotations == {
        "tenant": "team-a",
        "tier": "guaranteed",
        "profile": "general",
        "classified-by": "default",
        "reservation": rid,
    }
    reservation = chain.state().reservations[rid]
    assert reservation.tier == "guaranteed"
    assert reservation.amount == rl(cpu="500m", memory="256Mi", pods="1")
    # A hold until /validate binds it: the short hold TTL (holdTTLSeconds), not the full TTL.
    assert reservation.held
    assert reservation.expires_at == chain.now + 15


def test_burst_pod_gets_burst_class_and_warning(chain: Chain) -> None:
    fill(chain, 8)
    verdict = chain.mutate(make_pod(), uid="b1")
    assert verdict.patched is not None
    spec = verdict.patched["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "tenant-burst",
        10,
        "Never",
    )
    assert verdict.patched["metadata"]["labels"]["tenantgate.io/tier"] == "burst"
    assert verdict.warnings[-1] == (
        "tenant team-a is above its guarantee: admitted on burst capacity "
        "(burst left cpu=1500m,memory=9984Mi,pods=21); priority class tenant-burst, "
        "may be preempted"
    )


def test_guaranteed_pod_above_the_ceiling_warns(policy: Policy) -> None:
    # Burst pods fill the ceiling (cpu 2 guaranteed + 4 burst = 6); the guarantee still holds.
    seeded = TenantLedger.of("team-a", guaranteed=rl(cpu="2"), burst=rl(cpu="4"))
    chain = Chain(policy, MemoryLedger([seeded]))
    verdict = chain.mutate(make_pod(cpu="1"), uid="g")
    assert verdict.patched is not None
    assert verdict.patched["metadata"]["labels"]["tenantgate.io/tier"] == "guaranteed"
    assert verdict.warnings[-1] == (
        "tenant team-a is above its burst ceiling (cpu=7/6): "
        "its burst pods are the first to be preempted"
    )


def test_over_quota_on_memory_while_cpu_fits(chain: Chain) -> None:
    verdict = chain.mutate(make_pod(cpu="100m", memory="13Gi"))
    assert (verdict.allowed, verdict.code, verdict.reason) == (False, 403, "Forbidden")
    assert verdict.message == (
        "exceeded tenant quota: team-a: requested memory=13Gi, used memory=0/12Gi "
        "(burst ceiling), guaranteed memory=8Gi"
    )
    assert verdict.cause == "over_quota"
    assert chain.ledger.snapshot() == {}


def test_unlimited_resources_never_block(chain: Chain) -> None:
    pod = make_pod(extra={"ephemeral-storage": "100Ti", "example.com/dongle": "50"})
    mutated, validated, _ = chain.admit(pod)
    assert mutated.allowed
    assert validated is not None
    assert validated.allowed


def test_gpu_tenant_guarantee_then_burst_max(policy: Policy) -> None:
    chain = Chain(policy)
    tiers = []
    for index in range(7):
        pod = make_pod(namespace="ml", extra={"nvidia.com/gpu": "1"})
        mutated, _validated, final = chain.admit(pod, uid=f"g{index}", pod_uid=f"gp{index}")
        tiers.append(
            final["metadata"]["labels"]["tenantgate.io/tier"]
            if mutated.allowed
            else mutated.message
        )
        if mutated.allowed:
            assert final["metadata"]["annotations"]["tenantgate.io/profile"] == "ml"
    assert tiers == ["guaranteed"] * 4 + ["burst"] * 2 + [
        "exceeded tenant quota: ml: requested nvidia.com/gpu=1, used nvidia.com/gpu=6/6 "
        "(burst ceiling), guaranteed nvidia.com/gpu=4"
    ]


# --------------------------------------------------------------------------- re-invocation


def test_reinvocation_changes_nothing_and_books_once(chain: Chain) -> None:
    pod = make_pod()
    first = chain.mutate(pod, uid="r")
    once = patched(pod, first)
    before = chain.state()
    again = chain.mutate(once, uid="r")
    assert again.allowed
    assert again.patched == once
    assert jsonpatch.make_patch(once, again.patched).patch == []
    assert again.warnings == first.warnings
    assert chain.state() == before
    # A re-invocation carries a new request uid in some API servers: the annotation decides.
    third = chain.mutate(once, uid="another-uid")
    assert third.patched == once
    assert chain.state() == before


def test_reinvocation_tops_up_or_shrinks_when_another_webhook_changed_resources(
    chain: Chain,
) -> None:
    pod = make_pod()
    once = patched(pod, chain.mutate(pod, uid="r"))
    rid = once["metadata"]["annotations"]["tenantgate.io/reservation"]
    grown = copy.deepcopy(once)
    grown["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    verdict = chain.mutate(grown, uid="r")
    assert verdict.patched == grown  # same id, same tier: nothing to change
    assert chain.state().reservations[rid].amount == rl(cpu="2", memory="256Mi", pods="1")
    assert chain.state().guaranteed == rl(cpu="2", memory="256Mi", pods="1")
    grown["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100m"
    chain.mutate(grown, uid="r")
    assert chain.state().guaranteed == rl(cpu="100m", memory="256Mi", pods="1")
    assert list(chain.state().reservations) == [rid]


def test_reinvocation_moves_the_tier_when_the_pod_grew_past_the_guarantee(chain: Chain) -> None:
    fill(chain, 6)  # cpu 3 of 4 guaranteed
    pod = make_pod()
    once = patched(pod, chain.mutate(pod, uid="r"))
    assert once["metadata"]["labels"]["tenantgate.io/tier"] == "guaranteed"
    grown = copy.deepcopy(once)
    grown["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m"
    verdict = chain.mutate(grown, uid="r")
    twice = patched(grown, verdict)
    assert twice["metadata"]["labels"]["tenantgate.io/tier"] == "burst"
    assert twice["spec"]["priorityClassName"] == "tenant-burst"
    assert twice["spec"]["priority"] == 10
    assert chain.state().burst == rl(cpu="1500m", memory="256Mi", pods="1")
    assert chain.state().guaranteed == rl(cpu="3", memory="1536Mi", pods="6")


# --------------------------------------------------------------------------- dry-run


def test_dry_run_answers_exactly_like_the_real_run(policy: Policy) -> None:
    for filled in (0, 7, 8, 11, 12):
        chain = Chain(policy)
        fill(chain, filled)
        before = chain.state()
        dry_mutate, dry_validate, dry_final = chain.admit(make_pod(), uid="same", dry_run=True)
        assert chain.state() == before, "a dry-run booked something"
        real_mutate, real_validate, real_final = chain.admit(make_pod(), uid="same")
        # The one difference: the dry-run's tier travels to its /validate in an annotation.
        tier = dry_final["metadata"].get("annotations", {}).pop("tenantgate.io/dry-run-tier", None)
        if dry_mutate.patched is not None:
            assert dry_mutate.patched["metadata"]["annotations"].pop(
                "tenantgate.io/dry-run-tier"
            ) == (tier or "")
        assert dry_mutate == real_mutate
        assert dry_validate == real_validate
        assert dry_final == real_final


def test_dry_run_validate_without_mutate_books_nothing(chain: Chain) -> None:
    final = stored(make_pod(), pod_uid="p")
    verdict = chain.validate(final, dry_run=True)
    assert verdict.allowed
    assert chain.ledger.snapshot() == {}


# --------------------------------------------------------------------------- priority


def test_escalation_to_a_system_class_is_denied(chain: Chain) -> None:
    pod = make_pod(priorityClassName="system-cluster-critical", priority=2000000000)
    verdict = chain.mutate(pod)
    assert (verdict.allowed, verdict.code) == (False, 403)
    assert verdict.message == (
        "priority class system-cluster-critical is not allowed for tenant team-a "
        "(allowed: batch-low, gold, tenant-burst, tenant-guaranteed)"
    )
    assert verdict.cause == "priority_class"
    assert chain.ledger.snapshot() == {}


def test_escalation_to_another_tenants_class_is_denied(chain: Chain) -> None:
    verdict = chain.mutate(make_pod(priorityClassName="other-tenant", priority=3000))
    assert not verdict.allowed
    assert verdict.message.startswith(
        "priority class other-tenant is not allowed for tenant team-a"
    )


def test_a_lower_unlisted_class_is_replaced_with_a_warning(chain: Chain) -> None:
    # e.g. the cluster's globalDefault class, which the Priority plugin wrote into the pod.
    verdict = chain.mutate(make_pod(priorityClassName="cluster-default", priority=0))
    assert verdict.allowed
    assert verdict.patched is not None
    assert verdict.patched["spec"]["priorityClassName"] == "tenant-guaranteed"
    assert (
        "priority class cluster-default is not allowed for tenant team-a; using tenant-guaranteed"
        in verdict.warnings
    )


def test_an_allowed_class_is_kept_on_the_guarantee(chain: Chain) -> None:
    mutated, validated, final = chain.admit(make_pod(priorityClassName="gold", priority=5000))
    assert mutated.allowed
    assert validated is not None
    assert validated.allowed
    assert (final["spec"]["priorityClassName"], final["spec"]["priority"]) == ("gold", 5000)


def test_burst_always_gets_the_burst_class(chain: Chain) -> None:
    fill(chain, 8)
    mutated, validated, final = chain.admit(make_pod(priorityClassName="gold", priority=5000))
    assert validated is not None
    assert validated.allowed
    assert (final["spec"]["priorityClassName"], final["spec"]["priority"]) == ("tenant-burst", 10)
    assert "priority class gold replaced by tenant-burst: the pod runs on burst capacity" in (
        mutated.warnings
    )


def test_profile_class_is_kept_when_allowed_else_the_tenant_class(policy: Policy) -> None:
    chain = Chain(policy)
    batch = make_pod(restartPolicy="Never")
    _, _, final = chain.admit(batch)
    assert final["spec"]["priorityClassName"] == "batch-low"
    _, validated, final = chain.admit(
        make_pod(namespace="other", cpu="100m", restartPolicy="Never")
    )
    assert validated is not None
    assert validated.allowed
    assert (final["spec"]["priorityClassName"], final["spec"]["priority"]) == ("other-tenant", 3000)


@pytest.mark.parametrize(
    ("class_name", "priority", "message"),
    [
        (
            "system-node-critical",
            2000001000,
            "priority class system-node-critical is not allowed for tenant team-a "
            "(allowed: batch-low, gold, tenant-burst, tenant-guaranteed)",
        ),
        (
            "other-tenant",
            3000,
            "priority class other-tenant is not allowed for tenant team-a "
            "(allowed: batch-low, gold, tenant-burst, tenant-guaranteed)",
        ),
        (
            "tenant-guaranteed",
            999999,
            "spec.priority 999999 is above the value 1000 of priority class tenant-guaranteed",
        ),
    ],
)
def test_validate_denies_escalation_whoever_set_it(
    chain: Chain, class_name: str, priority: int, message: str
) -> None:
    pod = make_pod()
    final = stored(patched(pod, chain.mutate(pod)), pod_uid="p")
    final["spec"]["priorityClassName"] = class_name  # a later webhook changed it
    final["spec"]["priority"] = priority
    verdict = chain.validate(final)
    assert (verdict.allowed, verdict.code, verdict.message) == (False, 403, message)
    assert verdict.cause == "priority_class"


def test_validate_denies_a_burst_pod_that_lost_the_burst_class(chain: Chain) -> None:
    fill(chain, 8)
    pod = make_pod()
    final = stored(patched(pod, chain.mutate(pod, uid="b")), pod_uid="p")
    final["spec"].update(priorityClassName="tenant-guaranteed", priority=1000)
    verdict = chain.validate(final, uid="b")
    assert verdict.message == (
        "burst pods of tenant team-a must use priority class tenant-burst, not tenant-guaranteed"
    )
    assert verdict.cause == "priority_class"
    assert reservation_id_for("b") not in chain.state().reservations  # released at once


# --------------------------------------------------------------------------- /validate


def test_validate_binds_the_reservation_to_one_pod(chain: Chain) -> None:
    pod = make_pod(cpu="3")
    once = patched(pod, chain.mutate(pod, uid="r"))
    rid = once["metadata"]["annotations"]["tenantgate.io/reservation"]
    assert chain.validate(stored(once, pod_uid="first"), uid="r").allowed
    assert chain.state().reservations[rid].pod_uid == "first"
    assert chain.validate(stored(once, pod_uid="first"), uid="r").allowed  # retried: same pod
    # A second pod carrying the same annotation must book its own quota: 3 + 3 > 4.
    copied = chain.validate(stored(once, pod_uid="second"), uid="other")
    assert (copied.allowed, copied.code, copied.reason) == (False, 409, "Conflict")
    assert copied.message == (
        "pod team-a/worker-x of tenant team-a was not classified by the mutating webhook "
        "(it holds no reservation and does not fit the guarantee); retry"
    )
    assert chain.state().guaranteed == rl(cpu="3", memory="256Mi", pods="1")


def test_validate_tops_up_within_the_tier(chain: Chain) -> None:
    pod = make_pod()
    final = stored(patched(pod, chain.mutate(pod)), pod_uid="p")
    final["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"  # a later webhook
    assert chain.validate(final).allowed
    assert chain.state().guaranteed == rl(cpu="1", memory="256Mi", pods="1")


def test_validate_denies_growth_past_the_tier_and_releases(chain: Chain) -> None:
    fill(chain, 7)  # cpu 3500m guaranteed
    pod = make_pod()
    final = stored(patched(pod, chain.mutate(pod, uid="g")), pod_uid="p")
    final["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    verdict = chain.validate(final, uid="g")
    assert (verdict.allowed, verdict.code) == (False, 409)
    assert verdict.message == (
        "exceeded tenant quota: team-a: requested cpu=500m, used cpu=4/4 (guaranteed); "
        f"the pod's request grew after tenantgate's mutating webhook ran "
        f"(reservation {reservation_id_for('g')}); retry"
    )
    assert verdict.cause == "retry"
    assert chain.state().guaranteed == rl(cpu="3500m", memory="1792Mi", pods="7")


def test_validate_books_a_pod_the_mutating_webhook_missed(chain: Chain) -> None:
    verdict = chain.validate(stored(make_pod(cpu="1"), pod_uid="p"), uid="v")
    assert verdict.allowed
    assert verdict.warnings == (
        "quota of tenant team-a booked by the validating webhook: "
        "the mutating webhook did not run for this pod",
    )
    state = chain.state()
    assert state.guaranteed == rl(cpu="1", memory="256Mi", pods="1")
    assert state.reservation_for_pod("p") is not None


def test_validate_denies_a_missed_pod_that_needs_burst(chain: Chain) -> None:
    fill(chain, 8)
    verdict = chain.validate(stored(make_pod(), pod_uid="p"))
    assert (verdict.allowed, verdict.code) == (False, 409)
    assert verdict.message.endswith(
        "was not classified by the mutating webhook "
        "(it holds no reservation and does not fit the guarantee); retry"
    )
    fill(chain, 4, prefix="more")
    over = chain.validate(stored(make_pod(), pod_uid="q"))
    assert (over.code, over.message) == (403, TEAM_A_MESSAGE)
    assert (verdict.cause, over.cause) == ("retry", "over_quota")


def test_validate_after_the_reservation_expired(chain: Chain) -> None:
    pod = make_pod()
    final = stored(patched(pod, chain.mutate(pod)), pod_uid="p")
    chain.ledger.expire(now=chain.now + 121)
    assert chain.ledger.get("team-a").guaranteed == {}
    verdict = chain.validate(final)
    assert verdict.allowed
    assert chain.state().guaranteed == rl(cpu="500m", memory="256Mi", pods="1")


def test_tier_label_must_match_the_reservation(chain: Chain) -> None:
    pod = make_pod()
    final = stored(patched(pod, chain.mutate(pod, uid="t")), pod_uid="p")
    final["metadata"]["labels"]["tenantgate.io/tier"] = "burst"
    verdict = chain.validate(final, uid="t")
    assert (verdict.code, verdict.message) == (
        409,
        f"label tenantgate.io/tier=burst does not match the guaranteed reservation "
        f"{reservation_id_for('t')} of tenant team-a; retry",
    )


# --------------------------------------------------------------------------- container defaults


def test_container_defaults_apply_and_count(chain: Chain) -> None:
    pod = make_pod(cpu=None, memory=None)
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}
    ]
    mutated, validated, final = chain.admit(pod)
    assert validated is not None
    assert validated.allowed
    assert final["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "100m",
        "memory": "128Mi",
    }
    # The init container's limit already fixes its cpu request; only memory is defaulted.
    assert final["spec"]["initContainers"][0]["resources"] == {
        "limits": {"cpu": "1"},
        "requests": {"memory": "128Mi"},
    }
    assert (
        "tenant team-a default requests applied: init memory=128Mi; app cpu=100m,memory=128Mi"
        in mutated.warnings
    )
    assert chain.state().guaranteed == rl(cpu="1", memory="128Mi", pods="1")
    assert pod["spec"]["containers"][0].get("resources") is None  # input untouched


def test_a_pod_without_requests_cannot_skip_the_defaults(chain: Chain) -> None:
    verdict = chain.validate(stored(make_pod(cpu=None, memory=None), pod_uid="p"))
    assert (verdict.code, verdict.message) == (
        409,
        "pod team-a/worker-x of tenant team-a has containers without requests and was not "
        "mutated by tenantgate; retry",
    )


_DEFAULTS = {"cpu": Quantity.parse("100m"), "memory": Quantity.parse("128Mi")}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"containers": "not a list"},
        {"containers": [{"name": "a"}]},
        {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
        {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1"}}}]},
        {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1"}}}]},
        {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {}}}]},
        {"containers": ["junk", {"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
        {
            "resources": {"requests": {"memory": "1Gi"}},
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        },
        {
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            "containers": [{"name": "a"}],
        },
        {
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1"}}}],
        },
        {"containers": [{"name": "a", "resources": "junk"}]},
    ],
)
def test_validate_sees_missing_defaults_exactly_as_mutate_applies_them(
    spec: dict[str, Any],
) -> None:
    applied = apply_container_defaults({"spec": copy.deepcopy(spec)}, _DEFAULTS)
    assert lacks_defaults(spec, requests=_DEFAULTS, limits={}) == bool(applied)
    assert not lacks_defaults(spec, requests={}, limits={})


# --------------------------------------------------------------------------- bad input


def test_invalid_quantity_is_a_bad_request_naming_the_field(chain: Chain) -> None:
    pod = make_pod(cpu="4x")
    for verdict in (chain.mutate(pod), chain.validate(stored(pod, pod_uid="p"))):
        assert (verdict.allowed, verdict.code, verdict.reason) == (False, 400, "BadRequest")
        assert verdict.message == (
            'spec.containers[0].resources.requests.cpu: invalid quantity "4x": unknown suffix "x"'
        )
        assert verdict.cause == "invalid_request"


def test_negative_requests_are_refused(chain: Chain) -> None:
    verdict = chain.mutate(make_pod(cpu="-2"))
    assert (verdict.code, verdict.message) == (
        400,
        "invalid pod resources: negative request cpu=-2",
    )


def test_disallowed_profile_opt_in_is_denied(chain: Chain) -> None:
    pod = make_pod(namespace="ml")
    pod["metadata"]["labels"]["tenantgate.io/profile"] = "batch"
    verdict = chain.mutate(pod)
    assert (verdict.allowed, verdict.code) == (False, 403)
    assert verdict.message == (
        'tenant ml: label tenantgate.io/profile asks for profile "batch", which is not allowed '
        "here (allowed: general, ml)"
    )
    assert verdict.cause == "profile_not_allowed"


# --------------------------------------------------------------------------- scope


def test_unclaimed_namespaces_are_untouched_by_default(chain: Chain) -> None:
    pod = make_pod(namespace="elsewhere")
    assert chain.mutate(pod) == Verdict.allow()
    assert chain.validate(stored(pod, pod_uid="p")) == Verdict.allow()
    assert chain.ledger.snapshot() == {}


def test_unclaimed_namespaces_can_be_denied() -> None:
    chain = Chain(make_policy(CONFIG + "unclaimedNamespaces: deny\n"))
    pod = make_pod(namespace="elsewhere")
    for verdict in (chain.mutate(pod), chain.validate(stored(pod, pod_uid="p"))):
        assert (verdict.allowed, verdict.code, verdict.message) == (
            False,
            403,
            'namespace "elsewhere" is not claimed by any tenant; '
            "ask the platform team to add it to a tenant",
        )
        assert verdict.cause == "unclaimed_namespace"


def test_other_kinds_and_operations_pass_untouched(chain: Chain) -> None:
    pod = make_pod()
    for request in (
        AdmissionInput(
            uid="1",
            operation="CREATE",
            namespace="team-a",
            name="",
            object=pod,
            kind="Deployment",
            group="apps",
        ),
        AdmissionInput(uid="2", operation="DELETE", namespace="team-a", name="x", object=None),
        AdmissionInput(
            uid="3",
            operation="UPDATE",
            namespace="team-a",
            name="x",
            object=pod,
            old_object=pod,
            sub_resource="status",
        ),
        AdmissionInput(uid="4", operation="CONNECT", namespace="team-a", name="x", object=pod),
    ):
        assert asyncio.run(chain.admitter.mutate(request, now=0)) == Verdict.allow()
        assert asyncio.run(chain.admitter.validate(request, now=0)) == Verdict.allow()
    assert chain.ledger.snapshot() == {}


def test_namespace_selector_tenants_use_the_label_lookup() -> None:
    policy = make_policy(
        CONFIG
        + """\
  labelled:
    namespaceSelector: {matchLabels: {team: b}}
    quota: {guaranteed: {cpu: "1"}}
"""
    )
    labels = {"team-b-prod": {"team": "b"}}
    admitter = PolicyAdmitter(policy, MemoryLedger(), namespace_labels=labels.get)
    verdict = asyncio.run(admitter.mutate(create(make_pod(namespace="team-b-prod")), now=0))
    assert verdict.patched is not None
    assert verdict.patched["metadata"]["labels"]["tenantgate.io/tenant"] == "labelled"
    unknown = asyncio.run(admitter.mutate(create(make_pod(namespace="team-c")), now=0))
    assert unknown == Verdict.allow()


UNSEEN: dict[str, dict[str, str]] = {}  # namespaces the watch has shown: none
SELECTOR_TENANT = """\
  labelled:
    namespaceSelector: {matchLabels: {team: b}}
    quota: {guaranteed: {cpu: "1"}}
"""


def test_a_namespace_the_watch_has_not_shown_yet_is_read() -> None:
    # A namespace created a moment before its pod: the watch has not shown it. kube-apiserver's
    # NamespaceLifecycle plugin reads such a namespace live
    # (plugin/pkg/admission/namespace/lifecycle/admission.go); so does the admitter, else a
    # selector tenant's pod would pass unmetered.
    policy = make_policy(CONFIG + SELECTOR_TENANT)
    read: list[str] = []

    async def lookup(namespace: str) -> dict[str, str] | None:
        read.append(namespace)
        return {"team": "b"}

    ledger = MemoryLedger()
    admitter = PolicyAdmitter(policy, ledger, namespace_labels=UNSEEN.get, namespace_lookup=lookup)
    verdict = asyncio.run(admitter.mutate(create(make_pod(namespace="fresh")), now=0))
    assert verdict.patched is not None
    assert verdict.patched["metadata"]["labels"]["tenantgate.io/tenant"] == "labelled"
    assert len(ledger.get("labelled").reservations) == 1
    assert read == ["fresh"]
    # A namespace the watch knows is not read; one a namespace list names is never read.
    known = PolicyAdmitter(
        policy,
        MemoryLedger(),
        namespace_labels={"seen": {"team": "b"}}.get,
        namespace_lookup=lookup,
    )
    asyncio.run(known.mutate(create(make_pod(namespace="seen")), now=0))
    asyncio.run(known.mutate(create(make_pod(namespace="team-a")), now=0))
    assert read == ["fresh"]


def test_a_namespace_that_cannot_be_read_gets_a_retryable_denial() -> None:
    policy = make_policy(CONFIG + SELECTOR_TENANT)

    async def lookup(namespace: str) -> dict[str, str] | None:
        raise NamespaceUnreadable(f"read namespace {namespace}: connection refused")

    ledger = MemoryLedger()
    admitter = PolicyAdmitter(policy, ledger, namespace_labels=UNSEEN.get, namespace_lookup=lookup)
    verdict = asyncio.run(admitter.mutate(create(make_pod(namespace="fresh")), now=0))
    assert not verdict.allowed
    assert verdict.code == 409
    assert verdict.message == (
        'cannot tell which tenant owns namespace "fresh": it is not known to tenantgate yet and '
        "reading it failed (read namespace fresh: connection refused); retry"
    )
    assert ledger.snapshot() == {}


def test_replace_policy_takes_effect_for_the_next_request(chain: Chain) -> None:
    strict = make_policy(
        CONFIG.replace('guaranteed: {cpu: "4", memory: 8Gi', 'guaranteed: {cpu: "1", memory: 8Gi')
    )
    chain.admitter.replace_policy(strict)
    assert chain.admitter.policy is strict
    verdict = chain.mutate(make_pod(cpu="2"))
    assert verdict.message.startswith(
        "exceeded tenant quota: team-a: requested cpu=2, used cpu=0/1500m"
    )


# --------------------------------------------------------------------------- UPDATE


def update(
    old: dict[str, Any], new: dict[str, Any], *, sub_resource: str = "", dry_run: bool = False
) -> AdmissionInput:
    return AdmissionInput(
        uid="upd",
        operation="UPDATE",
        namespace="team-a",
        name="worker-x",
        object=new,
        old_object=old,
        sub_resource=sub_resource,
        dry_run=dry_run,
    )


def test_ordinary_updates_are_not_charged(chain: Chain) -> None:
    (final,) = fill(chain, 1)
    before = chain.state()
    changed = copy.deepcopy(final)
    changed["metadata"]["labels"]["release"] = "2"
    changed["spec"]["schedulingGates"] = []
    assert asyncio.run(chain.admitter.validate(update(final, changed), now=0)) == Verdict.allow()
    assert chain.state() == before


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("labels", "tenantgate.io/tier", "guaranteed-please"),
        ("labels", "tenantgate.io/tenant", "ml"),
        ("annotations", "tenantgate.io/reservation", "r-mine"),
    ],
)
def test_managed_labels_cannot_change(chain: Chain, where: str, key: str, value: str) -> None:
    (final,) = fill(chain, 1)
    changed = copy.deepcopy(final)
    changed["metadata"][where][key] = value
    verdict = asyncio.run(chain.admitter.validate(update(final, changed), now=0))
    kind = "label" if where == "labels" else "annotation"
    assert (verdict.allowed, verdict.message) == (
        False,
        f"{kind} {key} is managed by tenantgate and cannot be changed",
    )
    assert verdict.cause == "managed_metadata"


def resized(pod: dict[str, Any], cpu: str) -> dict[str, Any]:
    new = copy.deepcopy(pod)
    new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return new


def test_resize_charges_only_the_delta(chain: Chain) -> None:
    (final,) = fill(chain, 1)
    verdict = asyncio.run(
        chain.admitter.validate(
            update(final, resized(final, "1500m"), sub_resource="resize"), now=0
        )
    )
    assert verdict.allowed
    assert chain.state().guaranteed == rl(cpu="1500m", memory="256Mi", pods="1")
    smaller = asyncio.run(
        chain.admitter.validate(
            update(resized(final, "1500m"), resized(final, "250m"), sub_resource="resize"), now=0
        )
    )
    assert smaller.allowed
    assert chain.state().guaranteed == rl(cpu="250m", memory="256Mi", pods="1")


def test_resize_past_the_guarantee_is_denied(chain: Chain) -> None:
    finals = fill(chain, 7)
    verdict = asyncio.run(
        chain.admitter.validate(
            update(finals[0], resized(finals[0], "1100m"), sub_resource="resize"), now=0
        )
    )
    assert (verdict.allowed, verdict.code, verdict.message) == (
        False,
        403,
        "exceeded tenant quota: team-a: requested cpu=600m, used cpu=3500m/4 (guaranteed)",
    )
    assert verdict.cause == "over_quota"


def test_resize_of_a_burst_pod_checks_the_ceiling(chain: Chain) -> None:
    finals = fill(chain, 9)
    burst_pod = finals[-1]
    assert burst_pod["metadata"]["labels"]["tenantgate.io/tier"] == "burst"
    ok = asyncio.run(
        chain.admitter.validate(
            update(burst_pod, resized(burst_pod, "2"), sub_resource="resize"), now=0
        )
    )
    assert ok.allowed
    assert chain.state().burst == rl(cpu="2", memory="256Mi", pods="1")


def test_dry_run_resize_books_nothing(chain: Chain) -> None:
    (final,) = fill(chain, 1)
    before = chain.state()
    verdict = asyncio.run(
        chain.admitter.validate(
            update(final, resized(final, "1"), sub_resource="resize", dry_run=True), now=0
        )
    )
    assert verdict.allowed
    assert chain.state() == before


# --------------------------------------------------------------------------- offline review


def test_review_runs_both_webhooks_as_a_dry_run(chain: Chain) -> None:
    fill(chain, 8)
    before = chain.state()
    review = asyncio.run(chain.admitter.review(make_pod(), namespace="team-a", now=chain.now))
    assert (review.tenant, review.tier, review.profile, review.allowed) == (
        "team-a",
        "burst",
        "general",
        True,
    )
    assert review.mutated["spec"]["priorityClassName"] == "tenant-burst"
    assert any("may be preempted" in warning for warning in review.warnings)
    assert chain.state() == before


def test_review_against_a_usage_snapshot(policy: Policy) -> None:
    usage = ledger_from_usage(
        {"tenants": {"team-a": {"used": {"guaranteed": {"cpu": "4"}, "burst": {"cpu": "2"}}}}}
    )
    review = asyncio.run(
        PolicyAdmitter(policy, usage).review(make_pod(), namespace="team-a", now=0)
    )
    assert (review.tenant, review.tier, review.allowed, review.code) == ("team-a", None, False, 403)
    assert review.message == TEAM_A_MESSAGE
    unclaimed = asyncio.run(
        PolicyAdmitter(policy, usage).review(make_pod(), namespace="default", now=0)
    )
    assert (unclaimed.tenant, unclaimed.tier, unclaimed.allowed) == (None, None, True)


def test_defaults_count_even_when_a_rule_already_read_the_request() -> None:
    # "cpu < 2" holds for a pod without requests, so the rule reads the request before the
    # tenant's container defaults are applied: the booking must count the defaults.
    config = CONFIG.replace(
        "  - name: batch\n",
        '  - name: small\n    profile: batch\n    match: {resource: "cpu < 2"}\n  - name: batch\n',
    )
    chain = Chain(make_policy(config))

    mutated = chain.mutate(make_pod(cpu=None, memory=None))  # booked by /mutate alone

    assert mutated.audit_annotations["profile"] == "batch"
    assert chain.state().guaranteed == rl(cpu="100m", memory="128Mi", pods="1")


def test_a_request_a_rule_read_is_booked_as_read() -> None:
    config = CONFIG.replace(
        "  - name: batch\n",
        '  - name: small\n    profile: batch\n    match: {resource: "cpu < 2"}\n  - name: batch\n',
    )
    chain = Chain(make_policy(config))

    mutated = chain.mutate(make_pod(cpu="1500m", memory="1Gi"))

    assert mutated.audit_annotations["profile"] == "batch"
    assert chain.state().guaranteed == rl(cpu="1500m", memory="1Gi", pods="1")
