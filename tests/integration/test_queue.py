"""Queue mode on the real control plane, through the real client and the real admission chain.

Over-quota pods wait behind the scheduling gate ``tenantgate.io/quota`` and are released, in
order, as room frees. The facts the design rests on are the API server's: a gate can only be
removed once the pod exists, and ``priority`` never changes (``ValidatePodUpdate`` in
pkg/apis/core/validation/validation.go); kube-apiserver enforces both.

Aging reads each pod's creationTimestamp, which kube-apiserver writes with the real time in
whole seconds. tenantgate's clock is injected: moved forward, it ages every waiting pod alike;
pinned to a pod's creation second, it gives pods created seconds apart exact, different ages.
"""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testcluster import Cluster
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import (
    Tenantgate,
    api_client,
    create_namespace,
    eventually,
    http_json,
    pod,
)

GATE = "tenantgate.io/quota"

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
  batch-low: {value: 100}
  batch-high: {value: 500}
profiles: {general: {}}
reservationTTLSeconds: 3600
tenants:
  team-q:
    namespaces: [team-q]
    quota: {guaranteed: {cpu: "12"}}
    overQuota: queue
    queue: {maxPending: 8}
  team-s:
    namespaces: [team-s]
    quota: {guaranteed: {cpu: "4"}}
    overQuota: queue
    queue: {ordering: StrictFIFO}
  team-b:
    namespaces: [team-b]
    quota: {guaranteed: {cpu: "4"}}
    overQuota: queue
    queue:
      ordering: BestEffortFIFO
      aging: {intervalSeconds: 60, step: 100, maxBoost: 200}
  team-p:
    namespaces: [team-p]
    quota: {guaranteed: {cpu: "2"}}
    priorityClasses: {allowed: [batch-low, batch-high]}
    overQuota: queue
    queue:
      aging: {intervalSeconds: 1, step: 100, maxBoost: 1000}
"""


class Clock:
    """tenantgate's clock: the real time moved forward by the test, or pinned by it."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.pinned: float | None = None

    def __call__(self) -> float:
        return self.pinned if self.pinned is not None else time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def pin(self, at: float) -> None:
        self.pinned = at


@pytest.fixture
def clock() -> Clock:
    return Clock()


def created_at(core: Any, namespace: str, name: str) -> float:
    """The pod's creationTimestamp (whole seconds, as kube-apiserver writes it)."""
    stored = core.read_namespaced_pod(name, namespace)
    stamp: float = stored.metadata.creation_timestamp.timestamp()
    return stamp


def create_at(core: Any, namespace: str, body: dict[str, Any], *, second: float) -> None:
    """Create ``body`` so that kube-apiserver stamps it with ``second`` (a whole second)."""
    time.sleep(max(0.0, second + 0.05 - time.time()))
    core.create_namespaced_pod(namespace, body)
    stamped = created_at(core, namespace, body["metadata"]["name"])
    assert stamped == second, f"created at {stamped}, not {second}: the API server was slow"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def tenantgate(
    start_tenantgate: StartTenantgate, core: Any, clock: Clock, kubeconfig: Path
) -> Tenantgate:
    # batch-low (100) is installed from deploy/webhooks; batch-high is this test's own.
    api = api_client(kubeconfig)
    scheduling: Any = client.SchedulingV1Api(api)
    scheduling.create_priority_class({"metadata": {"name": "batch-high"}, "value": 500})
    api.close()
    started = start_tenantgate(clock=clock)
    for namespace in ("team-q", "team-s", "team-b", "team-p"):
        create_namespace(core, {"metadata": {"name": namespace}})
    return started


def gated(stored: Any) -> bool:
    return any(gate.name == GATE for gate in stored.spec.scheduling_gates or [])


def create(
    core: Any, namespace: str, name: str, *, dry_run: bool = False, **kwargs: Any
) -> tuple[Any, list[str]]:
    """Create a pod; returns what was stored (or would be) and the API server's warnings."""
    body = pod(name, **kwargs)
    response = core.create_namespaced_pod(
        namespace, body, _preload_content=False, **({"dry_run": "All"} if dry_run else {})
    )
    warnings = [
        value.split('"', 1)[1].rsplit('"', 1)[0]
        for key, value in response.headers.items()
        if key.lower() == "warning" and '"' in value
    ]
    if dry_run:
        return response, warnings
    return core.read_namespaced_pod(name, namespace), warnings


