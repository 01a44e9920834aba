"""The cohort rule on worked examples: lending limits, borrowing limits, a parent's quota,
the over-share class on reclaim, the fair-share gate and the release order."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest

from classifier.quantities import Quantity
from tenants.cohorts.borrowing import Borrow, borrow_warning, check_borrow, pool
from tenants.cohorts.fairshare import fair_share, release_order, share
from tenants.cohorts.tier import cohort_rule
from tenants.cohorts.tree import CohortTree
from tenants.config import Policy
from tenants.configfile import ConfigError, load_text
from tenants.ledger import TenantLedger
from tenants.lint import lint_text

HEAD = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
rules: []
"""

# research: team-a lends up to cpu 2 of its 4, team-b lends all its 8, team-c lends all 4.
RESEARCH = (
    HEAD
    + """\
cohorts:
  research: {description: shared research room}
tenants:
  team-a:
    namespaces: [team-a]
    cohort: research
    lendingLimit: {cpu: "2"}
    quota: {guaranteed: {cpu: "4"}}
  team-b:
    namespaces: [team-b]
    cohort: research
    borrowingLimit: {cpu: "3"}
    quota: {guaranteed: {cpu: "8"}}
  team-c:
    namespaces: [team-c]
    cohort: research
    fairSharing: {weight: 2}
    quota: {guaranteed: {cpu: "4"}}
"""
)


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def cpu(text: str) -> dict[str, Quantity]:
    return {"cpu": q(text)}


def compiled(text: str) -> Policy:
    return load_text(text, filename="test.yaml").policy


def tree_of(text: str = RESEARCH) -> CohortTree:
    return compiled(text).cohorts


class TestBorrowing:
    def test_borrows_unused_guarantees_up_to_the_lending_limit(self) -> None:
        tree = tree_of()
        # team-a and team-b idle: lendable = team-a's 2 (its lendingLimit) + team-b's 8.
        totals = {"team-c": cpu("4")}
        assert pool(tree, "team-c", totals, "cpu").supply == q("10")
        assert check_borrow(tree, "team-c", totals, cpu("10"), limited={"cpu"}).fits
        denied = check_borrow(tree, "team-c", totals, cpu("11"), limited={"cpu"})
        assert not denied.fits
        assert denied.reasons == (
            "exceeded cohort research's shared room: requested cpu=11, cpu 0/10 borrowed "
            "(none), free to lend (team-a 2, team-b 8); team-c's guarantee cpu=4",
        )

    def test_a_lender_using_its_guarantee_lends_only_what_is_left(self) -> None:
        tree = tree_of()
        totals = {"team-b": cpu("7"), "team-c": cpu("4"), "team-a": cpu("3")}
        # team-b lends 1, team-a lends min(2, 1) = 1.
        assert check_borrow(tree, "team-c", totals, cpu("2"), limited={"cpu"}).fits
        assert not check_borrow(tree, "team-c", totals, cpu("3"), limited={"cpu"}).fits

    def test_the_borrowing_limit(self) -> None:
        tree = tree_of()
        totals = {"team-b": cpu("9")}
        assert check_borrow(tree, "team-b", totals, cpu("2"), limited={"cpu"}).fits
        denied = check_borrow(tree, "team-b", totals, cpu("3"), limited={"cpu"})
        assert denied.reasons == ("cpu: team-b would borrow 4, above its borrowingLimit 3",)

    def test_within_its_own_guarantee_a_resource_is_not_borrowed(self) -> None:
        tree = tree_of()
        # Every lender busy: nothing to borrow, but team-a's own cpu is its own.
        totals = {"team-b": cpu("8"), "team-c": cpu("4"), "team-a": cpu("1")}
        result = check_borrow(tree, "team-a", totals, cpu("3"), limited={"cpu"})
        assert result.fits
        assert not result.borrows

    def test_a_resource_its_quota_does_not_name_is_never_borrowed(self) -> None:
        tree = tree_of()
        # team-b uses 3 pods and no quota names pods: it borrows nothing, so team-a borrows
        # alone and its fair share is all of it.
        totals = {"team-a": cpu("4"), "team-b": {"pods": q("3")}}
        result = check_borrow(tree, "team-a", totals, cpu("1"), limited={"cpu"})
        assert result.fair_share == 1
        assert pool(tree, "team-a", totals, "pods").demand == q("0")

    def test_the_burst_ceiling_still_bounds_a_member(self) -> None:
        text = RESEARCH.replace(
            'quota: {guaranteed: {cpu: "4"}}\n  team-b',
            'quota: {guaranteed: {cpu: "4"}, burst: {max: {cpu: "5"}}}\n  team-b',
        )
        tree = tree_of(text)
        result = check_borrow(tree, "team-a", {"team-a": cpu("4")}, cpu("2"), limited={"cpu"})
        assert result.reasons == ("cpu: team-a would use 6, above its burst ceiling 5",)


