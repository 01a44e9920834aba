"""``tenantgate init``: every preset is a config that lint accepts and review uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli import main
from admission.commands.init import preset_names

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tenantgate.yaml"
EXAMPLE_PODS = sorted((ROOT / "examples" / "pods").glob("*.yaml"))
PRESETS = [
    "default",
    "cohorts",
    "development",
    "hpc",
    "memory",
    "microservices",
    "multitenant",
    "production",
    "scheduler-selector",
]


def init(capsys: pytest.CaptureFixture[str], tmp_path: Path, preset: str) -> Path:
    path = tmp_path / f"{preset}.yaml"
    assert main(["init", "--preset", preset, "-o", str(path)]) == 0
    assert f"wrote {path} (preset {preset})" in capsys.readouterr().err
    return path


def review(capsys: pytest.CaptureFixture[str], config: Path, manifest: Path) -> tuple[int, Any]:
    code = main(["review", "--config", str(config), "-f", str(manifest), "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_presets_are_the_documented_ones() -> None:
    assert preset_names() == PRESETS


def test_default_is_the_example_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init"]) == 0
    assert capsys.readouterr().out == EXAMPLE.read_text()


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_passes_lint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, preset: str
) -> None:
    path = init(capsys, tmp_path, preset)

    assert main(["lint", str(path)]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith(f"{path}: ok: ")


@pytest.mark.parametrize("preset", PRESETS)
def test_review_uses_every_preset_on_the_example_pods(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, preset: str
) -> None:
    path = init(capsys, tmp_path, preset)
    for manifest in EXAMPLE_PODS:
        code, rows = review(capsys, path, manifest)
        (row,) = rows
        # Exit 3: a pod would be denied (big.yaml asks for 8 CPUs); anything else is an error.
        assert code in (0, 3), (manifest.name, row)
        assert row["tenant"] in ("team-a", "ml"), (manifest.name, row)
        assert (code == 3) == (not row["allowed"])


def test_an_existing_file_is_kept_unless_forced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "tenantgate.yaml"
    path.write_text("mine\n")

    assert main(["init", "--preset", "hpc", "-o", str(path)]) == 1
    assert "exists; pass --force to replace it" in capsys.readouterr().err
    assert path.read_text() == "mine\n"
    assert main(["init", "--preset", "hpc", "-o", str(path), "--force"]) == 0
    assert "hpc" in path.read_text()


def test_an_unknown_preset_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["init", "--preset", "nope"])
    assert exited.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


# --------------------------------------------------------------------------- scheduler-selector


def pod(name: str, *, memory: str | list[str] = "1Gi", **extra: Any) -> dict[str, Any]:
    labels = extra.pop("labels", {})
    gpu = extra.pop("gpu", None)
    containers = []
    for index, amount in enumerate([memory] if isinstance(memory, str) else memory):
        resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": amount}}
        if gpu is not None and index == 0:
            resources["limits"] = {"nvidia.com/gpu": gpu}
        containers.append({"name": f"c{index}", "image": "busybox", "resources": resources})
    spec: dict[str, Any] = {"containers": containers, **extra}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("manifest", "scheduler"),
    [
        (pod("gpu", gpu=1), "gpu-scheduler"),
        (pod("rt", labels={"workload.kubernetes.io/priority": "realtime"}), "realtime-scheduler"),
        (pod("batch", labels={"workload.kubernetes.io/type": "batch"}), "batch-scheduler"),
        (pod("big", memory="9Gi"), "memory-optimized-scheduler"),
        (pod("exactly", memory="8Gi"), None),  # "above 8Gi"
        # Per container: 10Gi in all, but no container above 8Gi.
        (pod("split", memory=["5Gi", "5Gi"]), None),
        (pod("one-big", memory=["1Gi", "9Gi"]), "memory-optimized-scheduler"),
        (pod("plain"), None),
        # GPU first: a realtime GPU pod goes to the GPU scheduler.
        (
            pod("both", gpu=1, labels={"workload.kubernetes.io/priority": "realtime"}),
            "gpu-scheduler",
        ),
        # A scheduler the pod names itself is kept.
        (pod("own", memory="9Gi", schedulerName="my-scheduler"), "my-scheduler"),
    ],
    ids=lambda value: value["metadata"]["name"] if isinstance(value, dict) else str(value),
)
def test_scheduler_selector_routes_each_kind_of_pod(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    manifest: dict[str, Any],
    scheduler: str | None,
) -> None:
    config = init(capsys, tmp_path, "scheduler-selector")
    file = tmp_path / "pod.yaml"
    file.write_text(yaml.safe_dump(manifest))

    code, (row,) = review(capsys, config, file)

    assert code == 0, row
    assert row["mutated"]["spec"].get("schedulerName") == scheduler


def test_multitenant_queues_ml_pods_over_quota_and_refuses_other_teams(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The ml tenant is in queue mode: at its GPU ceiling a training pod waits for the
    guarantee behind the gate; team-a (overQuota: reject) denies at its ceiling."""
    config = init(capsys, tmp_path, "multitenant")
    usage = tmp_path / "usage.json"
    usage.write_text(
        json.dumps(
            {
                "tenants": {
                    "ml": {
                        "used": {
                            "guaranteed": {"cpu": "8", "nvidia.com/gpu": "4"},
                            "burst": {"nvidia.com/gpu": "2"},
                        }
                    },
                    "team-a": {"used": {"guaranteed": {"cpu": "8"}, "burst": {"cpu": "4"}}},
                }
            }
        )
    )

    def at_usage(manifest: Path) -> tuple[int, Any]:
        argv = ["review", "--config", str(config), "-f", str(manifest), "--usage", str(usage)]
        code = main([*argv, "-o", "json"])
        return code, json.loads(capsys.readouterr().out)

    code, (gpu,) = at_usage(ROOT / "examples" / "pods" / "gpu-training.yaml")
    assert code == 0, gpu
    assert (gpu["tenant"], gpu["allowed"], gpu["tier"]) == ("ml", True, "queued")
    assert {"name": "tenantgate.io/quota"} in gpu["mutated"]["spec"]["schedulingGates"]
    assert gpu["mutated"]["spec"]["priorityClassName"] == "batch-low"  # its profile's class
    assert any(w.startswith("queued: ml is at its guarantee") for w in gpu["warnings"])

    code, (web,) = at_usage(ROOT / "examples" / "pods" / "web.yaml")
    assert code == 3, web
    assert (web["tenant"], web["allowed"]) == ("team-a", False)
