"""An in-place resize is charged from what the pod holds, in admission and in the controller.

``PodRequests`` with ``UseStatusResources`` (``k8s.io/component-helpers/resource/helpers.go``,
Kubernetes 1.33), as ``pkg/quota/v1/evaluator/core/pods.go`` charges pods: the largest of the
spec, the containers' ``allocatedResources`` and actual ``resources``; while the resize is
Infeasible, only the last two.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from classifier.quantities import Quantity
from tenants.config import Policy
from tenants.controller import LedgerController, find_drift, pod_facts
from tenants.ledger import MemoryLedger
from tests.tenants.test_decisions import Chain, fill, resized, update


def running(pod: dict[str, Any], cpu: str, *, allocated: str | None = None) -> dict[str, Any]:
    """``pod`` as its kubelet reports it: ``allocated`` (default: ``cpu``) allocated and run."""
    started = copy.deepcopy(pod)
    held = allocated or cpu
    started["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "app",
                "allocatedResources": {"cpu": held, "memory": "256Mi"},
                "resources": {"requests": {"cpu": held, "memory": "256Mi"}},
            }
        ],
    }
    return started


def infeasible(pod: dict[str, Any]) -> dict[str, Any]:
    refused = copy.deepcopy(pod)
    refused["status"]["conditions"] = [
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
    ]
    return refused


def cpu(chain: Chain) -> Quantity:
    return chain.state().guaranteed["cpu"]


def validate_resize(chain: Chain, old: dict[str, Any], new: dict[str, Any]) -> Any:
    return asyncio.run(chain.admitter.validate(update(old, new, sub_resource="resize"), now=0))


def test_a_requested_shrink_frees_nothing_at_admission(policy: Policy) -> None:
    chain = Chain(policy)
    (final,) = fill(chain, 1)
    pod = running(final, "500m")
    grown = resized(pod, "2")
    assert validate_resize(chain, pod, grown).allowed
    assert cpu(chain) == Quantity.parse("2")
    # The kubelet applied the growth; now a shrink is asked for: still 2 held on the node.
    applied = running(grown, "2")
    assert validate_resize(chain, applied, resized(applied, "1")).allowed
    assert cpu(chain) == Quantity.parse("2")


def test_growth_is_charged_only_above_what_is_held(policy: Policy) -> None:
    chain = Chain(policy)
    (final,) = fill(chain, 1)
    # The spec says 500m, the node still holds 3 (a shrink not applied yet).
    pod = running(resized(final, "500m"), "500m", allocated="3")
    # Growing back to 2 is still under what is held: no more quota.
    before = chain.state()
    verdict = validate_resize(chain, pod, resized(pod, "2"))
    assert verdict.allowed
    assert chain.state().guaranteed == before.guaranteed


def test_the_controller_follows_what_the_pod_holds(policy: Policy) -> None:
    chain = Chain(policy)
    (final,) = fill(chain, 1)
    controller = LedgerController(chain.ledger, policy=policy)
    now = 1000.0

    def observe(pod: dict[str, Any], version: str) -> None:
        pod = copy.deepcopy(pod)
        pod["metadata"]["resourceVersion"] = version
        facts = pod_facts(pod)
        assert facts is not None
        controller.apply_pod(facts, now=now)

    started = running(final, "500m")
    observe(started, "1")
    assert cpu(chain) == Quantity.parse("500m")
    grown = resized(started, "3")
    assert validate_resize(chain, started, grown).allowed
    observe(grown, "2")  # the stored resize: max(3, 500m, 500m) as admission charged
    assert cpu(chain) == Quantity.parse("3")
    refused = infeasible(grown)
    observe(refused, "3")  # the node cannot fit it: what it holds, 500m
    assert cpu(chain) == Quantity.parse("500m")
    assert controller.recount(now=now).repaired is False
    back = resized(refused, "500m")
    back["status"].pop("conditions")
    observe(back, "4")
    assert cpu(chain) == Quantity.parse("500m")
    frozen = controller.freeze(now=now)
    assert find_drift(frozen) == frozenset()


def test_recharging_twice_changes_nothing(policy: Policy) -> None:
    ledger = MemoryLedger()
    chain = Chain(policy, ledger)
    (final,) = fill(chain, 1)
    controller = LedgerController(ledger, policy=policy)
    pod = running(final, "1", allocated="1")
    facts = pod_facts(pod)
    assert facts is not None
    controller.apply_pod(facts, now=0)
    first = chain.state()
    controller.apply_pod(facts, now=0)
    assert chain.state() is first
