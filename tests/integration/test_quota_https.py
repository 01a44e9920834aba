"""Quota over real HTTPS: 200 concurrent pods for team-a, sent the way the API server sends them.

tenantgate runs as ``tenantgate serve --offline`` runs it: :func:`admission.runtime.build_runtime`
on the example config, served by the real :class:`~admission.server.WebhookServer` (TLS, ports
bound to 0). A client that trusts only tenantgate's CA plays kube-apiserver for each pod, over
many simultaneous connections: ``POST /mutate`` with an AdmissionReview v1 (a ``generateName``,
no name, no uid), apply the returned JSONPatch, give the pod a generated name, a uid and a
creation timestamp (as ``BeforeCreate`` does), ``POST /validate`` with it. Every webhook call
carries its own request uid, as the API server's do.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import jsonpatch
import pytest

from tenants.config import Policy
from tenants.configfile import load_policy
from tenants.ledger import TenantLedger, ledger_to_json
from tests.integration.harness import WAIT, Tenantgate, offline_tenantgate
from tests.tlsclient import client_context

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = ROOT / "examples" / "tenantgate.yaml"
# A ReplicaSet's pod as kube-apiserver hands it to a mutating webhook (defaults applied).
API_SERVER_REVIEW = ROOT / "tests" / "fixtures" / "reviews" / "v1-create-pod.json"

PODS: Final = 200
CONNECTIONS: Final = 50
TENANT: Final = "team-a"
# team-a: guaranteed cpu 4 (8 pods of 500m), burst ceiling cpu 6 (4 more); memory and pod
# counts never bind, so every denial names cpu only.
QUOTA_MESSAGE: Final = (
    "exceeded tenant quota: team-a: requested cpu=500m, used cpu=6/6 (burst ceiling), "
    "guaranteed cpu=4"
)
# Nothing in the background may change the ledger during a run: no expiry sweep, no recount.
# kube's rand.SafeEncodeString alphabet, which generateName suffixes use.
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(EXAMPLE_CONFIG)


@pytest.fixture
def tenantgate(tmp_path: Path, cert_dir: Path) -> Iterator[Tenantgate]:
    with offline_tenantgate(EXAMPLE_CONFIG, cert_dir) as running:
        yield running


def pod_template() -> dict[str, Any]:
    """The fixture's pod, asking for ``cpu: 500m, memory: 256Mi``."""
    pod: dict[str, Any] = json.loads(API_SERVER_REVIEW.read_text())["request"]["object"]
    (container,) = pod["spec"]["containers"]
    container["resources"] = {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"memory": "256Mi"},
    }
    return pod


# --------------------------------------------------------------------------- the API server


@dataclass(frozen=True)
class Outcome:
    """What the API server got for one pod: both responses, and the pod it would store."""

    mutate_uid: str
    mutate: dict[str, Any]
    validate: dict[str, Any] | None = None
    pod: dict[str, Any] | None = None

    @property
    def admitted(self) -> bool:
        return self.pod is not None

    @property
    def patch(self) -> list[dict[str, Any]]:
        encoded = self.mutate.get("patch")
        if encoded is None:
            return []
        assert self.mutate["patchType"] == "JSONPatch"
        operations: list[dict[str, Any]] = json.loads(base64.b64decode(encoded))
        return operations


def admission_review(pod: dict[str, Any], *, uid: str, name: str, dry_run: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = ["All"]
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": TENANT,
        "operation": "CREATE",
        "userInfo": {
            "username": "system:serviceaccount:kube-system:replicaset-controller",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        },
        "object": pod,
        "oldObject": None,
        "dryRun": dry_run,
        "options": options,
    }
    if name:
        request["name"] = name
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def call_webhook(http: httpx.AsyncClient, path: str, review: dict[str, Any]) -> Any:
    response = await http.post(path, json=review)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert answer["response"]["uid"] == review["request"]["uid"]
    return answer["response"]


