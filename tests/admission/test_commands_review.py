"""``tenantgate review``: tenant, tier and verdict through the server's own decision path;
table / JSON / YAML output, ``--namespace``, ``--usage``, exit codes, every fixture, and
precise read errors."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from admission.cli import main
from admission.commands import review
from classifier.templates import find_pod_templates, pod_from_template

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "manifests"
EXAMPLE_CONFIG = ROOT / "examples" / "tenantgate.yaml"
EXAMPLE_PODS = ROOT / "examples" / "pods"

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
  annotations:
    released: 2024-05-01
spec:
  containers:
    - name: nginx
      image: nginx:1.27
      ports: [{containerPort: 80}]
"""

# One replica fits team-a's guarantee (cpu 4); three would not even fit its ceiling (cpu 6).
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: crunch, namespace: team-a}
spec:
  replicas: 3
  selector: {matchLabels: {app: crunch}}
  template:
    metadata: {labels: {app: crunch}}
    spec:
      containers:
        - name: crunch
          image: busybox:1.36
          resources: {requests: {cpu: "3", memory: 1Gi}}
"""

TEAM_A_FULL = "exceeded tenant quota: team-a: requested cpu=100m, used cpu=6/6 (burst ceiling), "
TEAM_A_FULL += "guaranteed cpu=4"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["review", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def example_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return config


def config_file(tmp_path: Path, config: dict[str, Any], name: str = "config.yaml") -> str:
    return write(tmp_path, name, yaml.safe_dump(config, sort_keys=False))


def claiming(tmp_path: Path, *namespaces: str) -> str:
    """The example config plus a tenant ``everyone`` claiming ``namespaces``.

    Its pods may keep the built-in system classes, as cluster add-ons ask for them, the class
    Longhorn's manifest asks for and the overprovisioning class of the EKS workshop's pause pods
    (value -1, as that workshop defines it).
    """
    config = example_config()
    config["priorityClasses"]["system-cluster-critical"] = {"value": 2_000_000_000}
    config["priorityClasses"]["system-node-critical"] = {"value": 2_000_001_000}
    config["priorityClasses"]["longhorn-critical"] = {"value": 1_000_000_000}
    config["priorityClasses"]["pause-pods"] = {"value": -1}
    config["tenants"]["everyone"] = {
        "namespaces": list(namespaces),
        "quota": {"guaranteed": {"cpu": "1000", "memory": "10Ti"}},
        "priorityClasses": {
            "allowed": [
                "system-cluster-critical",
                "system-node-critical",
                "longhorn-critical",
                "pause-pods",
            ]
        },
    }
    return config_file(tmp_path, config, "claiming.yaml")


def usage_snapshot(guaranteed_cpu: str, burst_cpu: str) -> dict[str, Any]:
    """A document in the shape ``GET /status`` serves (extra keys and counts included)."""
    return {
        "tenants": {
            "team-a": {
                "guaranteed": {"cpu": "4", "memory": "8Gi", "pods": "20"},
                "ceiling": {"cpu": "6", "memory": "12Gi", "pods": "30"},
                "used": {
                    "guaranteed": {"cpu": guaranteed_cpu, "memory": "2Gi", "pods": "8"},
                    "burst": {"cpu": burst_cpu} if burst_cpu != "0" else {},
                },
                "reservations": 3,
                "pods": 9,
            }
        },
        "synced": True,
        "mode": "offline",
        "cluster": None,
        "generatedAt": 1_700_000_000.0,
    }


def fixture_files() -> list[str]:
    return sorted(
        str(p)
        for p in FIXTURES.iterdir()
        if p.suffix in (".yaml", ".json") and p.name != "expected.yaml"
    )


def fixture_namespaces() -> set[str]:
    namespaces = set()
    for name in fixture_files():
        for document in review.read_manifests(name, Path(name).read_text()):
            for found in find_pod_templates(document.body):
                pod = pod_from_template(found, namespace="default")
                namespaces.add(pod["metadata"]["namespace"])
    return namespaces


# --------------------------------------------------------------------------- table


def test_table_is_the_default(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "web.yaml", POD)
    code, out, err = run(capsys, "-f", path, "-n", "team-a")
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == [
        "FILE",
        "OBJECT",
        "PATH",
        "PROFILE",
        "TENANT",
        "TIER",
        "VERDICT",
        "WHY",
    ]
    assert row.split(None, 7) == [
        path,
        "Pod/web",
        "-",
        "web-frontend",
        "team-a",
        "guaranteed",
        "allowed",
        "evidence: web-frontend 11 (image:nginx +3, name:web +3, name:nginx +2, port:80 +2, "
        "+1 more); next api 3",
    ]


def test_table_shows_each_denial_below(capsys: pytest.CaptureFixture[str]) -> None:
    big = str(EXAMPLE_PODS / "big.yaml")
    web = str(EXAMPLE_PODS / "web.yaml")
    code, out, err = run(capsys, "-f", web, "-f", big)
    assert (code, err) == (3, "")
    lines = out.splitlines()
    assert [line.split()[6] for line in lines[1:3]] == ["allowed", "denied"]
    assert lines[2].split()[3:7] == ["general", "team-a", "-", "denied"]
    assert lines[3:] == [
        "",
        f"Pod/big in namespace team-a ({big}) would be denied:",
        "  exceeded tenant quota: team-a: requested cpu=8, used cpu=0/6 (burst ceiling), "
        "guaranteed cpu=4",
    ]


def test_render_table_aligns_columns() -> None:
    rows: list[dict[str, Any]] = [
        {
            "file": "a.yaml",
            "kind": "Pod",
            "name": "p",
            "namespace": "team-a",
            "path": "",
            "tenant": "team-a",
            "tier": "burst",
            "profile": "api",
            "reason": "r1",
            "allowed": True,
        },
        {
            "file": "bb.yaml",
            "kind": "Deployment",
            "name": "web",
            "namespace": "team-a",
            "path": "spec.template",
            "tenant": "team-a",
            "tier": None,
            "profile": "web-frontend",
            "reason": "r2",
            "problem": "profile x is not allowed",
            "allowed": False,
            "message": "no",
        },
        {
            "file": "c.yaml",
            "kind": "Pod",
            "name": "q",
            "namespace": "default",
            "path": "",
            "tenant": None,
            "tier": None,
            "profile": None,
            "allowed": None,
            "error": "bad",
        },
    ]
    assert review.render_table(rows).splitlines() == [
        "FILE     OBJECT          PATH           PROFILE       TENANT  TIER   VERDICT  WHY",
        "a.yaml   Pod/p           -              api           team-a  burst  allowed  r1",
        "bb.yaml  Deployment/web  spec.template  web-frontend  team-a  -      denied   "
        "r2 (profile x is not allowed)",
        "c.yaml   Pod/q           -              -             -       -      error    bad",
        "",
        "Deployment/web spec.template in namespace team-a (bb.yaml) would be denied:",
        "  no",
    ]


# --------------------------------------------------------------------------- JSON fields


def test_json_adds_tenant_tier_and_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "web.yaml", POD)
    code, out, err = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    assert (code, err) == (0, "")
    (row,) = json.loads(out)
    assert {k: row[k] for k in ("tenant", "tier", "allowed", "code", "message")} == {
        "tenant": "team-a",
        "tier": "guaranteed",
        "allowed": True,
        "code": 200,
        "message": "",
    }
    assert row["warnings"] == [
        "profile web-frontend: evidence: web-frontend 11 (image:nginx +3, name:web +3, "
        "name:nginx +2, port:80 +2, +1 more); next api 3",
        "tenant team-a default requests applied: nginx cpu=100m,memory=128Mi",
    ]
    mutated = row["mutated"]
    assert mutated["metadata"]["labels"]["tenantgate.io/tenant"] == "team-a"
    assert mutated["metadata"]["labels"]["tenantgate.io/tier"] == "guaranteed"
    assert mutated["metadata"]["annotations"]["tenantgate.io/reservation"].startswith("r-")
    assert (mutated["spec"]["priorityClassName"], mutated["spec"]["priority"]) == (
        "tenant-guaranteed",
        1000,
    )
    assert mutated["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"}
    }


def test_row_contents(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "web.yaml", POD)
    _, out, _ = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    (row,) = json.loads(out)
    assert row["namespace"] == "team-a"
    assert row["classifiedBy"] == "evidence"
    # YAML timestamps stay strings, as the API server would store them.
    assert row["mutated"]["metadata"]["annotations"]["released"] == "2024-05-01"
    assert {
        "op": "add",
        "path": "/metadata/annotations/tenantgate.io~1profile",
        "value": "web-frontend",
    } in row["patch"]
    assert row["notes"][0].startswith("spread over kubernetes.io/hostname")
    original = yaml.safe_load(POD.replace("2024-05-01", '"2024-05-01"'))
    original["metadata"]["namespace"] = "team-a"
    assert jsonpatch.apply_patch(original, row["patch"]) == row["mutated"]


def test_burst_tier_at_todays_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    usage = write(tmp_path, "usage.json", json.dumps(usage_snapshot("4", "1")))
    code, out, _ = run(capsys, "-f", str(EXAMPLE_PODS / "web.yaml"), "--usage", usage, "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["tier"], row["allowed"]) == ("burst", True)
    assert (row["mutated"]["spec"]["priorityClassName"], row["mutated"]["spec"]["priority"]) == (
        "tenant-burst",
        10,
    )
    assert row["mutated"]["spec"]["preemptionPolicy"] == "Never"
    assert row["warnings"][-1] == (
        "tenant team-a is above its guarantee: admitted on burst capacity "
        "(burst left cpu=750m,memory=10112Mi,pods=21); priority class tenant-burst, "
        "may be preempted"
    )


def test_unclaimed_namespace_is_left_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "web.yaml", POD)
    code, out, _ = run(capsys, "-f", path, "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["namespace"] == "default"
    assert (row["tenant"], row["tier"], row["profile"], row["allowed"]) == (
        None,
        None,
        None,
        True,
    )
    assert row["reason"] == 'namespace "default" belongs to no tenant: admitted untouched'
    assert (row["patch"], row["warnings"]) == ([], [])


def test_unclaimed_namespace_denied_by_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = example_config()
    config["unclaimedNamespaces"] = "deny"
    path = write(tmp_path, "web.yaml", POD)
    code, out, _ = run(capsys, "-f", path, "--config", config_file(tmp_path, config))
    assert code == 3
    assert out.splitlines()[-1] == (
        '  namespace "default" is not claimed by any tenant; '
        "ask the platform team to add it to a tenant"
    )


def test_priority_escalation_is_denied(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    escalating = POD.replace("spec:\n", "spec:\n  priorityClassName: system-cluster-critical\n")
    path = write(tmp_path, "web.yaml", escalating)
    code, out, _ = run(capsys, "-f", path, "-n", "team-a", "-o", "json")
    assert code == 3
    (row,) = json.loads(out)
    assert (row["allowed"], row["code"], row["tier"], row["patch"]) == (False, 403, None, [])
    assert row["message"] == (
        "priority class system-cluster-critical is not allowed for tenant team-a "
        "(allowed: batch-low, tenant-burst, tenant-guaranteed)"
    )


def test_yaml_output_matches_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "web.yaml", POD)
    _, as_json, _ = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    code, as_yaml, _ = run(capsys, "-f", path, "-o", "yaml", "-n", "team-a")
    assert code == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


# --------------------------------------------------------------------------- --namespace


def test_namespace_flag_overrides_the_objects_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    web = str(EXAMPLE_PODS / "web.yaml")
    _, out, _ = run(capsys, "-f", web, "-o", "json")
    assert [(r["namespace"], r["tenant"]) for r in json.loads(out)] == [("team-a", "team-a")]
    _, out, _ = run(capsys, "-f", web, "-o", "json", "--namespace", "ml")
    (row,) = json.loads(out)
    assert (row["namespace"], row["tenant"], row["tier"]) == ("ml", "ml", "guaranteed")
    assert row["mutated"]["metadata"]["namespace"] == "ml"
    _, out, _ = run(capsys, "-f", web, "-o", "json", "-n", "elsewhere")
    assert json.loads(out)[0]["tenant"] is None


AGENT = """\
apiVersion: v1
kind: Pod
metadata: {name: agent}
spec:
  containers: [{name: reporter, image: example.com/reporter:1}]
