"""The controllers' side of a denial: workloads applied with the built kubectl into a tenant
with too little room, tenantgate's webhooks, kube-controller-manager's ReplicaSet, Job and
CronJob controllers, and the simulated kubelet running what is bound.

A ReplicaSet or Job controller turns each denied create into a ``FailedCreate`` event carrying
the webhook's message (``pkg/controller/controller_utils.go``, ``createPods``) and retries with
its work queue's rate-limited backoff; once room frees, a retry creates the rest. In queue
mode the denied creates do not happen: the replicas are created gated and wait in line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testcluster import Cluster
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import WAIT, create_namespace, eventually

# team-a has room for 6 pods of one cpu, and no burst above it; team-q the same, queueing.
CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 900}
profiles: {general: {}}
reservationTTLSeconds: 2
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed: {cpu: "6"}
  team-q:
    namespaces: [team-q]
    quota:
      guaranteed: {cpu: "6"}
    overQuota: queue
"""
DENIAL = "exceeded tenant quota: team-a: requested cpu=1, used cpu=6/6"
GATE = "tenantgate.io/quota"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def kubectl(kube: Cluster) -> Callable[..., str]:
    """The built kubectl (v1.37.2) as the cluster admin, in team-a unless told otherwise."""

    def run(*args: str, stdin: str | None = None, namespace: str = "team-a") -> str:
        done = kube.plane.kubectl("-n", namespace, *args, stdin=stdin, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def template(labels: dict[str, str], restart: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1",
                    "resources": {"requests": {"cpu": "1"}},
                }
            ],
        },
    }


def deployment(name: str, replicas: int, namespace: str = "team-a") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": template({"app": name}, "Always"),
            },
        }
    )


def live_pods(core: Any, selector: str, namespace: str = "team-a") -> list[Any]:
    items = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in items if p.metadata.deletion_timestamp is None]


def gated(stored: Any) -> bool:
    return any(gate.name == GATE for gate in stored.spec.scheduling_gates or [])


def running(core: Any, selector: str, namespace: str) -> list[Any]:
    return [p for p in live_pods(core, selector, namespace) if p.status.phase == "Running"]


def failed_creates(core: Any, owner: str) -> list[Any]:
    events = core.list_namespaced_event(
        "team-a", field_selector=f"involvedObject.name={owner},reason=FailedCreate"
    ).items
    return list(events)


def leave_room_for_four(
    start_tenantgate: StartTenantgate,
    core: Any,
    kubectl: Callable[..., str],
    namespace: str = "team-a",
) -> None:
    """tenantgate running, and two of the tenant's six pods' room taken by another Deployment."""
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": namespace}})
    kubectl("apply", "-f", "-", stdin=deployment("other", 2, namespace), namespace=namespace)
    eventually(lambda: len(running(core, "app=other", namespace)) == 2, "the 2 other pods running")


def test_a_deployment_gets_the_room_there_is_and_the_rest_once_room_frees(
    start_tenantgate: StartTenantgate, core: Any, kubectl: Callable[..., str]
) -> None:
    leave_room_for_four(start_tenantgate, core, kubectl)

    assert kubectl("apply", "-f", "-", stdin=deployment("web", 10)).strip() == (
        "deployment.apps/web created"
    )
    eventually(lambda: len(live_pods(core, "app=web")) == 4, "4 web pods: the room left")
    apps: Any = client.AppsV1Api(core.api_client)
    (rs,) = apps.list_namespaced_replica_set("team-a", label_selector="app=web").items
    eventually(lambda: bool(failed_creates(core, rs.metadata.name)), "FailedCreate events")
    (event,) = failed_creates(core, rs.metadata.name)
    assert event.type == "Warning"
    assert event.source.component == "replicaset-controller"
    assert event.message == (
        'Error creating: admission webhook "mutate.tenantgate.io" denied the request: '
        "exceeded tenant quota: team-a: requested cpu=1, used cpu=6/6 (burst ceiling), "
        "guaranteed cpu=6"
    )
    time.sleep(1.5)  # more retries, each denied again: still 4
    assert len(live_pods(core, "app=web")) == 4
    eventually(lambda: len(running(core, "app=web", "team-a")) == 4, "the 4 web pods running")
    shown = kubectl("describe", "replicaset", rs.metadata.name)
    assert "FailedCreate" in shown
    assert DENIAL in shown

    # Fewer replicas than the room holds, but more than there are: nothing changes yet.
    kubectl("scale", "deployment/web", "--replicas=6")
    # Scaling the other workload down frees two pods' room; the controller's next retry
    # (rate-limited: its backoff grew with every denial) takes it.
    kubectl("scale", "deployment/other", "--replicas=0")
    eventually(
        lambda: len(live_pods(core, "app=web")) == 6,
        "the rest of web's 6 pods",
        timeout=WAIT * 3,
    )
    eventually(
        lambda: apps.read_namespaced_deployment("web", "team-a").status.ready_replicas == 6,
        "web 6/6 ready",
    )


