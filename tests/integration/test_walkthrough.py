"""docs/walkthrough.md, step by step, on `make cluster` as a person runs it.

``python -m testcluster up`` (what ``make cluster`` runs) starts its own control plane with the
walkthrough's nodes and tenantgate on a copy of the example config; the steps then run the
walkthrough's commands: the built kubectl (v1.37.2) with the printed kubeconfig, and the
``tenantgate`` CLI (review, usage, queue). Ctrl-C (SIGINT) stops it all.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from testcluster.binary import kube_binary
from tests.integration.harness import ROOT, eventually

TENANTGATE = [sys.executable, "-m", "admission.cli"]
WEB = (ROOT / "examples" / "pods" / "web.yaml").read_text()
START = 300.0  # a whole control plane and tenantgate, on a loaded machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Walkthrough:
    """`make cluster` running, and the walkthrough's terminal 2."""

    process: subprocess.Popen[str]
    config: Path
    metrics: str
    output: list[str] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return ROOT / ".tenantgate" / "cluster" / "kubeconfig"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        result = subprocess.run(
            [str(kube_binary()), "kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def tenantgate(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*TENANTGATE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stderr
        return result

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        listed = json.loads(self.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
        return {
            item["metadata"]["name"]: item
            for item in listed["items"]
            if not item["metadata"].get("deletionTimestamp")
        }


def filler(name: str, namespace: str = "team-a") -> str:
    """The walkthrough's sed over examples/pods/web.yaml."""
    lines = []
    for line in WEB.splitlines():
        if line.endswith("name: web"):
            line = line[: -len("web")] + name
        line = line.replace("cpu: 250m", 'cpu: "1"').replace(
            "namespace: team-a", f"namespace: {namespace}"
        )
        lines.append(line)
    return "\n".join(lines) + "\n"


def warnings_of(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]


@pytest.fixture
def walkthrough() -> Iterator[Walkthrough]:
    config = ROOT / ".tenantgate" / "walkthrough-test.yaml"
    config.parent.mkdir(exist_ok=True)
    shutil.copy(ROOT / "examples" / "tenantgate.yaml", config)
    metrics_port = free_port()
    env = {**os.environ}
    env.pop("KUBECONFIG", None)
    process = subprocess.Popen(
        [
            sys.executable, "-m", "testcluster", "up", "--config", str(config),
            "--port", str(free_port()), "--metrics-port", str(metrics_port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    running = Walkthrough(process, config, f"http://127.0.0.1:{metrics_port}")

    def read(stream: IO[str] | None) -> None:
        for line in stream or []:
            running.output.append(line.rstrip())

    reader = threading.Thread(target=read, args=(process.stdout,), daemon=True)
    reader.start()
    try:
        eventually(
            lambda: "ready." in "\n".join(running.output) or process.poll() is not None,
            "make cluster to print ready.",
            timeout=START,
        )
        assert process.poll() is None, "\n".join(running.output[-30:])
        yield running
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        reader.join(10)
        if process.stdout is not None:
            process.stdout.close()
        config.unlink(missing_ok=True)
        assert code == 0, "\n".join(running.output[-30:])
        assert running.output[-1] == "stopping"


def test_the_walkthrough_on_make_cluster(walkthrough: Walkthrough) -> None:
    w = walkthrough
    # 1. The control plane and nodes.
    versions = w.kubectl("version", "-o", "json").stdout
    assert json.loads(versions)["serverVersion"]["gitVersion"] == "v1.37.2"
    assert json.loads(versions)["clientVersion"]["gitVersion"] == "v1.37.2"
    nodes = json.loads(w.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["gpu-a", "node-a", "node-b"]

    # 2. Review offline.
    reviewed = w.tenantgate(
        "review", "-f", "examples/pods/web.yaml", "--config", str(w.config), "-o", "json"
    )
    (review,) = json.loads(reviewed.stdout)
    assert (review["tenant"], review["profile"], review["tier"]) == (
        "team-a",
        "web-frontend",
        "guaranteed",
    )

    # 3. Pods.
    w.kubectl("create", "namespace", "team-a")
    w.kubectl("create", "namespace", "ml")
    w.kubectl("apply", "-f", "examples/pods/web.yaml")
    web = w.pods("team-a")["web"]
    assert web["metadata"]["labels"]["tenantgate.io/tier"] == "guaranteed"
    assert web["metadata"]["annotations"]["tenantgate.io/profile"] == "web-frontend"
    assert web["spec"]["priorityClassName"] == "tenant-guaranteed"
    for index in range(1, 6):
        applied = w.kubectl("apply", "-f", "-", stdin=filler(f"fill-{index}"))
        burst = any(
            "above its guarantee: admitted on burst capacity" in line
            for line in warnings_of(applied)
        )
        assert burst == (index >= 4), (index, applied.stderr)
    tiers = {
        name: p["metadata"]["labels"]["tenantgate.io/tier"] for name, p in w.pods("team-a").items()
    }
    assert tiers == {
        "web": "guaranteed",
        "fill-1": "guaranteed",
        "fill-2": "guaranteed",
        "fill-3": "guaranteed",
        "fill-4": "burst",
        "fill-5": "burst",
    }
    eventually(
        lambda: all(p["status"].get("phase") == "Running" for p in w.pods("team-a").values()),
        "team-a running",
    )

    # 4. The ledger: cpu 3250m on the guarantee, 2 on burst, ceiling 6.
    def usage_cpu() -> list[str]:
        shown = w.tenantgate("usage", "--server", w.metrics, "--tenant", "team-a").stdout
        return shown.splitlines()[1].split()[:7]

    eventually(lambda: usage_cpu() == ["team-a", "cpu", "4", "6", "5250m", "3250m", "2"], "usage")

    # 5. The dry-run denial books nothing.
    denied = w.kubectl("apply", "--dry-run=server", "-f", "-", stdin=filler("fill-6"), check=False)
    assert denied.returncode == 1
    assert (
        'admission webhook "mutate.tenantgate.io" denied the request: exceeded tenant quota: '
        "team-a: requested cpu=1, used cpu=5250m/6 (burst ceiling), guaranteed cpu=4"
    ) in denied.stderr
    assert usage_cpu() == ["team-a", "cpu", "4", "6", "5250m", "3250m", "2"]

    # 6. Preemption: ml's guaranteed pods take the room of team-a's burst pods.
    for index in range(1, 4):
        w.kubectl("apply", "-f", "-", stdin=filler(f"serve-{index}", namespace="ml"))

    def ml_running() -> bool:
        pods = w.pods("ml")
        return len(pods) == 3 and all(p["status"].get("phase") == "Running" for p in pods.values())

    eventually(ml_running, "ml's pods running", timeout=120)
    events = w.kubectl(
        "get", "events", "-n", "team-a", "--field-selector", "reason=Preempted", "-o", "json"
    )
    preempted = {e["involvedObject"]["name"] for e in json.loads(events.stdout)["items"]}
    assert preempted, "no pod was preempted"
    assert preempted <= {"fill-4", "fill-5"}, preempted  # burst pods only
    assert {"web", "fill-1", "fill-2", "fill-3"} <= set(w.pods("team-a"))
    taken = len(preempted)
    after = [f"{5250 - 1000 * taken}m", "3250m", str(2 - taken)]
    eventually(lambda: usage_cpu()[4:] == after, "the ledger to follow the preemption")

    # 7. Queue mode, reloaded from the edited file.
    log = ROOT / ".tenantgate" / "cluster" / "tenantgate.log"
    w.config.write_text(w.config.read_text().replace("overQuota: reject", "overQuota: queue"))
    eventually(lambda: "policy installed (config reloaded)" in log.read_text(), "the reload")
    results = {
        index: w.kubectl("apply", "-f", "-", stdin=filler(f"fill-{index}"))
        for index in range(6, 10)
    }
    pods = w.pods("team-a")

    def gated(name: str) -> bool:
        gates = pods[name]["spec"].get("schedulingGates") or []
        return any(g["name"] == "tenantgate.io/quota" for g in gates)

    # As many fit the ceiling on burst as step 6 preempted; the rest wait behind the gate.
    on_burst = [i for i in range(6, 10) if not gated(f"fill-{i}")]
    waiting = [i for i in range(6, 10) if gated(f"fill-{i}")]
    assert on_burst == list(range(6, 6 + taken))
    for position, index in enumerate(waiting, start=1):
        assert any(
            f"position {position} of {position}" in line for line in warnings_of(results[index])
        ), results[index].stderr
        assert pods[f"fill-{index}"]["spec"]["priorityClassName"] == "tenant-guaranteed"
        assert not pods[f"fill-{index}"]["spec"].get("nodeName")
    described = w.kubectl("describe", "pod", f"fill-{waiting[-1]}", "-n", "team-a").stdout
    assert "tenantgate.io/tier=queued" in described
    assert "PodScheduled   False" in described
    assert "Queued" in described
    assert "behind the scheduling gate tenantgate.io/quota: position" in described
    gates = w.kubectl(
        "get",
        "pod",
        f"fill-{waiting[-1]}",
        "-n",
        "team-a",
        "-o",
        "jsonpath={.spec.schedulingGates}",
    )
    assert json.loads(gates.stdout) == [{"name": "tenantgate.io/quota"}]
    conditions = pods[f"fill-{waiting[-1]}"]["status"]["conditions"]
    assert {(c["type"], c["status"], c.get("reason")) for c in conditions} == {
        ("PodScheduled", "False", "SchedulingGated")
    }
    w.tenantgate("queue", "--server", w.metrics)  # the table the walkthrough shows
    queued = json.loads(w.tenantgate("queue", "--server", w.metrics, "-o", "json").stdout)
    rows = queued["tenants"]["team-a"]["pods"]
    assert [(row["position"], row["pod"]) for row in rows] == [
        (position, f"team-a/fill-{index}") for position, index in enumerate(waiting, start=1)
    ]

    w.kubectl("delete", "pod", "fill-1", "-n", "team-a")
    first = f"fill-{waiting[0]}"

    def released_and_running() -> bool:
        stored = w.pods("team-a")[first]
        return not stored["spec"].get("schedulingGates") and stored["status"].get("phase") == (
            "Running"
        )

    eventually(released_and_running, f"{first} released and bound", timeout=120)
    assert w.pods("team-a")[first]["metadata"]["labels"]["tenantgate.io/tier"] == "guaranteed"
    released = w.kubectl(
        "get", "events", "-n", "team-a", "--field-selector", "reason=Released", "-o", "json"
    )
    assert {e["involvedObject"]["name"] for e in json.loads(released.stdout)["items"]} == {first}
    for index in waiting[1:]:
        assert w.pods("team-a")[f"fill-{index}"]["spec"].get("schedulingGates")