"""


def test_the_namespace_weighs_in_the_evidence(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = claiming(tmp_path, "kube-system", "default")
    path = write(tmp_path, "agent.yaml", AGENT)
    _, out, _ = run(capsys, "-f", path, "-o", "json", "--config", config)
    assert json.loads(out)[0]["profile"] == "general"
    _, out, _ = run(capsys, "-f", path, "-o", "json", "--config", config, "-n", "kube-system")
    assert [(r["tenant"], r["profile"]) for r in json.loads(out)] == [("everyone", "system")]


def test_namespace_selector_tenants_claim_by_namespace_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = example_config()
    config["tenants"]["selected"] = {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop"]}
            ]
        },
        "quota": {"guaranteed": {"cpu": "1"}},
    }
    path = write(tmp_path, "web.yaml", POD)
    code, out, _ = run(
        capsys, "-f", path, "-o", "json", "-n", "shop", "--config", config_file(tmp_path, config)
    )
    assert code == 0
    assert json.loads(out)[0]["tenant"] == "selected"


# --------------------------------------------------------------------------- --usage


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_usage_turns_a_fitting_pod_into_a_denial(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, form: str
) -> None:
    path = write(tmp_path, "web.yaml", POD)
    code, out, _ = run(capsys, "-f", path, "-n", "team-a", "-o", "json")
    assert (code, json.loads(out)[0]["allowed"]) == (0, True)

    document = usage_snapshot("4", "2")
    text = json.dumps(document) if form == "json" else yaml.safe_dump(document)
    usage = write(tmp_path, f"usage.{form}", text)
    code, out, err = run(capsys, "-f", path, "-n", "team-a", "-o", "json", "--usage", usage)
    assert (code, err) == (3, "")
    (row,) = json.loads(out)
    assert (row["tenant"], row["tier"], row["allowed"], row["code"]) == (
        "team-a",
        None,
        False,
        403,
    )
    assert row["message"] == TEAM_A_FULL
    assert row["profile"] == "web-frontend"


def test_usage_of_another_tenant_changes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = usage_snapshot("4", "2")
    document["tenants"]["gone"] = document["tenants"].pop("team-a")
    usage = write(tmp_path, "usage.json", json.dumps(document))
    code, out, err = run(capsys, "-f", str(EXAMPLE_PODS / "web.yaml"), "--usage", usage)
    assert code == 0
    assert err == f"{usage}: tenant gone is not in the config; ignored\n"
    assert out.splitlines()[1].split()[5:7] == ["guaranteed", "allowed"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{\n  "tenants": \n}\n', "usage.json:3:1: invalid JSON: Expecting value"),
        ("[]", 'usage.json: invalid usage snapshot: usage snapshot: expected an object with a "'),
        ("tenants: 3\n", "usage.json: invalid usage snapshot: usage snapshot: expected an "),
        ("tenants: [\n", "usage.json:2:1: invalid YAML: "),
        ("a: 1\n---\nb: 2\n", "usage.json: a usage snapshot is one JSON or YAML document"),
        (
            '{"tenants": {"team-a": {"used": {"guaranteed": {"cpu": "lots"}}}}}',
            "usage.json: invalid usage snapshot: team-a.used.guaranteed.cpu: ",
        ),
    ],
)
def test_unreadable_usage_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    usage = write(tmp_path, "usage.json", text)
    code, out, err = run(capsys, "-f", str(EXAMPLE_PODS / "web.yaml"), "--usage", usage)
    assert (code, out) == (1, "")
    assert err.startswith(f"{tmp_path}/{message}"), err


def test_missing_usage_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "usage.json"
    code, _, err = run(capsys, "-f", str(EXAMPLE_PODS / "web.yaml"), "--usage", str(missing))
    assert code == 1
    assert err.strip() == f"{missing}: cannot read: No such file or directory"


# --------------------------------------------------------------------------- one pod each


def test_a_workload_is_reviewed_as_one_pod(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "deploy.yaml", DEPLOYMENT)
    code, out, _ = run(capsys, "-f", path, "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["kind"], row["tier"], row["allowed"]) == ("Deployment", "guaranteed", True)


def test_reviews_never_book(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Each pod is reviewed against the same starting usage: together they would not fit.
    path = write(tmp_path, "deploy.yaml", "---\n".join([DEPLOYMENT] * 3))
    code, out, _ = run(capsys, "-f", path, "-o", "json")
    assert code == 0
    assert [row["tier"] for row in json.loads(out)] == ["guaranteed"] * 3


def test_help_says_how_workloads_and_exit_codes_work(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["review", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(a Deployment with replicas: 3, a Job, a CronJob...) is reviewed as ONE pod" in text
    assert "3 at least one pod would be denied" in text


# --------------------------------------------------------------------------- fixtures


def test_json_covers_every_fixture_with_patch_and_mutated_pod(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = fixture_files()
    config = claiming(tmp_path, *sorted(fixture_namespaces()))
    args = [arg for name in files for arg in ("-f", name)]
    code, out, err = run(capsys, *args, "-o", "json", "--config", config)
    assert (code, err) == (0, "")
    rows = json.loads(out)
    expected = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
    assert len(rows) == sum(len(entries or {}) for entries in expected.values())
    kinds = set()
    grouped = set()
    for row in rows:
        assert set(row) >= {
            "file",
            "kind",
            "name",
            "path",
            "profile",
            "reason",
            "patch",
            "mutated",
            "tenant",
            "tier",
            "allowed",
            "message",
            "warnings",
        }
        name = Path(row["file"]).name
        key = f"{row['kind']}/{row['name']}@{row['path']}"
        entry = expected[name][key]  # a known miss records what the rules give
        assert row["profile"] == (entry if isinstance(entry, str) else entry["classified"])
        # A pod group's members wait behind the gate until their whole group is there.
        tier = "queued" if "group" in row else "guaranteed"
        assert (row["tenant"], row["tier"], row["allowed"]) == ("everyone", tier, True)
        if "group" in row:
            grouped.add(f"{row['kind']}/{row['group']['source']}/{row['group']['verdict']}")
        kinds.add(row["kind"])
        original = original_pod(row)
        assert jsonpatch.apply_patch(original, row["patch"]) == row["mutated"]
    assert {
        "PyTorchJob",
        "RayJob",
        "RayCluster",
        "MPIJob",
        "CronJob",
        "DaemonSet",
        "Workflow",
        "CronWorkflow",
        "WorkflowTemplate",
        "ClusterWorkflowTemplate",
        "SparkApplication",
        "TaskRun",
        "Service",
        "Rollout",
    } <= kinds
    assert grouped == {
        "PyTorchJob/rule:pytorchjob/allowed",
        "MPIJob/rule:mpijob/allowed",
        "JobSet/rule:jobset/allowed",
        "RayCluster/rule:raycluster-workers/allowed",
    }


def original_pod(row: dict[str, Any]) -> dict[str, Any]:
    text = Path(row["file"]).read_text()
    for document in review.read_manifests(row["file"], text):
        for found in find_pod_templates(document.body):
            if (found.kind, found.name, found.path) == (row["kind"], row["name"], row["path"]):
                return pod_from_template(found, namespace="default")
    raise AssertionError(f"no template for {row}")


def test_every_tour_pod(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in EXAMPLE_PODS.glob("*.yaml"))
    code, out, _ = run(capsys, *[a for f in files for a in ("-f", f)], "-o", "json")
    assert code == 3
    verdicts = {
        Path(r["file"]).stem: (r["tenant"], r["tier"], r["allowed"]) for r in json.loads(out)
    }
    assert verdicts == {
        "api": ("team-a", "guaranteed", True),
        "batch-job": ("team-a", "guaranteed", True),
        "big": ("team-a", None, False),
        "gpu-training": ("ml", "guaranteed", True),
        "web": ("team-a", "guaranteed", True),
    }


# --------------------------------------------------------------------------- inputs


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(POD))
    code, out, _ = run(capsys, "-f", "-", "-o", "json")
    assert code == 0
    assert json.loads(out)[0]["file"] == "-"


def test_custom_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "config.yaml",
        "apiVersion: tenantgate.io/v1alpha1\nkind: TenantgateConfig\n"
        "priorityClasses: {tenant-burst: {value: 1}, tenant-guaranteed: {value: 2}}\n"
        "profiles: {general: {}, nginx: {schedulerName: edge}}\n"
        "rules: [{name: n, profile: nginx, match: {image: nginx}}]\n"
        "tenants: {edge: {namespaces: [default], quota: {guaranteed: {pods: '1'}}}}\n",
    )
    path = write(tmp_path, "web.yaml", POD)
    code, out, _ = run(capsys, "-f", path, "--config", config, "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["tenant"], row["profile"], row["mutated"]["spec"]["schedulerName"]) == (
        "edge",
        "nginx",
        "edge",
    )
    assert (row["mutated"]["spec"]["priorityClassName"], row["mutated"]["spec"]["priority"]) == (
        "tenant-guaranteed",
        2,
    )


def test_invalid_config_exits_2_with_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = write(
        tmp_path,
        "config.yaml",
        "apiVersion: tenantgate.io/v1alpha1\nkind: TenantgateConfig\n"
        "priorityClasses: {tenant-burst: {value: 1}}\n"
        "profiles:\n  general: {}\n"
        "rules:\n  - name: n\n    profile: missing\n",
    )
    path = write(tmp_path, "web.yaml", POD)
    code, out, err = run(capsys, "-f", path, "--config", config)
    assert (code, out) == (2, "")
    assert f"{config}:8: rules[0].profile: unknown profile" in err


def test_semantic_config_error_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = example_config()
    config["tenants"]["ml"]["namespaces"] = ["team-a"]
    path = write(tmp_path, "web.yaml", POD)
    code, out, err = run(capsys, "-f", path, "--config", config_file(tmp_path, config))
    assert (code, out) == (2, "")
    assert 'namespace "team-a" is already claimed by tenant "team-a"' in err


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.yaml", "kind: Pod\nmetadata:\n  name: [unclosed\n", "bad.yaml:4:1: invalid YAML: "),
        ("tabs.yaml", "kind: Pod\nspec:\n\tcontainers: []\n", "tabs.yaml:3:1: invalid YAML: "),
        (
            "bad.json",
            '{\n  "kind": "Pod",\n  "spec": }\n',
            "bad.json:3:11: invalid JSON: Expecting value",
        ),
    ],
)
def test_parse_errors_name_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path, name, text)
    good = write(tmp_path, "good.yaml", POD)
    code, out, err = run(capsys, "-f", good, "-f", path)
    assert (code, out) == (1, "")
    assert err.startswith(str(tmp_path / message.split(":")[0]) + message[len(name) :]), err


def test_unreadable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "-f", str(tmp_path / "missing.yaml"))
    assert code == 1
    assert err.strip() == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory"


def test_invalid_quantity_is_reported_per_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = POD.replace("ports: [{containerPort: 80}]", "resources: {limits: {memory: 1XY}}")
    path = write(tmp_path, "broken.yaml", "---\n" + broken + "---\n" + POD)
    code, out, err = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    assert code == 1
    rows = json.loads(out)
    assert (rows[0]["profile"], rows[0]["allowed"]) == (None, None)
    assert rows[0]["error"].startswith(
        "spec.containers[0].resources.limits.memory: invalid quantity"
    )
    assert (rows[1]["profile"], rows[1]["allowed"]) == ("web-frontend", True)
    assert f"{path}: Pod/web@: spec.containers[0].resources.limits.memory" in err


def test_a_pod_the_webhook_finds_malformed_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    negative = POD.replace("ports: [{containerPort: 80}]", "resources: {requests: {cpu: '-1'}}")
    path = write(tmp_path, "negative.yaml", negative)
    code, out, err = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    assert code == 1
    (row,) = json.loads(out)
    assert (row["allowed"], row["code"]) == (False, 400)
    assert row["error"] == row["message"] == "invalid pod resources: negative request cpu=-1"
    assert err == f"{path}: Pod/web@: invalid pod resources: negative request cpu=-1\n"


def test_parse_errors_win_over_denials(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = POD.replace("ports: [{containerPort: 80}]", "resources: {limits: {memory: 1XY}}")
    path = write(tmp_path, "broken.yaml", broken)
    code, _, _ = run(capsys, "-f", path, "-f", str(EXAMPLE_PODS / "big.yaml"), "-n", "team-a")
    assert code == 1


def test_documents_without_templates(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n--- just text\n",
    )
    code, out, err = run(capsys, "-f", path, "-o", "json")
    assert code == 0
    assert json.loads(out) == []
    assert err.splitlines() == [
        f"{path}: document 3 is not an object; skipped",
        "no pod templates found",
    ]


def test_list_and_json_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "-f",
        str(FIXTURES / "kubernetes-hack-testdata-rclist.json"),
        "-f",
        str(FIXTURES / "kubernetes-hack-testdata-list.yaml"),
        "-o",
        "json",
    )
    assert code == 0
    assert [row["path"] for row in json.loads(out)] == [
        "items[0].spec.template",
        "items[1].spec.template",
        "items[1].spec.template",
    ]


def test_yaml_output_has_no_anchors_or_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    """Objects a profile shares between pods (tolerations, spreads) are written out in full."""
    code, out, _ = run(capsys, "-f", str(EXAMPLE_PODS / "gpu-training.yaml"), "-o", "yaml")

    assert code == 0
    assert not re.search(r"[&*]id\d+", out), out
    rows = yaml.safe_load(out)
    (as_json,) = json.loads(
        run(capsys, "-f", str(EXAMPLE_PODS / "gpu-training.yaml"), "-o", "json")[1]
    )
    assert rows == [as_json]


# --------------------------------------------------------------------------- workload resources


def test_workload_resources_give_one_row_per_pod_their_operator_creates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Argo Workflow, SparkApplication, Tekton TaskRun, Knative Service and Argo Rollout, each
    a real published manifest (tests/fixtures/manifests/SOURCES.md)."""
    names = [
        "argo-workflows-scripts-python.yaml",
        "spark-operator-spark-pi.yaml",
        "tekton-taskrun-step-script.yaml",
        "knative-docs-helloworld-go-service.yaml",
        "argo-rollouts-rollout-canary.yaml",
    ]
    args = [arg for name in names for arg in ("-f", str(FIXTURES / name))]
    code, out, err = run(capsys, *args, "-o", "json", "-n", "team-a")
    assert (code, err) == (0, "")
    rows = [
        (
            row["kind"],
            row["path"],
            row["profile"],
            row["mutated"]["metadata"]["ownerReferences"][0]["kind"],
        )
        for row in json.loads(out)
    ]
    assert rows == [
        # templates[0] is a steps template: it runs no pod of its own.
        ("Workflow", "spec.templates[1]", "batch", "Workflow"),
        ("Workflow", "spec.templates[2]", "batch", "Workflow"),
        ("SparkApplication", "spec.driver", "batch", "SparkApplication"),
        ("SparkApplication", "spec.executor", "batch", "Pod"),  # owned by the driver pod
        ("TaskRun", "spec.taskSpec", "batch", "TaskRun"),
        ("Service", "spec.template", "api", "ReplicaSet"),
        # A recorded miss (expected.yaml): nothing in the demo's image or names says web, and
        # a common application port alone weighs as an API's.
        ("Rollout", "spec.template", "api", "ReplicaSet"),
    ]


