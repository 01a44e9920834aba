"""Cohort members through the admission chain: borrowed pods, the over-share class, denials
naming the cohort, validation of the burst classes and the ledger's view of them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from classifier.quantities import Quantity
from tenants.config import BORROWED_ANNOTATION, TIER_LABEL, Policy
from tenants.configfile import load_text
from tenants.controller import charge_pod, pod_facts
from tenants.ledger import MemoryLedger, TenantLedger, release
from tests.tenants.conftest import make_pod, stored
from tests.tenants.test_decisions import Chain, patched, resized, update

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
rules: []
cohorts:
  research: {}
tenants:
  team-a:
    namespaces: [team-a]
    cohort: research
    quota: {guaranteed: {cpu: "4"}}
  team-b:
    namespaces: [team-b]
    cohort: research
    quota: {guaranteed: {cpu: "8"}}
  team-c:
    namespaces: [team-c]
    quota: {guaranteed: {cpu: "2"}, burst: {max: {cpu: "3"}}}
"""


def policy() -> Policy:
    return load_text(CONFIG, filename="test.yaml").policy


def pod(namespace: str, cpu: str) -> dict[str, Any]:
    return make_pod(cpu=cpu, memory=None, namespace=namespace)


def end(chain: Chain, pod_uid: str) -> None:
    """The pod ``pod_uid`` of team-a has ended: its charge is released."""
    asyncio.run(
        chain.ledger.transact("team-a", lambda ledger: (release(ledger, pod_uid=pod_uid), None))
    )