def with_class(name: str, class_name: str, cpu: str = "1") -> dict[str, Any]:
    body = pod(name, cpu=cpu)
    body["spec"]["priorityClassName"] = class_name
    return body


def listing(tenantgate: Tenantgate, tenant: str) -> list[dict[str, Any]]:
    code, document = http_json(f"{tenantgate.metrics_url}/queue?tenant={tenant}")
    assert code == 200, document
    rows: list[dict[str, Any]] = document["tenants"][tenant]["pods"]
    return rows


def waiting(tenantgate: Tenantgate, tenant: str) -> list[str]:
    return [row["pod"].split("/", 1)[1] for row in listing(tenantgate, tenant)]


def ungated(core: Any, namespace: str) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod(namespace).items if not gated(p)}


def settled(tenantgate: Tenantgate, tenant: str, cpu: str) -> None:
    """Wait until the ledger charges ``cpu`` and the releaser has nothing left to look at."""

    def done() -> bool:
        def check() -> bool:
            runtime = tenantgate.state
            used = runtime.ledger.get(tenant).guaranteed.get("cpu")
            releaser = runtime.releaser
            return str(used or "0") == cpu and releaser is not None and releaser.idle

        return tenantgate.call(check)

    try:
        eventually(done, f"{tenant} settled at cpu {cpu}")
    except AssertionError:
        runtime = tenantgate.state
        releaser = runtime.releaser
        detail = tenantgate.call(
            lambda: (
                runtime.ledger.get(tenant),
                releaser.stats if releaser is not None else None,
                releaser.idle if releaser is not None else None,
            )
        )
        raise AssertionError(f"{tenant} not settled at cpu {cpu}: {detail}") from None


def fill(core: Any, namespace: str, count: int) -> None:
    for index in range(count):
        stored, _ = create(core, namespace, f"run-{index}")
        assert not gated(stored)


def delete(core: Any, namespace: str, name: str, tenantgate: Tenantgate | None = None) -> None:
    """Delete a pod; with ``tenantgate``, wait until its controller has seen it go."""
    uid = core.read_namespaced_pod(name, namespace).metadata.uid
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    if tenantgate is not None:
        eventually(
            lambda: tenantgate.call(lambda: tenantgate.state.controller.tracked(uid)) is None,
            f"tenantgate to see {name} deleted",
        )


# --------------------------------------------------------------------------- the basics


