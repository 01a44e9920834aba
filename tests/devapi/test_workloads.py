"""Deployments, ReplicaSets, Jobs and CronJobs through the real client and kubectl, with the
simulated controllers creating pods through the admission chain.

Upstream: pkg/controller/replicaset/replica_set.go (syncReplicaSet, manageReplicas,
slowStartBatch), pkg/controller/controller_utils.go (GetPodFromTemplate, createPods:
"Created pod: NAME" / "Error creating: <err>"), pkg/controller/deployment (ScalingReplicaSet,
pod-template-hash), pkg/controller/job/job_controller.go (syncJob, backoff constants),
pkg/registry/batch/job/strategy.go (generateSelector), pkg/controller/cronjob,
client-go util/workqueue (DefaultTypedControllerRateLimiter).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devapi import DevAPIServer
from devapi.workloads.controllers import WorkloadSettings
from devapi.workloads.workqueue import (
    Backoff,
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    controller_rate_limiter,
)
from tests.devapi.support import (
    Api,
    TLSMaterial,
    WebhookServer,
    hook,
    new_client,
    register,
    status_of,
)
from tests.devapi.test_kubectl import KUBECTL, Kubectl

WAIT = 60.0
FAST = WorkloadSettings(run_pods=True, run_seconds=0.2)


def eventually(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Cluster:
    """A test API server with given workload settings, and clients for it."""

    def __init__(self, settings: WorkloadSettings, tmp_path: Path) -> None:
        self.server = DevAPIServer(bookmark_interval=0.2, workloads=settings).start()
        self.kubeconfig = self.server.write_kubeconfig(tmp_path / "kubeconfig")
        self.api_client = new_client(self.kubeconfig)
        self.core: Api = client.CoreV1Api(self.api_client)
        self.apps: Api = client.AppsV1Api(self.api_client)
        self.batch: Api = client.BatchV1Api(self.api_client)
        self.kubectl = Kubectl(self.kubeconfig, tmp_path)

    def pods(self, selector: str = "") -> list[Any]:
        items: list[Any] = self.core.list_namespaced_pod("default", label_selector=selector).items
        return items

    def events(self, name: str) -> list[Any]:
        found = self.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={name}"
        )
        items: list[Any] = found.items
        return items

    def close(self) -> None:
        self.api_client.close()
        self.server.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[[WorkloadSettings], Cluster]]:
    started: list[Cluster] = []

    def start(settings: WorkloadSettings) -> Cluster:
        cluster = Cluster(settings, tmp_path)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.close()


def deployment(name: str = "web", replicas: int = 3, image: str = "app:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": f"registry.example/{image}"}],
                },
            },
        },
    }


def job(name: str = "batch", **spec: Any) -> dict[str, Any]:
    template_meta = spec.pop("template_meta", {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": template_meta,
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "app", "image": "registry.example/job:1"}],
                },
            },
            **spec,
        },
    }


# --- rate limiters ----------------------------------------------------------------------------


def test_the_controller_rate_limiter_is_client_gos_default() -> None:
    """DefaultTypedControllerRateLimiter: 5 ms doubling to 1000 s per item, and a bucket."""
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    assert [limiter.when("a") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert limiter.when("b") == 0.005
    for _ in range(30):
        limiter.when("a")
    assert limiter.when("a") == 1000.0
    limiter.forget("a")
    assert limiter.when("a") == 0.005
    now = [0.0]
    bucket = BucketRateLimiter(10.0, 100, clock=lambda: now[0])
    assert {bucket.when("x") for _ in range(100)} == {0.0}
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("x") == pytest.approx(0.2)
    combined = controller_rate_limiter()
    assert combined.when("k") == 0.005


# --- Deployments and ReplicaSets --------------------------------------------------------------


def test_a_deployment_owns_a_replica_set_whose_pods_it_scales(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    cluster = cluster_factory(WorkloadSettings())
    created = cluster.apps.create_namespaced_deployment("default", deployment())
    eventually(lambda: len(cluster.pods("app=web")) == 3, "3 pods")
    (rs,) = cluster.apps.list_namespaced_replica_set("default").items
    suffix = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{suffix}"
    assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": suffix}
    (owner,) = rs.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Deployment",
        "web",
        created.metadata.uid,
        True,
    )
    for pod in cluster.pods("app=web"):
        assert pod.metadata.generate_name == f"{rs.metadata.name}-"
        assert pod.metadata.labels == {"app": "web", "pod-template-hash": suffix}
        (ref,) = pod.metadata.owner_references
        assert (ref.kind, ref.uid, ref.controller, ref.block_owner_deletion) == (
            "ReplicaSet",
            rs.metadata.uid,
            True,
            True,
        )
    eventually(
        lambda: cluster.apps.read_namespaced_deployment("web", "default").status.replicas == 3,
        "status",
    )
    created_events = [e for e in cluster.events(rs.metadata.name) if e.reason == "SuccessfulCreate"]
    assert sorted(e.message for e in created_events) == sorted(
        f"Created pod: {p.metadata.name}" for p in cluster.pods("app=web")
    )
    assert {e.source.component for e in created_events} == {"replicaset-controller"}
    scaling = [e.message for e in cluster.events("web") if e.reason == "ScalingReplicaSet"]
    assert scaling == [f"Scaled up replica set {rs.metadata.name} from 0 to 3"]

    cluster.apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 1}})
    eventually(lambda: len(cluster.pods("app=web")) == 1, "scaled down to 1")
    scale = cluster.apps.read_namespaced_deployment_scale("web", "default")
    assert (scale.spec.replicas, scale.status.selector) == (1, "app=web")

    cluster.apps.patch_namespaced_deployment(
        "web",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}},
    )

    def rolled() -> bool:
        sets = cluster.apps.list_namespaced_replica_set("default").items
        replicas = sorted((s.spec.replicas, s.metadata.name == rs.metadata.name) for s in sets)
        return replicas == [(0, True), (1, False)]

    eventually(rolled, "a new replica set for the new template, the old one at 0")
    eventually(
        lambda: [p.spec.containers[0].image for p in cluster.pods("app=web")] == ["app:2"],
        "the old pod replaced",
    )


def test_invalid_deployments_are_refused(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    """ValidateDeploymentSpec: the selector must select the template's labels."""
    cluster = cluster_factory(WorkloadSettings())
    body = deployment()
    body["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(client.ApiException) as err:
        cluster.apps.create_namespaced_deployment("default", body)
    assert err.value.status == 422
    assert status_of(err.value)["message"] == (
        'Deployment.apps "web" is invalid: spec.template.metadata.labels: Invalid value: '
        '"map[app:other]": `selector` does not match template `labels`'
    )


def test_deleting_a_deployment_collects_its_replica_sets_and_pods(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    cluster = cluster_factory(WorkloadSettings())
    cluster.apps.create_namespaced_deployment("default", deployment(replicas=2))
    eventually(lambda: len(cluster.pods("app=web")) == 2, "2 pods")
    cluster.apps.delete_namespaced_deployment("web", "default")
    eventually(
        lambda: (
            not cluster.apps.list_namespaced_replica_set("default").items
            and not cluster.pods("app=web")
        ),
        "the garbage collector",
    )


def test_denied_creates_are_failed_create_events_and_retried_with_backoff(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    """createPods: 'Error creating: <the admission error>'; the sync fails and is retried by
    the rate-limited queue until creations are admitted (its backoff capped at a second
    here, so that the test does not wait out a long one)."""
    cluster = cluster_factory(WorkloadSettings(controller_backoff=Backoff(0.005, 1.0)))
    room = [2]
    lock = threading.Lock()

    def admit(review: dict[str, Any]) -> dict[str, Any]:
        with lock:
            if room[0] > 0:
                room[0] -= 1
                return {"allowed": True}
        return {
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": "no room for this pod"},
        }

    register(
        cluster.api_client,
        "room",
        hook("room.example.com", webhooks.route("/room", admit), webhook_tls),
        mutating=False,
    )
    cluster.apps.create_namespaced_deployment("default", deployment(replicas=4))
    eventually(lambda: len(webhooks.requests("/room")) >= 6, "retries")
    assert len(cluster.pods("app=web")) == 2
    (rs,) = cluster.apps.list_namespaced_replica_set("default").items
    failed = [e for e in cluster.events(rs.metadata.name) if e.reason == "FailedCreate"]
    assert len(failed) == 1  # repeats are counted on one event
    assert failed[0].type == "Warning"
    assert failed[0].message == (
        'Error creating: admission webhook "room.example.com" denied the request: '
        "no room for this pod"
    )
    assert failed[0].count >= 2
    user = webhooks.requests("/room")[0]["userInfo"]
    assert user["username"] == "system:serviceaccount:kube-system:replicaset-controller"
    with lock:
        room[0] = 2
    eventually(lambda: len(cluster.pods("app=web")) == 4, "the rest, once admitted")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_apply_scale_and_get(
    cluster_factory: Callable[[WorkloadSettings], Cluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(FAST)
    manifest = cluster.kubectl.write("web.yaml", yaml.safe_dump(deployment(replicas=2)))
    applied = cluster.kubectl("apply", "-f", manifest)
    assert applied.code == 0, applied.stderr
    assert applied.stdout.strip() == "deployment.apps/web created"

    def ready() -> bool:
        got = cluster.kubectl("get", "deployment", "web", "--no-headers")
        return got.stdout.split()[1:4] == ["2/2", "2", "2"]

    eventually(ready, "2/2 ready")
    scaled = cluster.kubectl("scale", "deployment/web", "--replicas=3")
    assert scaled.code == 0, scaled.stderr
    assert scaled.stdout.strip() == "deployment.apps/web scaled"
    eventually(lambda: len(cluster.pods("app=web")) == 3, "3 pods")
    again = cluster.kubectl("apply", "-f", manifest)
    assert again.code == 0, again.stderr
    assert again.stdout.strip() == "deployment.apps/web configured"
    eventually(lambda: len(cluster.pods("app=web")) == 2, "back to the manifest's 2")
    listed = cluster.kubectl("get", "rs")
    assert listed.stdout.split()[:5] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]


# --- Jobs -------------------------------------------------------------------------------------


def test_a_job_runs_its_completions_and_completes(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    cluster = cluster_factory(FAST)
    created = cluster.batch.create_namespaced_job("default", job(completions=3, parallelism=2))
    uid = created.metadata.uid
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert created.spec.backoff_limit == 6

    def complete() -> bool:
        status = cluster.batch.read_namespaced_job("batch", "default").status
        return status is not None and bool(status.conditions) and status.succeeded == 3

    eventually(complete, "the job to complete")
    eventually(lambda: any(e.reason == "Completed" for e in cluster.events("batch")), "its event")
    status = cluster.batch.read_namespaced_job("batch", "default").status
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert status.completion_time is not None
    assert [e.message for e in cluster.events("batch") if e.reason == "Completed"] == [
        "Job completed"
    ]
    pods = cluster.pods(f"batch.kubernetes.io/controller-uid={uid}")
    assert len(pods) == 3
    for pod in pods:
        assert pod.status.phase == "Succeeded"
        assert pod.metadata.generate_name == "batch-"
        labels = pod.metadata.labels
        assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "batch"
        assert labels["controller-uid"] == uid
        assert pod.metadata.owner_references[0].kind == "Job"


def test_a_job_fails_past_its_backoff_limit(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    settings = WorkloadSettings(
        run_pods=True, run_seconds=0.1, job_pod_failure_backoff=Backoff(0.1, 0.5)
    )
    cluster = cluster_factory(settings)
    failing = {"annotations": {"devapi.tenantgate.io/exit-code": "1"}}
    cluster.batch.create_namespaced_job("default", job(backoffLimit=1, template_meta=failing))

    def failed() -> bool:
        status = cluster.batch.read_namespaced_job("batch", "default").status
        return status is not None and any(c.type == "Failed" for c in status.conditions or [])

    eventually(failed, "the job to fail")
    status = cluster.batch.read_namespaced_job("batch", "default").status
    assert status.failed == 2
    (failure,) = [c for c in status.conditions if c.type == "Failed"]
    assert (failure.reason, failure.message) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    eventually(
        lambda: any(e.reason == "BackoffLimitExceeded" for e in cluster.events("batch")),
        "its event",
    )
    warnings = [e for e in cluster.events("batch") if e.reason == "BackoffLimitExceeded"]
    assert [(e.type, e.message) for e in warnings] == [
        ("Warning", "Job has reached the specified backoff limit")
    ]


def test_a_job_template_needs_a_restart_policy_that_ends(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    cluster = cluster_factory(WorkloadSettings())
    body = job()
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(client.ApiException) as err:
        cluster.batch.create_namespaced_job("default", body)
    assert err.value.status == 422
    assert (
        'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
        in status_of(err.value)["message"]
    )


# --- CronJobs ---------------------------------------------------------------------------------


def test_a_cron_job_creates_jobs_on_its_schedule(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    now = [time.time()]
    cluster = cluster_factory(WorkloadSettings(clock=lambda: now[0]))
    cluster.batch.create_namespaced_cron_job(
        "default",
        {
            "metadata": {"name": "nightly"},
            "spec": {
                "schedule": "*/5 * * * *",
                "jobTemplate": {"spec": job()["spec"]},
            },
        },
    )
    time.sleep(1)  # several controller passes, none at a scheduled time yet
    assert cluster.batch.list_namespaced_job("default").items == []
    next_slot = (int(now[0] // 300) + 1) * 300
    now[0] = next_slot + 30
    eventually(lambda: bool(cluster.batch.list_namespaced_job("default").items), "a job")
    (created,) = cluster.batch.list_namespaced_job("default").items
    assert created.metadata.name == f"nightly-{next_slot // 60}"
    assert created.metadata.owner_references[0].kind == "CronJob"
    assert "batch.kubernetes.io/cronjob-scheduled-timestamp" in created.metadata.annotations
    eventually(
        lambda: (
            cluster.batch.read_namespaced_cron_job("nightly", "default").status.active is not None
        ),
        "the active job in the status",
    )


# --- gated pods under the simulated scheduler ------------------------------------------------


def test_the_scheduler_leaves_gated_pods_alone_until_ungated(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    cluster = cluster_factory(FAST)
    containers = [{"name": "app", "image": "registry.example/app:1"}]
    gates = [{"name": "example.com/wait"}]
    cluster.core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "gated"},
            "spec": {"schedulingGates": gates, "containers": containers},
        },
    )
    cluster.core.create_namespaced_pod(
        "default", {"metadata": {"name": "plain"}, "spec": {"containers": containers}}
    )
    eventually(
        lambda: cluster.core.read_namespaced_pod("plain", "default").status.phase == "Running",
        "the ungated pod to run",
    )
    held = cluster.core.read_namespaced_pod("gated", "default")
    assert (held.spec.node_name, held.status.phase) == (None, "Pending")
    cluster.core.patch_namespaced_pod("gated", "default", {"spec": {"schedulingGates": None}})
    eventually(
        lambda: cluster.core.read_namespaced_pod("gated", "default").status.phase == "Running",
        "the released pod to run",
    )


def test_workloads_in_manifests_are_not_loaded_at_start(tmp_path: Path) -> None:
    """The webhook's own Deployment (deploy/webhooks) runs outside the test server."""
    (tmp_path / "web.yaml").write_text(yaml.safe_dump(deployment()))
    with DevAPIServer(manifests=[tmp_path / "web.yaml"]) as server:
        assert server.store.count(("apps", "deployments")) == 0


@pytest.mark.parametrize(("policy", "names"), [("Forbid", 1), ("Replace", 1), ("Allow", 2)])
def test_a_cron_job_honours_its_concurrency_policy(
    cluster_factory: Callable[[WorkloadSettings], Cluster], policy: str, names: int
) -> None:
    """syncCronJob: with a Job still running, Forbid skips the next time, Replace deletes the
    running Job for a new one, Allow runs both."""
    slot = (int(time.time() // 300) + 1) * 300
    now = [slot - 1.0]
    cluster = cluster_factory(WorkloadSettings(clock=lambda: now[0]))
    cluster.batch.create_namespaced_cron_job(
        "default",
        {
            "metadata": {"name": "tick"},
            "spec": {
                "schedule": "*/5 * * * *",
                "concurrencyPolicy": policy,
                "jobTemplate": {"spec": job()["spec"]},
            },
        },
    )

    def jobs() -> list[str]:
        items = cluster.batch.list_namespaced_job("default").items
        return sorted(j.metadata.name for j in items if j.metadata.deletion_timestamp is None)

    now[0] = slot + 1
    eventually(lambda: jobs() == [f"tick-{slot // 60}"], "the first job")
    now[0] = slot + 301  # the next time, the first Job still running (no pods run here)
    expected = {
        "Forbid": [f"tick-{slot // 60}"],
        "Replace": [f"tick-{(slot + 300) // 60}"],
        "Allow": [f"tick-{slot // 60}", f"tick-{(slot + 300) // 60}"],
    }[policy]
    eventually(lambda: jobs() == expected, f"{policy}: {expected}")
    time.sleep(1)  # several more passes change nothing
    assert jobs() == expected
    assert len(expected) == names


def test_deleting_a_job_collects_its_pods(
    cluster_factory: Callable[[WorkloadSettings], Cluster],
) -> None:
    """The garbage collector, Background propagation: dependents go once the owner is gone."""
    cluster = cluster_factory(WorkloadSettings())
    created = cluster.batch.create_namespaced_job("default", job(parallelism=2, completions=2))
    selector = f"batch.kubernetes.io/controller-uid={created.metadata.uid}"
    eventually(lambda: len(cluster.pods(selector)) == 2, "2 pods")
    cluster.batch.delete_namespaced_job("batch", "default", propagation_policy="Background")
    eventually(lambda: not cluster.pods(selector), "the pods collected")


@pytest.mark.parametrize("policy", ["Orphan", "Foreground"])
def test_deletion_propagation_orphans_or_waits_for_dependents(
    cluster_factory: Callable[[WorkloadSettings], Cluster], policy: str
) -> None:
    """deletionFinalizersForGarbageCollection: Orphan keeps the dependents without their owner
    reference; Foreground deletes them before the owner."""
    cluster = cluster_factory(WorkloadSettings())
    cluster.apps.create_namespaced_deployment("default", deployment(replicas=2))
    eventually(lambda: len(cluster.pods("app=web")) == 2, "2 pods")
    cluster.apps.delete_namespaced_deployment("web", "default", propagation_policy=policy)

    def gone() -> bool:
        try:
            cluster.apps.read_namespaced_deployment("web", "default")
        except client.ApiException as err:
            return bool(err.status == 404)
        return False

    eventually(gone, "the deployment deleted")
    sets = cluster.apps.list_namespaced_replica_set("default").items
    if policy == "Orphan":
        (rs,) = sets
        assert rs.metadata.owner_references is None
        time.sleep(1)  # the collector leaves the orphan alone
        assert len(cluster.apps.list_namespaced_replica_set("default").items) == 1
        assert len(cluster.pods("app=web")) == 2
    else:
        assert sets == []