# --------------------------------------------------------------------------- --explain, --expected

REDIS = """\
apiVersion: v1
kind: Pod
metadata:
  name: cache
  labels: {app: redis}
spec:
  containers:
    - name: redis
      image: redis:7
      ports: [{containerPort: 6379}]
"""


def test_explain_names_every_signal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "cache.yaml", REDIS)
    _, plain, _ = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    _, explained, _ = run(capsys, "-f", path, "-o", "json", "-n", "team-a", "--explain")
    assert json.loads(plain)[0]["reason"] == (
        "evidence: database 16 (image:redis +6, name:redis +4, port:6379 +4, name:cache +2); "
        "next api 2"
    )
    assert json.loads(explained)[0]["reason"] == (
        "evidence: database 16 (image:redis +6 (container redis), name:redis +4 (container "
        "redis), port:6379 +4 (container redis), name:cache +2 (pod)); api 2 (port:any +2 "
        "(container redis)); web-frontend 1 (port:any +1 (container redis))"
    )


def test_explain_classifies_pods_no_tenant_claims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "cache.yaml", REDIS)
    _, out, _ = run(capsys, "-f", path, "-o", "json", "--explain")
    (row,) = json.loads(out)
    assert (row["profile"], row["rulesProfile"]) == (None, "database")
    assert row["reason"] == (
        'namespace "default" belongs to no tenant: admitted untouched (the classifier would '
        "give database: evidence: database 16 (image:redis +6 (container redis), name:redis +4 "
        "(container redis), port:6379 +4 (container redis), name:cache +2 (pod)); api 2 "
        "(port:any +2 (container redis)); web-frontend 1 (port:any +1 (container redis)))"
    )


