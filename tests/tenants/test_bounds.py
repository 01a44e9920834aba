"""Tests for tenants.bounds, tenants.defaults and the limits quotas, through PolicyAdmitter.

Every denial the bounds, the default limits and the ``limits.*`` quotas add is asserted with
its exact message, in /mutate (before anything is booked) and in /validate (on the final
object). The rules mirror LimitRanger (``plugin/pkg/admission/limitranger/admission.go``:
``minConstraint``, ``maxConstraint``, ``limitRequestRatioConstraint``, ``PodLimitFunc``) and
ResourceQuota's pod evaluator (``pkg/quota/v1/evaluator/core/pods.go``: ``Constraints``,
``podComputeUsageHelper``).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import pytest

from classifier.quantities import Quantity
from tenants.config import Policy
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger
from tests.tenants.conftest import create, make_policy, stored

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed: {requests.cpu: "4", limits.cpu: "8", limits.memory: 16Gi, pods: "10"}
    containerDefaults:
      requests: {cpu: 100m, memory: 128Mi}
      limits: {cpu: 500m, memory: 512Mi}
    bounds:
      container:
        min: {cpu: 50m, memory: 64Mi}
        max: {cpu: "2", memory: 4Gi}
        maxLimitRequestRatio: {memory: "4"}
      pod:
        max: {cpu: "4", memory: 8Gi}
  bare:
    namespaces: [bare]
    quota: {guaranteed: {cpu: "4"}}
    bounds:
      container:
        min: {cpu: 50m}
        max: {memory: 4Gi}
        maxLimitRequestRatio: {memory: "4"}
      pod:
        max: {memory: 8Gi}
  plain:
    namespaces: [plain]
    quota: {guaranteed: {cpu: "4", limits.cpu: "4"}}
"""


@pytest.fixture(scope="module")
def policy() -> Policy:
    return make_policy(CONFIG)


def container(
    name: str = "web",
    *,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "nginx", "resources": resources}


def a_pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, namespace: str = "team-a"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": namespace},
        "spec": spec,
    }


def run_mutate(
    policy: Policy,
    pod: dict[str, Any],
    ledger: MemoryLedger | None = None,
    *,
    dry_run: bool = False,
) -> Any:
    admitter = PolicyAdmitter(policy, ledger or MemoryLedger())
    request = dataclasses.replace(create(pod, dry_run=dry_run), name="web-1")
    return asyncio.run(admitter.mutate(request, now=1000.0))


def run_validate(policy: Policy, pod: dict[str, Any], ledger: MemoryLedger | None = None) -> Any:
    admitter = PolicyAdmitter(policy, ledger or MemoryLedger())
    return asyncio.run(
        admitter.validate(create(stored(pod, pod_uid="u-1", name="web-1")), now=1000.0)
    )


WITHIN = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}


def fine(name: str = "web", **changes: dict[str, str]) -> dict[str, Any]:
    resources = copy.deepcopy(WITHIN)
    for key, values in changes.items():
        resources[key].update(values)
    return container(name, requests=resources["requests"], limits=resources["limits"])


