"""What tenantgate's webhooks cost a real cluster: pod creates through kube-apiserver with and
without them, in one run.

A real control plane (``testcluster``: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler v1.37) with tenantgate installed from deploy/ and ``tenantgate serve`` running
with the shipped ServiceAccount's token and the memory ledger (which follows every pod through
its watch). ``PODS`` pods are created by ``CLIENTS`` concurrent clients, first with no webhook
registered, then, after they are deleted, with tenantgate's two webhooks calling tenantgate
directly. The pods carry a scheduling gate of their own so that nothing else (the scheduler,
the simulated kubelet) works on them: the figures are admission's alone.

Reported: the wall-time ratio, p50/p99 create latency each way, what tenantgate adds at p99,
and the CPU seconds each process used during the webhook run (on 2 cores the control plane
and tenantgate share the CPU, which is part of the ratio).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from kubernetes import client, config

import certs
from bench.procstat import cpu_times
from bench.stats import percentile
from testcluster import Cluster

ROOT: Final = Path(__file__).resolve().parent.parent
NAMESPACE: Final = "bench"
CLIENTS: Final = 8
CONFIG: Final = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  bench:
    namespaces: [bench]
    quota:
      guaranteed: {cpu: "1000", pods: "5000"}
"""


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "schedulingGates": [{"name": "bench.tenantgate.io/hold"}],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def _clients(kubeconfig: Path, count: int) -> list[Any]:
    factory: Any = config.new_client_from_config
    return [factory(config_file=str(kubeconfig)) for _ in range(count)]


def _create_all(kubeconfig: Path, pods: int, prefix: str) -> tuple[float, list[float], int]:
    """Create ``pods`` pods with CLIENTS clients; (wall seconds, latencies in ms, errors)."""
    apis = _clients(kubeconfig, CLIENTS)
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()

    def one(index: int) -> None:
        nonlocal errors
        core: Any = client.CoreV1Api(apis[index % CLIENTS])
        started = time.perf_counter()
        try:
            core.create_namespaced_pod(
                NAMESPACE, _pod(f"{prefix}-{index:05d}"), _preload_content=False
            )
        except client.ApiException:
            with lock:
                errors += 1
            return
        elapsed = (time.perf_counter() - started) * 1000
        with lock:
            latencies.append(elapsed)

    began = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one, range(pods)))
    wall = time.perf_counter() - began
    for api in apis:
        api.close()
    return wall, latencies, errors


def _delete_all(cluster: Cluster) -> None:
    core: Any = client.CoreV1Api(cluster.api)
    core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the bench pods were not deleted in 120 s")
        time.sleep(0.5)


def _summary(wall: float, latencies: list[float], errors: int) -> dict[str, Any]:
    return {
        "wall_seconds": round(wall, 2),
        "creates_per_second": round(len(latencies) / wall, 1) if wall else None,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "errors": errors,
    }


def _cpu_seconds(pid: int) -> float:
    times = cpu_times(pid)
    return float(times.user + times.system)


def measure(*, quick: bool, progress: Any = print) -> dict[str, Any]:
    pods = 500 if quick else 2000
    with tempfile.TemporaryDirectory(prefix="tenantgate-bench-cluster-") as directory:
        work = Path(directory)
        with Cluster(work / "cluster", nodes=()) as cluster:
            cert_dir = work / "certs"
            certs.init(cert_dir, service="tenantgate", namespace="tenantgate-system")
            cluster.install(ca_bundle=certs.MaterialPaths(cert_dir).ca_cert.read_bytes())
            core: Any = client.CoreV1Api(cluster.api)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            admin = cluster.plane.admin_kubeconfig
            progress(f"cluster: {pods} creates without webhooks")
            _create_all(admin, min(pods, 200), "warm")  # the API server's caches and pools
            _delete_all(cluster)
            without = _create_all(admin, pods, "plain")
            _delete_all(cluster)

            config_file = work / "tenantgate.yaml"
            config_file.write_text(CONFIG)
            kubeconfig = cluster.tenantgate_kubeconfig(
                work / "tenantgate.kubeconfig", through_proxy=False
            )
            port = _free_port()
            log = (work / "tenantgate.log").open("wb")
            serve = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "admission.cli",
                    "serve",
                    "--config",
                    str(config_file),
                    "--cert-dir",
                    str(cert_dir),
                    "--kubeconfig",
                    str(kubeconfig),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--metrics-host",
                    "127.0.0.1",
                    "--metrics-port",
                    str(_free_port()),
                    "--log-level",
                    "warning",
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                _register_direct(cluster, port)
                _wait_webhooks(cluster)
                progress(f"cluster: {pods} creates through tenantgate's webhooks")
                _create_all(admin, min(pods, 200), "warm-hooked")
                _delete_all(cluster)
                before = {
                    name: _cpu_seconds(c.pid)
                    for name, c in cluster.plane.components.items()
                    if c.pid
                }
                before["tenantgate"] = _cpu_seconds(serve.pid)
                hooked = _create_all(admin, pods, "hooked")
                used = {
                    name: round(_cpu_seconds(c.pid) - before[name], 2)
                    for name, c in cluster.plane.components.items()
                    if c.pid
                }
                used["tenantgate"] = round(_cpu_seconds(serve.pid) - before["tenantgate"], 2)
            finally:
                serve.send_signal(signal.SIGTERM)
                serve.wait(30)
                log.close()
    plain, webhooks = _summary(*without), _summary(*hooked)
    return {
        "pods": pods,
        "clients": CLIENTS,
        "without": plain,
        "with": webhooks,
        "wall_ratio": round(webhooks["wall_seconds"] / plain["wall_seconds"], 3),
        "added_p99_ms": round(webhooks["p99_ms"] - plain["p99_ms"], 2),
        "cpu_seconds_with_webhooks": used,
    }


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _register_direct(cluster: Cluster, port: int) -> None:
    """The installed webhook configurations, calling tenantgate on ``port`` directly."""
    assert cluster.installation is not None
    registration: Any = client.AdmissionregistrationV1Api(cluster.api)
    for document in cluster.installation.webhook_configurations():
        body = json.loads(
            json.dumps(document).replace(cluster.balancer.url, f"https://127.0.0.1:{port}")
        )
        body["metadata"].pop("resourceVersion", None)
        if body["kind"].startswith("Mutating"):
            registration.create_mutating_webhook_configuration(body)
        else:
            registration.create_validating_webhook_configuration(body)


def _wait_webhooks(cluster: Cluster) -> None:
    """Until a dry-run create comes back mutated by tenantgate."""
    core: Any = client.CoreV1Api(cluster.api)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            probe = core.create_namespaced_pod(NAMESPACE, _pod("probe"), dry_run="All")
        except client.ApiException:
            time.sleep(0.2)
            continue
        if (probe.metadata.labels or {}).get("tenantgate.io/tenant") == "bench":
            return
        time.sleep(0.2)
    raise RuntimeError("tenantgate's webhooks were not called within 120 s")
