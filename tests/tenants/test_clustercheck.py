"""tenants.clustercheck: which schedulers run, which tenant namespaces the webhooks see."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tenants.clustercheck import (
    ClusterFacts,
    RunningPod,
    WebhookScope,
    cluster_warnings,
    running_schedulers,
    webhook_scopes,
)
from tenants.config import TenantgateConfig

CONFIG = """
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
  gang: {schedulerName: volcano}
  memory: {schedulerName: memory-optimized-scheduler}
  plain: {schedulerName: default-scheduler}
tenants:
  team-a:
    namespaces: [team-a]
    quota: {guaranteed: {cpu: "4"}}
    profiles:
      overrides:
        general: {schedulerName: team-a-scheduler}
  data:
    namespaceSelector: {matchLabels: {team: data}}
    quota: {guaranteed: {cpu: "4"}}
"""


def config() -> TenantgateConfig:
    return TenantgateConfig.model_validate(yaml.safe_load(CONFIG))


def opt_in_webhooks() -> tuple[WebhookScope, ...]:
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
            {"key": "tenantgate.io/enabled", "operator": "In", "values": ["true"]},
        ]
    }
    objects: list[dict[str, Any]] = [
        {
            "kind": "MutatingWebhookConfiguration",
            "webhooks": [{"name": "mutate.tenantgate.io", "namespaceSelector": selector}],
        },
        {
            "kind": "ValidatingWebhookConfiguration",
            "webhooks": [
                {"name": "validate.tenantgate.io", "namespaceSelector": selector},
                {"name": "other.example.com", "namespaceSelector": {}},
            ],
        },
        {"kind": "Service", "metadata": {"name": "tenantgate"}},
    ]
    return webhook_scopes(objects)


def messages(facts: ClusterFacts) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in cluster_warnings(config(), facts)]


# --------------------------------------------------------------------------- schedulers


def test_a_scheduler_runs_when_it_placed_a_running_pod_or_a_pod_carries_its_name() -> None:
    pods = [
        RunningPod(scheduler="volcano", node="node-1"),
        RunningPod(scheduler="never-bound", node=""),  # not placed by anyone yet
        RunningPod(scheduler="", node="node-2", labels={"component": "kube-scheduler"}),
        RunningPod(scheduler="", node="", labels={"app.kubernetes.io/name": "gpu-scheduler"}),
    ]

    assert running_schedulers(pods) == {
        "default-scheduler",
        "volcano",
        "kube-scheduler",
        "gpu-scheduler",
    }


def test_profiles_naming_a_scheduler_that_does_not_run_are_warned_about() -> None:
    facts = ClusterFacts(schedulers=frozenset({"default-scheduler", "volcano"}))

    assert messages(facts) == [
        (
            "profiles.memory.schedulerName",
            "no scheduler memory-optimized-scheduler runs in the cluster (no running "
            "pod was placed by it or is labelled memory-optimized-scheduler); pods given "
            "profile memory would stay Pending",
        ),
        (
            "tenants.team-a.profiles.overrides.general.schedulerName",
            "no scheduler team-a-scheduler runs in the cluster (no running pod was "
            "placed by it or is labelled team-a-scheduler); pods given profile general would "
            "stay Pending",
        ),
    ]


def test_nothing_known_nothing_warned() -> None:
    assert messages(ClusterFacts()) == []


# --------------------------------------------------------------------------- opt-in namespaces


def test_only_tenantgate_webhooks_are_read() -> None:
    assert [scope.name for scope in opt_in_webhooks()] == [
        "mutate.tenantgate.io",
        "validate.tenantgate.io",
    ]


def test_tenant_namespaces_without_the_opt_in_label_are_warned_about() -> None:
    facts = ClusterFacts(
        namespaces={
            "team-a": {"kubernetes.io/metadata.name": "team-a"},
            "data-1": {"kubernetes.io/metadata.name": "data-1", "team": "data"},
            "data-2": {
                "kubernetes.io/metadata.name": "data-2",
                "team": "data",
                "tenantgate.io/enabled": "true",
            },
            "elsewhere": {"kubernetes.io/metadata.name": "elsewhere"},
        },
        webhooks=opt_in_webhooks(),
    )

    assert messages(facts) == [
        (
            "tenants.team-a.namespaces",
            "namespace team-a of tenant team-a is not selected by webhook "
            "mutate.tenantgate.io, validate.tenantgate.io: its pods would skip tenantgate and "
            "use no quota; label it: kubectl label namespace team-a tenantgate.io/enabled=true",
        ),
        (
            "tenants.data.namespaceSelector",
            "namespace data-1 of tenant data is not selected by webhook "
            "mutate.tenantgate.io, validate.tenantgate.io: its pods would skip tenantgate and "
            "use no quota; label it: kubectl label namespace data-1 tenantgate.io/enabled=true",
        ),
    ]


def test_offline_only_named_namespaces_are_checked_as_unlabelled() -> None:
    facts = ClusterFacts(webhooks=opt_in_webhooks())

    assert [path for path, _ in messages(facts)] == ["tenants.team-a.namespaces"]


def test_the_base_webhooks_select_every_tenant_namespace() -> None:
    base = [
        {
            "kind": "ValidatingWebhookConfiguration",
            "webhooks": [
                {
                    "name": "validate.tenantgate.io",
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": ["kube-system", "tenantgate-system"],
                            }
                        ]
                    },
                }
            ],
        }
    ]
    assert messages(ClusterFacts(webhooks=webhook_scopes(base))) == []


def test_an_unreadable_selector_is_an_error() -> None:
    broken = [
        {
            "kind": "MutatingWebhookConfiguration",
            "webhooks": [
                {
                    "name": "mutate.tenantgate.io",
                    "namespaceSelector": {"matchExpressions": [{"key": "x", "operator": "Near"}]},
                }
            ],
        }
    ]
    with pytest.raises(ValueError, match=r"webhook mutate\.tenantgate\.io: unreadable"):
        webhook_scopes(broken)
