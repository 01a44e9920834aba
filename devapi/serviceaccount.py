"""The ``ServiceAccount`` admission plugin, as far as a server without ServiceAccount objects
and secrets can follow it.

``plugin/pkg/admission/serviceaccount/admission.go`` (``Admit``), pods on create only, not for
mirror pods: ``serviceAccountName`` defaults to ``default``; unless the pod says
``automountServiceAccountToken: false``, every container and init container that has nothing
mounted at ``/var/run/secrets/kubernetes.io/serviceaccount`` gets a read-only mount of a
projected ``kube-api-access-<5 characters>`` volume (``TokenVolumeSource``: a bound token of
3607 seconds, the ``kube-root-ca.crt`` ConfigMap's ``ca.crt``, the pod's namespace; mode 0644),
added once. Every service account is taken to exist and to allow automounting (the real
plugin looks the account up and refuses a pod whose account is missing).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

from devapi.jsonvalues import obj as _obj
from devapi.types import JSONObject

DEFAULT_SERVICE_ACCOUNT = "default"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 - a path
VOLUME_PREFIX = "kube-api-access-"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
TOKEN_EXPIRATION_SECONDS = 3607
# apiserver/pkg/storage/names: SimpleNameGenerator's alphabet (no vowels, no ambiguous digits).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _containers(spec: JSONObject) -> Iterator[JSONObject]:
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if isinstance(container, dict):
                yield container


def token_volume(name: str) -> JSONObject:
    """``TokenVolumeSource``: what the projected service-account volume holds."""
    return {
        "name": name,
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                        "path": "token",
                    }
                },
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 0o644,
        },
    }


def admit(pod: JSONObject) -> None:
    if MIRROR_POD_ANNOTATION in _obj(_obj(pod.get("metadata")).get("annotations")):
        return
    spec = pod.setdefault("spec", {})
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = DEFAULT_SERVICE_ACCOUNT
    if spec.get("automountServiceAccountToken") is False:
        return
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
    existing = next(
        (str(v.get("name")) for v in volumes if str(v.get("name") or "").startswith(VOLUME_PREFIX)),
        None,
    )
    name = existing or VOLUME_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(5))
    needed = False
    for container in _containers(spec):
        mounts = container.get("volumeMounts")
        if not isinstance(mounts, list):
            mounts = []
        if any(isinstance(m, dict) and m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
            continue
        container["volumeMounts"] = [
            *mounts,
            {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH},
        ]
        needed = True
    if needed and existing is None:
        spec["volumes"] = [*volumes, token_volume(name)]
