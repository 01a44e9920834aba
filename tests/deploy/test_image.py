"""The Dockerfile and the image the Deployment names (building it is ``make image-test``)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DEPLOYMENT = REPO / "deploy" / "webhooks" / "deployment.yaml"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_the_base_is_pinned_by_an_arg_and_both_stages_use_it() -> None:
    steps = instructions()
    base_arg = next(rest for keyword, rest in steps if keyword == "ARG" and "BASE_IMAGE=" in rest)
    image = base_arg.partition("=")[2]
    assert not image.endswith(":latest")
    assert re.search(r":\d+\.\d+\.\d+-", image), f"pin the base to a full version: {image}"
    stages = [rest for keyword, rest in steps if keyword == "FROM"]
    assert len(stages) == 2, "a build stage and a runtime stage"
    assert all(stage.startswith("${BASE_IMAGE}") for stage in stages)


def test_the_runtime_stage_runs_tenantgate_serve_as_a_non_root_uid() -> None:
    steps = instructions()
    runtime = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    assert ("USER", "65532:65532") in runtime
    assert ("ENTRYPOINT", '["/opt/tenantgate/bin/tenantgate"]') in runtime
    assert ("CMD", '["serve"]') in runtime
    copies = [rest for keyword, rest in runtime if keyword == "COPY"]
    assert copies == ["--from=build /opt/tenantgate /opt/tenantgate"], "only the virtualenv"
    labels = " ".join(rest for keyword, rest in runtime if keyword == "LABEL")
    for key in ("title", "version", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_the_deployment_names_the_image_make_image_builds() -> None:
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "image"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    built = re.search(r"IMAGE=(\S+) ", result.stdout)
    assert built is not None, result.stdout
    assert container["image"] == built.group(1) == f"ghcr.io/tenantgate/tenantgate:{VERSION}"


def test_the_build_context_holds_what_the_wheel_needs() -> None:
    """The defaults config is a symlink into examples/: the context must carry its target."""
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    kept = {line[1:] for line in ignore if line.startswith("!")}
    link = REPO / "admission" / "defaults" / "tenantgate.yaml"
    target = link.resolve().relative_to(REPO)
    assert str(target) in kept
    for package in ("admission", "tenants", "classifier", "certs"):
        assert f"{package}/" in kept
    assert {"pyproject.toml", "README.md", "LICENSE"} <= kept