def test_a_job_runs_through_a_tenant_with_room_for_four(
    start_tenantgate: StartTenantgate, core: Any, kubectl: Callable[..., str]
) -> None:
    leave_room_for_four(start_tenantgate, core, kubectl)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "crunch", "namespace": "team-a"},
        "spec": {
            "completions": 10,
            "parallelism": 10,
            "template": template({"app": "crunch"}, "Never"),
        },
    }
    assert kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job)).strip() == (
        "job.batch/crunch created"
    )
    eventually(lambda: bool(failed_creates(core, "crunch")), "FailedCreate events")
    (event,) = failed_creates(core, "crunch")
    assert event.source.component == "job-controller"
    assert DENIAL in event.message
    batch: Any = client.BatchV1Api(core.api_client)

    def finished() -> bool:
        status = batch.read_namespaced_job("crunch", "team-a").status
        return status is not None and status.succeeded == 10

    # As pods finish, their room goes to the next ones, created on the queue's retries.
    eventually(finished, "all 10 completions", timeout=WAIT * 2)
    status = batch.read_namespaced_job("crunch", "team-a").status
    assert [c.type for c in status.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert (status.failed or 0) == 0


def test_in_queue_mode_a_deployment_s_replicas_wait_gated_and_then_run(
    start_tenantgate: StartTenantgate, core: Any, kubectl: Callable[..., str]
) -> None:
    leave_room_for_four(start_tenantgate, core, kubectl, namespace="team-q")
    kubectl("apply", "-f", "-", stdin=deployment("web", 10, "team-q"), namespace="team-q")

    def counted() -> tuple[int, int]:
        pods = live_pods(core, "app=web", "team-q")
        return sum(1 for p in pods if not gated(p)), sum(1 for p in pods if gated(p))

    # Every replica is created: four on the room, six behind the gate, none denied.
    eventually(lambda: counted() == (4, 6), "4 web pods admitted and 6 waiting")
    eventually(lambda: len(running(core, "app=web", "team-q")) == 4, "the 4 admitted running")
    for waiting in (p for p in live_pods(core, "app=web", "team-q") if gated(p)):
        assert waiting.spec.node_name is None
        (condition,) = [c for c in waiting.status.conditions if c.type == "PodScheduled"]
        assert (condition.status, condition.reason) == ("False", "SchedulingGated")
    events = core.list_namespaced_event("team-q", field_selector="reason=FailedCreate").items
    assert events == []

    kubectl("scale", "deployment/other", "--replicas=0", namespace="team-q")
    eventually(lambda: counted() == (6, 4), "two replicas released")
    eventually(lambda: len(running(core, "app=web", "team-q")) == 6, "the released running")


def test_a_cronjob_s_jobs_are_admitted_and_complete(
    start_tenantgate: StartTenantgate, core: Any, kubectl: Callable[..., str]
) -> None:
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-a"}})
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": template({"app": "nightly"}, "Never")}},
        },
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(cronjob))
    batch: Any = client.BatchV1Api(core.api_client)

    def completed() -> list[Any]:
        jobs = batch.list_namespaced_job("team-a").items
        return [j for j in jobs if j.status is not None and j.status.succeeded == 1]

    # The CronJob controller starts a Job on the next whole minute.
    eventually(lambda: bool(completed()), "the first scheduled Job to complete", timeout=WAIT * 3)
    (job, *_) = completed()
    assert job.metadata.owner_references[0].kind == "CronJob"
    (stored, *_) = core.list_namespaced_pod(
        "team-a", label_selector=f"batch.kubernetes.io/job-name={job.metadata.name}"
    ).items
    assert stored.metadata.labels["tenantgate.io/tenant"] == "team-a"
    assert stored.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    assert stored.spec.priority_class_name == "tenant-guaranteed"