NESTED = (
    HEAD
    + """\
cohorts:
  lab: {quota: {cpu: "6"}}
  research: {parent: lab}
  ops: {parent: lab}
tenants:
  team-a: {namespaces: [team-a], cohort: research, quota: {guaranteed: {cpu: "4"}}}
  team-b: {namespaces: [team-b], cohort: research, quota: {guaranteed: {cpu: "4"}}}
  team-x: {namespaces: [team-x], cohort: ops, quota: {guaranteed: {cpu: "2"}}}
  team-y: {namespaces: [team-y], cohort: ops, quota: {guaranteed: {cpu: "2"}}}
"""
)


class TestParentQuota:
    def test_the_parent_cohorts_quota_serves_every_cohort_below_it(self) -> None:
        tree = tree_of(NESTED)
        busy = {"team-b": cpu("4"), "team-x": cpu("2"), "team-y": cpu("2")}
        # Only lab's own cpu 6 is free: team-a may go 6 past its guarantee, not 7.
        assert check_borrow(
            tree, "team-a", {**busy, "team-a": cpu("4")}, cpu("6"), limited={"cpu"}
        ).fits
        denied = check_borrow(
            tree, "team-a", {**busy, "team-a": cpu("4")}, cpu("7"), limited={"cpu"}
        )
        assert denied.cohort == "lab"
        assert "free to lend (cohort lab 6)" in denied.reasons[0]

    def test_a_sibling_cohorts_idle_guarantee_is_lent_across_the_tree(self) -> None:
        tree = tree_of(NESTED)
        totals = {"team-a": cpu("4"), "team-b": cpu("4")}
        # lab 6 + team-x 2 + team-y 2 = 10.
        assert check_borrow(tree, "team-a", totals, cpu("10"), limited={"cpu"}).fits
        assert not check_borrow(tree, "team-a", totals, cpu("11"), limited={"cpu"}).fits