DENIALS: list[tuple[str, dict[str, Any], str]] = [
    (
        "limit above the container maximum",
        a_pod(fine(requests={"memory": "2Gi"}, limits={"memory": "8Gi"})),
        "container web in pod team-a/web-1: memory limit 8Gi is above the tenant's maximum 4Gi "
        "(tenant team-a, bounds.container.max)",
    ),
    (
        "request above the container maximum (limit within)",
        a_pod(
            container(requests={"cpu": "3", "memory": "1Gi"}, limits={"cpu": "2", "memory": "2Gi"})
        ),
        "container web in pod team-a/web-1: cpu request 3 is above the tenant's maximum 2 "
        "(tenant team-a, bounds.container.max)",
    ),
    (
        "request below the container minimum",
        a_pod(fine(requests={"cpu": "10m"})),
        "container web in pod team-a/web-1: cpu request 10m is below the tenant's minimum 50m "
        "(tenant team-a, bounds.container.min)",
    ),
    (
        "limit below the container minimum",
        a_pod(
            container(
                requests={"cpu": "500m", "memory": "64Mi"}, limits={"cpu": "1", "memory": "32Mi"}
            )
        ),
        "container web in pod team-a/web-1: memory limit 32Mi is below the tenant's minimum 64Mi "
        "(tenant team-a, bounds.container.min)",
    ),
    (
        "limit-to-request ratio above the maximum",
        a_pod(fine(requests={"memory": "128Mi"}, limits={"memory": "1Gi"})),
        "container web in pod team-a/web-1: memory limit 1Gi is 8 times its request 128Mi, "
        "above the tenant's maximum ratio 4 (tenant team-a, bounds.container.maxLimitRequestRatio)",
    ),
    (
        "a fractional ratio is shown to two decimals",
        a_pod(fine(requests={"memory": "300Mi"}, limits={"memory": "1300Mi"})),
        "container web in pod team-a/web-1: memory limit 1300Mi is 4.33 times its request "
        "300Mi, above the tenant's maximum ratio 4 "
        "(tenant team-a, bounds.container.maxLimitRequestRatio)",
    ),
    (
        "init containers are bounded too, and named as such",
        a_pod(fine(), init=[fine("setup", limits={"cpu": "3"})]),
        "init container setup in pod team-a/web-1: cpu limit 3 is above the tenant's maximum 2 "
        "(tenant team-a, bounds.container.max)",
    ),
    (
        "pod maximum over the containers' sum",
        a_pod(
            fine("a", limits={"cpu": "2"}),
            fine("b", limits={"cpu": "2"}),
            fine("c", limits={"cpu": "2"}),
        ),
        "pod team-a/web-1: cpu limit 6 is above the tenant's maximum 4 "
        "(tenant team-a, bounds.pod.max)",
    ),
    (
        "several violations in one message, containers in order",
        a_pod(fine("a", limits={"memory": "5Gi"}), fine("b", requests={"cpu": "1m"})),
        "container a in pod team-a/web-1: memory limit 5Gi is above the tenant's maximum 4Gi "
        "(tenant team-a, bounds.container.max); "
        "container a in pod team-a/web-1: memory limit 5Gi is 5 times its request 1Gi, above "
        "the tenant's maximum ratio 4 (tenant team-a, bounds.container.maxLimitRequestRatio); "
        "container b in pod team-a/web-1: cpu request 1m is below the tenant's minimum 50m "
        "(tenant team-a, bounds.container.min)",
    ),
]


@pytest.mark.parametrize(("name", "pod", "message"), DENIALS, ids=[d[0] for d in DENIALS])
def test_bounds_denials_are_exact_in_mutate_and_validate(
    policy: Policy, name: str, pod: dict[str, Any], message: str
) -> None:
    ledger = MemoryLedger()
    mutated = run_mutate(policy, pod, ledger)
    assert (mutated.allowed, mutated.message) == (False, message), name
    assert not ledger.get("team-a").reservations  # denied before booking
    validated = run_validate(policy, pod, ledger)
    assert (validated.allowed, validated.message) == (False, message), name
    assert mutated.cause == validated.cause == "container_bounds"
    assert not ledger.get("team-a").guaranteed


def test_unset_request_limit_and_ratio_inputs_are_named(policy: Policy) -> None:
    """Unset and zero values, as LimitRanger reports them (a tenant without defaults)."""
    pod = a_pod(container(requests={"cpu": "0", "memory": "1Gi"}), namespace="bare")
    message = (
        "container web in pod bare/web-1: cpu request 0 is below the tenant's minimum 50m "
        "(tenant bare, bounds.container.min); "
        "container web in pod bare/web-1: memory limit is not set; the tenant's maximum is "
        "4Gi (tenant bare, bounds.container.max); "
        "container web in pod bare/web-1: memory limit is not set or zero; the tenant's "
        "maximum limit-to-request ratio is 4 (tenant bare, bounds.container.maxLimitRequestRatio); "
        "pod bare/web-1: memory limit is not set; the tenant's maximum is 8Gi "
        "(tenant bare, bounds.pod.max)"
    )
    mutated, validated = run_mutate(policy, pod), run_validate(policy, pod)
    assert mutated.message == validated.message == message
    assert mutated.cause == validated.cause == "container_bounds"
    no_request = a_pod(container(limits={"cpu": "1", "memory": "1Gi"}), namespace="bare")
    no_request["spec"]["containers"][0]["resources"]["requests"] = {"memory": "0"}
    assert run_validate(policy, no_request).message == (
        "container web in pod bare/web-1: memory request is not set or zero; the tenant's "
        "maximum limit-to-request ratio is 4 (tenant bare, bounds.container.maxLimitRequestRatio)"
    )
    unset = a_pod(container(limits={"memory": "1Gi"}), namespace="bare")
    assert run_validate(policy, unset).message == (
        "container web in pod bare/web-1: cpu request is not set; the tenant's minimum is 50m "
        "(tenant bare, bounds.container.min)"
    )


