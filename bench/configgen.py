"""Generated tenantgate configs: N tenants and M rules on top of the shipped profiles and rules.

The profiles, priority classes and rules of ``examples/tenantgate.yaml`` are kept; tenants are
generated, and rules beyond the shipped ones are team-specific rules placed *before* them (as
specific rules usually are), so every pod is tested against all of them before a shipped rule
matches. None of the generated rules matches a workload pod, so classification, and with it the
work done after it, is the same at every config size.

Tenant kinds, chosen so that the tier every pod gets does not depend on what else is booked
(the load generator's validate reviews are built in advance and must carry the right tier):

* guaranteed tenants (most): a guarantee far larger than any benchmark books;
* burst-only tenants (every 4th): a guarantee of zero pods, so every pod runs on burst capacity;
* tenants with a profile override (every 10th): another compiled classifier.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from tenants.config import Policy, TenantgateConfig, compile_policy

logger = logging.getLogger(__name__)

REPO: Final = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG: Final = REPO / "examples" / "tenantgate.yaml"

# Far above anything a run books: 150,000 pods x the largest fixture request stay below it.
HUGE: Final[Mapping[str, str]] = {
    "cpu": "10000000",
    "memory": "100000Ti",
    "ephemeral-storage": "100000Ti",
    "nvidia.com/gpu": "1000000",
    "pods": "100000000",
}
BURST_EVERY: Final = 4
OVERRIDE_EVERY: Final = 10


def tenant_name(index: int) -> str:
    return f"t{index:05d}"


def tenant_namespaces(index: int) -> list[str]:
    name = tenant_name(index)
    return [f"{name}-prod", f"{name}-dev"]


def is_burst_tenant(index: int) -> bool:
    return index % BURST_EVERY == BURST_EVERY - 1


def _tenant(index: int) -> dict[str, Any]:
    guaranteed = dict(HUGE)
    quota: dict[str, Any] = {"guaranteed": guaranteed, "burst": {"ratio": 1.5}}
    if is_burst_tenant(index):
        # No guaranteed pods: every pod of this tenant is admitted on burst capacity.
        guaranteed["pods"] = "0"
        quota["burst"] = {"max": {"pods": HUGE["pods"]}}
    tenant: dict[str, Any] = {
        "description": f"generated tenant {index}",
        "namespaces": tenant_namespaces(index),
        "quota": quota,
        "priorityClasses": {"guaranteed": "tenant-guaranteed", "allowed": ["batch-low"]},
        "overQuota": "reject",
        "containerDefaults": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    if index % OVERRIDE_EVERY == OVERRIDE_EVERY // 2:
        tenant["profiles"] = {
            "overrides": {"web-frontend": {"nodeSelector": {"node-pool.example.com/web": "true"}}}
        }
    return tenant


def _filler_rule(index: int, profiles: list[str]) -> dict[str, Any]:
    """A team-specific rule that no workload pod matches (values from made-up teams)."""
    team = f"team-{index:04d}"
    profile = profiles[index % len(profiles)]
    kind = index % 6
    match: dict[str, Any]
    if kind == 0:
        match = {"label": {"key": "example.com/team", "value": team}}
    elif kind == 1:
        match = {"image": [f"registry.example.com/{team}/*", f"ghcr.io/example-{team}/*"]}
    elif kind == 2:
        match = {"namespace": [f"{team}-*"]}
    elif kind == 3:
        match = {"all": [{"ownerKind": "Deployment"}, {"label": {"key": "app", "value": team}}]}
    elif kind == 4:
        match = {"annotation": {"key": f"{team}.example.com/profile", "exists": True}}
    else:
        match = {
            "any": [
                {"label": {"key": "example.com/cost-center", "values": [team, f"{team}-x"]}},
                {"resource": f"example.com/fpga-{index} > 0"},
            ]
        }
    return {
        "name": f"filler-{index:04d}",
        "profile": profile,
        "description": f"generated rule for {team}",
        "match": match,
    }


def _example() -> dict[str, Any]:
    with EXAMPLE_CONFIG.open(encoding="utf-8") as handle:
        loaded: dict[str, Any] = yaml.safe_load(handle)
    return loaded


_EXAMPLE_CACHE: dict[str, dict[str, Any]] = {}


def example_config() -> dict[str, Any]:
    """The shipped example config as plain data (a fresh copy)."""
    if "example" not in _EXAMPLE_CACHE:
        _EXAMPLE_CACHE["example"] = _example()
    return copy.deepcopy(_EXAMPLE_CACHE["example"])


def generate_config(
    *, tenants: int, rules: int | None = None, reservation_ttl_seconds: int = 30
) -> dict[str, Any]:
    """A config document with ``tenants`` tenants and ``rules`` rules in all (plain data).

    ``rules`` below the number of shipped rules keeps the shipped ones (``None``: only them).
    """
    if tenants < 1:
        raise ValueError("a generated config needs at least one tenant")
    document = example_config()
    shipped: list[dict[str, Any]] = document.get("rules", [])
    fillers = max(0, (rules or 0) - len(shipped))
    profiles = sorted(document.get("profiles", {}))
    document["rules"] = [_filler_rule(i, profiles) for i in range(fillers)] + shipped
    document["tenants"] = {tenant_name(i): _tenant(i) for i in range(tenants)}
    document["reservationTTLSeconds"] = reservation_ttl_seconds
    return document


def config_yaml(document: Mapping[str, Any]) -> str:
    """The config as YAML, for ``tenantgate serve --config``."""
    dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(dict(document), Dumper=dumper, sort_keys=False, width=100)


@dataclass(frozen=True, slots=True)
class GeneratedPolicy:
    """A compiled generated config and what the workload needs to know about it."""

    policy: Policy
    document: Mapping[str, Any]
    tenants: int
    rules: int

    def namespaces(self) -> list[tuple[str, str]]:
        """(tenant, namespace) for every namespace of every tenant, in config order."""
        return [
            (name, namespace)
            for name, tenant in self.policy.tenants.items()
            for namespace in tenant.namespaces
        ]


def compile_generated(document: Mapping[str, Any]) -> GeneratedPolicy:
    """Validate and compile a generated config with the product's own models."""
    config = TenantgateConfig.model_validate(dict(document))
    policy = compile_policy(config)
    return GeneratedPolicy(policy, document, len(policy.tenants), len(config.rules))


def generated_policy(
    *, tenants: int, rules: int | None = None, reservation_ttl_seconds: int = 30
) -> GeneratedPolicy:
    return compile_generated(
        generate_config(
            tenants=tenants, rules=rules, reservation_ttl_seconds=reservation_ttl_seconds
        )
    )