class TestFairShare:
    def test_a_lender_reclaims_and_the_over_share_borrower_is_marked(self) -> None:
        tree = tree_of()
        # team-c borrows 6 of 14 lendable (2 + 8 + 4); team-a borrows nothing.
        totals = {"team-c": cpu("10")}
        assert share(tree, "team-c", totals["team-c"]) == Fraction(6, 14) / 2
        # team-a goes past its guarantee too: 1 of 14, weight 1; fair = 1/3 for both active.
        result = check_borrow(
            tree, "team-a", {**totals, "team-a": cpu("4")}, cpu("1"), limited={"cpu"}
        )
        assert result.fits
        assert not result.over_share
        assert result.fair_share == Fraction(1, 3)
        # team-c borrowing 3 more: 9/14/2 = 0.32 < 2/3 -> within its share.
        more = check_borrow(
            tree, "team-c", {**totals, "team-a": cpu("5")}, cpu("3"), limited={"cpu"}
        )
        assert not more.over_share
        # team-c borrows 1 (its weight 2): team-a's fair share is 1 / (1 + 2).
        busy = {"team-a": cpu("4"), "team-c": cpu("5")}
        within = check_borrow(tree, "team-a", busy, cpu("4"), limited={"cpu"})
        assert within.fits
        assert not within.over_share
        heavy = check_borrow(tree, "team-a", busy, cpu("5"), limited={"cpu"})
        assert heavy.fits
        assert heavy.over_share
        assert "among the first preempted" in borrow_warning("team-a", heavy)

    def test_the_warning_names_three_lenders_and_counts_the_others(self) -> None:
        lenders = ("team-b", "team-c", "team-d", "team-e", "team-f")
        result = Borrow(
            cohort="lab",
            reasons=(),
            borrows={"cpu": Quantity.parse("2")},
            lenders=lenders,
            share=Fraction(0),
            fair_share=Fraction(1),
        )
        assert borrow_warning("team-a", result) == (
            "tenant team-a borrows cpu=2 from cohort lab (unused room of team-b, team-c, "
            "team-d and 2 more): the pod may be preempted when they need it back"
        )
        few = Borrow("lab", (), {"cpu": Quantity.parse("2")}, lenders[:3], Fraction(0), Fraction(1))
        assert "(unused room of team-b, team-c, team-d)" in borrow_warning("team-a", few)
        alone = Borrow("lab", (), {"cpu": Quantity.parse("2")}, (), Fraction(0), Fraction(1))
        assert "(unused room of the cohort)" in borrow_warning("team-a", alone)

    def test_at_or_above_its_fair_share_a_tenant_borrows_no_more_while_others_wait(
        self,
    ) -> None:
        tree = tree_of()
        totals = {"team-a": cpu("8")}  # borrows 4 of 14: share 2/7, fair share 1/2
        allowed = check_borrow(tree, "team-a", totals, cpu("1"), limited={"cpu"})
        assert allowed.fits  # nobody waits
        waiting = check_borrow(
            tree, "team-a", totals, cpu("1"), limited={"cpu"}, waiting={"team-c"}
        )
        assert fair_share(tree, "team-a", {"team-a", "team-c"}) == Fraction(1, 3)
        assert waiting.reasons == ()  # 2/7 < 1/3: still below
        more = {"team-a": cpu("9")}  # 5/14 >= 1/3
        refused = check_borrow(tree, "team-a", more, cpu("1"), limited={"cpu"}, waiting={"team-c"})
        assert refused.reasons == (
            "team-a is at or above its fair share of cohort research (36% of 33%) while "
            "team-c wait to borrow",
        )

    def test_release_order_across_three_tenants_weights_1_1_2(self) -> None:
        text = (
            HEAD
            + """\
cohorts:
  pool: {quota: {cpu: "12"}}
tenants:
  one: {namespaces: [one], cohort: pool, quota: {guaranteed: {cpu: "0"}}}
  two: {namespaces: [two], cohort: pool, quota: {guaranteed: {cpu: "0"}}}
  four:
    namespaces: [four]
    cohort: pool
    fairSharing: {weight: 2}
    quota: {guaranteed: {cpu: "0"}}
"""
        )
        tree = tree_of(text)
        queues: Mapping[str, list[tuple[str, Mapping[str, Quantity]]]] = {
            name: [(f"{name}-{i}", cpu("1")) for i in range(4)] for name in ("one", "two", "four")
        }
        order = release_order(
            tree, {"one": cpu("1")}, queues, order=lambda pod: (int(pod.rsplit("-", 1)[1]),)
        )
        # one starts at 1/12; ties go to the head's queue order, then the tenant's name.
        assert [pod for _, pod in order][:8] == [
            "four-0",  # 0 = 0 (two), "four" < "two"
            "two-0",
            "four-1",  # four 1/24 < 1/12
            "one-0",  # all at 1/12: one's head is first in its queue
            "two-1",
            "four-2",  # four 1/12 < 1/6
            "four-3",  # four 1/8 < 1/6
            "one-1",  # one and two at 1/6, one's head first
        ]