def test_over_quota_pods_wait_in_line_and_deletions_release_the_best_placed(
    tenantgate: Tenantgate, core: Any
) -> None:
    results = [create(core, "team-q", f"q-{i:02d}") for i in range(20)]
    admitted = [p.metadata.name for p, _ in results if not gated(p)]
    queued = [p for p, _ in results if gated(p)]
    assert admitted == [f"q-{i:02d}" for i in range(12)]
    assert [p.metadata.name for p in queued] == [f"q-{i:02d}" for i in range(12, 20)]
    first = queued[0]
    assert first.metadata.labels["tenantgate.io/tier"] == "queued"
    assert first.spec.priority_class_name == "tenant-guaranteed"
    assert first.spec.priority == 1000
    assert (
        "queued: team-q is at its guarantee (cpu 12/12); position 3 of 3; released when "
        "team-q's guaranteed room frees"
    ) in results[14][1]
    eventually(lambda: len(listing(tenantgate, "team-q")) == 8, "8 pods in the queue")
    assert [row["position"] for row in listing(tenantgate, "team-q")] == list(range(1, 9))
    assert waiting(tenantgate, "team-q") == [f"q-{i:02d}" for i in range(12, 20)]
    status = tenantgate.status()["tenants"]["team-q"]
    assert status["queue"]["pending"] == 8
    assert [row["pod"] for row in status["queue"]["first"]] == [
        f"team-q/q-{i:02d}" for i in range(12, 17)
    ]

    for name in ("q-00", "q-03", "q-05", "q-07"):
        delete(core, "team-q", name, tenantgate)
    settled(tenantgate, "team-q", "12")
    eventually(lambda: len(listing(tenantgate, "team-q")) == 4, "4 pods released")
    assert {f"q-{i:02d}" for i in range(12, 16)} <= ungated(core, "team-q")
    assert len(ungated(core, "team-q")) == 12
    assert waiting(tenantgate, "team-q") == [f"q-{i:02d}" for i in range(16, 20)]
    stored = core.read_namespaced_pod("q-12", "team-q")
    assert stored.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    assert not stored.spec.scheduling_gates
    with urllib.request.urlopen(f"{tenantgate.metrics_url}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'tenantgate_queue_pending{tenant="team-q"} 4.0' in metrics
    assert 'tenantgate_queue_released_total{tenant="team-q",tier="guaranteed"} 4.0' in metrics
    assert (
        'tenantgate_queue_wait_seconds_bucket{le="+Inf",tenant="team-q",tier="guaranteed"} 4.0'
        in (metrics)
    )
    assert 'tenantgate_queue_wait_seconds_bucket{le="0.1",' in metrics
    assert "tenantgate_queue_oldest_wait_seconds{" in metrics

    def story() -> list[tuple[str, str]]:
        events = core.list_namespaced_event(
            "team-q", field_selector="involvedObject.name=q-13"
        ).items
        return [(e.reason, e.message) for e in events if e.source.component == "tenantgate"]

    eventually(lambda: len(story()) == 2, "Queued and Released events on q-13")
    (queued_reason, queued_message), (released_reason, released_message) = story()
    assert queued_reason == "Queued"
    assert queued_message == (
        "waiting for tenant team-q's guaranteed room behind the scheduling gate "
        "tenantgate.io/quota: position 2 of 2"
    )
    assert released_reason == "Released"
    assert released_message.startswith(
        "released onto tenant team-q's guaranteed room after waiting "
    )


def test_max_pending_holds_under_200_concurrent_creates(
    tenantgate: Tenantgate, core: Any, kubeconfig: Path
) -> None:
    fill(core, "team-q", 12)

    def attempt(index: int) -> str:
        api = api_client(kubeconfig)
        try:
            mine: Any = client.CoreV1Api(api)
            mine.create_namespaced_pod("team-q", pod(f"c-{index:03d}"))
        except client.ApiException as exc:
            full = "tenant team-q's queue is full (8 pods waiting, maxPending 8)" in str(exc.body)
            return "rejected" if exc.status == 403 and full else f"{exc.status}: {exc.body}"
        finally:
            api.close()
        return "queued"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(attempt, range(200)))
    assert outcomes.count("queued") == 8
    assert outcomes.count("rejected") == 192
    pods = core.list_namespaced_pod("team-q").items
    assert sum(1 for p in pods if gated(p)) == 8
    assert sum(1 for p in pods if not gated(p)) == 12
    eventually(lambda: len(listing(tenantgate, "team-q")) == 8, "8 pods in the queue")
    assert len(tenantgate.call(lambda: tenantgate.state.ledger.get("team-q")).queued) == 8


def test_dry_run_tells_the_position_and_records_nothing(tenantgate: Tenantgate, core: Any) -> None:
    fill(core, "team-q", 12)
    create(core, "team-q", "waiting-1")
    response, warnings = create(core, "team-q", "would-wait", dry_run=True)
    assert response.status == 201
    assert (
        "queued: team-q is at its guarantee (cpu 12/12); position 2 of 2; released when "
        "team-q's guaranteed room frees"
    ) in warnings
    assert "would-wait" not in {p.metadata.name for p in core.list_namespaced_pod("team-q").items}
    ledger = tenantgate.call(lambda: tenantgate.state.ledger.get("team-q"))
    assert len(ledger.queued) == 1
    assert len(ledger.reservations) == 0
    # The real create is told the same.
    _, real = create(core, "team-q", "would-wait")
    assert warnings[-1] in real


