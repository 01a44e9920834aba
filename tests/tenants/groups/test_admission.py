"""A pod group's member at admission (tenants/groups/admission.py, tenants/decisions.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from classifier.podgroups import SizeRef
from classifier.quantities import Quantity
from tenants.config import GroupPolicy, Policy
from tenants.configfile import ConfigError
from tenants.groups.admission import known_total, never_fits_group
from tenants.groups.sizes import SizeAnswer
from tests.tenants.conftest import CONFIG, make_policy
from tests.tenants.test_decisions import Chain

GATE = {"name": "tenantgate.io/quota"}

GROUP_CONFIG = CONFIG.replace(
    """  other:
    namespaces: [other]""",
    """  gpu:
    namespaces: [gpu]
    quota: {guaranteed: {cpu: "64", nvidia.com/gpu: "12"}, burst: {max: {nvidia.com/gpu: "14"}}}
    podGroups: {timeoutSeconds: 60}
  qq:
    namespaces: [qq]
    quota: {guaranteed: {cpu: "64", nvidia.com/gpu: "12"}}
    overQuota: queue
  other:
    namespaces: [other]""",
)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return make_policy(GROUP_CONFIG)


@pytest.fixture
def chain(policy: Policy) -> Chain:
    return Chain(policy)


def member(
    group: str = "train-42",
    size: str | None = "8",
    *,
    gpu: str = "1",
    where: str = "labels",
    **spec: Any,
) -> dict[str, Any]:
    marks = {"tenantgate.io/pod-group": group}
    if size is not None:
        marks["tenantgate.io/pod-group-size"] = size
    meta: dict[str, Any] = {"generateName": f"{group}-", "namespace": "gpu"}
    meta[where] = marks
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": "w",
                    "image": "trainer",
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": gpu},
                        "limits": {"nvidia.com/gpu": gpu},
                    },
                }
            ],
            **spec,
        },
    }


def gpus(count: int) -> dict[str, Quantity]:
    return {"cpu": Quantity.parse("1"), "nvidia.com/gpu": Quantity.parse(str(count))}


def test_a_member_is_gated_in_a_reject_tenant_and_told_what_its_group_waits_for(
    chain: Chain,
) -> None:
    mutated, validated, final = chain.admit(member(), uid="m-0", pod_uid="m-0")
    assert mutated.allowed
    assert final["spec"]["schedulingGates"] == [GATE]
    assert final["metadata"]["labels"]["tenantgate.io/tier"] == "queued"
    assert final["spec"]["priorityClassName"] == "tenant-guaranteed"
    annotations = final["metadata"]["annotations"]
    assert annotations["tenantgate.io/group"] == "labels/train-42"
    assert annotations["tenantgate.io/group-size"] == "8"
    assert mutated.warnings[-1] == (
        "waiting for pod group train-42: 1 of 8 members created; the group needs "
        "cpu=8,nvidia.com/gpu=8, gpu has cpu=64,nvidia.com/gpu=12 free"
    )
    assert validated is not None
    assert validated.allowed
    ledger = chain.state("gpu")
    assert not ledger.guaranteed  # nothing is booked for an incomplete group
    assert not ledger.reservations
    [entry] = ledger.queued.values()
    assert entry.pod_uid == "m-0"


def test_the_warning_counts_the_members_seen_and_the_room_free(chain: Chain) -> None:
    seen = [gpus(1)] * 4
    calls: list[tuple[str, str]] = []

    def members(tenant: str, group: str) -> Sequence[Mapping[str, Quantity]]:
        calls.append((tenant, group))
        return seen

    chain.admitter.group_members = members
    for index in range(7):
        plain = member()
        del plain["metadata"]["labels"]
        _, _, final = chain.admit(plain, uid=f"o-{index}", pod_uid=f"o-{index}")
        assert "schedulingGates" not in final["spec"]
    mutated, _, _ = chain.admit(member(), uid="m-5", pod_uid="m-5")
    assert ("gpu", "gpu/labels/train-42") in calls
    assert mutated.warnings[-1] == (
        "waiting for pod group train-42: 5 of 8 members created; the group needs "
        "nvidia.com/gpu=8, gpu has 5 free"
    )


def test_a_group_that_can_never_fit_is_denied_with_its_known_total(chain: Chain) -> None:
    denied = chain.mutate(member(gpu="2"), uid="big")
    assert not denied.allowed
    assert denied.message == (
        "pod group train-42 (8 members) needs nvidia.com/gpu=16, more than tenant gpu's "
        "guarantee (nvidia.com/gpu=12): it can never run; make the group smaller or raise "
        "the quota"
    )
    assert not chain.state("gpu").queued


def test_the_burst_tier_measures_against_the_ceiling(policy: Policy) -> None:
    tenant = policy.tenants["gpu"]
    on_burst = replace(tenant, groups=GroupPolicy(tier="burst"))
    total = {"nvidia.com/gpu": Quantity.parse("13")}
    assert never_fits_group(tenant, tier="guaranteed", name="g", size=1, total=total)
    assert never_fits_group(on_burst, tier="burst", name="g", size=1, total=total) is None
    over = never_fits_group(
        on_burst, tier="burst", name="g", size=1, total={"nvidia.com/gpu": Quantity.parse("15")}
    )
    assert over is not None
    assert "burst ceiling (nvidia.com/gpu=14)" in over


def test_known_total_fills_missing_members_with_the_smallest_seen() -> None:
    total = known_total(gpus(1), [gpus(4)], size=4)
    assert total["nvidia.com/gpu"] == Quantity.parse("7")  # 4 + 1 + 2 x 1
    assert total["cpu"] == Quantity.parse("4")


def test_a_size_from_the_cluster_is_read_and_a_missing_one_keeps_the_member_gated(
    chain: Chain,
) -> None:
    asked: list[SizeRef] = []

    class Sizes:
        async def read(self, ref: SizeRef) -> SizeAnswer:
            asked.append(ref)
            if ref.name == "known":
                return SizeAnswer(4)
            return SizeAnswer(None, f"{ref.describe()} was not found")

    chain.admitter.sizes = Sizes()

    def indexed(job: str) -> dict[str, Any]:
        pod = member(size=None)
        pod["metadata"] = {
            "generateName": f"{job}-",
            "namespace": "gpu",
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job,
                    "uid": "u",
                    "controller": True,
                }
            ],
        }
        return pod

    mutated, validated, final = chain.admit(indexed("known"), uid="k", pod_uid="k")
    assert final["metadata"]["annotations"]["tenantgate.io/group-size"] == "4"
    assert "1 of 4 members created" in mutated.warnings[-1]
    assert validated is not None
    assert validated.allowed
    mutated, _, final = chain.admit(indexed("gone"), uid="g", pod_uid="g")
    assert mutated.allowed
    assert final["spec"]["schedulingGates"] == [GATE]
    assert "tenantgate.io/group-size" not in final["metadata"]["annotations"]
    assert mutated.warnings[-1] == (
        "waiting for pod group gone: its size is unknown (Job gpu/gone (spec.parallelism) was "
        "not found); the pod stays gated until it is recreated with the size known"
    )
    assert [ref.name for ref in asked] == ["known", "gone"]


def test_an_ungated_member_is_refused_at_validation(chain: Chain) -> None:
    pod = member()
    pod["metadata"]["uid"] = "u-1"
    pod["metadata"]["name"] = "train-42-0"
    denied = chain.validate(pod, uid="skip")
    assert not denied.allowed
    assert denied.code == 409
    assert "member of pod group train-42" in denied.message


def test_a_dry_run_books_nothing(chain: Chain) -> None:
    mutated, validated, _ = chain.admit(member(), uid="d", pod_uid="d", dry_run=True)
    assert mutated.allowed
    assert validated is not None
    assert validated.allowed
    assert not chain.state("gpu").queued


def test_a_size_that_is_not_a_count_is_denied(chain: Chain) -> None:
    denied = chain.mutate(member(size="eight"), uid="bad")
    assert not denied.allowed
    assert "tenantgate.io/pod-group-size='eight' is not a group size" in denied.message


def test_annotations_name_a_group_too(chain: Chain) -> None:
    mutated, _, final = chain.admit(member(where="annotations"), uid="a", pod_uid="a")
    assert final["spec"]["schedulingGates"] == [GATE]
    assert "1 of 8 members created" in mutated.warnings[-1]


def test_pod_groups_defaults_and_overrides(policy: Policy) -> None:
    assert policy.tenants["gpu"].groups == GroupPolicy("guaranteed", 60.0)
    assert policy.tenants["team-a"].groups == GroupPolicy("guaranteed", 300.0)
    top = make_policy(GROUP_CONFIG + "podGroups: {tier: burst, timeoutSeconds: 30}\n")
    assert top.tenants["team-a"].groups == GroupPolicy("burst", 30.0)
    assert top.tenants["gpu"].groups == GroupPolicy("burst", 60.0)
    assert top.tenants["team-a"].group_queue().tier == "burst"


def test_a_cohort_member_cannot_wait_for_burst_room() -> None:
    config = (
        GROUP_CONFIG.replace(
            "    podGroups: {timeoutSeconds: 60}", "    podGroups: {tier: burst}\n    cohort: c"
        )
        + "cohorts:\n  c: {}\noverShareBurstPriorityClass: tenant-burst\n"
    )
    with pytest.raises(ConfigError, match=r"tenants\.gpu\.podGroups\.tier: a cohort member"):
        make_policy(config)


def test_members_of_a_group_never_run_before_the_group_is_booked(chain: Chain) -> None:
    """Other pods of the tenant arriving in between run; no member is admitted ungated."""
    for index in range(8):
        _, validated, final = chain.admit(member(), uid=f"m-{index}", pod_uid=f"m-{index}")
        assert final["spec"]["schedulingGates"] == [GATE]
        assert validated is not None
        assert validated.allowed
        plain = member()
        del plain["metadata"]["labels"]
        _, _, other = chain.admit(plain, uid=f"s-{index}", pod_uid=f"s-{index}")
        assert "schedulingGates" not in other["spec"]
    ledger = chain.state("gpu")
    assert len(ledger.queued) == 8
    assert len(ledger.reservations) == 8  # the plain pods only
    assert ledger.guaranteed["nvidia.com/gpu"] == Quantity.parse("8")


def test_waiting_members_never_make_a_single_pod_that_fits_queue_behind_them(
    chain: Chain,
) -> None:
    for index in range(3):
        body = member()
        body["metadata"]["namespace"] = "qq"
        _, _, final = chain.admit(body, uid=f"m-{index}", pod_uid=f"m-{index}")
        assert final["spec"]["schedulingGates"] == [GATE]
    plain = member()
    plain["metadata"]["namespace"] = "qq"
    del plain["metadata"]["labels"]
    mutated, _, final = chain.admit(plain, uid="single", pod_uid="single")
    assert "schedulingGates" not in final["spec"], mutated.warnings
    assert len(chain.state("qq").queued) == 3  # maxPending still counts the members