class TestConfig:
    @pytest.mark.parametrize(
        ("change", "path", "message"),
        [
            (
                ("cohort: research\n    lendingLimit", "cohort: nowhere\n    lendingLimit"),
                "tenants.team-a.cohort",
                'unknown cohort "nowhere"',
            ),
            (
                ('lendingLimit: {cpu: "2"}', 'lendingLimit: {cpu: "5"}'),
                "tenants.team-a.lendingLimit[cpu]",
                "lendingLimit cpu=5 is above the guarantee cpu=4: a tenant lends only what it "
                "is guaranteed",
            ),
            (
                (
                    "research: {description: shared research room}",
                    "research: {parent: lab}\n  lab: {parent: research}",
                ),
                "cohorts.research.parent",
                "parent cycle: research -> lab -> research",
            ),
        ],
    )
    def test_cross_references(self, change: tuple[str, str], path: str, message: str) -> None:
        with pytest.raises(ConfigError) as caught:
            compiled(RESEARCH.replace(*change))
        assert [(p.field, p.message) for p in caught.value.problems] == [(path, message)]

    def test_the_kubernetes_ledger_takes_cohorts(self) -> None:
        policy = compiled(RESEARCH + "ledger: {backend: kubernetes}\n")
        assert policy.ledger_backend == "kubernetes"
        assert sorted(policy.cohorts.members) == ["team-a", "team-b", "team-c"]

    def test_the_over_share_class_must_be_declared(self) -> None:
        with pytest.raises(ConfigError) as caught:
            compiled(
                RESEARCH.replace(
                    "  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}\n", ""
                )
            )
        assert [p.field for p in caught.value.problems] == ["overShareBurstPriorityClass"]

    def test_without_cohorts_nothing_changes(self) -> None:
        policy = compiled(
            HEAD + "tenants:\n  t: {namespaces: [t], quota: {guaranteed: {cpu: '1'}}}\n"
        )
        assert not policy.cohorts
        assert policy.tenants["t"].allowed_classes == {"tenant-guaranteed", "tenant-burst"}


class TestLint:
    def test_a_cohort_with_one_member(self) -> None:
        text = (
            HEAD
            + """\
cohorts:
  research: {}
tenants:
  team-a: {namespaces: [team-a], cohort: research, quota: {guaranteed: {cpu: "4"}}}
  team-b: {namespaces: [team-b], quota: {guaranteed: {cpu: "4"}}}
"""
        )
        report = lint_text(text, filename="c.yaml")
        assert [(p.field, p.message) for p in report.problems] == [
            (
                "cohorts.research",
                "cohort research has one member (team-a) and no cohort below it: nobody "
                "lends to it or borrows from it; add members or give the tenant quota.burst",
            )
        ]

    def test_the_over_share_class_must_be_below_the_burst_class_and_never_preempt(
        self,
    ) -> None:
        text = RESEARCH.replace(
            "tenant-burst-over-share: {value: 5, preemptionPolicy: Never}",
            "tenant-burst-over-share: {value: 10}",
        )
        report = lint_text(text, filename="c.yaml")
        assert [p.message.split(":")[0] for p in report.problems] == [
            "pods borrowing above their fair share must be preempted first",
            "tenant-burst-over-share must have preemptionPolicy",
        ]

    def test_a_clean_cohort_config(self) -> None:
        assert lint_text(RESEARCH, filename="c.yaml").ok


LAB = (
    HEAD
    + """\
cohorts:
  lab: {quota: {pods: "2"}}
tenants:
  team-a:
    namespaces: [team-a]
    cohort: lab
    lendingLimit: {pods: "0"}
    quota: {guaranteed: {pods: "3"}}
  team-b:
    namespaces: [team-b]
    cohort: lab
    lendingLimit: {pods: "0"}
    quota: {guaranteed: {pods: "3"}}
"""
)