def test_expected_prints_agreement_and_confusion(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cache = write(tmp_path, "cache.yaml", REDIS)
    web = write(tmp_path, "web.yaml", POD)
    index = write(
        tmp_path,
        "expected.yaml",
        "cache.yaml:\n  Pod/cache@: database\n"
        "web.yaml:\n  Pod/web@: {expected: api, classified: web-frontend, why: a test}\n",
    )
    code, out, err = run(capsys, "-f", cache, "-f", web, "-n", "team-a", "--expected", index)
    assert (code, err) == (0, "")
    assert out.split("\n\n")[-1].splitlines() == [
        "agreement with expected profiles: 1/2 (50.0%)",
        "expected \\ classified  api  database  web-frontend",
        "api                      .         .             1",
        "database                 .         1             .",
    ]
    # With JSON on stdout, the report goes to stderr, so stdout still parses.
    code, out, err = run(capsys, "-f", cache, "-n", "team-a", "--expected", index, "-o", "json")
    assert json.loads(out)[0]["rulesProfile"] == "database"
    assert err.splitlines()[0] == "agreement with expected profiles: 1/1 (100.0%)"


def test_expected_on_the_fixture_corpus_reports_what_the_test_measures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [arg for name in fixture_files() for arg in ("-f", name)]
    code, out, _ = run(capsys, *args, "--expected", str(FIXTURES / "expected.yaml"))
    assert code == 0
    summary = next(line for line in out.splitlines() if line.startswith("agreement"))
    matched, total = map(int, summary.split(": ")[1].split(" ")[0].split("/"))
    expected = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
    entries = [e for entries in expected.values() for e in (entries or {}).values()]
    assert total == len(entries)
    assert matched == sum(isinstance(e, str) for e in entries)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "expected one mapping of file name to entries"),
        ("x.yaml: [a]\n", "x.yaml: expected a mapping of template key to profile"),
        ("x.yaml:\n  Pod/p@: {why: no profile}\n", "x.yaml: Pod/p@: expected a profile name"),
        ("x.yaml: {a: [\n", "invalid YAML"),
    ],
)
def test_a_bad_expected_index_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    cache = write(tmp_path, "cache.yaml", REDIS)
    index = write(tmp_path, "expected.yaml", text)
    code, out, err = run(capsys, "-f", cache, "--expected", index)
    assert (code, out) == (1, "")
    assert err.startswith(index), err
    assert message in err, err


