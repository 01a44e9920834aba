"""Parity with Kubernetes' ResourceQuota and LimitRanger admission plugins.

Each table is written from an upstream test (cited per table; the cases are our own, in the
shape of upstream's): for the same pod, the same ResourceQuota ``hard`` (in ResourceQuota's own
names) or the same LimitRange items, tenantgate must give the verdict the plugin gives and
charge, or report, the same numbers.

* ``pkg/quota/v1/evaluator/core/pods_test.go``: ``TestPodEvaluatorUsage`` (what a pod is
  charged, per quota name) and ``TestPodConstraintsFunc`` (limits a quota requires);
* ``plugin/pkg/admission/resourcequota/admission_test.go``: ``TestAdmitBelowQuotaLimit``,
  ``TestAdmitExceedQuotaLimit``, ``TestAdmitEnforceQuotaConstraints`` and friends (a pod fits
  when used + usage <= hard for every resource it uses that the quota names);
* ``plugin/pkg/admission/limitranger/admission_test.go``: ``TestPodLimitFunc`` (container and
  pod min / max / maxLimitRequestRatio) and ``TestMergePodResourceRequirements`` (defaults).

Deliberate differences, asserted as such: a quota on requests (``cpu``, ``requests.memory``)
does not require containers to set requests (ResourceQuota's admitted "mistake", see
``validationSet`` in pods.go): tenantgate fills ``containerDefaults.requests`` or counts zero,
as it always has. ``count/pods`` is not a tenantgate quota.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from classifier.limits import pod_usage
from classifier.quantities import Quantity
from tenants.bounds import Bounds, BoundsLevel, bounds_violations, missing_limits
from tenants.config import Policy
from tenants.decisions import PolicyAdmitter
from tenants.defaults import apply_defaults
from tenants.ledger import MemoryLedger, TenantLedger
from tenants.quota import build_quota, check
from tenants.resourcenames import ledger_key, ledger_keys, limit_keys
from tests.tenants.conftest import create, make_policy

JSONDict = dict[str, Any]


def q(values: dict[str, str]) -> dict[str, Quantity]:
    return {name: Quantity.parse(text) for name, text in values.items()}


def ctr(
    name: str = "c",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> JSONDict:
    resources: JSONDict = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def pod_of(*containers: JSONDict, init: list[JSONDict] | None = None, **spec: Any) -> JSONDict:
    body: JSONDict = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": body,
    }


# --------------------------------------------------------------------------- usage (pods_test.go)

# TestPodEvaluatorUsage: the usage upstream charges, in ResourceQuota names (count/pods left
# out). Each name maps to the ledger key tenantgate counts it under; both sides must agree.
USAGE: list[tuple[str, JSONDict, dict[str, str]]] = [
    (
        "init container CPU",
        pod_of(init=[ctr(requests={"cpu": "1m"}, limits={"cpu": "2m"})]),
        {"requests.cpu": "1m", "limits.cpu": "2m", "pods": "1", "cpu": "1m"},
    ),
    (
        "init container MEM",
        pod_of(init=[ctr(requests={"memory": "1m"}, limits={"memory": "2m"})]),
        {"requests.memory": "1m", "limits.memory": "2m", "pods": "1", "memory": "1m"},
    ),
    (
        "init container local ephemeral storage",
        pod_of(
            init=[ctr(requests={"ephemeral-storage": "32Mi"}, limits={"ephemeral-storage": "64Mi"})]
        ),
        {
            "ephemeral-storage": "32Mi",
            "requests.ephemeral-storage": "32Mi",
            "limits.ephemeral-storage": "64Mi",
            "pods": "1",
        },
    ),
    (
        "container hugepages",
        pod_of(ctr(requests={"hugepages-2Mi": "100Mi"}, limits={"hugepages-2Mi": "100Mi"})),
        {"hugepages-2Mi": "100Mi", "requests.hugepages-2Mi": "100Mi", "pods": "1"},
    ),
    (
        "container extended resources",
        pod_of(ctr(requests={"example.com/dongle": "3"}, limits={"example.com/dongle": "3"})),
        {"requests.example.com/dongle": "3", "pods": "1"},
    ),
    (
        "init container maximums override sum of containers",
        pod_of(
            ctr(requests={"cpu": "1", "memory": "50M"}, limits={"cpu": "2", "memory": "100M"}),
            ctr(requests={"cpu": "1", "memory": "50M"}, limits={"cpu": "2", "memory": "100M"}),
            init=[
                ctr(requests={"cpu": "4", "memory": "100M"}, limits={"cpu": "8", "memory": "200M"}),
                ctr(requests={"cpu": "1", "memory": "50M"}, limits={"cpu": "2", "memory": "100M"}),
            ],
        ),
        {
            "requests.cpu": "4",
            "limits.cpu": "8",
            "cpu": "4",
            "requests.memory": "100M",
            "limits.memory": "200M",
            "memory": "100M",
            "pods": "1",
        },
    ),
    (
        "pod overhead: added to requests, and to the non-zero limits",
        pod_of(
            ctr(requests={"cpu": "1"}, limits={"cpu": "2"}),
            overhead={"cpu": "250m", "memory": "64Mi"},
        ),
        {
            "requests.cpu": "1250m",
            "cpu": "1250m",
            "limits.cpu": "2250m",
            "requests.memory": "64Mi",
            "memory": "64Mi",
            "pods": "1",
        },
    ),
]


@pytest.mark.parametrize(("name", "pod", "upstream"), USAGE, ids=[u[0] for u in USAGE])
def test_usage_equals_the_pod_evaluator(name: str, pod: JSONDict, upstream: dict[str, str]) -> None:
    charged = pod_usage(pod)
    for quota_name, amount in upstream.items():
        assert charged[ledger_key(quota_name)] == Quantity.parse(amount), (name, quota_name)
    assert set(charged) == {ledger_key(n) for n in upstream}, name


# ------------------------------------------------------------ constraints (pods_test.go)

# TestPodConstraintsFunc with the limits names tenantgate requires (limits.cpu, limits.memory):
# the "must specify ..." text is upstream's, word for word.
CONSTRAINTS: list[tuple[str, JSONDict, tuple[str, ...], str | None]] = [
    (
        "init container resource missing",
        pod_of(init=[ctr("dummy", {"cpu": "1m"}, {"cpu": "2m"})]),
        ("memory",),
        "must specify limits.memory for: dummy",
    ),
    (
        "multiple container resource missing",
        pod_of(ctr("foo", {"cpu": "1m"}, {"cpu": "2m"}), ctr("bar", {"cpu": "1m"}, {"cpu": "2m"})),
        ("memory",),
        "must specify limits.memory for: bar,foo",
    ),
    (
        "container resource missing multiple",
        pod_of(ctr("foo"), ctr("bar")),
        ("cpu", "memory"),
        "must specify limits.cpu for: bar,foo; limits.memory for: bar,foo",
    ),
    (
        "pod-level resource set, container-level required resources missing",
        pod_of(ctr("foo"), ctr("bar"), resources={"limits": {"cpu": "1"}}),
        ("cpu", "memory"),
        None,
    ),
    (
        "ephemeral-storage limits are never required",
        pod_of(ctr("foo", limits={"cpu": "1"})),
        ("cpu", "ephemeral-storage"),
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "capped", "expected"), CONSTRAINTS, ids=[c[0] for c in CONSTRAINTS]
)
def test_required_limits_equal_quota_constraints(
    name: str, pod: JSONDict, capped: tuple[str, ...], expected: str | None
) -> None:
    message = missing_limits(pod, capped, tenant="t", pod_name="ns/p")
    if expected is None:
        assert message is None, name
    else:
        assert message is not None
        assert message.startswith(f"pod ns/p: {expected} (tenant t caps "), name


# -------------------------------------------------- quota admission (resourcequota tests)

# (case, hard in ResourceQuota names, used in ResourceQuota names, pod, admitted, exceeded
# names with (requested, used, hard) as the plugin's "exceeded quota" message reports them).
QuotaCase = tuple[
    str, dict[str, str], dict[str, str], JSONDict, bool, dict[str, tuple[str, str, str]]
]

_SMALL = pod_of(ctr("c", {"cpu": "100m", "memory": "2Gi"}, {"cpu": "200m", "memory": "4Gi"}))
QUOTA: list[QuotaCase] = [
    (
        "TestAdmitBelowQuotaLimit: requests and limits within hard",
        {"cpu": "3", "memory": "100Gi", "limits.cpu": "6", "limits.memory": "200Gi", "pods": "5"},
        {"cpu": "1", "memory": "50Gi", "limits.cpu": "2", "limits.memory": "100Gi", "pods": "3"},
        _SMALL,
        True,
        {},
    ),
    (
        "TestAdmitExceedQuotaLimit: requests.cpu over hard",
        {"requests.cpu": "3", "requests.memory": "100Gi", "pods": "5"},
        {"requests.cpu": "1", "requests.memory": "50Gi", "pods": "3"},
        pod_of(ctr("c", {"cpu": "3", "memory": "2Gi"})),
        False,
        {"requests.cpu": ("3", "1", "3")},
    ),
    (
        "limits.memory over hard while requests fit",
        {"requests.memory": "100Gi", "limits.memory": "100Gi"},
        {"requests.memory": "10Gi", "limits.memory": "98Gi"},
        _SMALL,
        False,
        {"limits.memory": ("4Gi", "98Gi", "100Gi")},
    ),
    (
        "pods count exactly at hard",
        {"pods": "4"},
        {"pods": "3"},
        _SMALL,
        True,
        {},
    ),
    (
        "pods count over hard",
        {"pods": "3", "limits.cpu": "1"},
        {"pods": "3", "limits.cpu": "900m"},
        _SMALL,
        False,
        {"pods": ("1", "3", "3"), "limits.cpu": ("200m", "900m", "1")},
    ),
    (
        "extended resource quota by request (TestAdmitBelowQuotaLimitWithExtendedResource)",
        {"requests.example.com/dongle": "10"},
        {"requests.example.com/dongle": "3"},
        pod_of(ctr("c", {"example.com/dongle": "3"}, {"example.com/dongle": "3"})),
        True,
        {},
    ),
    (
        "extended resource over quota (TestAdmitExceedQuotaLimitWithExtendedResource)",
        {"requests.example.com/dongle": "5"},
        {"requests.example.com/dongle": "3"},
        pod_of(ctr("c", {"example.com/dongle": "3"}, {"example.com/dongle": "3"})),
        False,
        {"requests.example.com/dongle": ("3", "3", "5")},
    ),
    (
        "resources the pod does not use never block (TestAdmitBelowTerminatingQuotaLimit shape)",
        {"requests.example.com/dongle": "1", "limits.cpu": "1"},
        {"requests.example.com/dongle": "2", "limits.cpu": "900m"},
        pod_of(ctr("c", {"memory": "1Gi"}, {"memory": "1Gi"})),
        True,
        {},
    ),
]


@pytest.mark.parametrize(
    ("name", "hard", "used", "pod", "admitted", "exceeded"), QUOTA, ids=[c[0] for c in QUOTA]
)
def test_quota_verdict_and_numbers_equal_resourcequota(
    name: str,
    hard: dict[str, str],
    used: dict[str, str],
    pod: JSONDict,
    admitted: bool,
    exceeded: dict[str, tuple[str, str, str]],
) -> None:
    """A quota without burst is a ResourceQuota: its guarantee is ``hard``."""
    quota = build_quota(ledger_keys(q(hard)))
    ledger = TenantLedger.of("t", guaranteed=ledger_keys(q(used)))
    decision = check(quota, ledger, pod_usage(pod))
    assert decision.fits is admitted, name
    found = {s.resource: (s.requested, s.used, s.limit) for s in decision.shortfalls}
    expected = {
        ledger_key(n): tuple(Quantity.parse(v) for v in values) for n, values in exceeded.items()
    }
    assert found == expected, name


# ------------------------------------------------------------ LimitRanger (admission_test.go)

# TestPodLimitFunc: (case, Container item, Pod item, pod, the constraint that fails or None).
# LimitRanger's errors name the constraint ("minimum cpu usage per Container is 50m, but request
# is 10m"); tenantgate's name the same bound, value and observed quantity.
LR: list[tuple[str, BoundsLevel | None, BoundsLevel | None, JSONDict, list[str]]] = [
    (
        "success: container within min and max",
        BoundsLevel(min=q({"cpu": "50m", "memory": "64Mi"}), max=q({"cpu": "2", "memory": "4Gi"})),
        None,
        pod_of(ctr("c", {"cpu": "100m", "memory": "128Mi"}, {"cpu": "1", "memory": "1Gi"})),
        [],
    ),
    (
        "error: request below the container minimum",
        BoundsLevel(min=q({"cpu": "50m"})),
        None,
        pod_of(ctr("c", {"cpu": "10m"}, {"cpu": "1"})),
        ["cpu request 10m is below the tenant's minimum 50m"],
    ),
    (
        "error: no request with a minimum",
        BoundsLevel(min=q({"memory": "64Mi"})),
        None,
        pod_of(ctr("c", {"cpu": "10m"})),
        ["memory request is not set; the tenant's minimum is 64Mi"],
    ),
    (
        "error: no limit with a maximum",
        BoundsLevel(max=q({"cpu": "2"})),
        None,
        pod_of(ctr("c", {"cpu": "1"})),
        ["cpu limit is not set; the tenant's maximum is 2"],
    ),
    (
        "success: a limit alone counts as the request (API defaulting)",
        BoundsLevel(min=q({"cpu": "50m"}), max=q({"cpu": "2"})),
        None,
        pod_of(ctr("c", limits={"cpu": "2"})),
        [],
    ),
    (
        "success: ratio exactly at the maximum",
        BoundsLevel(ratio=q({"memory": "4"})),
        None,
        pod_of(ctr("c", {"memory": "128Mi"}, {"memory": "512Mi"})),
        [],
    ),
    (
        "error: ratio above the maximum (LimitRanger: provided ratio is 5.000000)",
        BoundsLevel(ratio=q({"cpu": "4"})),
        None,
        pod_of(ctr("c", {"cpu": "100m"}, {"cpu": "500m"})),
        ["cpu limit 500m is 5 times its request 100m, above the tenant's maximum ratio 4"],
    ),
    (
        "error: a fractional ratio bound (1500m) is exceeded by 1.6",
        BoundsLevel(ratio=q({"cpu": "1500m"})),
        None,
        pod_of(ctr("c", {"cpu": "500m"}, {"cpu": "800m"})),
        ["cpu limit 800m is 1.6 times its request 500m, above the tenant's maximum ratio 1500m"],
    ),
    (
        "success: pod max over the sum of containers, init container below it",
        None,
        BoundsLevel(max=q({"cpu": "4"})),
        pod_of(
            ctr("a", {"cpu": "1"}, {"cpu": "2"}),
            ctr("b", {"cpu": "1"}, {"cpu": "2"}),
            init=[ctr("i", {"cpu": "1"}, {"cpu": "3"})],
        ),
        [],
    ),
    (
        "error: pod max exceeded by an init container (max of sum and init)",
        None,
        BoundsLevel(max=q({"cpu": "4"})),
        pod_of(ctr("a", {"cpu": "1"}, {"cpu": "2"}), init=[ctr("i", {"cpu": "1"}, {"cpu": "5"})]),
        ["cpu limit 5 is above the tenant's maximum 4"],
    ),
    (
        "error: pod max counts sidecars with the containers",
        None,
        BoundsLevel(max=q({"memory": "1Gi"})),
        pod_of(
            ctr("a", {"memory": "512Mi"}, {"memory": "768Mi"}),
            init=[
                {**ctr("s", {"memory": "128Mi"}, {"memory": "512Mi"}), "restartPolicy": "Always"}
            ],
        ),
        ["memory limit 1280Mi is above the tenant's maximum 1Gi"],
    ),
    (
        "success: pod overhead is not counted by LimitRanger",
        None,
        BoundsLevel(max=q({"cpu": "1"})),
        pod_of(ctr("a", {"cpu": "1"}, {"cpu": "1"}), overhead={"cpu": "500m"}),
        [],
    ),
    (
        "error: pod min below the requests' sum is fine, above it is not",
        None,
        BoundsLevel(min=q({"cpu": "2"})),
        pod_of(ctr("a", {"cpu": "500m"}, {"cpu": "1"}), ctr("b", {"cpu": "500m"}, {"cpu": "1"})),
        ["cpu request 1 is below the tenant's minimum 2"],
    ),
]


@pytest.mark.parametrize(
    ("name", "container", "pod_level", "pod", "failing"), LR, ids=[c[0] for c in LR]
)
def test_bounds_equal_limit_ranger(
    name: str,
    container: BoundsLevel | None,
    pod_level: BoundsLevel | None,
    pod: JSONDict,
    failing: list[str],
) -> None:
    found = bounds_violations(pod, Bounds(container, pod_level), tenant="t", pod_name="ns/p")
    assert [text.split(": ", 1)[1].split(" (tenant t, ")[0] for text in found] == failing, name


# TestMergePodResourceRequirements: defaults fill only what is missing; a set limit is the
# request already (the API server defaulted it), so no default request is added for it.
MERGE: list[tuple[str, JSONDict, JSONDict]] = [
    (
        "empty container gets both defaults",
        ctr("c"),
        {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
    ),
    (
        "a set request is kept, the limit defaulted",
        ctr("c", {"cpu": "200m"}),
        {
            "requests": {"cpu": "200m", "memory": "128Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
    ),
    (
        "a set limit is kept and no request added for it",
        ctr("c", limits={"memory": "1Gi"}),
        {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi", "cpu": "500m"}},
    ),
]


@pytest.mark.parametrize(("name", "container", "expected"), MERGE, ids=[m[0] for m in MERGE])
def test_defaults_merge_as_limit_ranger(name: str, container: JSONDict, expected: JSONDict) -> None:
    pod = pod_of(container)
    apply_defaults(
        pod,
        requests=q({"cpu": "100m", "memory": "128Mi"}),
        limits=q({"cpu": "500m", "memory": "512Mi"}),
    )
    assert pod["spec"]["containers"][0]["resources"] == expected, name


# ------------------------------------------------------- end to end, through the admitter

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  rq:
    namespaces: [ns]
    quota:
      guaranteed: {requests.cpu: "3", limits.cpu: "4", limits.memory: 8Gi, pods: "5"}
"""


def test_admission_numbers_equal_the_quota_plugin() -> None:
    """Three pods of limits.cpu 1500m against limits.cpu 4: two fit, the third is denied
    with ResourceQuota's numbers (requested 1500m, used 3, hard 4)."""
    policy: Policy = make_policy(CONFIG)
    ledger = MemoryLedger()
    admitter = PolicyAdmitter(policy, ledger)
    pod = pod_of(ctr("c", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1500m", "memory": "2Gi"}))
    verdicts = [
        asyncio.run(
            admitter.mutate(dataclasses.replace(create(pod, uid=f"r{i}"), name=f"p{i}"), now=1.0)
        )
        for i in range(3)
    ]
    assert [v.allowed for v in verdicts] == [True, True, False]
    assert verdicts[2].message == (
        "exceeded tenant quota: rq: requested limits.cpu=1500m, used limits.cpu=3/4 "
        "(burst ceiling), guaranteed limits.cpu=4"
    )
    assert ledger.get("rq").guaranteed == q(
        {"cpu": "1", "memory": "2Gi", "limits.cpu": "3", "limits.memory": "4Gi", "pods": "2"}
    )
    assert limit_keys(policy.tenants["rq"].quota.ceiling) == ("cpu", "memory")
