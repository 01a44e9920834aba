"""``tenantgate lint``: exit codes and output through the real CLI entry point."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.config import new_client_from_config

from admission.cli import main
from testcluster import Cluster
from tests.integration.harness import create_namespace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tenantgate.yaml"

BROKEN = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
tenants:
  a:
    namespaces: [shared]
    quota:
      guaranteed: {cpu: "4"}
      burst: {max: {cpu: "2"}}
  b:
    namespaces: [shared]
    quota: {guaranteed: {cpu: "1"}}
    profiles: {allowed: [web]}
"""


def test_clean_file_exits_zero_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{EXAMPLE}: ok: 2 tenants (3 namespaces), ")
    assert out.count("\n") == 1


def test_problems_exit_one_and_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tenantgate.yaml"
    config.write_text(BROKEN)
    assert main(["lint", str(config)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{config}:11: tenants.a.quota.burst.max.cpu: burst max cpu=2 is below guaranteed "
        "cpu=4 (the ceiling stays at the guarantee)",
        f'{config}:13: tenants.b.namespaces[0]: namespace "shared" is already claimed by '
        'tenant "a"',
        f'{config}:15: tenants.b.profiles.allowed[0]: unknown profile "web"',
        "3 problems found",
    ]


def test_several_files_and_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("tenants: [\n")
    assert main(["lint", "-q", str(EXAMPLE), str(broken)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{broken}:2:1: ")
    assert main(["lint", "--quiet", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == ""


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["lint", str(missing)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{missing}: cannot read: No such file or directory",
        "1 problem found",
    ]


def test_a_file_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["lint"])
    assert exited.value.code == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A key without ':' is noticed on the next line; the mistake is on this one.
        (
            "kind: TenantgateConfig\ntenants\n  team-a:\n    namespaces: [team-a]\n",
            "2:1: while scanning a simple key, could not find expected ':' "
            "(noticed at line 3, column 9)",
        ),
        # An unclosed bracket: reported where it opens.
        (
            "tenants:\n  team-a:\n    namespaces: [team-a\n  ml: {}\n",
            "3:17: while parsing a flow sequence, did not find expected ',' or ']' "
            "(noticed at line 4, column 5)",
        ),
        # An unterminated quote, noticed at the end of the file.
        (
            'tenants:\n  team-a:\n    namespaces: ["team-a]\n  ml: {}\n',
            "3:18: while scanning a quoted scalar, found unexpected end of stream "
            "(noticed at line 5, column 1)",
        ),
        # Where the parser is right, its own position stands.
        ("tenants:\n  a: b: c\n", "2:7: mapping values are not allowed in this context"),
        (
            "tenants:\n  - a\n b: c\n",
            "3:2: while parsing a block mapping, did not find expected key",
        ),
    ],
)
def test_yaml_syntax_errors_name_the_line_and_column_of_the_mistake(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)

    assert main(["lint", str(path)]) == 1

    assert capsys.readouterr().out.splitlines()[0] == f"{path}:{expected}"


# --------------------------------------------------------------------------- against a cluster

CLUSTER_CONFIG = """\
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
  gang: {schedulerName: volcano}
  memory: {schedulerName: memory-optimized-scheduler}
tenants:
  team-a:
    namespaces: [team-a]
    quota: {guaranteed: {cpu: "4"}}
  ml:
    namespaces: [ml]
    quota: {guaranteed: {cpu: "4"}}
"""

OPT_IN_SELECTOR = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
        {"key": "tenantgate.io/enabled", "operator": "In", "values": ["true"]},
    ]
}


def webhook_configuration(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "tenantgate"},
        "webhooks": [
            {
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "clientConfig": {"url": "https://127.0.0.1:9/never-called"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": OPT_IN_SELECTOR,
            }
        ],
    }


def test_connected_lint_warns_about_schedulers_and_unselected_namespaces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kube: Cluster
) -> None:
    config = tmp_path / "tenantgate.yaml"
    config.write_text(CLUSTER_CONFIG)
    # The real control plane, as its admin.
    kubeconfig = kube.plane.admin_kubeconfig
    factory: Any = new_client_from_config
    client_api = factory(config_file=str(kubeconfig))
    try:
        core: Any = client.CoreV1Api(client_api)
        create_namespace(core, {"metadata": {"name": "team-a"}})
        create_namespace(
            core, {"metadata": {"name": "ml", "labels": {"tenantgate.io/enabled": "true"}}}
        )
        create_namespace(core, {"metadata": {"name": "volcano-system"}})
        placed = {
            "metadata": {"name": "job-0"},
            "spec": {
                "schedulerName": "volcano",
                "nodeName": "node-1",
                "containers": [{"name": "main", "image": "busybox"}],
            },
        }
        core.create_namespaced_pod("volcano-system", placed)
        core.patch_namespaced_pod_status(
            "job-0", "volcano-system", {"status": {"phase": "Running"}}
        )
        admission: Any = client.AdmissionregistrationV1Api(client_api)
        admission.create_mutating_webhook_configuration(
            webhook_configuration("MutatingWebhookConfiguration", "mutate.tenantgate.io")
        )
        admission.create_validating_webhook_configuration(
            webhook_configuration("ValidatingWebhookConfiguration", "validate.tenantgate.io")
        )
    finally:
        client_api.close()

    code = main(["lint", str(config), "--kubeconfig", str(kubeconfig)])

    out = capsys.readouterr().out.splitlines()
    assert code == 0, out  # warnings alone do not fail
    assert out == [
        f"{config}:7: profiles.memory.schedulerName: warning: no scheduler "
        "memory-optimized-scheduler runs in the cluster (no running pod was placed by it or is "
        "labelled memory-optimized-scheduler); pods given profile memory would stay Pending",
        f"{config}:10: tenants.team-a.namespaces: warning: namespace team-a of tenant team-a is "
        "not selected by webhook mutate.tenantgate.io, validate.tenantgate.io: its pods would "
        "skip tenantgate and use no quota; label it: kubectl label namespace team-a "
        "tenantgate.io/enabled=true",
        f"{config}: ok: 2 tenants (2 namespaces), 3 profiles, 0 rules, 2 priority classes",
    ]


def test_lint_reads_the_rendered_webhooks_offline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "tenantgate.yaml"
    config.write_text(CLUSTER_CONFIG)
    webhooks = tmp_path / "rendered.yaml"
    webhooks.write_text(
        yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
                webhook_configuration("ValidatingWebhookConfiguration", "validate.tenantgate.io"),
            ]
        )
    )

    assert main(["lint", str(config), "--webhooks", str(webhooks)]) == 0

    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning:" in line]
    # Offline, no namespace is known to carry the label: both are warned about.
    assert [line.split(": ")[1] for line in warnings] == [
        "tenants.team-a.namespaces",
        "tenants.ml.namespaces",
    ]


def test_an_unreachable_cluster_exits_two(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    assert main(["lint", str(EXAMPLE), "--kubeconfig", str(kubeconfig)]) == 2
    assert capsys.readouterr().err.startswith("tenantgate lint: ")
