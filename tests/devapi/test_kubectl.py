"""kubectl against the test API server: get, apply, apply --dry-run=server.

Skipped where kubectl is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.devapi.support import Api, TLSMaterial, WebhookServer, allow, crd, hook, register

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: app
    image: registry.example/app:1.0
    resources:
      requests: {cpu: 100m, memory: 64Mi}
"""


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Kubectl:
    kubeconfig: Path
    workdir: Path

    def __call__(self, *args: str) -> Result:
        if KUBECTL is None:  # pragma: no cover - the module is skipped
            raise RuntimeError("kubectl is not installed")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.workdir)}
        done = subprocess.run(
            [KUBECTL, "--cache-dir", str(self.workdir / "cache"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def write(self, name: str, text: str) -> str:
        path = self.workdir / name
        path.write_text(text)
        return str(path)


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    return Kubectl(kubeconfig, tmp_path)


def test_apply_get_and_reapply(kubectl: Kubectl, core: Api) -> None:
    manifest = kubectl.write("pod.yaml", POD)
    created = kubectl("apply", "-f", manifest)
    assert (created.code, created.stdout.strip()) == (0, "pod/web created"), created.stderr
    listed = kubectl("get", "pods")
    assert listed.code == 0
    header, row = listed.stdout.strip().splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["web", "0/1", "Pending", "0"]

    assert kubectl("apply", "-f", manifest).stdout.strip() == "pod/web unchanged"
    changed = kubectl.write("pod.yaml", POD.replace("app:1.0", "app:2.0"))
    configured = kubectl("apply", "-f", changed)
    assert configured.stdout.strip() == "pod/web configured", configured.stderr
    assert (
        core.read_namespaced_pod("web", "default").spec.containers[0].image
        == "registry.example/app:2.0"
    )
    as_json = kubectl("get", "pod", "web", "-o", "jsonpath={.metadata.annotations}")
    assert "kubectl.kubernetes.io/last-applied-configuration" in as_json.stdout

    deleted = kubectl("delete", "-f", manifest)
    assert deleted.stdout.strip() == 'pod "web" deleted'
    assert core.list_namespaced_pod("default").items == []


def test_apply_dry_run_server_runs_admission_and_persists_nothing(
    kubectl: Kubectl,
    api_client: Api,
    core: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    url = webhooks.route(
        "/validate", allow(warnings=["tenant team-a: would run on burst capacity"])
    )
    register(
        api_client,
        "v",
        hook("validate.example.com", url, webhook_tls, sideEffects="NoneOnDryRun"),
        mutating=False,
    )
    result = kubectl("apply", "--dry-run=server", "-f", kubectl.write("pod.yaml", POD))
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == "pod/web created (server dry run)"
    assert "Warning: tenant team-a: would run on burst capacity" in result.stderr
    (review,) = webhooks.requests("/validate")
    assert review["dryRun"] is True
    assert core.list_namespaced_pod("default").items == []


def test_a_denial_is_printed_with_its_message(
    kubectl: Kubectl,
    api_client: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    url = webhooks.route(
        "/validate",
        lambda review: {
            "allowed": False,
            "status": {
                "code": 403,
                "reason": "Forbidden",
                "message": "exceeded tenant quota: team-a",
            },
        },
    )
    register(
        api_client,
        "v",
        hook("validate.tenantgate.io", url, webhook_tls, sideEffects="NoneOnDryRun"),
        mutating=False,
    )
    result = kubectl("apply", "--dry-run=server", "-f", kubectl.write("pod.yaml", POD))
    assert result.code == 1
    assert (
        'admission webhook "validate.tenantgate.io" denied the request: '
        "exceeded tenant quota: team-a" in result.stderr
    )
    assert "Error from server (Forbidden)" in result.stderr


def test_custom_resources_with_kubectl(kubectl: Kubectl) -> None:
    definition = kubectl.write("crd.yaml", yaml.safe_dump(crd()))
    assert kubectl("apply", "-f", definition).code == 0
    widget = kubectl.write(
        "widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 3\n",
    )
    assert kubectl("apply", "-f", widget).stdout.strip() == "widget.example.com/w created"
    table = kubectl("get", "widgets")
    assert table.stdout.split() == ["NAME", "SIZE", "w", "3"]
    assert kubectl("get", "wd", "w", "-o", "jsonpath={.spec.size}").stdout == "3"
    resized = kubectl.write(
        "widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 4\n",
    )
    assert kubectl("apply", "-f", resized).stdout.strip() == "widget.example.com/w configured"
    assert kubectl("get", "widget", "w", "-o", "jsonpath={.metadata.generation}").stdout == "2"


def test_namespaces_priority_classes_and_api_resources(kubectl: Kubectl) -> None:
    namespace = kubectl.write(
        "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n"
    )
    assert kubectl("apply", "-f", namespace).stdout.strip() == "namespace/team-a created"
    assert "team-a" in kubectl("get", "ns", "-l", "kubernetes.io/metadata.name=team-a").stdout
    classes = kubectl("get", "priorityclasses").stdout
    assert "system-cluster-critical" in classes
    resources = kubectl("api-resources", "--no-headers").stdout
    names = {line.split()[0] for line in resources.splitlines()}
    assert {"pods", "namespaces", "priorityclasses", "leases", "customresourcedefinitions"} <= names


@pytest.mark.parametrize(
    ("args", "subject"),
    [
        (("create", "namespace", "team-b"), "namespaces"),
        (("create", "priorityclass", "batch", "--value=5"), "priorityclasses"),
    ],
)
def test_kubectl_commands_that_send_protobuf_get_the_real_415_and_the_json_way(
    kubectl: Kubectl, args: tuple[str, ...], subject: str
) -> None:
    """apiserver/pkg/endpoints/handlers/negotiation/errors.go (errUnsupportedMediaType): a body
    in a media type the server does not decode is 415 UnsupportedMediaType with the accepted
    types; this server adds how to send the object as JSON instead (kubectl apply -f)."""
    result = kubectl(*args)
    assert result.code == 1
    assert (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml; this API server reads no protobuf" in result.stderr
    )
    assert "write the object in YAML and use kubectl apply -f FILE" in result.stderr
    assert args[2] not in kubectl("get", subject, "-o", "name").stdout


def test_a_denial_without_a_code_or_reason_reaches_kubectl_as_400_without_reason(
    kubectl: Kubectl,
    api_client: Api,
    webhooks: WebhookServer,
    webhook_tls: TLSMaterial,
) -> None:
    """webhook/errors/statuserror.go (ToStatusErr): a denial without a code is 400 and keeps
    its empty reason, which metav1.Status omits; kubectl then prints no reason
    (kubectl/pkg/cmd/util/helpers.go, StandardErrorMessage)."""
    url = webhooks.route(
        "/validate", lambda review: {"allowed": False, "status": {"message": "no room"}}
    )
    register(
        api_client,
        "v",
        hook("validate.tenantgate.io", url, webhook_tls, sideEffects="NoneOnDryRun"),
        mutating=False,
    )
    result = kubectl("apply", "--dry-run=server", "-f", kubectl.write("pod.yaml", POD))
    assert result.code == 1
    assert 'Error from server: error when creating "' in result.stderr, result.stderr
    assert 'admission webhook "validate.tenantgate.io" denied the request: no room' in (
        result.stderr
    )


def test_limit_ranges_and_runtime_classes_with_kubectl(kubectl: Kubectl) -> None:
    """pkg/printers/internalversion/printers.go (printLimitRange, printRuntimeClass): the
    columns kubectl get shows for them."""
    manifest = kubectl.write(
        "objects.yaml",
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: limits\nspec:\n  limits:\n"
        "  - type: Container\n    default: {cpu: 500m}\n---\n"
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: kata\nhandler: kata\n",
    )
    applied = kubectl("apply", "-f", manifest)
    assert applied.stdout.split() == [
        "limitrange/limits",
        "created",
        "runtimeclass.node.k8s.io/kata",
        "created",
    ], applied.stderr
    assert kubectl("get", "limits").stdout.split()[:4] == ["NAME", "CREATED", "AT", "limits"]
    assert kubectl("get", "runtimeclass").stdout.split()[:5] == [
        "NAME",
        "HANDLER",
        "AGE",
        "kata",
        "kata",
    ]
    assert "Container   cpu" in kubectl("describe", "limitrange", "limits").stdout