async def create_pod(
    http: httpx.AsyncClient,
    template: dict[str, Any],
    *,
    dry_run: bool,
    mutate_uid: str | None = None,
) -> Outcome:
    pod = copy.deepcopy(template)
    uid = mutate_uid or str(uuid.uuid4())
    mutated = await call_webhook(
        http, "/mutate", admission_review(pod, uid=uid, name="", dry_run=dry_run)
    )
    outcome = Outcome(uid, mutated)
    if not mutated["allowed"]:
        return outcome
    pod = jsonpatch.apply_patch(pod, outcome.patch)
    meta = pod["metadata"]
    meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_ALPHABET, k=5))
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = "2025-03-14T09:26:53Z"
    validated = await call_webhook(
        http,
        "/validate",
        admission_review(pod, uid=str(uuid.uuid4()), name=meta["name"], dry_run=dry_run),
    )
    return Outcome(uid, mutated, validated, pod if validated["allowed"] else None)


def https_client(tenantgate: Tenantgate) -> httpx.AsyncClient:
    ca_file = tenantgate.settings.cert_dir / "ca.crt"
    return httpx.AsyncClient(
        base_url=tenantgate.url,
        verify=client_context(ca_file),
        limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS),
        timeout=httpx.Timeout(WAIT),
        trust_env=False,
    )


def create_pods(tenantgate: Tenantgate, *, count: int, dry_run: bool) -> list[Outcome]:
    """``count`` pods created at once, over up to CONNECTIONS simultaneous connections."""
    template = pod_template()

    async def run() -> list[Outcome]:
        async with https_client(tenantgate) as http:
            return list(
                await asyncio.gather(
                    *(create_pod(http, template, dry_run=dry_run) for _ in range(count))
                )
            )

    return asyncio.run(run())


def create_one(tenantgate: Tenantgate, *, dry_run: bool, mutate_uid: str) -> Outcome:
    async def run() -> Outcome:
        async with https_client(tenantgate) as http:
            return await create_pod(http, pod_template(), dry_run=dry_run, mutate_uid=mutate_uid)

    return asyncio.run(run())


def ledger_of(tenantgate: Tenantgate) -> TenantLedger:
    """team-a's ledger, read on tenantgate's event loop where it changes."""
    return tenantgate.call(lambda: tenantgate.state.ledger.get(TENANT))


def snapshot(tenantgate: Tenantgate) -> dict[str, TenantLedger]:
    return tenantgate.call(tenantgate.state.ledger.snapshot)


def mutated_without_reservation(outcome: Outcome) -> str:
    """The pod /mutate returned, its reservation id (derived from the request uid) blanked."""
    pod = jsonpatch.apply_patch(pod_template(), outcome.patch)
    pod["metadata"]["annotations"]["tenantgate.io/reservation"] = "<id>"
    return json.dumps(pod, sort_keys=True)


# --------------------------------------------------------------------------- the tests