# --------------------------------------------------------------------------- pod groups


def pytorchjob_with_workers(tmp_path: Path, workers: int) -> str:
    """The training-operator's published NCCL example (one GPU per pod), with ``workers``."""
    document = yaml.safe_load((FIXTURES / "kubeflow-pytorchjob-mnist-nccl.yaml").read_text())
    document["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    return write(tmp_path, "pytorchjob.yaml", yaml.safe_dump(document))


def gpu_tenant(tmp_path: Path, gpus: str) -> str:
    config = example_config()
    config["tenants"]["ml"]["quota"] = {"guaranteed": {"cpu": "32", "nvidia.com/gpu": gpus}}
    return config_file(tmp_path, config)


def test_a_pytorchjob_with_8_workers_is_one_group_with_its_total_and_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = pytorchjob_with_workers(tmp_path, 8)
    config = gpu_tenant(tmp_path, "12")
    code, out, err = run(capsys, "-f", manifest, "-n", "ml", "--config", config, "-o", "json")
    assert (code, err) == (0, "")
    master, worker = json.loads(out)
    assert master["group"] == worker["group"]
    group = master["group"]
    assert {k: group[k] for k in ("name", "key", "source", "namespace", "tenant")} == {
        "name": "pytorch-dist-mnist-nccl",
        "key": "pytorchjob/pytorch-dist-mnist-nccl",
        "source": "rule:pytorchjob",
        "namespace": "ml",
        "tenant": "ml",
    }
    assert (group["size"], group["pods"]) == (9, 9)
    assert [m["pods"] for m in group["members"]] == [1, 8]
    # 9 pods, each a GPU and the tenant's container defaults (cpu 250m, memory 512Mi).
    assert group["total"] == {
        "cpu": "2250m",
        "memory": "4608Mi",
        "nvidia.com/gpu": "9",
        "pods": "9",
    }
    assert (group["verdict"], group["message"]) == (
        "allowed",
        "all 9 members released together on guaranteed",
    )
    # Each member, as the webhook answers it, waits behind the gate for its group.
    assert (worker["tier"], worker["allowed"]) == ("queued", True)

    code, out, _ = run(capsys, "-f", manifest, "-n", "ml", "--config", config)
    assert code == 0
    assert out.splitlines()[-6:] == [
        "",
        "pod group pytorch-dist-mnist-nccl (rule:pytorchjob) in namespace ml, tenant ml: "
        "9 pods, size 9: allowed",
        "  PyTorchJob/pytorch-dist-mnist-nccl spec.pytorchReplicaSpecs.Master.template: 1 pod",
        "  PyTorchJob/pytorch-dist-mnist-nccl spec.pytorchReplicaSpecs.Worker.template: 8 pods",
        "  total: cpu=2250m,memory=4608Mi,nvidia.com/gpu=9,pods=9",
        "  all 9 members released together on guaranteed",
    ]


def test_a_group_over_the_guarantee_is_denied_as_a_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = pytorchjob_with_workers(tmp_path, 8)
    code, out, _ = run(
        capsys, "-f", manifest, "-n", "ml", "--config", gpu_tenant(tmp_path, "8"), "-o", "json"
    )
    assert code == 3
    group = json.loads(out)[0]["group"]
    assert group["verdict"] == "denied"
    assert group["message"] == (
        "pod group pytorch-dist-mnist-nccl (9 members) needs nvidia.com/gpu=9, more than tenant "
        "ml's guarantee (nvidia.com/gpu=8): it can never run; make the group smaller or raise "
        "the quota"
    )


def test_a_group_that_fits_the_quota_but_not_todays_usage_waits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = pytorchjob_with_workers(tmp_path, 3)
    usage = {"tenants": {"ml": {"used": {"guaranteed": {"nvidia.com/gpu": "10"}}}}}
    usage_file = write(tmp_path, "usage.json", json.dumps(usage))
    config = gpu_tenant(tmp_path, "12")
    code, out, _ = run(
        capsys, "-f", manifest, "-n", "ml", "--config", config, "--usage", usage_file, "-o", "json"
    )
    assert code == 0
    group = json.loads(out)[0]["group"]
    assert (group["verdict"], group["message"]) == (
        "queued",
        "pod group pytorch-dist-mnist-nccl needs nvidia.com/gpu=4, tenant ml has "
        "nvidia.com/gpu=2 free on guaranteed: the group waits, all its members gated, until "
        "there is room",
    )


def test_a_jobset_is_one_group_of_every_pod_of_its_child_jobs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = str(FIXTURES / "gke-samples-sax-model-server-jobset-tpu.yaml")
    code, out, _ = run(capsys, "-f", manifest, "-n", "ml", "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    group = row["group"]
    assert (group["key"], group["size"], group["pods"], group["verdict"]) == (
        "jobset/sax-model-server-set",
        16,
        16,
        "allowed",
    )
    assert group["total"]["google.com/tpu"] == "64"


def test_a_group_the_manifests_do_not_complete_is_incomplete(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    labels = "{tenantgate.io/pod-group: g, tenantgate.io/pod-group-size: '4'}"
    manifest = write(tmp_path, "pod.yaml", POD.replace("labels: {app: web}", f"labels: {labels}"))
    code, out, _ = run(capsys, "-f", manifest, "-n", "team-a", "-o", "json")
    assert code == 0
    group = json.loads(out)[0]["group"]
    assert (group["source"], group["size"], group["pods"], group["verdict"]) == (
        "labels",
        4,
        1,
        "incomplete",
    )
    assert group["message"] == (
        "pod group g has 4 members and the manifests make 1: its members wait behind "
        "tenantgate's gate until the others are created"
    )
