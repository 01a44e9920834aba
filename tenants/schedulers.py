"""The ``schedulers:`` block: the scheduling policy of each scheduler name profiles route to,
and the KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``) that runs them.

Each name becomes one profile of one second kube-scheduler (``deploy/webhooks/components/
schedulers``): its scoring strategy is NodeResourcesFit's ``scoringStrategy``
(``pkg/scheduler/apis/config/v1`` defaults: LeastAllocated, cpu and memory weight 1), preemption
off disables the DefaultPreemption PostFilter plugin, and ``percentageOfNodesToScore`` is the
profile's own. Every profile keeps the default queueSort plugin: kube-scheduler refuses
profiles whose queueSort differs (``validateCommonQueueSort`` in
``pkg/scheduler/apis/config/validation/validation.go``). ``default-scheduler`` is never
rendered, the cluster runs it; an ``external`` name (Volcano's, say) is served elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_SCHEDULER: Final = "default-scheduler"
STRATEGIES: Final = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceWeight(_Model):
    name: str = Field(min_length=1, description="a resource name (cpu, memory, nvidia.com/gpu)")
    weight: int = Field(default=1, ge=1, le=100)


class ShapePoint(_Model):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=10)


class ScoringSpec(_Model):
    """NodeResourcesFit's scoring: spread (LeastAllocated), pack (MostAllocated), or a shape."""

    strategy: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"] = (
        "LeastAllocated"
    )
    resources: list[ResourceWeight] = Field(
        default_factory=lambda: [ResourceWeight(name="cpu"), ResourceWeight(name="memory")]
    )
    shape: list[ShapePoint] | None = Field(
        default=None, description="RequestedToCapacityRatio only: utilization -> score points"
    )

    @model_validator(mode="after")
    def _shape_for_ratio(self) -> ScoringSpec:
        if self.strategy == "RequestedToCapacityRatio" and not self.shape:
            raise ValueError("RequestedToCapacityRatio needs a shape (utilization -> score)")
        if self.strategy != "RequestedToCapacityRatio" and self.shape:
            raise ValueError(f"shape applies to RequestedToCapacityRatio only, not {self.strategy}")
        names = [resource.name for resource in self.resources]
        if len(set(names)) != len(names):
            raise ValueError("a resource is weighted twice")
        return self


class SchedulerSpec(_Model):
    """The scheduling policy of one scheduler name."""

    description: str = ""
    external: bool = Field(
        default=False, description="served by another scheduler: nothing is rendered for it"
    )
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    preemption: bool = Field(default=True, description="may preempt lower-priority pods")
    percentageOfNodesToScore: int | None = Field(default=None, ge=0, le=100)


SchedulersSpec = dict[str, SchedulerSpec]


def check_names(value: Mapping[str, SchedulerSpec]) -> None:
    """Raises ValueError for ``default-scheduler`` (the cluster's own, never configured here)."""
    if DEFAULT_SCHEDULER in value:
        raise ValueError(
            f"{DEFAULT_SCHEDULER} is the cluster's own scheduler: configure it there, not here"
        )


def _profile(name: str, spec: SchedulerSpec) -> dict[str, Any]:
    scoring: dict[str, Any] = {
        "type": spec.scoring.strategy,
        "resources": [{"name": r.name, "weight": r.weight} for r in spec.scoring.resources],
    }
    if spec.scoring.shape:
        scoring["requestedToCapacityRatio"] = {
            "shape": [{"utilization": p.utilization, "score": p.score} for p in spec.scoring.shape]
        }
    profile: dict[str, Any] = {
        "schedulerName": name,
        "pluginConfig": [
            {
                "name": "NodeResourcesFit",
                "args": {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "NodeResourcesFitArgs",
                    "scoringStrategy": scoring,
                },
            }
        ],
    }
    if not spec.preemption:
        profile["plugins"] = {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}
    if spec.percentageOfNodesToScore is not None:
        profile["percentageOfNodesToScore"] = spec.percentageOfNodesToScore
    return profile


def scheduler_profiles(schedulers: Mapping[str, SchedulerSpec]) -> list[dict[str, Any]]:
    """One KubeSchedulerConfiguration profile per name the block configures, sorted by name."""
    return [
        _profile(name, spec)
        for name, spec in sorted(schedulers.items())
        if not spec.external and name != DEFAULT_SCHEDULER
    ]


def scheduler_configuration(
    schedulers: Mapping[str, SchedulerSpec],
    *,
    lease_namespace: str = "tenantgate-system",
    lease_name: str = "tenantgate-schedulers",
) -> dict[str, Any]:
    """The whole KubeSchedulerConfiguration for the second kube-scheduler.

    Its leader election has a Lease of its own, so that it never contends with the cluster's
    kube-scheduler (``kube-system/kube-scheduler``).
    """
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {
            "leaderElect": True,
            "resourceLock": "leases",
            "resourceNamespace": lease_namespace,
            "resourceName": lease_name,
        },
        "profiles": scheduler_profiles(schedulers),
    }


def named_schedulers(
    profiles: Iterable[tuple[str, str, str]], schedulers: Mapping[str, SchedulerSpec]
) -> list[tuple[str, str, str]]:
    """Of ``(path, profile, schedulerName)``, those the block does not define (nor the
    cluster's default scheduler)."""
    return [
        (path, profile, scheduler)
        for path, profile, scheduler in profiles
        if scheduler != DEFAULT_SCHEDULER and scheduler not in schedulers
    ]


__all__ = [
    "DEFAULT_SCHEDULER",
    "STRATEGIES",
    "ResourceWeight",
    "SchedulerSpec",
    "SchedulersSpec",
    "ScoringSpec",
    "ShapePoint",
    "check_names",
    "named_schedulers",
    "scheduler_configuration",
    "scheduler_profiles",
]
