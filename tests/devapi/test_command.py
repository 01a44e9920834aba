"""``tenantgate dev apiserver`` as a process, used through the kubeconfig it writes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.devapi.support import Api, new_client, pod

REPO = Path(__file__).resolve().parents[2]


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "admission.cli",
            "dev",
            "apiserver",
            "--log-level",
            "warning",
            *args,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    kubeconfig = tmp_path / "kubeconfig"
    process = start("--port", "0", "--kubeconfig-out", str(kubeconfig))
    try:
        yield process, kubeconfig
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def test_serves_and_writes_a_kubeconfig(running: tuple[subprocess.Popen[str], Path]) -> None:
    process, kubeconfig = running
    assert process.stdout is not None
    serving = process.stdout.readline()
    assert serving.startswith("tenantgate dev apiserver: serving http://127.0.0.1:")
    assert (
        process.stdout.readline().strip()
        == f"tenantgate dev apiserver: kubeconfig written to {kubeconfig}"
    )
    assert kubeconfig.stat().st_mode & 0o077 == 0
    api_client = new_client(kubeconfig)
    try:
        core: Api = client.CoreV1Api(api_client)
        assert core.create_namespaced_pod("default", pod("web")).metadata.name == "web"
    finally:
        api_client.close()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def test_bad_arguments_exit_2_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    broken = start("--webhooks", str(tmp_path))
    _, stderr = broken.communicate(timeout=60)
    assert broken.returncode == 2
    assert "bad.yaml: invalid YAML" in stderr

    unmapped = start("--webhook-service", "tenantgate=127.0.0.1")
    _, stderr = unmapped.communicate(timeout=60)
    assert unmapped.returncode == 2
    assert "expected NAME.NAMESPACE[:PORT]=HOST:PORT" in stderr


def test_run_pods_schedules_and_runs_pods(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = start("--run-pods", "--pod-run-seconds", "0.5", "--kubeconfig-out", str(kubeconfig))
    try:
        assert process.stdout is not None
        process.stdout.readline()
        process.stdout.readline()  # the kubeconfig is written
        api_client = new_client(kubeconfig)
        try:
            core: Api = client.CoreV1Api(api_client)
            core.create_namespaced_pod("default", pod("job", restartPolicy="Never"))
            deadline = time.monotonic() + 60
            while core.read_namespaced_pod("job", "default").status.phase != "Succeeded":
                assert time.monotonic() < deadline, "the pod did not run to completion"
                time.sleep(0.1)
            assert core.read_namespaced_pod("job", "default").spec.node_name == "devapi-node"
        finally:
            api_client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    negative = start("--pod-run-seconds", "-1")
    _, stderr = negative.communicate(timeout=60)
    assert negative.returncode == 2
    assert "--pod-run-seconds must not be negative" in stderr
