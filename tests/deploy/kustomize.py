"""Rendering a cluster's kustomization (the base plus components) with ``kubectl kustomize``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

BASE = Path(__file__).resolve().parents[2] / "deploy" / "webhooks"


def render_cluster(directory: Path, components: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """The objects of a kustomization in ``directory`` including the base and ``components``."""
    directory.mkdir(parents=True, exist_ok=True)
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(BASE, directory)],
    }
    if components:
        kustomization["components"] = [os.path.relpath(c, directory) for c in components]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render(directory)


def render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize directory``; skips the test when kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders the kustomizations)")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
