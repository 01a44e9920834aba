"""``python -m testcluster build`` (``make kube``) and ``python -m testcluster up``
(``make cluster``): the Kubernetes binary, and a cluster with tenantgate installed for a person.

``up`` starts the control plane and simulated nodes, installs deploy/webhooks through the test
overlay, runs ``tenantgate serve`` on CONFIG with the shipped ServiceAccount's token, registers
the webhooks, writes the admin kubeconfig to ``.tenantgate/cluster/kubeconfig`` and runs until
Ctrl-C, then stops everything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from testcluster.binary import BuildError, build
from testcluster.kubelet import NodeSpec

ROOT = Path(__file__).resolve().parents[1]
# Small enough that a few pods fill them (the walkthrough shows preemption), and a GPU node
# tainted as the GPU profiles expect.
WALKTHROUGH_NODES = (
    NodeSpec(
        "node-a",
        capacity={"cpu": "4", "memory": "16Gi", "pods": "110"},
        labels={"topology.kubernetes.io/zone": "zone-a"},
    ),
    NodeSpec(
        "node-b",
        capacity={"cpu": "4", "memory": "16Gi", "pods": "110"},
        labels={"topology.kubernetes.io/zone": "zone-b"},
    ),
    NodeSpec(
        "gpu-a",
        capacity={"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"},
        labels={"topology.kubernetes.io/zone": "zone-a", "tenantgate.io/node-class": "gpu"},
        taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    ),
)


def _build(_: argparse.Namespace) -> int:
    try:
        path = build()
    except BuildError as exc:
        print(f"make kube: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def _tenantgate(*args: str) -> list[str]:
    return [sys.executable, "-m", "admission.cli", *args]


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until tenantgate answers /readyz 200 (its webhooks are registered only then)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tenantgate serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (http only)
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"tenantgate did not become ready at {url} within 120 s")


def _up(args: argparse.Namespace) -> int:
    from testcluster.cluster import Cluster

    try:
        build()
    except BuildError as exc:
        print(f"make cluster: {exc}", file=sys.stderr)
        return 1
    state = ROOT / ".tenantgate" / "cluster"
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    workdir = Path(tempfile.mkdtemp(prefix="tenantgate-cluster-"))
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(
        f"starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler in {workdir}",
        flush=True,
    )
    cluster = Cluster(workdir, nodes=WALKTHROUGH_NODES).start()
    serve: subprocess.Popen[bytes] | None = None
    try:
        cert_dir = state / "certs"
        subprocess.run(_tenantgate("certs", "init", "--dir", str(cert_dir)), check=True, cwd=ROOT)
        print("installing deploy/webhooks (kubectl apply -k)", flush=True)
        cluster.install(ca_bundle=(cert_dir / "ca.crt").read_bytes())
        kubeconfig = cluster.tenantgate_kubeconfig(
            state / "tenantgate.kubeconfig", through_proxy=False
        )
        log = (state / "tenantgate.log").open("ab")
        serve = subprocess.Popen(
            _tenantgate(
                "serve",
                "--config",
                str(args.config),
                "--cert-dir",
                str(cert_dir),
                "--kubeconfig",
                str(kubeconfig),
                "--host",
                "127.0.0.1",
                "--port",
                str(args.port),
                "--metrics-host",
                "127.0.0.1",
                "--metrics-port",
                str(args.metrics_port),
            ),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_ready(f"http://127.0.0.1:{args.metrics_port}/readyz", serve)
        cluster.serve([args.port])
        scheduling = subprocess.run(
            _tenantgate("scheduler-config", "--config", str(args.config)),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if scheduling.returncode == 0:
            configuration = yaml.safe_load(scheduling.stdout)
            names = [p["schedulerName"] for p in configuration["profiles"]]
            print(f"starting kube-scheduler for {', '.join(names)}", flush=True)
            cluster.run_second_scheduler(configuration)
        shutil.copy(cluster.plane.admin_kubeconfig, state / "kubeconfig")
        kubectl = state / "kubectl"
        admin = state / "kubeconfig"
        kubectl.write_text(
            f'#!/bin/sh\nexec {cluster.plane.binary} kubectl --kubeconfig={admin} "$@"\n'
        )
        kubectl.chmod(0o755)
        print(
            f"\nready. admin kubeconfig: {state / 'kubeconfig'}\n"
            f"  export KUBECONFIG={state / 'kubeconfig'}\n"
            f"  kubectl: {kubectl} (v1.37.2)\n"
            f"  tenantgate: https://127.0.0.1:{args.port} (metrics and /status on "
            f"http://127.0.0.1:{args.metrics_port}), log {state / 'tenantgate.log'}\n"
            f"  component logs: {cluster.plane.logs}\n"
            "Ctrl-C stops everything.",
            flush=True,
        )
        while not stop.wait(1.0):
            if serve.poll() is not None:
                print(
                    f"tenantgate exited with {serve.returncode}; see {state / 'tenantgate.log'}",
                    file=sys.stderr,
                )
                return 1
    finally:
        print("stopping", flush=True)
        if serve is not None and serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(15)
            except subprocess.TimeoutExpired:
                serve.kill()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testcluster", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the Kubernetes binary into the cache").set_defaults(
        run=_build
    )
    up = commands.add_parser("up", help="a cluster with tenantgate installed, until Ctrl-C")
    up.add_argument("--config", type=Path, default=ROOT / "examples" / "tenantgate.yaml")
    up.add_argument("--port", type=int, default=int(os.environ.get("TENANTGATE_PORT", "8443")))
    up.add_argument(
        "--metrics-port", type=int, default=int(os.environ.get("TENANTGATE_METRICS_PORT", "8080"))
    )
    up.set_defaults(run=_up)
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