def test_200_concurrent_pods_admit_exactly_the_quota(
    tenantgate: Tenantgate, policy: Policy
) -> None:
    outcomes = create_pods(tenantgate, count=PODS, dry_run=False)

    admitted = [o for o in outcomes if o.admitted]
    denied = [o for o in outcomes if not o.mutate["allowed"]]
    assert (len(admitted), len(denied)) == (12, 188)
    # Every pod /mutate admitted passes /validate: its reservation covers it.
    assert all(o.validate is not None and o.validate["allowed"] for o in outcomes if o.validate)

    tiers = Counter(o.pod["metadata"]["labels"]["tenantgate.io/tier"] for o in admitted if o.pod)
    assert tiers == {"guaranteed": 8, "burst": 4}
    classes = {
        "guaranteed": policy.tenants[TENANT].guaranteed_class,
        "burst": policy.burst_class,
    }
    assert classes == {"guaranteed": "tenant-guaranteed", "burst": "tenant-burst"}
    for outcome in admitted:
        assert outcome.pod is not None
        labels = outcome.pod["metadata"]["labels"]
        tier = labels["tenantgate.io/tier"]
        spec = outcome.pod["spec"]
        priority_class = policy.priority_classes[classes[tier]]
        assert labels["tenantgate.io/tenant"] == TENANT
        assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
            classes[tier],
            priority_class.value,
            priority_class.preemptionPolicy,
        )
        if tier == "burst":
            assert any("may be preempted" in w for w in outcome.mutate["warnings"])

    for outcome in denied:
        assert outcome.mutate["status"] == {
            "code": 403,
            "reason": "Forbidden",
            "message": QUOTA_MESSAGE,
        }
        assert "patch" not in outcome.mutate
        assert outcome.validate is None

    ledger = ledger_of(tenantgate)
    assert ledger_to_json(ledger)["used"] == {
        "guaranteed": {"cpu": "4", "memory": "2Gi", "pods": "8"},
        "burst": {"cpu": "2", "memory": "1Gi", "pods": "4"},
    }
    # One reservation per admitted pod, bound to it by /validate, in the pod's tier.
    stored = {
        o.pod["metadata"]["uid"]: (
            o.pod["metadata"]["annotations"]["tenantgate.io/reservation"],
            o.pod["metadata"]["labels"]["tenantgate.io/tier"],
        )
        for o in admitted
        if o.pod
    }
    assert {r.pod_uid: (r.id, r.tier) for r in ledger.reservations.values()} == stored
    status = tenantgate.status()["tenants"][TENANT]
    assert (status["used"], status["reservations"]) == (ledger_to_json(ledger)["used"], 12)

    # The same run as a dry run, on the full ledger: the answers real requests get now, and
    # nothing booked.
    before = snapshot(tenantgate)
    dry = create_pods(tenantgate, count=PODS, dry_run=True)
    assert snapshot(tenantgate) == before
    assert [o.mutate["allowed"] for o in dry] == [False] * PODS
    assert {json.dumps(o.mutate["status"], sort_keys=True) for o in dry} == {
        json.dumps(denied[0].mutate["status"], sort_keys=True)
    }


def test_dry_run_answers_as_a_real_request_would_and_books_nothing(
    tenantgate: Tenantgate, policy: Policy
) -> None:
    before = snapshot(tenantgate)
    dry = create_pods(tenantgate, count=PODS, dry_run=True)
    assert snapshot(tenantgate) == before
    assert tenantgate.status()["tenants"][TENANT]["used"] == {"guaranteed": {}, "burst": {}}

    # Nothing was booked, so every pod met the empty ledger: all on the guarantee, with the
    # same patch (up to the reservation id, which follows the request uid).
    assert all(o.admitted for o in dry)
    tiers = {o.pod["metadata"]["labels"]["tenantgate.io/tier"] for o in dry if o.pod}
    assert tiers == {"guaranteed"}
    assert len({mutated_without_reservation(o) for o in dry}) == 1
    guaranteed = policy.priority_classes["tenant-guaranteed"]
    assert all(
        (o.pod["spec"]["priorityClassName"], o.pod["spec"]["priority"])
        == ("tenant-guaranteed", guaranteed.value)
        for o in dry
        if o.pod
    )

    # The real request for one of them gets exactly the dry-run's answer, and is booked; the
    # one difference is the annotation carrying the dry-run's tier to its /validate.
    sample = dry[0]
    real = create_one(tenantgate, dry_run=False, mutate_uid=sample.mutate_uid)
    assert {k: v for k, v in real.mutate.items() if k != "patch"} == {
        k: v for k, v in sample.mutate.items() if k != "patch"
    }
    sample_pod = jsonpatch.apply_patch(pod_template(), sample.patch)
    assert sample_pod["metadata"]["annotations"].pop("tenantgate.io/dry-run-tier") == "guaranteed"
    assert jsonpatch.apply_patch(pod_template(), real.patch) == sample_pod
    assert real.validate is not None
    assert sample.validate is not None
    assert real.validate == {**sample.validate, "uid": real.validate["uid"]}
    assert real.pod is not None
    ledger = ledger_of(tenantgate)
    assert ledger_to_json(ledger)["used"]["guaranteed"] == {
        "cpu": "500m",
        "memory": "256Mi",
        "pods": "1",
    }
    assert [r.pod_uid for r in ledger.reservations.values()] == [real.pod["metadata"]["uid"]]
