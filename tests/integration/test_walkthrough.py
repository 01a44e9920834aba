"""The operator's walkthrough (docs/walkthrough.md) with the real ``tenantgate`` commands.

``tenantgate serve`` runs as its own process against the test API server; pods go in through
the official client (and ``kubectl`` when it is installed); ``tenantgate usage`` reads the
result; a server-side dry run shows the denial message.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from kubernetes import client

import certs
from tests.integration.harness import (
    ROOT,
    eventually,
    http_json,
    pod,
    register_webhooks,
)

TENANTGATE = [sys.executable, "-m", "admission.cli"]
WAIT = 60.0


class ServeProcess:
    """``tenantgate serve`` on ports 0; the ports are read from its JSON log."""

    def __init__(self, args: list[str], *, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [*TENANTGATE, "serve", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self.ports: dict[str, int] = {}
        self._reader = threading.Thread(target=self._read, args=(self.process.stderr,), daemon=True)
        self._reader.start()
        eventually(lambda: bool(self.ports) or self.process.poll() is not None, "serve to start")
        if not self.ports:
            raise AssertionError(f"tenantgate serve exited: {self.lines}")

    def _read(self, stream: IO[str] | None) -> None:
        if stream is None:
            return
        for line in stream:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            self.lines.append(record)
            if "metrics_port" in record and "port" in record:
                self.ports = {"webhook": record["port"], "metrics": record["metrics_port"]}

    def messages(self) -> list[str]:
        return [str(record.get("msg", "")) for record in self.lines]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(WAIT)
        self._reader.join(WAIT)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return code


def start_serve(kubeconfig: Path, cert_dir: Path, config_file: Path, *extra: str) -> ServeProcess:
    env = {**os.environ, "TENANTGATE_SWEEP_SECONDS": "0.2", "TENANTGATE_RECOUNT_SECONDS": "1"}
    env.pop("KUBECONFIG", None)
    return ServeProcess(
        [
            "--kubeconfig", str(kubeconfig),
            "--cert-dir", str(cert_dir),
            "--config", str(config_file),
            "--host", "127.0.0.1",
            "--port", "0",
            "--metrics-host", "127.0.0.1",
            "--metrics-port", "0",
            "--log-format", "json",
            "--shutdown-grace-seconds", "1",
            *extra,
        ],
        env=env,
    )  # fmt: skip


@pytest.fixture
def serve(kubeconfig: Path, cert_dir: Path, config_file: Path) -> Iterator[ServeProcess]:
    process = start_serve(kubeconfig, cert_dir, config_file)
    yield process
    if process.process.poll() is None:
        process.stop()


def test_the_walkthrough(
    serve: ServeProcess, kubeconfig: Path, cert_dir: Path, config_file: Path, core: Any
) -> None:
    webhook = f"https://127.0.0.1:{serve.ports['webhook']}"
    metrics = f"http://127.0.0.1:{serve.ports['metrics']}"
    register_webhooks(
        kubeconfig, url=webhook, ca_bundle=certs.MaterialPaths(cert_dir).ca_cert.read_bytes()
    )
    eventually(lambda: http_json(f"{metrics}/readyz")[0] == 200, "/readyz")

    core.create_namespace({"metadata": {"name": "team-a"}})
    stored = core.create_namespaced_pod("team-a", pod("web", cpu="250m", memory="128Mi"))
    assert stored.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    for index in range(4):
        core.create_namespaced_pod("team-a", pod(f"worker-{index}", cpu="1", memory="512Mi"))

    def usage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*TENANTGATE, "usage", "--server", metrics, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )

    eventually(lambda: "5 pods watched" in usage().stdout, "the pods in tenantgate usage")
    shown = usage("--tenant", "team-a")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == [
        "TENANT", "RESOURCE", "GUARANTEED", "CEILING", "USED", "IN-GUARANTEE", "ON-BURST", "USAGE"
    ]  # fmt: skip
    cpu = lines[1].split()
    assert cpu[:7] == ["team-a", "cpu", "4", "6", "4250m", "3250m", "1"]
    assert cpu[-1] == "71%"

    # A server-side dry run of a pod too big for the tenant: denied, nothing booked.
    big = pod("big", cpu="8", memory="1Gi")
    with pytest.raises(client.ApiException) as denied:
        core.create_namespaced_pod("team-a", big, dry_run="All")
    message = json.loads(str(denied.value.body))["message"]
    assert message == (
        'admission webhook "mutate.tenantgate.io" denied the request: exceeded tenant quota: '
        "team-a: requested cpu=8, used cpu=4250m/6 (burst ceiling), guaranteed cpu=4"
    )
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        manifest = Path(str(kubeconfig) + ".big.yaml")
        manifest.write_text(
            json.dumps({**big, "metadata": {**big["metadata"], "namespace": "team-a"}})
        )
        result = subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig), "apply", "--dry-run=server", "-f",
             str(manifest)],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )  # fmt: skip
        assert result.returncode == 1
        assert "exceeded tenant quota: team-a: requested cpu=8" in result.stderr
    assert usage("-o", "json").returncode == 0
    status = json.loads(usage("-o", "json").stdout)
    assert status["tenants"]["team-a"]["reservations"] == 0
    assert status["synced"] is True

    assert serve.stop() == 0
    assert "stopped" in serve.messages()

    # 8c. Queue mode: the same tenants, over-quota pods wait in line.
    queue_config = config_file.with_name("queue.yaml")
    queue_config.write_text(
        config_file.read_text().replace(
            "      burst: {ratio: 1.5}\n", "      burst: {ratio: 1.5}\n    overQuota: queue\n", 1
        )
    )
    queued = start_serve(kubeconfig, cert_dir, queue_config, "--gate-owner", "kubernetes-admin")
    try:
        walk_the_queue(queued, kubeconfig=kubeconfig, cert_dir=cert_dir, core=core)
    finally:
        assert queued.stop() == 0


def walk_the_queue(serve: ServeProcess, *, kubeconfig: Path, cert_dir: Path, core: Any) -> None:
    webhook = f"https://127.0.0.1:{serve.ports['webhook']}"
    metrics = f"http://127.0.0.1:{serve.ports['metrics']}"
    register_webhooks(
        kubeconfig, url=webhook, ca_bundle=certs.MaterialPaths(cert_dir).ca_cert.read_bytes()
    )
    eventually(lambda: http_json(f"{metrics}/readyz")[0] == 200, "/readyz")
    tiers = []
    for index in (1, 2, 3):
        stored = core.create_namespaced_pod("team-a", pod(f"queued-{index}", cpu="1"))
        tiers.append(stored.metadata.labels["tenantgate.io/tier"])
    assert tiers == ["burst", "queued", "queued"]

    def queue(*args: str) -> list[str]:
        result = subprocess.run(
            [*TENANTGATE, "queue", "--server", metrics, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    eventually(lambda: len(queue("--tenant", "team-a")) == 3, "two pods in tenantgate queue")
    lines = queue("--tenant", "team-a")
    assert lines[0].split() == [
        "TENANT", "POSITION", "POD", "PRIORITY", "EFFECTIVE", "REQUEST", "WAITED"
    ]  # fmt: skip
    assert lines[1].split()[:5] == ["team-a", "1", "team-a/queued-2", "1000", "1000"]
    assert lines[2].split()[:4] == ["2", "team-a/queued-3", "1000", "1000"]

    core.delete_namespaced_pod("worker-0", "team-a", grace_period_seconds=0)
    eventually(lambda: len(queue("--tenant", "team-a")) == 2, "queued-2 released")
    assert queue("--tenant", "team-a")[1].split()[:3] == ["team-a", "1", "team-a/queued-3"]
    released = core.read_namespaced_pod("queued-2", "team-a")
    assert released.metadata.labels["tenantgate.io/tier"] == "guaranteed"
    assert not released.spec.scheduling_gates

    def reasons() -> list[str]:
        events = core.list_namespaced_event(
            "team-a", field_selector="involvedObject.name=queued-2"
        ).items
        return [event.reason for event in events]

    eventually(lambda: reasons() == ["Queued", "Released"], "Queued and Released events")
