"""Pod groups on the real control plane, with the real scheduler and Job controller.

Members of a group wait behind ``tenantgate.io/quota`` until the whole group exists and fits;
then all are booked at once and released together. The Job controller creates an Indexed
Job's pods; the simulated kubelet runs each for ``testcluster.tenantgate.io/run-seconds``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import StartTenantgate
from tests.integration.harness import (
    Tenantgate,
    create_namespace,
    eventually,
    http_json,
    one_tenant_config,
    pod,
    write_config,
)
from tests.integration.test_installation import indexed_job

GATE = "tenantgate.io/quota"

CONFIG = one_tenant_config("team-g", cpu="12")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path, CONFIG)


@pytest.fixture
def tenantgate(start_tenantgate: StartTenantgate, core: Any) -> Tenantgate:
    started = start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-g"}})
    return started


def gated(stored: Any) -> bool:
    return any(gate.name == GATE for gate in stored.spec.scheduling_gates or [])


def finished(stored: Any) -> bool:
    return stored.status.phase in ("Succeeded", "Failed")


class Sampler:
    """Lists the namespace's pods until stopped; keeps every sample (name -> state)."""

    def __init__(self, core: Any, namespace: str) -> None:
        self.samples: list[tuple[float, dict[str, str]]] = []
        self._core = core
        self._namespace = namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self._core.list_namespaced_pod(self._namespace).items
            states = {
                p.metadata.name: "done" if finished(p) else "gated" if gated(p) else "ungated"
                for p in pods
            }
            self.samples.append((time.monotonic(), states))
            time.sleep(0.05)


def job_of(name: str) -> str:
    return name.rsplit("-", 2)[0]


def test_two_indexed_jobs_of_eight_into_room_for_twelve_never_run_six_and_six(
    tenantgate: Tenantgate, core: Any
) -> None:
    batch: Any = client.BatchV1Api(core.api_client)
    with Sampler(core, "team-g") as sampler:
        for name in ("job-a", "job-b"):
            body = indexed_job(name, parallelism=8)
            body["spec"]["template"]["metadata"]["annotations"][
                "testcluster.tenantgate.io/run-seconds"
            ] = "4"
            batch.create_namespaced_job("team-g", body)

        def both_complete() -> bool:
            jobs = [batch.read_namespaced_job(n, "team-g") for n in ("job-a", "job-b")]
            return all((job.status.succeeded or 0) == 8 for job in jobs)

        eventually(both_complete, "both Jobs to complete", timeout=120)
    order: list[str] = []
    first_out: dict[str, float] = {}
    all_out: dict[str, float] = {}
    for at, sample in sampler.samples:
        live = {job_of(name) for name, state in sample.items() if state == "ungated"}
        for job in sorted(live):
            if job not in order:
                order.append(job)
        for job in ("job-a", "job-b"):
            states = [s for n, s in sample.items() if job_of(n) == job]
            if "ungated" in states:
                first_out.setdefault(job, at)
                if len(states) == 8 and "gated" not in states:
                    all_out.setdefault(job, at)
    assert len(order) == 2
    first, second = order
    for _, sample in sampler.samples:
        running = [n for n, state in sample.items() if state == "ungated"]
        assert len(running) <= 12, sample  # the room: 12 pods of 1 cpu
        if any(job_of(n) == second for n in running):
            # The second runs whole, only on room the first has freed: at least 4 of the
            # first's 8 have finished (never 6 + 6, never 8 + 8).
            assert sum(1 for n in running if job_of(n) == first) <= 4, sample
    # Released together: the gates of one booking come off within moments of each other
    # (one PATCH per pod: the API server has no call for several).
    for job in order:
        assert all_out[job] - first_out[job] < 3.0, (job, first_out, all_out)
    assert tenantgate.state.releaser is not None
    assert tenantgate.state.releaser.groups.stats.released == 2


def member(name: str, index: int, *, size: int = 8) -> dict[str, Any]:
    body = pod(f"{name}-{index}", cpu="1")
    body["metadata"]["labels"] = {
        "tenantgate.io/pod-group": name,
        "tenantgate.io/pod-group-size": str(size),
    }
    body["metadata"]["annotations"] = {"testcluster.tenantgate.io/run-seconds": "600"}
    body["spec"]["restartPolicy"] = "Never"
    return body


