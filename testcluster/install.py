"""tenantgate installed as a user installs it: ``kubectl apply -k`` of ``deploy/webhooks``
(with the HA and schedulers components) through a test overlay, and tokens of the shipped
ServiceAccounts to run tenantgate and the second kube-scheduler with.

The overlay changes only what a webhook running outside the cluster needs: each webhook's
``clientConfig.service`` becomes a ``url`` (the balancer in front of the local replicas) with
the ``caBundle`` filled, and the Deployment is scaled to 0 (its pods would only be faked).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import yaml

from testcluster.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[1]
WEBHOOKS = ROOT / "deploy" / "webhooks"
HA = WEBHOOKS / "overlays" / "ha"
SCHEDULERS = WEBHOOKS / "components" / "schedulers"
NAMESPACE = "tenantgate-system"
SERVICE_ACCOUNT = "tenantgate"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _webhook_patch(kind: str, url: str, ca_bundle: bytes) -> dict[str, Any]:
    """A JSON 6902 patch giving every webhook of ``kind`` a url client config."""
    file = (
        "mutatingwebhookconfiguration.yaml"
        if kind.startswith("Mutating")
        else "validatingwebhookconfiguration.yaml"
    )
    document = yaml.safe_load((WEBHOOKS / file).read_text())
    bundle = base64.b64encode(ca_bundle).decode("ascii")
    operations = [
        {
            "op": "replace",
            "path": f"/webhooks/{index}/clientConfig",
            "value": {
                "url": f"{url}{webhook['clientConfig']['service']['path']}",
                "caBundle": bundle,
            },
        }
        for index, webhook in enumerate(document["webhooks"])
    ]
    return {
        "target": {"kind": kind, "name": document["metadata"]["name"]},
        "patch": json.dumps(operations),
    }


def write_overlay(directory: Path, *, url: str, ca_bundle: bytes, ha: bool = True) -> Path:
    """The test overlay over deploy/webhooks (and the HA component), in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(WEBHOOKS, directory)],
        "components": [
            *([os.path.relpath(HA, directory)] if ha else []),
            os.path.relpath(SCHEDULERS, directory),
        ],
        # Their pods would only be faked: tests run tenantgate and the second scheduler
        # as processes, with the installed ServiceAccounts' tokens.
        "replicas": [
            {"name": "tenantgate", "count": 0},
            {"name": "tenantgate-scheduler", "count": 0},
        ],
        "patches": [_webhook_patch(kind, url, ca_bundle) for kind in WEBHOOK_KINDS],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory


class Installation:
    """deploy/webhooks applied to ``plane``; the webhook configurations kept aside so that a
    test registers them only while its tenantgate runs."""

    def __init__(self, plane: ControlPlane, *, url: str, ca_bundle: bytes, ha: bool = True) -> None:
        self.plane = plane
        self.overlay = write_overlay(plane.workdir / "install", url=url, ca_bundle=ca_bundle, ha=ha)
        self.rendered: list[dict[str, Any]] = []

    def apply(self) -> Installation:
        rendered = self.plane.kubectl("kustomize", str(self.overlay)).stdout
        self.rendered = [doc for doc in yaml.safe_load_all(rendered) if doc]
        self.plane.kubectl("apply", "--server-side", "-k", str(self.overlay))
        self.plane.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/tenantledgers.tenantgate.io",
            "crd/tenantcohortledgers.tenantgate.io",
            "--timeout=60s",
        )
        return self

    def webhook_configurations(self) -> list[dict[str, Any]]:
        return [doc for doc in self.rendered if doc["kind"] in WEBHOOK_KINDS]

    def service_account_token(
        self, *, seconds: int = 86400, name: str = SERVICE_ACCOUNT, namespace: str = NAMESPACE
    ) -> str:
        """A token of the ServiceAccount ``namespace/name`` (TokenRequest API)."""
        request = json.dumps(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            }
        )
        out = self.plane.kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            "-f",
            "-",
            stdin=request,
        ).stdout
        token: str = json.loads(out)["status"]["token"]
        return token
