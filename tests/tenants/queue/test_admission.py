"""Queue mode at admission: the gate, the queued entry, the warning, maxPending, the gate's owner.

A gate can be set only when a pod is created and only removed afterwards, and a pod with
``spec.nodeName`` cannot carry one (``ValidatePodCreate`` / ``ValidatePodUpdate`` in
pkg/apis/core/validation/validation.go): tenantgate decides at creation and releases later.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from tenants.config import Policy
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger
from tenants.lint import lint_text
from tenants.verdicts import AdmissionInput
from tests.tenants.conftest import CONFIG, make_pod, make_policy, stored
from tests.tenants.test_decisions import Chain, patched

GATE = {"name": "tenantgate.io/quota"}
OWNER = "system:serviceaccount:tenantgate-system:tenantgate"

QUEUE_CONFIG = CONFIG.replace(
    """  other:
    namespaces: [other]""",
    """  q:
    namespaces: [q]
    quota: {guaranteed: {cpu: "2"}}
    priorityClasses: {allowed: [batch-low]}
    overQuota: queue
    queue: {maxPending: 3, aging: {intervalSeconds: 60, step: 100, maxBoost: 500}}
  qb:
    namespaces: [qb]
    quota: {guaranteed: {cpu: "1"}, burst: {max: {cpu: "2"}}}
    overQuota: queue
    queue: {tier: burst}
  other:
    namespaces: [other]""",
)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return make_policy(QUEUE_CONFIG)


@pytest.fixture
def chain(policy: Policy) -> Chain:
    return Chain(policy)


def qpod(cpu: str = "1", namespace: str = "q", **spec: Any) -> dict[str, Any]:
    return make_pod(cpu=cpu, memory=None, namespace=namespace, **spec)


def fill(chain: Chain, count: int, namespace: str = "q") -> None:
    for index in range(count):
        mutated, validated, _ = chain.admit(
            qpod(namespace=namespace), uid=f"fill-{index}", pod_uid=f"fill-{index}"
        )
        assert mutated.allowed
        assert validated is not None
        assert validated.allowed
        assert mutated.patched is not None
        assert "schedulingGates" not in mutated.patched["spec"]


def test_an_over_quota_pod_is_gated_labelled_and_told_its_position(chain: Chain) -> None:
    fill(chain, 2)
    pod = qpod(schedulingGates=[{"name": "example.com/other"}])
    mutated, validated, final = chain.admit(pod, uid="w-1", pod_uid="w-1")
    assert mutated.allowed
    assert final["spec"]["schedulingGates"] == [{"name": "example.com/other"}, GATE]
    assert final["metadata"]["labels"]["tenantgate.io/tier"] == "queued"
    assert final["spec"]["priorityClassName"] == "tenant-guaranteed"
    assert final["spec"]["priority"] == 1000
    assert mutated.warnings[-1] == (
        "queued: q is at its guarantee (cpu 2/2); position 1 of 1; released when q's "
        "guaranteed room frees"
    )
    assert validated is not None
    assert validated.allowed
    ledger = chain.state("q")
    assert ledger.guaranteed["cpu"].nanos == 2 * 10**9  # queued pods are not usage
    [entry] = ledger.queued.values()
    assert entry.pod_uid == "w-1"
    assert entry.priority == 1000


def test_priority_and_age_decide_the_position_told(chain: Chain) -> None:
    fill(chain, 2)
    chain.admit(qpod(priorityClassName="batch-low"), uid="low", pod_uid="low")
    chain.now += 120
    mutated, _, _ = chain.admit(qpod(), uid="high", pod_uid="high")
    assert "position 1 of 2" in mutated.warnings[-1]  # 1000 beats low's 100 + 200
    mutated, _, _ = chain.admit(qpod(priorityClassName="batch-low"), uid="l2", pod_uid="l2")
    assert "position 3 of 3" in mutated.warnings[-1]


def test_a_pod_that_fits_queues_behind_pods_already_waiting(chain: Chain) -> None:
    fill(chain, 1)
    chain.admit(qpod(cpu="2"), uid="big", pod_uid="big")  # does not fit: waits
    mutated, _, final = chain.admit(qpod(), uid="small", pod_uid="small")
    assert final["spec"]["schedulingGates"] == [GATE]
    assert mutated.warnings[-1] == (
        "queued: 1 pod waits ahead of it for q's guaranteed room; position 2 of 2; released "
        "when q's guaranteed room frees"
    )
    assert chain.state("q").guaranteed["cpu"].nanos == 10**9


def test_max_pending_rejects_with_the_limit(chain: Chain) -> None:
    fill(chain, 2)
    for index in range(3):
        assert chain.admit(qpod(), uid=f"w-{index}", pod_uid=f"w-{index}")[0].allowed
    denied = chain.mutate(qpod(), uid="w-4")
    assert not denied.allowed
    assert denied.message == (
        "exceeded tenant quota: q: requested cpu=1, used cpu=2/2 (burst ceiling), guaranteed "
        "cpu=2; tenant q's queue is full (3 pods waiting, maxPending 3): try again when pods "
        "of q finish"
    )
    assert denied.cause == "queue_full"  # the reason label of tenantgate_denials_total


def test_a_gated_pod_that_finds_the_queue_full_at_validate_is_counted_as_queue_full(
    chain: Chain,
) -> None:
    """A gate set without the mutating webhook is queued by /validate, up to maxPending."""
    fill(chain, 2)
    for index in range(3):
        assert chain.admit(qpod(), uid=f"w-{index}", pod_uid=f"w-{index}")[0].allowed
    denied = chain.validate(stored(qpod(schedulingGates=[GATE]), pod_uid="raw"), uid="raw")
    assert not denied.allowed
    assert denied.message == "tenant q's queue is full (3 pods waiting, maxPending 3)"
    assert denied.cause == "queue_full"


def test_dry_run_answers_the_same_and_records_nothing(chain: Chain) -> None:
    fill(chain, 2)
    chain.admit(qpod(), uid="w-1", pod_uid="w-1")
    before = chain.state("q")
    dry, validated, _ = chain.admit(qpod(), uid="w-2", pod_uid="w-2", dry_run=True)
    assert validated is not None
    assert validated.allowed
    assert chain.state("q") is before
    real, _, _ = chain.admit(qpod(), uid="w-2", pod_uid="w-2")
    assert dry.warnings == real.warnings
    assert dry.patched is not None
    told = copy.deepcopy(dry.patched)
    # Only a dry-run carries its tier to its /validate.
    assert told["metadata"]["annotations"].pop("tenantgate.io/dry-run-tier") == "queued"
    assert told == real.patched


def test_reinvocation_keeps_one_entry(chain: Chain) -> None:
    fill(chain, 2)
    first = chain.mutate(qpod(), uid="w-1")
    assert first.patched is not None
    again = chain.mutate(patched(qpod(), first), uid="w-1")
    assert again.allowed
    assert again.patched is not None
    assert again.patched["spec"]["schedulingGates"] == [GATE]
    assert len(chain.state("q").queued) == 1


@pytest.mark.parametrize(
    ("namespace", "cpu", "reason"),
    [
        ("q", "3", "it is larger than tenant q's guarantee (cpu=2), so it is never queued"),
        ("qb", "3", "it is larger than tenant qb's ceiling (cpu=2), so it is never queued"),
    ],
)
def test_a_pod_that_could_never_fit_is_rejected(
    chain: Chain, namespace: str, cpu: str, reason: str
) -> None:
    denied = chain.mutate(qpod(cpu=cpu, namespace=namespace))
    assert not denied.allowed
    assert denied.message.endswith(reason)
    assert not chain.state(namespace).queued


def test_a_pod_with_a_node_name_is_never_queued(chain: Chain) -> None:
    fill(chain, 2)
    denied = chain.mutate(qpod(nodeName="node-1"))
    assert not denied.allowed
    assert denied.message.endswith(
        "; a pod with spec.nodeName cannot wait behind a scheduling gate"
    )


def test_a_burst_tier_queue_gives_the_burst_class(chain: Chain) -> None:
    fill(chain, 2, namespace="qb")  # one guaranteed, one burst: the ceiling is reached
    mutated, validated, final = chain.admit(qpod(namespace="qb"), uid="b", pod_uid="b")
    assert final["spec"]["priorityClassName"] == "tenant-burst"
    assert final["spec"]["preemptionPolicy"] == "Never"
    assert "released when qb's burst room frees" in mutated.warnings[-1]
    assert validated is not None
    assert validated.allowed


def test_a_gate_set_without_the_mutating_webhook_is_queued_by_validate(chain: Chain) -> None:
    fill(chain, 2)
    pod = stored(qpod(schedulingGates=[GATE]), pod_uid="raw")
    verdict = chain.validate(pod, uid="raw")
    assert verdict.allowed
    assert "position 1 of 1" in verdict.warnings[0]
    [entry] = chain.state("q").queued.values()
    assert entry.id == "q-raw"


def test_a_gate_stripped_by_a_later_webhook_means_the_pod_must_fit_now(chain: Chain) -> None:
    fill(chain, 2)
    mutated = chain.mutate(qpod(), uid="w-1")
    final = stored(patched(qpod(), mutated), pod_uid="w-1")
    del final["spec"]["schedulingGates"]
    denied = chain.validate(final, uid="w-1")
    assert not denied.allowed
    assert denied.message.endswith(
        "the scheduling gate tenantgate.io/quota was removed by a later admission step, so "
        "the pod must fit now"
    )
    assert not chain.state("q").queued


def _update(old: dict[str, Any], new: dict[str, Any], user: str) -> AdmissionInput:
    return AdmissionInput(
        uid="u",
        operation="UPDATE",
        namespace="q",
        name="worker-x",
        object=new,
        old_object=old,
        username=user,
    )


def test_only_tenantgate_removes_the_gate(policy: Policy) -> None:
    chain = Chain(policy)
    fill(chain, 2)
    _, _, final = chain.admit(qpod(), uid="w-1", pod_uid="w-1")
    released = copy.deepcopy(final)
    del released["spec"]["schedulingGates"]
    released["metadata"]["labels"]["tenantgate.io/tier"] = "guaranteed"
    admitter: PolicyAdmitter = chain.admitter
    denied = asyncio.run(admitter.validate(_update(final, released, "alice"), now=chain.now))
    assert not denied.allowed
    assert denied.message == (
        "pod q/worker-x: the scheduling gate tenantgate.io/quota is removed only by tenantgate "
        f"({OWNER}) when the tenant has room; position 1 of 1 in tenant q's queue"
    )
    allowed = asyncio.run(admitter.validate(_update(final, released, OWNER), now=chain.now))
    assert allowed.allowed
    relabel = copy.deepcopy(final)
    relabel["metadata"]["labels"]["tenantgate.io/tier"] = "guaranteed"
    assert not asyncio.run(admitter.validate(_update(final, relabel, OWNER), now=chain.now)).allowed


def test_the_gate_owner_is_configurable(policy: Policy) -> None:
    admitter = PolicyAdmitter(policy, MemoryLedger(), gate_owner="system:serviceaccount:x:y")
    assert admitter.gate_owner == "system:serviceaccount:x:y"


def test_lint_checks_the_queue_block() -> None:
    text = QUEUE_CONFIG.replace(
        "queue: {maxPending: 3, aging: {intervalSeconds: 60, step: 100, maxBoost: 500}}",
        "queue: {aging: {intervalSeconds: 60, step: 100, maxBoost: 50}}",
    ).replace("queue: {tier: burst}", "queue: {aging: {step: 30, maxBoost: 100}}")
    text = text.replace(
        '    quota: {guaranteed: {cpu: "1"}, burst: {max: {cpu: "2"}}}\n',
        '    quota: {guaranteed: {cpu: "1"}}\n',
    )
    report = lint_text(text, filename="cfg.yaml")
    messages = [str(p) for p in report.problems]
    assert any(
        "tenants.q.queue.aging: aging never changes a priority (step 100, maxBoost 50)" in m
        for m in messages
    ), messages
    assert any(
        "tenants.qb.queue.aging.maxBoost: maxBoost 100 is not a multiple of step 30" in m
        for m in messages
    ), messages


def test_lint_flags_a_burst_tier_queue_without_burst() -> None:
    text = QUEUE_CONFIG.replace(
        '    quota: {guaranteed: {cpu: "1"}, burst: {max: {cpu: "2"}}}\n',
        '    quota: {guaranteed: {cpu: "1"}}\n',
    )
    messages = [str(p) for p in lint_text(text, filename="cfg.yaml").problems]
    assert any("tenants.qb.queue.tier: tenant qb has no burst capacity" in m for m in messages)


def test_without_the_mutating_webhook_an_over_quota_pod_is_told_to_retry(chain: Chain) -> None:
    fill(chain, 2)
    # /mutate failed open (its failurePolicy is Ignore): only it can gate the pod.
    verdict = chain.validate(stored(qpod(), pod_uid="skipped"), uid="skipped")
    assert not verdict.allowed
    assert verdict.code == 409
    assert verdict.message.endswith(
        "tenantgate's mutating webhook did not run for pod q/worker-x, so it could not be "
        "queued; retry"
    )
    assert not chain.state("q").queued