def spec_of(verdict_pod: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = verdict_pod["spec"]
    return spec


class TestBorrowedPods:
    def test_a_member_borrows_a_peers_idle_guarantee(self) -> None:
        chain = Chain(policy())
        assert chain.admit(pod("team-a", "4"), uid="a1", pod_uid="p1")[1] is not None
        mutated, validated, final = chain.admit(pod("team-a", "3"), uid="a2", pod_uid="p2")
        assert validated is not None
        assert validated.allowed
        assert final["metadata"]["labels"][TIER_LABEL] == "burst"
        assert final["metadata"]["annotations"][BORROWED_ANNOTATION] == "research"
        assert spec_of(final)["priorityClassName"] == "tenant-burst"
        assert mutated.warnings[-1] == (
            "tenant team-a borrows cpu=3 from cohort research (unused room of team-b): the "
            "pod may be preempted when they need it back"
        )
        assert chain.state("team-a").burst["cpu"] == Quantity.parse("3")

    def test_beyond_the_cohorts_room_the_denial_names_the_cohort_and_lenders(self) -> None:
        chain = Chain(policy())
        chain.admit(pod("team-a", "4"), uid="a1", pod_uid="p1")
        chain.admit(pod("team-b", "5"), uid="b1", pod_uid="p2")
        denied = chain.mutate(pod("team-a", "4"), uid="a2")
        assert not denied.allowed
        assert denied.message == (
            "exceeded tenant quota: team-a: exceeded cohort research's shared room: requested "
            "cpu=4, cpu 0/3 borrowed (none), free to lend (team-b 3); team-a's guarantee cpu=4"
        )

    def test_a_lender_reclaims_and_the_borrower_above_its_share_gets_the_over_share_class(
        self,
    ) -> None:
        chain = Chain(policy())
        chain.admit(pod("team-b", "2"), uid="b1", pod_uid="b1")
        chain.admit(pod("team-b", "1"), uid="b2", pod_uid="b2")
        chain.admit(pod("team-b", "4"), uid="b3", pod_uid="b3")  # team-b at 7: lends 1
        chain.admit(pod("team-a", "4"), uid="a1", pod_uid="a1")
        # team-a borrows 1 of 12 lendable, alone: its fair share is 1, not over.
        _, _, within = chain.admit(pod("team-a", "1"), uid="a2", pod_uid="a2")
        assert spec_of(within)["priorityClassName"] == "tenant-burst"
        # team-b takes back its last cpu: within its guarantee, so always admitted.
        _, validated, reclaim = chain.admit(pod("team-b", "1"), uid="b4", pod_uid="b4")
        assert validated is not None
        assert validated.allowed
        assert reclaim["metadata"]["labels"][TIER_LABEL] == "guaranteed"
        # team-b at 8, team-a at 5 (borrows 1): the cohort is overcommitted by 1 until the
        # scheduler preempts team-a's borrowed pod.
        assert not chain.mutate(pod("team-a", "1"), uid="a3").allowed

    def test_over_share_class_when_above_the_fair_share(self) -> None:
        text = CONFIG.replace('guaranteed: {cpu: "8"}', 'guaranteed: {cpu: "16"}').replace(
            "  team-c:\n    namespaces: [team-c]\n    quota",
            "  team-d:\n    namespaces: [team-d]\n    cohort: research\n"
            '    quota: {guaranteed: {cpu: "4"}}\n  team-c:\n    namespaces: [team-c]\n    quota',
        )
        chain = Chain(load_text(text, filename="test.yaml").policy)
        chain.admit(pod("team-d", "5"), uid="d1", pod_uid="d1")  # team-d borrows 1 of 24
        chain.admit(pod("team-a", "4"), uid="a1", pod_uid="a1")
        # team-a borrowing 12 of 24 while team-d borrows: a share of 1/2, its fair share.
        _, _, equal = chain.admit(pod("team-a", "12"), uid="a2", pod_uid="a2")
        assert spec_of(equal)["priorityClassName"] == "tenant-burst"
        _, validated, over = chain.admit(pod("team-a", "1"), uid="a3", pod_uid="a3")
        assert validated is not None
        assert validated.allowed  # /validate accepts the over-share class
        assert spec_of(over)["priorityClassName"] == "tenant-burst-over-share"
        assert spec_of(over)["priority"] == 5
        assert over["metadata"]["labels"][TIER_LABEL] == "burst"

    def test_a_tenant_outside_any_cohort_is_unchanged(self) -> None:
        chain = Chain(policy())
        chain.admit(pod("team-c", "2"), uid="c0", pod_uid="c0")
        mutated, validated, final = chain.admit(pod("team-c", "1"), uid="c1", pod_uid="c1")
        assert validated is not None
        assert validated.allowed
        assert BORROWED_ANNOTATION not in final["metadata"]["annotations"]
        assert mutated.warnings[-1].startswith("tenant team-c is above its guarantee")
        assert not chain.mutate(pod("team-c", "1"), uid="c2").allowed

    def test_the_over_share_class_is_charged_as_burst(self) -> None:
        stored = pod("team-a", "1")
        stored["metadata"].update(name="x", uid="u1")
        stored["spec"]["priorityClassName"] = "tenant-burst-over-share"
        facts = pod_facts(stored)
        assert facts is not None
        charged, _ = charge_pod(TenantLedger("team-a"), facts, burst_classes=policy().burst_classes)
        assert charged.burst["cpu"].nanos == 10**9

    def test_a_borrowed_booking_does_not_grow_at_validation(self) -> None:
        chain = Chain(policy(), MemoryLedger())
        chain.admit(pod("team-a", "4"), uid="a1", pod_uid="p1")
        mutated = chain.mutate(pod("team-a", "1"), uid="a2")
        final = patched(pod("team-a", "1"), mutated)
        final["metadata"].update(name="x", uid="p2")
        final["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
        verdict = chain.validate(final, uid="a2")
        assert not verdict.allowed
        assert "cannot grow here" in verdict.message

    def test_a_missed_pod_past_the_members_guarantee_in_total_is_not_booked_at_validation(
        self,
    ) -> None:
        # team-a borrowed 3 while its guarantee (4) was full; the guaranteed pod has ended, so
        # its guaranteed tier is empty but its total (3) plus a 2-cpu pod is past 4. /mutate
        # would make that pod borrow (tenants/cohorts/tier.py, within_guarantee); /validate,
        # booking a pod /mutate missed, reads no peers and must not book it as guaranteed.
        chain = Chain(policy(), MemoryLedger())
        chain.admit(pod("team-a", "4"), uid="a1", pod_uid="p1")
        _, borrowed, _ = chain.admit(pod("team-a", "3"), uid="a2", pod_uid="p2")
        assert borrowed is not None
        assert borrowed.allowed
        end(chain, "p1")
        assert not chain.state().guaranteed.get("cpu")
        missed = chain.validate(stored(pod("team-a", "2"), pod_uid="p3"), uid="a3")
        assert (missed.allowed, missed.code, missed.cause) == (False, 409, "retry")
        assert missed.message.endswith(
            "was not classified by the mutating webhook "
            "(it holds no reservation and does not fit the guarantee); retry"
        )
        assert chain.state().reservation_for_pod("p3") is None
        # Within the guarantee in total, the fallback books it.
        within = chain.validate(stored(pod("team-a", "1"), pod_uid="p4"), uid="a4")
        assert within.allowed
        assert chain.state().guaranteed["cpu"] == Quantity.parse("1")


class TestGrowthPastTheGuarantee:
    """A member's guaranteed booking that grows must keep its total within its guarantee: the
    pool measures the part past it as borrowed, and only /mutate reads the pool."""

    @staticmethod
    def borrowed_then_ended() -> Chain:
        # team-a borrowed 3 while its guarantee (4) was full; its guaranteed pod has ended.
        chain = Chain(policy(), MemoryLedger())
        chain.admit(pod("team-a", "4"), uid="a1", pod_uid="p1")
        chain.admit(pod("team-a", "3"), uid="a2", pod_uid="p2")
        end(chain, "p1")
        return chain

    def test_at_validation(self) -> None:
        chain = self.borrowed_then_ended()
        mutated = chain.mutate(pod("team-a", "1"), uid="a3")  # total 4: guaranteed
        final = stored(patched(pod("team-a", "1"), mutated), pod_uid="p3")
        assert final["metadata"]["labels"][TIER_LABEL] == "guaranteed"
        final["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"  # a later webhook
        verdict = chain.validate(final, uid="a3")
        assert (verdict.allowed, verdict.code, verdict.cause) == (False, 409, "retry")
        assert verdict.message == (
            "the request of pod team-a/worker-x of tenant team-a grew after tenantgate's "
            "mutating webhook ran (cpu=1), past the tenant's guarantee in its cohort: only the "
            "mutating webhook can book borrowed room; retry"
        )
        assert not chain.state().guaranteed.get("cpu")  # the hold is released

    def test_in_place(self) -> None:
        chain = self.borrowed_then_ended()
        _, validated, final = chain.admit(pod("team-a", "1"), uid="a3", pod_uid="p3")
        assert validated is not None
        assert validated.allowed
        verdict = asyncio.run(
            chain.admitter.validate(
                update(final, resized(final, "2"), sub_resource="resize"), now=0
            )
        )
        assert not verdict.allowed
        assert verdict.message == (
            "tenant team-a: the pod cannot grow in place (cpu=1): it would take the tenant past "
            "its guarantee, and borrowed room is measured against the whole cohort; recreate "
            "the pod with the new request"
        )
        assert chain.state().guaranteed["cpu"] == Quantity.parse("1")
        # Once the borrowed pod ends, the total stays within the guarantee: it grows.
        end(chain, "p2")
        grown = asyncio.run(
            chain.admitter.validate(
                update(final, resized(final, "2"), sub_resource="resize"), now=0
            )
        )
        assert grown.allowed
        assert chain.state().guaranteed["cpu"] == Quantity.parse("2")


def test_the_documented_worked_example_matches_the_admitter() -> None:
    """docs/configuration.md, "The cohort rule": the table, the denial and the warning."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    section = doc.split("**Worked example.** Three teams", 1)[1]
    config = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    chain = Chain(load_text(config, filename="doc.yaml").policy)
    outcomes = []
    steps = [("team-a", "1")] * 4 + [("team-c", "6"), ("team-a", "6"), ("team-a", "1")]
    steps.append(("team-b", "4"))
    for index, (namespace, cpu) in enumerate(steps):
        mutated, _, final = chain.admit(pod(namespace, cpu), uid=f"u{index}", pod_uid=f"p{index}")
        if not mutated.allowed:
            outcomes.append("denied")
            assert mutated.message in section
            continue
        outcomes.append(spec_of(final)["priorityClassName"])
        if spec_of(final)["priorityClassName"] == "tenant-burst-over-share":
            assert f"Warning: {mutated.warnings[-1]}" in section
    assert outcomes == [
        *["tenant-guaranteed"] * 4,
        "tenant-burst",
        "tenant-burst-over-share",
        "denied",
        "tenant-guaranteed",
    ]
