"""The kubeconfig that points ``kubectl`` and the Kubernetes clients at the test API server."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

CONTEXT = "tenantgate-dev"


def render(server: str, *, ca_pem: bytes | None = None, namespace: str = "default") -> str:
    cluster: dict[str, str] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }
    text: str = yaml.safe_dump(config, sort_keys=False)
    return text


def write(path: Path, text: str) -> Path:
    """Write atomically with owner-only permissions, as kubeconfigs usually are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    temporary.replace(path)
    return path