def grant_edit(core: Any, kubeconfig: Path, namespace: str, user: str) -> None:
    """Bind the built-in ``edit`` ClusterRole to ``user`` in ``namespace``: RBAC lets the user
    patch pods there, so what stops a patch is tenantgate."""
    api = api_client(kubeconfig)
    rbac: Any = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    api.close()


def test_a_user_removing_the_gate_is_denied(
    tenantgate: Tenantgate, core: Any, kubeconfig: Path, kube: Cluster
) -> None:
    fill(core, "team-q", 12)
    create(core, "team-q", "w-1")
    create(core, "team-q", "w-2")
    grant_edit(core, kubeconfig, "team-q", "alice")
    # alice with her own client certificate.
    api = api_client(kube.plane.user_kubeconfig("alice", ("developers",)))
    alice: Any = client.CoreV1Api(api)
    try:
        with pytest.raises(client.ApiException) as denied:
            alice.patch_namespaced_pod(
                "w-2",
                "team-q",
                {"spec": {"schedulingGates": None}},
                _content_type="application/merge-patch+json",
            )
    finally:
        api.close()
    assert denied.value.status == 403
    assert (
        "pod team-q/w-2: the scheduling gate tenantgate.io/quota is removed only by tenantgate "
        "(system:serviceaccount:tenantgate-system:tenantgate) when the tenant has room; "
        "position 2 of 2 in tenant team-q's queue"
    ) in str(denied.value.body)
    assert gated(core.read_namespaced_pod("w-2", "team-q"))
    # The admin acting as alice (kubectl --as): its labels stay as tenantgate set them too.
    relabel = kube.plane.kubectl(
        "--as=alice",
        "label",
        "--overwrite",
        "-n",
        "team-q",
        "pod/w-2",
        "tenantgate.io/tier=guaranteed",
        check=False,
    )
    assert relabel.returncode != 0
    assert 'admission webhook "validate.tenantgate.io" denied the request' in relabel.stderr
    assert core.read_namespaced_pod("w-2", "team-q").metadata.labels["tenantgate.io/tier"] == (
        "queued"
    )


def test_a_pod_that_could_never_fit_or_names_a_node_is_rejected_not_queued(
    tenantgate: Tenantgate, core: Any
) -> None:
    with pytest.raises(client.ApiException) as huge:
        create(core, "team-q", "huge", cpu="13")
    assert huge.value.status == 403
    assert "larger than tenant team-q's guarantee (cpu=12), so it is never queued" in str(
        huge.value.body
    )
    fill(core, "team-q", 12)
    bound = pod("bound")
    bound["spec"]["nodeName"] = "node-1"
    with pytest.raises(client.ApiException) as pinned:
        core.create_namespaced_pod("team-q", bound)
    assert "a pod with spec.nodeName cannot wait behind a scheduling gate" in str(pinned.value.body)


# --------------------------------------------------------------------------- order


def test_higher_classes_go_first_and_aging_lets_an_old_low_class_pod_overtake(
    tenantgate: Tenantgate, core: Any, clock: Clock
) -> None:
    fill(core, "team-p", 2)
    core.create_namespaced_pod("team-p", with_class("low", "batch-low"))
    low = created_at(core, "team-p", "low")
    # team-p ages one step (100) a second: pods created seconds apart, the clock pinned.
    create_at(core, "team-p", with_class("high-1", "batch-high"), second=low + 3)
    clock.pin(low + 3)  # low: 100 + 3 x 100 = 400, below batch-high's 500
    eventually(lambda: waiting(tenantgate, "team-p") == ["high-1", "low"], "high-1 first")
    create_at(core, "team-p", with_class("high-2", "batch-high"), second=low + 5)
    clock.pin(low + 5)  # low: 100 + 500 = 600; high-1: 500 + 200 = 700
    eventually(lambda: len(listing(tenantgate, "team-p")) == 3, "high-2 in the queue")
    rows = listing(tenantgate, "team-p")
    assert [(r["pod"], r["priority"], r["effectivePriority"]) for r in rows] == [
        ("team-p/high-1", 500, 700),
        ("team-p/low", 100, 600),
        ("team-p/high-2", 500, 500),
    ]
    delete(core, "team-p", "run-0", tenantgate)
    settled(tenantgate, "team-p", "2")
    assert ungated(core, "team-p") == {"run-1", "high-1"}
    delete(core, "team-p", "run-1", tenantgate)
    settled(tenantgate, "team-p", "2")
    assert ungated(core, "team-p") == {"high-1", "low"}
    assert waiting(tenantgate, "team-p") == ["high-2"]


