"""What ``tenantgate lint`` checks a config against when it knows the cluster: the schedulers
that run there and the namespaces the webhooks are sent.

Pure: the facts (:class:`ClusterFacts`) are read elsewhere (``tenants.kube.clusterfacts``, or a
file of rendered webhook configurations) and every check returns warnings as field-path
problems, which lint locates in the file like its other findings.

Which schedulers run. Kubernetes has no list of schedulers, so a scheduler name counts as
running when one of these holds:

* it is ``default-scheduler`` (every cluster runs it, even where its pods are hidden, as on
  managed control planes);
* a running pod that is bound to a node names it in ``spec.schedulerName``: that scheduler
  placed it;
* a running pod is labelled with that name under ``component`` (how kube-scheduler's own
  manifests label it), ``app.kubernetes.io/name`` or ``app``: a scheduler deployed under its
  own name.

A profile naming any other scheduler gets a warning: the pods it gives that scheduler would
stay Pending, since no scheduler would ever bind them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from tenants.config import (
    NamespaceSelector,
    NamespaceSelectorSpec,
    PolicyProblem,
    TenantgateConfig,
    field_path,
)

DEFAULT_SCHEDULER: Final = "default-scheduler"
SCHEDULER_LABELS: Final = ("component", "app.kubernetes.io/name", "app")
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
OPT_IN_LABEL: Final = ("tenantgate.io/enabled", "true")


@dataclass(frozen=True, slots=True)
class RunningPod:
    """What the scheduler check reads of a running pod."""

    scheduler: str
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WebhookScope:
    """One admission webhook and the namespaces it is sent (``selector`` None: all)."""

    name: str
    selector: NamespaceSelector | None


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What is known of the cluster; None where nothing is known (that check is skipped)."""

    schedulers: frozenset[str] | None = None
    namespaces: Mapping[str, Mapping[str, str]] | None = None  # name -> labels
    webhooks: tuple[WebhookScope, ...] | None = None


def running_schedulers(pods: Iterable[RunningPod]) -> frozenset[str]:
    """The scheduler names that run, by the rules of the module docstring."""
    names = {DEFAULT_SCHEDULER}
    for pod in pods:
        if pod.node:
            names.add(pod.scheduler or DEFAULT_SCHEDULER)
        names.update(value for key in SCHEDULER_LABELS if (value := pod.labels.get(key)))
    return frozenset(names)


def webhook_scopes(objects: Iterable[Mapping[str, Any]]) -> tuple[WebhookScope, ...]:
    """The tenantgate webhooks (names under ``tenantgate.io``) of webhook configurations."""
    scopes: list[WebhookScope] = []
    for obj in objects:
        if obj.get("kind") not in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ):
            continue
        for webhook in obj.get("webhooks") or []:
            name = str(webhook.get("name", ""))
            if not name.endswith(".tenantgate.io"):
                continue
            selector = webhook.get("namespaceSelector") or {}
            scopes.append(WebhookScope(name, _selector(name, selector)))
    return tuple(scopes)


def _selector(name: str, selector: Mapping[str, Any]) -> NamespaceSelector | None:
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return None  # an empty selector selects every namespace
    try:
        return NamespaceSelector.from_spec(NamespaceSelectorSpec.model_validate(selector))
    except ValidationError as exc:
        raise ValueError(f"webhook {name}: unreadable namespaceSelector: {exc}") from exc


def cluster_warnings(config: TenantgateConfig, facts: ClusterFacts) -> list[PolicyProblem]:
    """Warnings about the config in this cluster."""
    return [*_scheduler_warnings(config, facts), *_namespace_warnings(config, facts)]


def profile_schedulers(config: TenantgateConfig) -> list[tuple[str, str, str]]:
    """(field path, profile, schedulerName) of every profile and tenant override naming one."""
    named: list[tuple[str, str, str]] = [
        (field_path("profiles", name, "schedulerName"), name, profile.schedulerName)
        for name, profile in config.profiles.items()
        if profile.schedulerName
    ]
    for tenant_name, tenant in config.tenants.items():
        overrides = tenant.profiles.overrides if tenant.profiles is not None else {}
        for name, override in overrides.items():
            if override.schedulerName:
                path = field_path(
                    "tenants", tenant_name, "profiles", "overrides", name, "schedulerName"
                )
                named.append((path, name, override.schedulerName))
    return named


def _scheduler_warnings(config: TenantgateConfig, facts: ClusterFacts) -> Iterable[PolicyProblem]:
    running = facts.schedulers
    if running is None:
        return
    for path, profile, scheduler in profile_schedulers(config):
        configured = scheduler in config.schedulers and not config.schedulers[scheduler].external
        if scheduler in running or configured:
            continue  # running, or run by the schedulers component from the block
        yield PolicyProblem(
            path,
            f"no scheduler {scheduler} runs in the cluster (no running pod was placed "
            f"by it or is labelled {scheduler}); pods given profile {profile} would stay "
            "Pending",
        )


def _namespace_warnings(config: TenantgateConfig, facts: ClusterFacts) -> Iterable[PolicyProblem]:
    if not facts.webhooks:
        return
    known = facts.namespaces
    for tenant_name, tenant in config.tenants.items():
        claimed: dict[str, str] = {
            namespace: field_path("tenants", tenant_name, "namespaces")
            for namespace in tenant.namespaces
        }
        if tenant.namespaceSelector is not None and known is not None:
            selector = NamespaceSelector.from_spec(tenant.namespaceSelector)
            for namespace, labels in sorted(known.items()):
                if selector.matches(labels):
                    claimed.setdefault(
                        namespace, field_path("tenants", tenant_name, "namespaceSelector")
                    )
        for namespace, path in claimed.items():
            labels = (known or {}).get(namespace) or {NAMESPACE_NAME_LABEL: namespace}
            missed = [
                w.name for w in facts.webhooks if w.selector and not w.selector.matches(labels)
            ]
            if missed:
                yield PolicyProblem(
                    path, _not_selected(namespace, tenant_name, missed, labels, facts)
                )


def _not_selected(
    namespace: str,
    tenant: str,
    webhooks: list[str],
    labels: Mapping[str, str],
    facts: ClusterFacts,
) -> str:
    key, value = OPT_IN_LABEL
    hint = ""
    wants_opt_in = any(
        w.selector is not None
        and any(expression[0] == key for expression in w.selector.expressions)
        for w in facts.webhooks or ()
    )
    if wants_opt_in and labels.get(key) != value:
        hint = f"; label it: kubectl label namespace {namespace} {key}={value}"
    return (
        f"namespace {namespace} of tenant {tenant} is not selected by webhook "
        f"{', '.join(webhooks)}: its pods would skip tenantgate and use no quota{hint}"
    )


__all__ = [
    "DEFAULT_SCHEDULER",
    "ClusterFacts",
    "RunningPod",
    "WebhookScope",
    "cluster_warnings",
    "running_schedulers",
    "webhook_scopes",
]
