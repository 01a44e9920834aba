"""Tier selection, ceilings and denial messages (tenants/quota.py)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest

from classifier.quantities import Quantity
from tenants.ledger import TenantLedger, Tier
from tenants.quota import (
    Quota,
    build_quota,
    check,
    check_growth,
    denial_message,
    format_over,
    headroom,
    over_ceiling,
    scale,
)


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def rl(**items: str) -> dict[str, Quantity]:
    """Resource list; ``nvidia_com_gpu`` stands for ``nvidia.com/gpu``."""
    return {name.replace("nvidia_com_gpu", "nvidia.com/gpu"): q(v) for name, v in items.items()}


# team-a of the example config: guaranteed cpu 4, memory 8Gi, pods 20; burst ratio 1.5.
TEAM_A = build_quota(rl(cpu="4", memory="8Gi", pods="20"), ratio=Fraction(3, 2))
# ml: guaranteed cpu 32, memory 128Gi, gpu 4; burst max gpu 6.
ML = build_quota(rl(cpu="32", memory="128Gi", nvidia_com_gpu="4"), maximum=rl(nvidia_com_gpu="6"))


def ledger(
    guaranteed: Mapping[str, Quantity] | None = None, burst: Mapping[str, Quantity] | None = None
) -> TenantLedger:
    return TenantLedger.of("team-a", guaranteed=guaranteed, burst=burst)


class TestBuildQuota:
    def test_ratio_scales_every_guaranteed_resource(self) -> None:
        assert TEAM_A.ceiling == rl(cpu="6", memory="12Gi", pods="30")
        assert {n: str(v) for n, v in TEAM_A.ceiling.items()} == {
            "cpu": "6",
            "memory": "12Gi",
            "pods": "30",
        }

    def test_max_only_for_named_resources(self) -> None:
        assert ML.ceiling == rl(cpu="32", memory="128Gi", nvidia_com_gpu="6")
        assert ML.guaranteed == rl(cpu="32", memory="128Gi", nvidia_com_gpu="4")

    def test_ceiling_is_largest_of_guarantee_ratio_and_max(self) -> None:
        quota = build_quota(rl(cpu="4", memory="4Gi"), ratio=Fraction(2), maximum=rl(cpu="10"))
        assert quota.ceiling == rl(cpu="10", memory="8Gi")
        low = build_quota(rl(cpu="4"), ratio=Fraction(1, 2), maximum=rl(cpu="3"))
        assert low.ceiling == rl(cpu="4")  # never below the guarantee

    def test_max_on_a_resource_without_guarantee_is_burst_only(self) -> None:
        quota = build_quota(rl(cpu="4"), maximum=rl(memory="1Gi"))
        assert quota.ceiling == rl(cpu="4", memory="1Gi")
        assert quota.guarantee_of("memory") == q("0")

    @pytest.mark.parametrize(
        ("amount", "ratio", "expected"),
        [
            ("8Gi", Fraction(3, 2), "12Gi"),
            ("4", Fraction(3, 2), "6"),
            ("500m", Fraction(3, 2), "750m"),
            ("5", Fraction(3, 2), "7500m"),
            ("1", Fraction(1, 3), "333333333n"),  # rounded down to the nano
            ("100Mi", Fraction(5, 4), "125Mi"),
        ],
    )
    def test_scale_is_exact_and_keeps_format(
        self, amount: str, ratio: Fraction, expected: str
    ) -> None:
        assert str(scale(q(amount), ratio)) == expected


# (guaranteed-tier usage, burst-tier usage, request) -> tier against TEAM_A
TIER_CASES: list[tuple[str, dict[str, str], dict[str, str], dict[str, str], Tier | None]] = [
    ("empty tenant", {}, {}, {"cpu": "500m", "memory": "256Mi", "pods": "1"}, "guaranteed"),
    ("fills the guarantee exactly", {"cpu": "3500m"}, {}, {"cpu": "500m"}, "guaranteed"),
    ("one milli over the guarantee", {"cpu": "3500m"}, {}, {"cpu": "501m"}, "burst"),
    ("fills the ceiling exactly", {"cpu": "4"}, {"cpu": "1500m"}, {"cpu": "500m"}, "burst"),
    ("one milli over the ceiling", {"cpu": "4"}, {"cpu": "1500m"}, {"cpu": "501m"}, None),
    (
        "burst usage does not count against the guarantee",
        {"cpu": "3"},
        {"cpu": "2"},
        {"cpu": "1"},
        "guaranteed",
    ),
    (
        "guaranteed pod never checks the ceiling",
        {"cpu": "3"},
        {"cpu": "3"},
        {"cpu": "1"},
        "guaranteed",
    ),
    (
        "fits cpu but not memory -> over quota",
        {"cpu": "1", "memory": "8Gi"},
        {"memory": "4Gi"},
        {"cpu": "1", "memory": "1Mi"},
        None,
    ),
    (
        "fits guarantee in cpu, only burst in memory -> burst",
        {"cpu": "1", "memory": "8Gi"},
        {},
        {"cpu": "1", "memory": "1Gi"},
        "burst",
    ),
    (
        "unlimited resources never block",
        {"cpu": "1"},
        {},
        {"cpu": "1", "ephemeral-storage": "1Ti", "example.com/dongle": "99"},
        "guaranteed",
    ),
    ("pods count", {"pods": "20"}, {"pods": "10"}, {"pods": "1"}, None),
    (
        "zero request of a full resource does not block",
        {"cpu": "4", "memory": "8Gi"},
        {"cpu": "2"},
        {"cpu": "0", "memory": "1Mi"},
        "burst",
    ),
    ("request of nothing", {"cpu": "4"}, {"cpu": "2"}, {}, "guaranteed"),
]


@pytest.mark.parametrize(
    ("used_guaranteed", "used_burst", "asked", "tier"),
    [case[1:] for case in TIER_CASES],
    ids=[case[0] for case in TIER_CASES],
)
def test_tier_selection(
    used_guaranteed: dict[str, str],
    used_burst: dict[str, str],
    asked: dict[str, str],
    tier: Tier | None,
) -> None:
    decision = check(TEAM_A, ledger(rl(**used_guaranteed), rl(**used_burst)), rl(**asked))
    assert decision.tier == tier
    assert decision.fits == (tier is not None)
    assert bool(decision.shortfalls) == (tier is None)


def test_burst_only_resource_always_bursts() -> None:
    quota = build_quota(rl(cpu="4"), maximum=rl(nvidia_com_gpu="2"))
    assert check(quota, ledger(), rl(cpu="1", nvidia_com_gpu="1")).tier == "burst"
    assert check(quota, ledger(), rl(cpu="1")).tier == "guaranteed"
    over = check(quota, ledger(burst=rl(nvidia_com_gpu="2")), rl(nvidia_com_gpu="1"))
    assert over.tier is None


def test_gpu_guarantee_then_burst_max() -> None:
    gpu = rl(nvidia_com_gpu="1")
    assert check(ML, ledger(rl(nvidia_com_gpu="3")), gpu).tier == "guaranteed"
    assert check(ML, ledger(rl(nvidia_com_gpu="4")), gpu).tier == "burst"
    assert check(ML, ledger(rl(nvidia_com_gpu="4"), rl(nvidia_com_gpu="1")), gpu).tier == "burst"
    assert check(ML, ledger(rl(nvidia_com_gpu="4"), rl(nvidia_com_gpu="2")), gpu).tier is None


class TestDenialMessage:
    def test_exact_text_of_the_issue(self) -> None:
        decision = check(
            build_quota(rl(cpu="4"), ratio=Fraction(3, 2)),
            ledger(rl(cpu="4"), rl(cpu="1500m")),
            rl(cpu="2"),
        )
        assert denial_message("team-a", decision) == (
            "exceeded tenant quota: team-a: requested cpu=2, used cpu=5500m/6 (burst ceiling), "
            "guaranteed cpu=4"
        )

    def test_lists_only_resources_that_do_not_fit_sorted(self) -> None:
        decision = check(
            TEAM_A,
            ledger(rl(cpu="4", memory="8Gi", pods="3"), rl(pods="1", memory="4Gi", cpu="1")),
            rl(pods="1", memory="512Mi", cpu="1500m"),
        )
        assert denial_message("team-a", decision) == (
            "exceeded tenant quota: team-a: requested cpu=1500m,memory=512Mi, "
            "used cpu=5/6,memory=12Gi/12Gi (burst ceiling), guaranteed cpu=4,memory=8Gi"
        )

    def test_two_hundred_pods_message(self) -> None:
        decision = check(
            TEAM_A,
            ledger(rl(cpu="4", memory="2Gi", pods="8"), rl(cpu="2", memory="1Gi", pods="4")),
            rl(cpu="500m", memory="256Mi", pods="1"),
        )
        assert denial_message("team-a", decision) == (
            "exceeded tenant quota: team-a: requested cpu=500m, used cpu=6/6 (burst ceiling), "
            "guaranteed cpu=4"
        )

    def test_burst_only_resource_shows_zero_guarantee(self) -> None:
        quota = build_quota(rl(cpu="4"), maximum=rl(nvidia_com_gpu="2"))
        decision = check(quota, ledger(burst=rl(nvidia_com_gpu="2")), rl(nvidia_com_gpu="1"))
        assert denial_message("ml", decision) == (
            "exceeded tenant quota: ml: requested nvidia.com/gpu=1, "
            "used nvidia.com/gpu=2/2 (burst ceiling), guaranteed nvidia.com/gpu=0"
        )


class TestGrowth:
    def test_guaranteed_growth_checks_the_guarantee_only(self) -> None:
        state = ledger(rl(cpu="3500m"), rl(cpu="1"))
        assert check_growth(TEAM_A, state, tier="guaranteed", delta=rl(cpu="500m")).fits
        grown = check_growth(TEAM_A, state, tier="guaranteed", delta=rl(cpu="600m"))
        assert not grown.fits
        assert denial_message("team-a", grown) == (
            "exceeded tenant quota: team-a: requested cpu=600m, used cpu=3500m/4 (guaranteed)"
        )

    def test_burst_growth_checks_the_ceiling(self) -> None:
        state = ledger(rl(cpu="4"), rl(cpu="1"))
        assert check_growth(TEAM_A, state, tier="burst", delta=rl(cpu="1")).tier == "burst"
        assert not check_growth(TEAM_A, state, tier="burst", delta=rl(cpu="1001m")).fits

    def test_shrinking_always_fits(self) -> None:
        state = ledger(rl(cpu="9"), rl(cpu="9"))  # far above everything (config shrank)
        assert check_growth(TEAM_A, state, tier="burst", delta=rl(cpu="-1")).fits
        mixed = rl(cpu="-1", memory="1Mi")
        assert check_growth(TEAM_A, ledger(rl(memory="1Gi")), tier="guaranteed", delta=mixed).fits


def test_headroom_reports_left_and_over() -> None:
    room = headroom(
        TEAM_A, ledger(rl(cpu="5", memory="1Gi"), rl(cpu="2")), resources=["cpu", "memory", "x"]
    )
    assert room.left == rl(memory="11Gi")
    assert room.over == {"cpu": (q("7"), q("6"))}
    assert format_over(room.over) == "cpu=7/6"


@pytest.mark.parametrize(
    ("guaranteed", "burst"),
    [("5", "2"), ("1", "0"), ("6", "0"), ("0", "7")],
)
def test_over_ceiling_is_the_headroom_over(guaranteed: str, burst: str) -> None:
    """A guaranteed admission's warning reads only what is over: the same as the headroom's."""
    state = ledger(rl(cpu=guaranteed, memory="13Gi"), rl(cpu=burst))
    resources = ["cpu", "memory", "pods", "x"]
    expected = headroom(TEAM_A, state, resources=resources).over
    assert over_ceiling(TEAM_A, state, resources=resources) == expected


def test_check_does_not_touch_its_inputs() -> None:
    state = ledger(rl(cpu="1"))
    request = rl(cpu="1")
    check(TEAM_A, state, request)
    assert state.guaranteed == rl(cpu="1")
    assert request == rl(cpu="1")


def test_quota_is_immutable() -> None:
    quota = Quota(guaranteed=rl(cpu="1"), ceiling=rl(cpu="2"))
    with pytest.raises(AttributeError):
        quota.ceiling = {}  # type: ignore[misc]