def test_strict_fifo_holds_the_line_behind_a_head_that_does_not_fit(
    tenantgate: Tenantgate, core: Any
) -> None:
    fill(core, "team-s", 4)
    create(core, "team-s", "big", cpu="2")
    create(core, "team-s", "small", cpu="1")
    delete(core, "team-s", "run-0", tenantgate)
    settled(tenantgate, "team-s", "3")
    assert waiting(tenantgate, "team-s") == ["big", "small"]
    delete(core, "team-s", "run-1", tenantgate)
    settled(tenantgate, "team-s", "4")
    # The booking comes first; big leaves the line when the watch shows its gate removed.
    eventually(lambda: waiting(tenantgate, "team-s") == ["small"], "big released, small waiting")
    assert "big" in ungated(core, "team-s")


def test_best_effort_fifo_skips_a_head_that_does_not_fit_until_it_reaches_max_boost(
    tenantgate: Tenantgate, core: Any, clock: Clock
) -> None:
    fill(core, "team-b", 4)
    create(core, "team-b", "big-1", cpu="2")
    create(core, "team-b", "small-1", cpu="1")
    delete(core, "team-b", "run-0", tenantgate)
    settled(tenantgate, "team-b", "4")
    assert "small-1" in ungated(core, "team-b")  # the head was skipped
    assert waiting(tenantgate, "team-b") == ["big-1"]

    create(core, "team-b", "small-2", cpu="1")
    clock.advance(120)  # big-1 has waited 2 intervals: boost 200 = maxBoost
    delete(core, "team-b", "run-1", tenantgate)
    settled(tenantgate, "team-b", "3")
    # big-1 is at maxBoost: nobody behind it is released until it fits.
    assert waiting(tenantgate, "team-b") == ["big-1", "small-2"]
    delete(core, "team-b", "run-2", tenantgate)
    settled(tenantgate, "team-b", "4")
    assert waiting(tenantgate, "team-b") == ["small-2"]
    assert "big-1" in ungated(core, "team-b")


# --------------------------------------------------------------------------- restarts


def test_a_restart_keeps_every_place_in_line_and_releases_nothing_past_the_room(
    start_tenantgate: StartTenantgate, core: Any, clock: Clock
) -> None:
    first = start_tenantgate(clock=clock)
    create_namespace(core, {"metadata": {"name": "team-q"}})
    for index in range(18):
        create(core, "team-q", f"r-{index:02d}")
    eventually(lambda: len(listing(first, "team-q")) == 6, "6 queued")
    before = listing(first, "team-q")
    first.stop()
    delete(core, "team-q", "r-00")  # while tenantgate is down
    second = start_tenantgate(clock=clock)
    settled(second, "team-q", "12")
    # The releaser is idle once r-12's gate is lifted; the queue drops r-12 when the watch
    # shows the pod ungated, a moment later.
    expected = [row["pod"] for row in before][1:]
    seen: list[list[str]] = []

    def kept_in_line() -> bool:
        seen[:] = [[row["pod"] for row in listing(second, "team-q")]]
        return seen[0] == expected

    try:
        eventually(kept_in_line, "the queue to keep its order, less the pod released")
    except AssertionError as exc:
        pods = {
            p.metadata.name: (str(p.metadata.creation_timestamp), gated(p))
            for p in core.list_namespaced_pod("team-q").items
        }
        raise AssertionError(
            f"{exc}: {seen[0]} != {expected}; before {before}; "
            f"after {listing(second, 'team-q')}; pods {pods}"
        ) from None
    assert len(ungated(core, "team-q")) == 12
    status = second.status()["tenants"]["team-q"]
    assert status["used"]["guaranteed"]["cpu"] == "12"
    assert len(status["queued"]) == 5
