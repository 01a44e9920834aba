"""Reading manifests from files and directories: the webhook configurations of ``--webhooks``
and anything else the server should hold from the start (namespaces, priority classes, CRDs)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from devapi.types import JSONObject

logger = logging.getLogger(__name__)

IGNORED_FILES = frozenset({"kustomization.yaml", "kustomization.yml", "Kustomization"})
# Objects others depend on go first: a namespace before its contents, a CRD before its objects.
_ORDER = {
    "Namespace": 0,
    "CustomResourceDefinition": 1,
    "PriorityClass": 2,
    "MutatingWebhookConfiguration": 3,
    "ValidatingWebhookConfiguration": 3,
}


class ManifestError(ValueError):
    """A manifest file that cannot be read, parsed, or stored."""


def manifest_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.yaml``/``*.yml`` below it (recursively, sorted), skipping
    kustomization files and the patches they name (partial objects, not manifests)."""
    if path.is_dir():
        found = [p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
        patches = {p for k in found if k.name in IGNORED_FILES for p in _kustomize_patches(k)}
        return sorted(
            p for p in found if p.name not in IGNORED_FILES and p.resolve() not in patches
        )
    if path.is_file():
        return [path]
    raise ManifestError(f"{path}: no such file or directory")


def _kustomize_patches(kustomization: Path) -> set[Path]:
    try:
        spec = yaml.safe_load(kustomization.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()  # not ours to validate: kustomize reports it
    if not isinstance(spec, dict):
        return set()
    names: list[str] = []
    for field in ("patches", "patchesJson6902"):
        for entry in spec.get(field) or []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                names.append(entry["path"])
    names += [p for p in spec.get("patchesStrategicMerge") or [] if isinstance(p, str)]
    return {(kustomization.parent / name).resolve() for name in names}


def read_documents(paths: Iterable[Path]) -> list[tuple[Path, JSONObject]]:
    """Every object in the files under ``paths``, in dependency order (stable otherwise)."""
    documents: list[tuple[Path, JSONObject]] = []
    for root in paths:
        for file in manifest_files(root):
            documents.extend((file, doc) for doc in _documents(file))
    return sorted(documents, key=lambda item: _ORDER.get(str(item[1].get("kind")), 9))


def _documents(file: Path) -> Iterator[JSONObject]:
    try:
        loaded = list(yaml.safe_load_all(file.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError) as err:
        raise ManifestError(f"{file}: {err}") from err
    except yaml.YAMLError as err:
        raise ManifestError(f"{file}: invalid YAML: {err}") from err
    for index, doc in enumerate(loaded):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"{file}: document {index + 1} is not an object")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            for item in doc["items"]:
                if isinstance(item, dict):
                    yield item
            continue
        if not doc.get("apiVersion") or not doc.get("kind"):
            raise ManifestError(f"{file}: document {index + 1} has no apiVersion or kind")
        yield doc
