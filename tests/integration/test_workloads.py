"""The controllers' side of a denial: workloads applied with kubectl into a tenant with too
little room, tenantgate's real webhooks, the test API server's ReplicaSet and Job controllers.

A real ReplicaSet or Job controller turns each denied create into a ``FailedCreate`` event
carrying the webhook's message (``pkg/controller/controller_utils.go``, ``createPods``) and
retries with its work queue's backoff; once room frees, the retry creates the rest. Here the
backoff is capped at a second so that the retries fit a test.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devapi import DevAPIServer
from devapi.workloads.controllers import WorkloadSettings
from devapi.workloads.workqueue import Backoff
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import WAIT, WEBHOOKS, api_client, eventually

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

# team-a has room for 6 pods of one cpu, and no burst above it.
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
"""
DENIAL = "exceeded tenant quota: team-a: requested cpu=1, used cpu=6/6"
RETRIES = Backoff(0.005, 1.0)  # the real queues' start, capped at a second


@pytest.fixture
def devapi() -> Iterator[DevAPIServer]:
    manifests = [
        WEBHOOKS / "namespace.yaml",
        WEBHOOKS / "priorityclass-tenant-burst.yaml",
        WEBHOOKS / "priorityclass-tenant-guaranteed.yaml",
    ]
    settings = WorkloadSettings(
        run_pods=True,
        run_seconds=2,  # far longer than creating the first pods takes
        controller_backoff=RETRIES,
        job_api_backoff=Backoff(0.2, 1.0),
    )
    with DevAPIServer(bookmark_interval=0.2, manifests=manifests, workloads=settings) as server:
        yield server


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Callable[..., str]:
    def run(*args: str, stdin: str | None = None) -> str:
        assert KUBECTL is not None
        done = subprocess.run(
            [
                KUBECTL,
                *("--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")),
                *("-n", "team-a", *args),
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[Any]:
    api = api_client(kubeconfig)
    yield client.CoreV1Api(api)
    api.close()


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


def deployment(name: str, replicas: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": template({"app": name}, "Always"),
            },
        }
    )


def live_pods(core: Any, selector: str) -> list[Any]:
    items = core.list_namespaced_pod("team-a", label_selector=selector).items
    return [p for p in items if p.metadata.deletion_timestamp is None]


def failed_creates(core: Any, owner: str) -> list[Any]:
    events = core.list_namespaced_event(
        "team-a", field_selector=f"involvedObject.name={owner},reason=FailedCreate"
    ).items
    return list(events)


def leave_room_for_four(
    start_tenantgate: StartTenantgate, core: Any, kubectl: Callable[..., str]
) -> None:
    """tenantgate running, and two of team-a's six pods' room taken by another Deployment."""
    start_tenantgate()
    core.create_namespace({"metadata": {"name": "team-a"}})
    kubectl("apply", "-f", "-", stdin=deployment("other", 2))
    eventually(lambda: len(live_pods(core, "app=other")) == 2, "the 2 other pods")


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
    shown = kubectl("describe", "replicaset", rs.metadata.name)
    assert "FailedCreate" in shown
    assert DENIAL in shown

    # Fewer replicas than the room holds, but more than there are: nothing changes yet.
    kubectl("scale", "deployment/web", "--replicas=6")
    # Scaling the other workload down frees two pods' room; the retry takes it.
    kubectl("scale", "deployment/other", "--replicas=0")
    eventually(lambda: len(live_pods(core, "app=web")) == 6, "the rest of web's 6 pods")
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
