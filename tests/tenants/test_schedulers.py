"""The schedulers: block: validation, the rendered KubeSchedulerConfiguration, lint."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tenants.configfile import load_text
from tenants.lint import lint_text
from tenants.schedulers import SchedulerSpec, scheduler_configuration, scheduler_profiles

BASE = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles:
  gpu: {schedulerName: gpu-scheduler}
  gang: {schedulerName: volcano}
  general: {}
"""


def spec(**fields: object) -> SchedulerSpec:
    return SchedulerSpec.model_validate(fields)


def test_a_profile_per_configured_name_sorted_and_without_external_ones() -> None:
    profiles = scheduler_profiles(
        {
            "zeta": spec(scoring={"strategy": "MostAllocated"}, preemption=False),
            "alpha": spec(percentageOfNodesToScore=50),
            "volcano": spec(external=True),
        }
    )
    assert [p["schedulerName"] for p in profiles] == ["alpha", "zeta"]
    alpha, zeta = profiles
    assert alpha["percentageOfNodesToScore"] == 50
    assert "plugins" not in alpha  # DefaultPreemption stays on
    assert alpha["pluginConfig"][0]["args"]["scoringStrategy"] == {
        "type": "LeastAllocated",
        "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
    }
    assert zeta["plugins"] == {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}
    assert zeta["pluginConfig"][0]["args"]["scoringStrategy"]["type"] == "MostAllocated"
    assert "queueSort" not in str(profiles)  # every profile shares the default queueSort


def test_requested_to_capacity_ratio_carries_its_shape() -> None:
    (profile,) = scheduler_profiles(
        {
            "packer": spec(
                scoring={
                    "strategy": "RequestedToCapacityRatio",
                    "resources": [{"name": "nvidia.com/gpu", "weight": 3}],
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}],
                }
            )
        }
    )
    strategy = profile["pluginConfig"][0]["args"]["scoringStrategy"]
    assert strategy["requestedToCapacityRatio"] == {
        "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    }
    assert strategy["resources"] == [{"name": "nvidia.com/gpu", "weight": 3}]


@pytest.mark.parametrize(
    ("scoring", "message"),
    [
        ({"strategy": "RequestedToCapacityRatio"}, "needs a shape"),
        (
            {"strategy": "MostAllocated", "shape": [{"utilization": 0, "score": 0}]},
            "shape applies to RequestedToCapacityRatio only",
        ),
        ({"resources": [{"name": "cpu"}, {"name": "cpu", "weight": 2}]}, "weighted twice"),
        ({"strategy": "Balanced"}, "LeastAllocated"),
    ],
)
def test_bad_scoring_is_refused(scoring: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(scoring=scoring)


def test_the_configuration_has_its_own_lease() -> None:
    document = scheduler_configuration({"a": spec()}, lease_namespace="ns", lease_name="mine")
    assert document["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert document["kind"] == "KubeSchedulerConfiguration"
    assert document["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceNamespace": "ns",
        "resourceName": "mine",
    }


def test_default_scheduler_cannot_be_configured_here() -> None:
    text = BASE + "schedulers:\n  default-scheduler: {}\n"
    report = lint_text(text, filename="t.yaml")
    assert [str(p) for p in report.problems] == [
        "t.yaml:8: schedulers: default-scheduler is the cluster's own scheduler: configure it "
        "there, not here"
    ]


def test_lint_warns_about_a_scheduler_the_block_does_not_define() -> None:
    text = BASE + "schedulers:\n  volcano: {external: true}\n"
    report = lint_text(text, filename="t.yaml")
    assert report.ok
    assert [str(w) for w in report.warnings] == [
        "t.yaml:5: profiles.gpu.schedulerName: scheduler gpu-scheduler of profile gpu is not in "
        "the schedulers: block, so `tenantgate scheduler-config` does not run it; add it there "
        "(external: true when another scheduler serves it), or run lint with --kubeconfig to "
        "check the cluster"
    ]
    assert load_text(text).config.schedulers["volcano"].external
