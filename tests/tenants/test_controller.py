"""The ledger lifecycle: confirm, release exactly once, expiry, namespace moves, rebuild, drift."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from immutables import Map

from classifier.quantities import Quantity
from tenants.config import Policy
from tenants.configfile import load_text
from tenants.controller import (
    AmountInterner,
    LedgerController,
    PodFacts,
    build_ledger,
    charge_pod,
    find_drift,
    pod_facts,
    release_pod,
    usage_drift,
)
from tenants.ledger import Charge, MemoryLedger, TenantLedger, book, cancel, enqueue
from tenants.queue.line import TenantQueue

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
reservationTTLSeconds: 30
tenants:
  team-a:
    namespaces: [team-a, team-a-dev]
    quota:
      guaranteed: {cpu: "4", memory: 8Gi}
      burst: {ratio: 2}
  team-b:
    namespaceSelector: {matchLabels: {team: b}}
    quota:
      guaranteed: {cpu: "8"}
"""

NOW = 1_700_000_000.0
T = TypeVar("T")


def policy_of(text: str = CONFIG) -> Policy:
    return load_text(text).policy


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def amounts(**values: str) -> dict[str, Quantity]:
    return {name.replace("_", "-"): q(value) for name, value in values.items()}


def make_pod(
    uid: str,
    namespace: str = "team-a",
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    reservation: str | None = None,
    tier: str | None = None,
    phase: str = "Running",
    version: str = "1",
    priority_class: str | None = None,
    deleted_at: str | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": f"pod-{uid}",
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": version,
    }
    if reservation is not None:
        metadata["annotations"] = {"tenantgate.io/reservation": reservation}
    if tier is not None:
        metadata["labels"] = {"tenantgate.io/tier": tier}
    if deleted_at is not None:
        metadata["deletionTimestamp"] = deleted_at
        metadata["deletionGracePeriodSeconds"] = grace
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": "nginx",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ]
    }
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def facts_of(pod: Mapping[str, Any]) -> PodFacts:
    facts = pod_facts(pod)
    assert facts is not None
    return facts


def reserve(
    store: MemoryLedger,
    tenant: str,
    reservation_id: str,
    amount: Mapping[str, Quantity],
    *,
    tier: str = "guaranteed",
    pod_uid: str | None = None,
    now: float = NOW,
) -> None:
    """Book as the admission path does."""
    store.update(
        tenant,
        lambda ledger: (
            book(
                ledger,
                reservation_id=reservation_id,
                tier="burst" if tier == "burst" else "guaranteed",
                amount=amount,
                now=now,
                ttl=30,
                pod_uid=pod_uid,
            ),
            None,
        ),
    )


