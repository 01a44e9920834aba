"""``tenantgate review``: table / JSON / YAML output, every fixture, and precise read errors."""

from __future__ import annotations

import io
import json
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


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["review", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def fixture_files() -> list[str]:
    return sorted(
        str(p)
        for p in FIXTURES.iterdir()
        if p.suffix in (".yaml", ".json") and p.name != "expected.yaml"
    )


def test_table_is_the_default(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "web.yaml", POD)
    code, out, err = run(capsys, "-f", path)
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == ["FILE", "OBJECT", "PATH", "PROFILE", "WHY"]
    assert row.split(None, 4) == [
        path,
        "Pod/web",
        "-",
        "web-frontend",
        'rule "web-frontend": image nginx:1.27 matches "nginx"',
    ]


def test_json_covers_every_fixture_with_patch_and_mutated_pod(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = fixture_files()
    args = [arg for name in files for arg in ("-f", name)]
    code, out, err = run(capsys, *args, "-o", "json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    expected = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
    assert len(rows) == sum(len(entries or {}) for entries in expected.values())
    kinds = set()
    for row in rows:
        assert set(row) >= {"file", "kind", "name", "path", "profile", "reason", "patch", "mutated"}
        name = Path(row["file"]).name
        key = f"{row['kind']}/{row['name']}@{row['path']}"
        assert row["profile"] == expected[name][key]
        kinds.add(row["kind"])
        original = original_pod(row)
        assert jsonpatch.apply_patch(original, row["patch"]) == row["mutated"]
    assert {"PyTorchJob", "RayJob", "RayCluster", "MPIJob", "CronJob", "DaemonSet"} <= kinds


def original_pod(row: dict[str, Any]) -> dict[str, Any]:
    text = Path(row["file"]).read_text()
    for document in review.read_manifests(row["file"], text):
        for found in find_pod_templates(document.body):
            if (found.kind, found.name, found.path) == (row["kind"], row["name"], row["path"]):
                return pod_from_template(found, namespace="default")
    raise AssertionError(f"no template for {row}")


def test_yaml_output_matches_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "web.yaml", POD)
    _, as_json, _ = run(capsys, "-f", path, "-o", "json")
    code, as_yaml, _ = run(capsys, "-f", path, "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_row_contents(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "web.yaml", POD)
    _, out, _ = run(capsys, "-f", path, "-o", "json", "-n", "team-a")
    (row,) = json.loads(out)
    assert row["namespace"] == "team-a"
    assert row["classifiedBy"] == "rule/web-frontend"
    # YAML timestamps stay strings, as the API server would store them.
    assert row["mutated"]["metadata"]["annotations"]["released"] == "2024-05-01"
    assert {
        "op": "add",
        "path": "/metadata/annotations/tenantgate.io~1profile",
        "value": "web-frontend",
    } in row["patch"]
    assert row["notes"][0].startswith("spread over kubernetes.io/hostname")


def test_namespace_flag_applies_to_objects_without_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "web.yaml", POD)
    _, out, _ = run(capsys, "-f", path, "-o", "json", "--namespace", "kube-system")
    assert json.loads(out)[0]["profile"] == "system"


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
        "priorityClasses: {tenant-burst: {value: 1}}\n"
        "profiles: {general: {}, nginx: {schedulerName: edge}}\n"
        "rules: [{name: n, profile: nginx, match: {image: nginx}}]\n",
    )
    path = write(tmp_path, "web.yaml", POD)
    code, out, _ = run(capsys, "-f", path, "--config", config, "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert (row["profile"], row["mutated"]["spec"]["schedulerName"]) == ("nginx", "edge")


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
    code, out, err = run(capsys, "-f", path, "-o", "json")
    assert code == 1
    rows = json.loads(out)
    assert rows[0]["profile"] is None
    assert rows[0]["error"].startswith(
        "spec.containers[0].resources.limits.memory: invalid quantity"
    )
    assert rows[1]["profile"] == "web-frontend"
    assert f"{path}: Pod/web@: spec.containers[0].resources.limits.memory" in err


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


def test_render_table_aligns_columns() -> None:
    rows: list[dict[str, Any]] = [
        {
            "file": "a.yaml",
            "kind": "Pod",
            "name": "p",
            "path": "",
            "profile": "api",
            "reason": "r1",
        },
        {
            "file": "bb.yaml",
            "kind": "Deployment",
            "name": "web",
            "path": "spec.template",
            "profile": None,
            "error": "bad",
        },
    ]
    assert review.render_table(rows).splitlines() == [
        "FILE     OBJECT          PATH           PROFILE  WHY",
        "a.yaml   Pod/p           -              api      r1",
        "bb.yaml  Deployment/web  spec.template  error    bad",
    ]