def pods(guaranteed: int, burst: int, tenant: str) -> TenantLedger:
    return TenantLedger.of(
        tenant,
        guaranteed={"pods": q(str(guaranteed))} if guaranteed else {},
        burst={"pods": q(str(burst))} if burst else {},
    )


def test_a_member_past_its_guarantee_in_total_borrows_whichever_tier_has_room() -> None:
    # team-a borrowed 2 pods while holds filled its guarantee; one hold lapsed since, so its
    # guaranteed tier has room (2 of 3) but its total (4) is past its guarantee: the pool
    # counts it as borrowing 1, team-b borrows the other, and the pool (2) is full. One more
    # team-a pod must borrow and be refused; as guaranteed, the cohort would hold 9 pods
    # against its 3 + 3 + 2.
    policy = load_text(LAB).policy
    tree = policy.cohorts
    peers = {"team-a": pods(2, 2, "team-a"), "team-b": pods(3, 1, "team-b")}
    rule = cohort_rule(tree, "team-a", policy.tenants["team-a"].quota, peers)
    decision = rule(peers["team-a"], {"pods": q("1")})
    assert decision.tier is None
    assert decision.limit == "cohort"
    # Within its guarantee in total, the guaranteed tier needs no pool.
    fresh = pods(1, 1, "team-a")
    assert (
        cohort_rule(tree, "team-a", policy.tenants["team-a"].quota, {**peers, "team-a": fresh})(
            fresh, {"pods": q("1")}
        ).tier
        == "guaranteed"
    )


def test_the_rule_reads_each_ledger_as_it_is_now_on_a_tree_that_has_measured_it_before() -> None:
    # The tree keeps each member's last total while its ledger is the same object: a member
    # that books since (a new ledger) is measured again, for a peer and for the tenant itself.
    policy = load_text(LAB).policy
    tree = policy.cohorts
    quota = policy.tenants["team-a"].quota

    def decide(team_a: TenantLedger, team_b: TenantLedger) -> str | None:
        peers = {"team-a": team_a, "team-b": team_b}
        return cohort_rule(tree, "team-a", quota, peers)(team_a, {"pods": q("1")}).tier

    full = pods(3, 0, "team-a")
    assert decide(full, pods(3, 0, "team-b")) == "burst"  # borrows 1 of the lab's 2
    assert decide(full, pods(3, 2, "team-b")) is None  # team-b borrows both now
    assert decide(full, pods(3, 1, "team-b")) == "burst"
    assert decide(pods(3, 1, "team-a"), pods(3, 1, "team-b")) is None  # and team-a one
    assert decide(full, pods(3, 1, "team-b")) == "burst"


def test_fair_shares_with_fractional_weights_are_exact() -> None:
    # Weights 0.5, 2.5 and 0.3333: a fair share is a ratio of exact fractions.
    text = HEAD + "cohorts:\n  lab: {}\ntenants:\n"
    for name, weight in (("team-a", "0.5"), ("team-b", "2.5"), ("team-c", "0.3333")):
        text += (
            f"  {name}:\n    namespaces: [{name}]\n    cohort: lab\n"
            f"    fairSharing: {{weight: {weight}}}\n"
            '    quota: {guaranteed: {cpu: "4"}}\n'
        )
    tree = tree_of(text)
    a, b, c = Fraction(1, 2), Fraction(5, 2), Fraction(3333, 10000)
    assert fair_share(tree, "team-a", {"team-b", "team-c"}) == a / (a + b + c)
    assert fair_share(tree, "team-c", {"team-a"}) == c / (a + c)
    assert fair_share(tree, "team-b", ()) == 1
    assert fair_share(tree, "team-b", {"team-b"}) == 1