def request_of(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    return dict(facts_of(pod).amount)


@pytest.fixture
def store() -> MemoryLedger:
    return MemoryLedger()


@pytest.fixture
def controller(store: MemoryLedger) -> LedgerController:
    ctl = LedgerController(store, policy=policy_of())
    ctl.replace_namespaces({"team-a": {}, "team-a-dev": {}, "b-one": {"team": "b"}}, now=NOW)
    ctl.replace_pods([], now=NOW, initial=True)
    return ctl


def assert_truthful(controller: LedgerController, *, now: float = NOW) -> None:
    """The incrementally kept ledger equals the truth: a recount finds nothing to repair."""
    assert find_drift(controller.freeze(now=now)) == frozenset()
    report = controller.recount(now=now)
    assert not report.repaired, report


# --------------------------------------------------------------------------- pod facts


def test_pod_facts_reads_what_the_ledger_needs() -> None:
    pod = make_pod(
        "u1",
        cpu="500m",
        memory="256Mi",
        reservation="r-1",
        tier="burst",
        priority_class="tenant-burst",
        version="42",
    )
    facts = facts_of(pod)
    assert facts.uid == "u1"
    assert facts.namespace == "team-a"
    assert facts.key == "team-a/pod-u1"
    assert facts.resource_version == "42"
    assert facts.amount == amounts(cpu="500m", memory="256Mi", pods="1")
    assert facts.tier_label == "burst"
    assert facts.reservation == "r-1"
    assert facts.priority_class == "tenant-burst"
    assert not facts.terminal
    assert facts.release_at is None
    assert facts.counted(NOW)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_phases_are_not_counted(phase: str) -> None:
    facts = facts_of(make_pod("u1", phase=phase))
    assert facts.terminal
    assert not facts.counted(NOW)


def test_a_pod_stuck_terminating_is_counted_until_its_grace_period_has_passed() -> None:
    facts = facts_of(make_pod("u1", deleted_at="2023-11-14T22:13:20Z", grace=30))
    assert facts.release_at == NOW + 30
    assert facts.counted(NOW + 30)
    assert not facts.counted(NOW + 30.5)


def test_pod_facts_tier_falls_back_to_the_priority_class() -> None:
    assert facts_of(make_pod("u1")).tier({"tenant-burst"}) == "guaranteed"
    assert facts_of(make_pod("u1", priority_class="tenant-burst")).tier({"tenant-burst"}) == "burst"
    assert facts_of(make_pod("u1", tier="nonsense")).tier_label is None
    labelled = facts_of(make_pod("u1", tier="guaranteed", priority_class="tenant-burst"))
    assert labelled.tier({"tenant-burst"}) == "guaranteed"


def test_pod_facts_of_an_invalid_quantity_counts_one_pod_and_says_why() -> None:
    facts = facts_of(make_pod("u1", cpu="lots"))
    assert facts.amount == amounts(pods="1")
    assert facts.invalid is not None
    assert "lots" in facts.invalid


def test_pod_facts_needs_a_uid_and_namespace() -> None:
    assert pod_facts({"metadata": {"name": "x", "namespace": "a"}}) is None
    assert pod_facts({"metadata": {"name": "x", "uid": "u"}}) is None
    assert pod_facts({}) is None


def test_amount_interner_shares_equal_requests() -> None:
    intern = AmountInterner(limit=1)
    first = facts_of(make_pod("u1")).amount
    a = pod_facts(make_pod("u1"), intern=intern)
    b = pod_facts(make_pod("u2"), intern=intern)
    c = pod_facts(make_pod("u3", cpu="2"), intern=intern)
    assert a is not None
    assert b is not None
    assert c is not None
    assert a.amount is b.amount
    assert a.amount == first
    assert c.amount == amounts(cpu="2", memory="1Gi", pods="1")  # past the limit: not shared


def test_amount_interner_remembers_each_spec_request_including_why_it_is_invalid() -> None:
    intern = AmountInterner()
    bad = [pod_facts(make_pod(uid, cpu="lots"), intern=intern) for uid in ("u1", "u2")]
    assert bad[0] is not None
    assert bad[1] is not None
    assert bad[0].invalid == bad[1].invalid == facts_of(make_pod("u1", cpu="lots")).invalid
    assert bad[1].amount == amounts(pods="1")
    good = pod_facts(make_pod("u3"), intern=intern)
    assert good is not None
    assert good.invalid is None
    # A number where a string was: another spec, read afresh (here: still one CPU).
    numeric = make_pod("u4")
    numeric["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 1
    again = pod_facts(numeric, intern=intern)
    assert again is not None
    assert again.amount == facts_of(numeric).amount
    halved = pod_facts(make_pod("u5", cpu="500m"), intern=intern)
    assert halved is not None
    assert halved.amount == amounts(cpu="500m", memory="1Gi", pods="1")


# --------------------------------------------------------------------------- pure transitions


def test_charge_pod_confirms_the_named_reservation_without_changing_usage() -> None:
    pod = make_pod("u1", reservation="r-1")
    ledger = book(
        TenantLedger("team-a"),
        reservation_id="r-1",
        tier="burst",
        amount=request_of(pod),
        now=NOW,
        ttl=30,
    )
    charged, outcome = charge_pod(ledger, facts_of(pod), burst_classes={"tenant-burst"})
    assert outcome == "confirmed"
    assert charged.burst == ledger.burst
    assert charged.guaranteed == {}
    assert "r-1" not in charged.reservations
    assert charged.charges["u1"] == Charge("burst", request_of(pod))
    again, outcome = charge_pod(charged, facts_of(pod), burst_classes={"tenant-burst"})
    assert outcome == "known"
    assert again is charged


def test_charge_pod_reports_unadmitted_and_late_pods() -> None:
    ledger = TenantLedger("team-a")
    unadmitted, outcome = charge_pod(ledger, facts_of(make_pod("u1")), burst_classes={"b"})
    assert outcome == "unadmitted"
    assert unadmitted.guaranteed == amounts(cpu="1", memory="1Gi", pods="1")
    late, outcome = charge_pod(
        ledger, facts_of(make_pod("u1", reservation="r-9")), burst_classes={"b"}
    )
    assert outcome == "late"
    assert late.guaranteed == unadmitted.guaranteed


def test_release_pod_frees_an_unbound_reservation_the_pod_names() -> None:
    pod = make_pod("u1", reservation="r-1", phase="Succeeded")
    ledger = book(
        TenantLedger("team-a"),
        reservation_id="r-1",
        tier="guaranteed",
        amount=request_of(pod),
        now=NOW,
        ttl=30,
    )
    released, charge = release_pod(ledger, facts_of(pod))
    assert charge is None
    assert released.reservations == Map()
    assert released.guaranteed == {}


def test_build_ledger_sums_charges_and_reservations() -> None:
    reservation = book(
        TenantLedger("t"), reservation_id="r", tier="burst", amount=amounts(cpu="1"), now=0, ttl=1
    ).reservations["r"]
    ledger = build_ledger(
        "t",
        charges={
            "a": Charge("guaranteed", amounts(cpu="500m", memory="1Gi")),
            "b": Charge("guaranteed", amounts(cpu="1500m")),
            "c": Charge("burst", amounts(cpu="1")),
        },
        reservations={"r": reservation},
    )
    assert ledger.guaranteed == amounts(cpu="2", memory="1Gi")
    assert str(ledger.guaranteed["memory"]) == "1Gi"
    assert ledger.burst == amounts(cpu="2")
    assert set(ledger.charges) == {"a", "b", "c"}
    assert ledger.reservation_for_pod("x") is None


# --------------------------------------------------------------------------- controller: pods


def test_a_stored_pod_confirms_its_reservation(
    controller: LedgerController, store: MemoryLedger
) -> None:
    pod = make_pod("u1", reservation="r-1", tier="guaranteed")
    reserve(store, "team-a", "r-1", request_of(pod))
    before = store.get("team-a").guaranteed
    controller.apply_pod(facts_of(pod), now=NOW)
    ledger = store.get("team-a")
    assert ledger.guaranteed == before
    assert ledger.reservations == Map()
    assert set(ledger.charges) == {"u1"}
    assert controller.stats.confirmed == 1
    assert controller.tracked("u1") == (facts_of(pod), "team-a")
    assert_truthful(controller)


def test_repeated_events_charge_a_pod_once(
    controller: LedgerController, store: MemoryLedger
) -> None:
    for version in range(5):
        controller.apply_pod(facts_of(make_pod("u1", version=str(version))), now=NOW)
    assert store.get("team-a").guaranteed == amounts(cpu="1", memory="1Gi", pods="1")
    assert controller.stats.unadmitted == {"team-a": 1}


def test_a_pod_that_did_not_pass_the_webhook_is_counted_and_reported(
    controller: LedgerController, store: MemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tenants.controller"):
        controller.apply_pod(facts_of(make_pod("u1", namespace="team-a-dev")), now=NOW)
    assert store.get("team-a").guaranteed == amounts(cpu="1", memory="1Gi", pods="1")
    assert controller.stats.unadmitted == {"team-a": 1}
    assert "pod team-a-dev/pod-u1 of tenant team-a did not pass the webhook" in caplog.text


def test_a_pod_naming_an_expired_reservation_is_reported_late(
    controller: LedgerController, store: MemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tenants.controller"):
        controller.apply_pod(facts_of(make_pod("u1", reservation="r-gone")), now=NOW)
    assert controller.stats.late == {"team-a": 1}
    assert "names reservation r-gone, which expired" in caplog.text
    assert store.get("team-a").guaranteed == amounts(cpu="1", memory="1Gi", pods="1")


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_releases_its_usage_exactly_once(
    controller: LedgerController, store: MemoryLedger, phase: str
) -> None:
    controller.apply_pod(facts_of(make_pod("u1")), now=NOW)
    controller.apply_pod(facts_of(make_pod("u2", cpu="2")), now=NOW)
    finished = facts_of(make_pod("u1", phase=phase, version="2"))
    controller.apply_pod(finished, now=NOW)
    controller.apply_pod(finished, now=NOW)
    controller.delete_pod(finished, now=NOW)
    assert store.get("team-a").guaranteed == amounts(cpu="2", memory="1Gi", pods="1")
    assert controller.stats.released == {"finished": 1}
    assert_truthful(controller)


def test_a_deleted_pod_releases_its_usage_exactly_once(
    controller: LedgerController, store: MemoryLedger
) -> None:
    pod = facts_of(make_pod("u1"))
    controller.apply_pod(pod, now=NOW)
    controller.delete_pod(pod, now=NOW)
    controller.delete_pod(pod, now=NOW)
    assert store.get("team-a").guaranteed == {}
    assert store.get("team-a").charges == Map()
    assert controller.stats.released == {"deleted": 1}
    assert controller.pod_count == 0


def test_a_pod_gone_before_it_was_seen_frees_its_booking(
    controller: LedgerController, store: MemoryLedger
) -> None:
    finished = make_pod("u1", reservation="r-1", phase="Succeeded")
    reserve(store, "team-a", "r-1", request_of(finished), pod_uid="u1")
    deleted = make_pod("u2", reservation="r-2")
    reserve(store, "team-a", "r-2", request_of(deleted))
    controller.apply_pod(facts_of(finished), now=NOW)
    controller.delete_pod(facts_of(deleted), now=NOW)
    ledger = store.get("team-a")
    assert ledger.reservations == Map()
    assert ledger.guaranteed == {}
    assert ledger.charges == Map()


def test_a_uid_seen_again_in_another_namespace_follows_it(
    controller: LedgerController, store: MemoryLedger
) -> None:
    controller.apply_pod(facts_of(make_pod("u1", namespace="team-a")), now=NOW)
    moved = facts_of(make_pod("u1", namespace="b-one", version="2"))
    controller.apply_pod(moved, now=NOW)
    assert controller.tracked("u1") == (moved, "team-b")
    assert store.get("team-a").charges == Map()
    assert set(store.get("team-b").charges) == {"u1"}
    assert_truthful(controller)
    controller.delete_pod(moved, now=NOW)
    assert store.get("team-b").charges == Map()
    assert controller.pod_count == 0
    assert_truthful(controller)


def test_pods_of_unclaimed_namespaces_are_tracked_but_not_charged(
    controller: LedgerController, store: MemoryLedger
) -> None:
    pod = facts_of(make_pod("u1", namespace="elsewhere"))
    controller.apply_pod(pod, now=NOW)
    assert controller.tracked("u1") == (pod, None)
    assert store.snapshot().get("team-a", TenantLedger("team-a")).charges == Map()
    assert controller.stats.unadmitted == {}


def test_a_pod_stuck_terminating_is_released_by_the_sweep_after_its_grace(
    controller: LedgerController, store: MemoryLedger
) -> None:
    controller.apply_pod(facts_of(make_pod("u1")), now=NOW)
    terminating = facts_of(make_pod("u1", version="2", deleted_at="2023-11-14T22:13:20Z", grace=30))
    controller.apply_pod(terminating, now=NOW)
    assert controller.sweep(now=NOW + 30, listed=True).released_terminating == 0
    assert store.get("team-a").guaranteed == amounts(cpu="1", memory="1Gi", pods="1")
    assert controller.sweep(now=NOW + 31, listed=True).released_terminating == 1
    assert store.get("team-a").guaranteed == {}
    assert controller.stats.released == {"terminating": 1}
    controller.delete_pod(terminating, now=NOW + 40)
    assert store.get("team-a").guaranteed == {}
    assert_truthful(controller, now=NOW + 40)


def test_the_sweep_expires_reservations_never_confirmed(
    controller: LedgerController, store: MemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    reserve(store, "team-a", "r-old", amounts(cpu="1"), now=NOW)
    reserve(store, "team-a", "r-new", amounts(cpu="2"), now=NOW + 20)
    assert controller.sweep(now=NOW + 29, listed=True).expired == ()
    with caplog.at_level(logging.INFO, logger="tenants.controller"):
        report = controller.sweep(now=NOW + 30, listed=True)
    assert [(tenant, r.id) for tenant, r in report.expired] == [("team-a", "r-old")]
    assert store.get("team-a").guaranteed == amounts(cpu="2")
    assert controller.stats.expired == {"team-a": 1}
    assert "reservation r-old of tenant team-a expired unconfirmed: released cpu=1" in caplog.text


def test_before_its_first_pod_list_the_sweep_keeps_reservations_bound_to_pods(
    store: MemoryLedger,
) -> None:
    # A new lease holder sweeps on a timer from the start, while its first list of the pods is
    # still coming. A reservation the validating webhook bound to a pod stands for a pod that
    # may be stored already: freeing it before the list shows the pod would lend its room
    # twice. Unbound holds past their TTL are orphans either way.
    fresh = LedgerController(store, policy=policy_of())
    fresh.replace_namespaces({"team-a": {}, "team-a-dev": {}}, now=NOW)
    pod = make_pod("u1", cpu="2", memory="1Gi", reservation="r-bound")
    reserve(store, "team-a", "r-bound", request_of(pod), pod_uid="u1")
    reserve(store, "team-a", "r-hold", amounts(cpu="1"))
    store.update(
        "team-a",
        lambda ledger: (enqueue(ledger, entry_id="q-1", priority=10, now=NOW, ttl=30), None),
    )

    report = fresh.sweep(now=NOW + 31, listed=False)

    assert [r.id for _, r in report.expired] == ["r-hold"]
    held = store.get("team-a")
    assert set(held.reservations) == {"r-bound"}
    assert held.guaranteed == amounts(cpu="2", memory="1Gi", pods="1")
    assert set(held.queued) == {"q-1"}  # lapses once the list could have settled it

    fresh.replace_pods([facts_of(pod)], now=NOW + 31, initial=True)
    charged = store.get("team-a")
    assert set(charged.charges) == {"u1"}
    assert charged.reservations == Map()
    assert charged.guaranteed == amounts(cpu="2", memory="1Gi", pods="1")
    fresh.sweep(now=NOW + 31, listed=True)
    assert store.get("team-a").queued == Map()


# --------------------------------------------------------------------------- namespaces and policy


def test_a_relabelled_namespace_moves_its_pods_usage_between_tenants(
    controller: LedgerController, store: MemoryLedger
) -> None:
    controller.apply_pod(facts_of(make_pod("u1", namespace="b-one", cpu="3")), now=NOW)
    controller.apply_pod(facts_of(make_pod("u2", namespace="b-two", cpu="1")), now=NOW)
    assert store.get("team-b").guaranteed == amounts(cpu="3", memory="1Gi", pods="1")
    assert controller.tenant_of("b-two") is None

    controller.apply_namespace("b-two", {"team": "b"}, now=NOW)
    assert store.get("team-b").guaranteed == amounts(cpu="4", memory="2Gi", pods="2")

    controller.apply_namespace("b-one", {"team": "c"}, now=NOW)
    assert store.get("team-b").guaranteed == amounts(cpu="1", memory="1Gi", pods="1")
    assert set(store.get("team-b").charges) == {"u2"}

    controller.delete_namespace("b-two", now=NOW)
    assert store.get("team-b").guaranteed == {}
    assert controller.stats.moved == 1
    assert_truthful(controller)


def test_a_moved_pod_keeps_its_tier_and_booked_amount(
    controller: LedgerController, store: MemoryLedger
) -> None:
    pod = make_pod("u1", namespace="b-one", reservation="r-1", tier="burst")
    reserve(store, "team-b", "r-1", request_of(pod), tier="burst")
    controller.apply_pod(facts_of(pod), now=NOW)
    controller.replace_namespaces({"b-one": {"team": "x"}, "b-two": {"team": "b"}}, now=NOW)
    assert store.get("team-b").burst == {}
    controller.replace_namespaces({"b-one": {"team": "b"}}, now=NOW)
    assert store.get("team-b").burst == amounts(cpu="1", memory="1Gi", pods="1")
    assert store.get("team-b").charges["u1"].tier == "burst"


def test_a_new_policy_moves_pods_and_drops_removed_tenants(
    controller: LedgerController, store: MemoryLedger
) -> None:
    controller.apply_pod(facts_of(make_pod("u1", namespace="team-a")), now=NOW)
    controller.apply_pod(facts_of(make_pod("u2", namespace="team-a-dev")), now=NOW)
    reserve(store, "team-b", "r-1", amounts(cpu="1"))
    moved = CONFIG.replace("namespaces: [team-a, team-a-dev]", "namespaces: [team-a]").replace(
        "  team-b:\n    namespaceSelector: {matchLabels: {team: b}}",
        "  dev:\n    namespaces: [team-a-dev]",
    )
    controller.set_policy(policy_of(moved), now=NOW)
    assert set(store.get("team-a").charges) == {"u1"}
    assert set(store.get("dev").charges) == {"u2"}
    assert store.get("team-b") == TenantLedger("team-b")
    assert_truthful(controller)


def test_a_new_policy_looks_each_namespace_up_once_not_each_pod(
    controller: LedgerController, store: MemoryLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(50):
        controller.apply_pod(facts_of(make_pod(f"a{n}", namespace="team-a")), now=NOW)
        controller.apply_pod(facts_of(make_pod(f"d{n}", namespace="team-a-dev")), now=NOW)
    moved = CONFIG.replace("namespaces: [team-a, team-a-dev]", "namespaces: [team-a]").replace(
        "  team-b:\n    namespaceSelector: {matchLabels: {team: b}}",
        "  dev:\n    namespaces: [team-a-dev]",
    )
    new = policy_of(moved)
    lookups: list[str] = []
    original = Policy.tenant_for

    def counting(policy: Policy, namespace: str, labels: Mapping[str, str] | None = None) -> Any:
        lookups.append(namespace)
        return original(policy, namespace, labels)

    monkeypatch.setattr(Policy, "tenant_for", counting)
    controller.set_policy(new, now=NOW)
    # Two namespaces, each looked up under the old and the new policy; the 50 pods of the
    # namespace that changed tenant are then charged to the new one.
    assert len([ns for ns in lookups if ns == "team-a"]) == 2
    assert len(set(store.get("dev").charges)) == 50
    assert len(set(store.get("team-a").charges)) == 50
    assert_truthful(controller)


# --------------------------------------------------------------------------- rebuild and recount


def test_the_first_list_rebuilds_the_ledger_from_live_pods(
    store: MemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    controller = LedgerController(store, policy=policy_of())
    controller.replace_namespaces({"b-one": {"team": "b"}}, now=NOW)
    # Admitted while the first list was in flight: one stored (listed), one not yet.
    reserve(store, "team-a", "r-stored", amounts(cpu="2", memory="1Gi", pods="1"), pod_uid="u3")
    reserve(store, "team-a", "r-flight", amounts(cpu="1"), tier="burst")
    pods = [
        make_pod("u1", reservation="r-before-restart", tier="guaranteed"),
        make_pod("u2", tier="burst", cpu="500m"),
        make_pod("u3", cpu="2", reservation="r-stored"),
        make_pod("u4", phase="Succeeded"),
        make_pod("u5", namespace="b-one", cpu="3"),
        make_pod("u6", namespace="unclaimed"),
    ]
    with caplog.at_level(logging.WARNING, logger="tenants.controller"):
        report = controller.replace_pods([facts_of(p) for p in pods], now=NOW, initial=True)
    assert report.pods == 6
    team_a = store.get("team-a")
    assert team_a.guaranteed == amounts(cpu="3", memory="2Gi", pods="2")
    assert team_a.burst == amounts(cpu="1500m", memory="1Gi", pods="1")
    assert set(team_a.charges) == {"u1", "u2", "u3"}
    assert set(team_a.reservations) == {"r-flight"}
    assert store.get("team-b").guaranteed == amounts(cpu="3", memory="1Gi", pods="1")
    assert controller.stats.unadmitted == {"team-a": 1, "team-b": 1}
    assert "tenant team-a: 1 running pods were created without passing the webhook" in caplog.text
    assert controller.pod_count == 6
    assert_truthful(controller)


def test_a_relist_after_a_lost_watch_neither_loses_nor_double_counts(
    controller: LedgerController, store: MemoryLedger
) -> None:
    kept = make_pod("kept")
    deleted_meanwhile = make_pod("gone", cpu="2")
    finished_meanwhile = make_pod("done", cpu="3")
    for pod in (kept, deleted_meanwhile, finished_meanwhile):
        controller.apply_pod(facts_of(pod), now=NOW)
    created_meanwhile = make_pod("new", cpu="500m", reservation="r-new")
    reserve(store, "team-a", "r-new", request_of(created_meanwhile))
    relist = [
        facts_of(kept),
        facts_of(make_pod("done", cpu="3", phase="Succeeded", version="2")),
        facts_of(created_meanwhile),
    ]
    controller.replace_pods(relist, now=NOW, initial=False)
    controller.replace_pods(relist, now=NOW, initial=False)
    ledger = store.get("team-a")
    assert set(ledger.charges) == {"kept", "new"}
    assert ledger.guaranteed == amounts(cpu="1500m", memory="2Gi", pods="2")
    assert ledger.reservations == Map()
    assert controller.stats.released == {"deleted": 1, "finished": 1}
    assert_truthful(controller)


def test_a_recount_repairs_drift_and_reports_it(
    controller: LedgerController, store: MemoryLedger, caplog: pytest.LogCaptureFixture
) -> None:
    controller.apply_pod(facts_of(make_pod("u1", cpu="2")), now=NOW)
    controller.apply_pod(facts_of(make_pod("u2")), now=NOW)
    truth = store.get("team-a")
    # Behind the ledger's back: usage inflated, and a charge for a pod that does not exist.
    store.update(
        "team-a",
        lambda ledger: (
            replace(
                ledger,
                guaranteed={**ledger.guaranteed, "cpu": q("5")},
                charges=ledger.charges.set("ghost", Charge("burst", amounts(cpu="1"))),
            ),
            None,
        ),
    )
    with caplog.at_level(logging.WARNING, logger="tenants.controller"):
        report = controller.recount(now=NOW)
    assert [(d.tenant, d.tier, d.resource, str(d.amount)) for d in report.drift] == [
        ("team-a", "guaranteed", "cpu", "2")
    ]
    assert report.stale_charges == 1
    assert report.missing_charges == 0
    assert store.get("team-a") == truth
    assert controller.stats.drift_repairs == {"team-a": 1}
    assert controller.stats.last_drift == {("team-a", "guaranteed", "cpu"): q("2")}
    assert (
        "ledger drift repaired: tenant team-a guaranteed cpu: ledger 5, truth 3 (drift +2)"
        in caplog.text
    )
    assert (
        "tenant team-a: 0 live pods were not charged, 1 charges belonged to no live pod, "
        "0 had another tier or amount" in caplog.text
    )
    again = controller.recount(now=NOW)
    assert not again.repaired
    assert controller.stats.last_drift == {}


def test_drift_is_found_off_the_loop_from_a_frozen_copy(
    controller: LedgerController, store: MemoryLedger
) -> None:
    controller.apply_pod(facts_of(make_pod("u1")), now=NOW)
    controller.apply_pod(facts_of(make_pod("u2", namespace="b-one")), now=NOW)
    frozen = controller.freeze(now=NOW)
    assert find_drift(frozen) == frozenset()
    # A tier changed behind the ledger's back: same usage total, wrong tier.
    store.update(
        "team-b",
        lambda ledger: (
            replace(
                ledger,
                charges=ledger.charges.set("u2", Charge("burst", ledger.charges["u2"].amount)),
            ),
            None,
        ),
    )
    assert find_drift(frozen) == frozenset()  # the copy is what it was
    suspects = find_drift(controller.freeze(now=NOW))
    assert suspects == frozenset({"team-b"})
    report = controller.recount(now=NOW)
    assert report.repaired
    assert report.drift == ()  # usage was right; the charge was not
    assert report.wrong_charges == 1
    assert store.get("team-b").charges["u2"].tier == "guaranteed"
    controller.mark_recounted(now=NOW + 1)
    assert controller.stats.last_recount_at == NOW + 1
    assert_truthful(controller)


def test_a_removed_tenant_still_holding_usage_is_drift(
    controller: LedgerController, store: MemoryLedger
) -> None:
    reserve(store, "gone", "r-1", amounts(cpu="1"))
    assert find_drift(controller.freeze(now=NOW)) == frozenset({"gone"})
    controller.recount(now=NOW)
    assert store.get("gone") == TenantLedger("gone")


def test_a_recount_keeps_open_reservations_and_counts_missing_charges(
    controller: LedgerController, store: MemoryLedger
) -> None:
    controller.apply_pod(facts_of(make_pod("u1")), now=NOW)
    reserve(store, "team-a", "r-flight", amounts(cpu="1"), tier="burst")
    store.update("team-a", lambda ledger: (cancel(ledger, reservation_id="nothing"), None))
    lost = store.get("team-a")
    store.update(
        "team-a",
        lambda ledger: (replace(ledger, charges=ledger.charges.delete("u1"), guaranteed={}), None),
    )
    report = controller.recount(now=NOW)
    assert report.missing_charges == 1
    assert [(d.resource, str(d.amount)) for d in report.drift] == [
        ("cpu", "-1"),
        ("memory", "-1Gi"),
        ("pods", "-1"),
    ]
    assert store.get("team-a") == lost


def test_usage_drift_lists_every_tier_and_resource() -> None:
    ledger = TenantLedger.of("t", guaranteed=amounts(cpu="1"), burst=amounts(memory="1Gi"))
    truth = TenantLedger.of("t", guaranteed=amounts(cpu="2"), burst={})
    found = usage_drift("t", ledger, truth)
    assert [str(d) for d in found] == [
        "tenant t guaranteed cpu: ledger 1, truth 2 (drift -1)",
        "tenant t burst memory: ledger 1Gi, truth 0 (drift +1Gi)",
    ]


def test_rebuild_scales_to_150000_pods(store: MemoryLedger) -> None:
    controller = LedgerController(store, policy=policy_of())
    namespaces = ["team-a", "team-a-dev", "elsewhere"]
    facts = [
        PodFacts(
            uid=f"uid-{i}",
            namespace=namespaces[i % 3],
            name=f"pod-{i}",
            resource_version=str(i),
            amount=amounts(cpu="100m", memory="64Mi", pods="1"),
            tier_label="burst" if i % 5 == 0 else None,
        )
        for i in range(150_000)
    ]
    controller.replace_pods(facts, now=NOW, initial=True)
    ledger = store.get("team-a")
    charged = 100_000
    burst = sum(1 for i in range(150_000) if i % 3 != 2 and i % 5 == 0)
    assert len(ledger.charges) == charged
    assert ledger.burst["pods"] == Quantity.from_int(burst)
    assert ledger.guaranteed["cpu"] == Quantity.from_milli(100 * (charged - burst))
    assert ledger.guaranteed["memory"] == q(f"{64 * (charged - burst)}Mi")
    assert str(ledger.guaranteed["memory"]) == "5000Gi"  # binary format kept
    controller.delete_pod(facts[0], now=NOW)
    assert len(store.get("team-a").charges) == charged - 1


# --------------------------------------------------------------------------- property


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "admit",
                "reject",
                "create-unadmitted",
                "finish",
                "delete",
                "relabel",
                "relist",
                "expire",
            ]
        ),
        st.integers(min_value=0, max_value=7),
        st.sampled_from(["team-a", "b-one", "b-two", "elsewhere"]),
        st.integers(min_value=1, max_value=4),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS)
def test_the_incremental_ledger_always_equals_the_truth(
    events: list[tuple[str, int, str, int]],
) -> None:
    """Whatever happens, in whatever order, a recount never finds anything to repair."""
    store = MemoryLedger()
    controller = LedgerController(store, policy=policy_of())
    controller.replace_namespaces({"b-one": {"team": "b"}, "b-two": {}}, now=NOW)
    controller.replace_pods([], now=NOW, initial=True)
    live: dict[str, dict[str, Any]] = {}
    now = NOW
    for step, (kind, number, namespace, cpu) in enumerate(events):
        version = step + 1
        uid = f"u{number}"
        now += 1
        if kind == "admit" and uid not in live:
            pod = make_pod(uid, namespace, cpu=str(cpu), reservation=f"r-{step}", tier="guaranteed")
            tenant = controller.tenant_of(namespace)
            if tenant is not None:
                reserve(store, tenant, f"r-{step}", request_of(pod), pod_uid=uid, now=now)
            live[uid] = pod
            controller.apply_pod(facts_of(pod), now=now)
        elif kind == "reject":
            # Booked at admission, then rejected by a later admission step: never stored.
            tenant = controller.tenant_of(namespace)
            if tenant is not None:
                reserve(store, tenant, f"r-{step}", amounts(cpu=str(cpu)), now=now)
        elif kind == "create-unadmitted" and uid not in live:
            live[uid] = make_pod(uid, namespace, cpu=str(cpu), version=str(version))
            controller.apply_pod(facts_of(live[uid]), now=now)
        elif kind == "finish" and uid in live:
            live[uid] = make_pod(
                uid, live[uid]["metadata"]["namespace"], phase="Succeeded", version=str(version)
            )
            controller.apply_pod(facts_of(live[uid]), now=now)
        elif kind == "delete" and uid in live:
            controller.delete_pod(facts_of(live.pop(uid)), now=now)
        elif kind == "relabel":
            controller.apply_namespace(namespace, {"team": "b" if cpu % 2 else "x"}, now=now)
        elif kind == "relist":
            controller.replace_pods([facts_of(p) for p in live.values()], now=now, initial=False)
        elif kind == "expire":
            controller.sweep(now=now + 31, listed=True)
            now += 31
        assert_truthful(controller, now=now)
    # And the ledger charges exactly the live, unfinished pods of claimed namespaces.
    expected = {
        uid
        for uid, pod in live.items()
        if pod["status"]["phase"] == "Running"
        and controller.tenant_of(pod["metadata"]["namespace"]) is not None
    }
    charged = {uid for ledger in store.snapshot().values() for uid in ledger.charges}
    assert charged == expected


def test_pod_facts_share_namespace_and_priority_class_names() -> None:
    pods = [orjson.loads(orjson.dumps(make_pod(uid))) for uid in ("u1", "u2")]
    for pod in pods:
        pod["spec"]["priorityClassName"] = "tenant-guaranteed"
    a, b = (facts_of(pod) for pod in pods)
    assert pods[0]["metadata"]["namespace"] is not pods[1]["metadata"]["namespace"]
    assert a.namespace is b.namespace == "team-a"
    assert a.priority_class is b.priority_class == "tenant-guaranteed"


class _WrittenLater(MemoryLedger):
    """A store whose writes are reported only on :meth:`flush`, as a shared store reports a
    change once the API server has it."""

    def __init__(self) -> None:
        super().__init__()
        self.unwritten: list[Callable[[], None]] = []

    def update(
        self,
        tenant: str,
        change: Callable[[TenantLedger], tuple[TenantLedger, T]],
        *,
        commit: bool = True,
        written: Callable[[T], None] | None = None,
    ) -> T:
        result = super().update(tenant, change, commit=commit)
        if commit and written is not None:
            self.unwritten.append(lambda: written(result))
        return result

    def flush(self) -> None:
        pending, self.unwritten = self.unwritten, []
        for report in pending:
            report()


class _Wakes:
    def __init__(self) -> None:
        self.tenants: list[str] = []

    def queued(self, tenant: str, pod: Any, *, listed: bool) -> None: ...

    def changed(self, tenant: str, pod: Any) -> None: ...

    def left(self, tenant: str, uid: str) -> None: ...

    def room_changed(self, tenant: str) -> None:
        self.tenants.append(tenant)


def test_a_queue_is_woken_once_the_room_a_pod_frees_is_written() -> None:
    """A release books on the stored ledger: woken while only this replica's view shows the
    room, it would find none there and wait for a next change that may never come."""
    store = _WrittenLater()
    controller = LedgerController(store, policy=policy_of())
    wakes = _Wakes()
    controller.queues.listener = wakes
    controller.queues.queues["team-a"] = TenantQueue("team-a")  # a pod waits in team-a
    pod = facts_of(make_pod("u1"))
    controller.apply_pod(pod, now=NOW)
    store.flush()
    wakes.tenants.clear()

    controller.delete_pod(pod, now=NOW)
    assert wakes.tenants == []  # the view has the room; the stored ledger not yet
    store.flush()
    assert wakes.tenants == ["team-a"]