def test_defaults_fill_requests_and_limits_and_are_listed(policy: Policy) -> None:
    pod = a_pod(container("web"), container("log", requests={"cpu": "200m"}))
    verdict = run_mutate(policy, pod)
    assert verdict.allowed, verdict.message
    containers = verdict.patched["spec"]["containers"]
    assert containers[0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "500m", "memory": "512Mi"},
    }
    assert containers[1]["resources"] == {
        "requests": {"cpu": "200m", "memory": "128Mi"},
        "limits": {"cpu": "500m", "memory": "512Mi"},
    }
    assert (
        "tenant team-a container defaults applied: web requests cpu=100m,memory=128Mi, "
        "limits cpu=500m,memory=512Mi; log requests memory=128Mi, limits cpu=500m,memory=512Mi"
    ) in verdict.warnings


def test_a_limit_without_a_request_gets_no_default_request(policy: Policy) -> None:
    """The API server made the limit the request: only the missing limit is filled."""
    verdict = run_mutate(policy, a_pod(container(limits={"cpu": "1"})))
    assert verdict.patched["spec"]["containers"][0]["resources"] == {
        "requests": {"memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }


def test_validate_retries_a_pod_that_missed_its_default_limits(policy: Policy) -> None:
    pod = a_pod(container(requests={"cpu": "100m", "memory": "128Mi"}))
    verdict = run_validate(policy, pod)
    assert (verdict.allowed, verdict.code, verdict.message) == (
        False,
        409,
        "pod team-a/web-1 of tenant team-a has containers without requests or limits and was "
        "not mutated by tenantgate; retry",
    )


def test_a_limits_quota_requires_limits_of_every_container(policy: Policy) -> None:
    """ResourceQuota's Constraints: ``must specify limits.cpu for: ...`` (plain: no defaults)."""
    pod = a_pod(
        container("web", requests={"cpu": "1"}, limits={"cpu": "1"}),
        container("log", requests={"cpu": "100m"}),
        init=[container("setup", requests={"cpu": "100m"})],
        namespace="plain",
    )
    message = (
        "pod plain/web-1: must specify limits.cpu for: log,setup (tenant plain caps limits.cpu)"
    )
    assert run_mutate(policy, pod).message == message
    assert run_validate(policy, pod).message == message


def test_limits_quota_counts_pod_limits_and_denies_with_resource_names(policy: Policy) -> None:
    ledger = MemoryLedger()
    pods = [a_pod(fine("a", limits={"cpu": "2"}), fine("b", limits={"cpu": "2"})) for _ in range(3)]
    first = run_mutate(policy, pods[0], ledger)
    assert first.allowed
    assert ledger.get("team-a").guaranteed["limits.cpu"] == Quantity.parse("4")
    assert ledger.get("team-a").guaranteed["cpu"] == Quantity.parse("1")
    second = asyncio.run(
        PolicyAdmitter(policy, ledger).mutate(create(pods[1], uid="req-2"), now=1000.0)
    )
    assert second.allowed
    third = asyncio.run(
        PolicyAdmitter(policy, ledger).mutate(create(pods[2], uid="req-3"), now=1000.0)
    )
    assert (third.allowed, third.message) == (
        False,
        "exceeded tenant quota: team-a: requested limits.cpu=4, used limits.cpu=8/8 "
        "(burst ceiling), guaranteed limits.cpu=8",
    )


def test_dry_run_checks_bounds_and_books_nothing(policy: Policy) -> None:
    ledger = MemoryLedger()
    allowed = run_mutate(policy, a_pod(fine()), ledger, dry_run=True)
    assert allowed.allowed
    denied = run_mutate(policy, a_pod(fine(limits={"memory": "8Gi"})), ledger, dry_run=True)
    assert not denied.allowed
    assert not ledger.get("team-a").guaranteed
    assert not ledger.get("team-a").reservations


def test_a_pod_not_named_yet_goes_by_its_generate_name(policy: Policy) -> None:
    pod = a_pod(fine(requests={"memory": "2Gi"}, limits={"memory": "8Gi"}))
    pod["metadata"] = {"generateName": "web-7d9f8c-", "namespace": "team-a"}
    verdict = asyncio.run(PolicyAdmitter(policy, MemoryLedger()).mutate(create(pod), now=1.0))
    assert verdict.message == (
        "container web in pod team-a/web-7d9f8c-: memory limit 8Gi is above the tenant's "
        "maximum 4Gi (tenant team-a, bounds.container.max)"
    )