def warnings_of(response: Any) -> list[str]:
    return [
        value.split('"', 1)[1].rsplit('"', 1)[0]
        for key, value in response.headers.items()
        if key.lower() == "warning" and '"' in value
    ]


def test_a_group_created_member_by_member_never_runs_before_all_are_booked(
    tenantgate: Tenantgate, core: Any
) -> None:
    told: list[list[str]] = []
    with Sampler(core, "team-g") as sampler:
        for index in range(8):
            response = core.create_namespaced_pod(
                "team-g", member("train-42", index), _preload_content=False
            )
            told.append(warnings_of(response))
            response.read()
            response.release_conn()
            # Another pod of the tenant arrives in between, and runs.
            other = pod(f"other-{index}", cpu="500m")
            assert not gated(core.create_namespaced_pod("team-g", other))
            if index < 7:
                pods = core.list_namespaced_pod(
                    "team-g", label_selector="tenantgate.io/pod-group"
                ).items
                assert all(gated(p) for p in pods)

        def all_released() -> bool:
            pods = core.list_namespaced_pod(
                "team-g", label_selector="tenantgate.io/pod-group"
            ).items
            return len(pods) == 8 and not any(gated(p) for p in pods)

        eventually(all_released, "the group to be released")
    assert "waiting for pod group train-42: 1 of 8 members created" in told[0][-1]
    assert "4 of 8 members created" in told[3][-1]
    for _, sample in sampler.samples:
        states = [s for n, s in sample.items() if n.startswith("train-42-")]
        if "ungated" in states:
            assert len(states) == 8, sample  # no member runs before all 8 exist
    used = tenantgate.state.ledger.get("team-g").guaranteed["cpu"]
    assert str(used) == "12"  # 8 members + 8 x 500m


def test_a_group_that_can_never_fit_is_denied_at_its_first_member(
    tenantgate: Tenantgate, core: Any
) -> None:
    with pytest.raises(client.ApiException) as denied:
        core.create_namespaced_pod("team-g", member("huge", 0, size=13))
    assert (
        "pod group huge (13 members) needs cpu=13, more than tenant team-g's guarantee (cpu=12)"
        in (denied.value.body or "")
    )


def test_queue_and_metrics_show_the_group(tenantgate: Tenantgate, core: Any) -> None:
    for index in range(3):
        core.create_namespaced_pod("team-g", member("wait", index, size=4))

    def listed() -> bool:
        code, document = http_json(f"{tenantgate.metrics_url}/queue?tenant=team-g")
        rows = document["tenants"]["team-g"]["pods"]
        return code == 200 and [(r.get("group"), r.get("members"), r["request"]) for r in rows] == [
            ("team-g/labels/wait", 3, "cpu=3,memory=3Gi,pods=3")
        ]

    try:
        eventually(listed, "the group in /queue")
    except AssertionError:
        raise AssertionError(http_json(f"{tenantgate.metrics_url}/queue?tenant=team-g")) from None
    with __import__("urllib.request").request.urlopen(f"{tenantgate.metrics_url}/metrics") as r:
        text = r.read().decode()
    assert 'tenantgate_pod_groups_waiting{tenant="team-g"} 1.0' in text


def test_a_member_whose_job_is_missing_stays_gated_and_is_told_why(
    tenantgate: Tenantgate, core: Any
) -> None:
    body = pod("ghost-0", cpu="1")
    body["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "0"}
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "ghost",
            "uid": "00000000-0000-0000-0000-000000000000",
            "controller": True,
        }
    ]
    response = core.create_namespaced_pod("team-g", body, _preload_content=False)
    told = warnings_of(response)
    stored = json.loads(response.read())
    response.release_conn()
    # As stored (the garbage collector soon deletes a pod whose owner does not exist).
    assert {"name": GATE} in stored["spec"]["schedulingGates"]
    assert told[-1] == (
        "waiting for pod group ghost: its size is unknown (Job team-g/ghost was not found); "
        "the pod stays gated until it is recreated with the size known"
    )
