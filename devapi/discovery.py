"""Discovery documents (``/api``, ``/apis``, resource lists, ``/version``) and OpenAPI v3.

The OpenAPI v3 documents carry what ``kubectl`` reads from them: each PATCH operation's
group-version-kind and its ``fieldValidation`` parameter (so ``kubectl apply`` relies on the
server for field validation), and the patch content types. Strategic merge patch is left out of
those on purpose: ``kubectl apply`` then computes it from its built-in types, which know every
merge key, instead of from schemas this server does not carry.
"""

from __future__ import annotations

import hashlib
import platform

import orjson

from devapi.resources import (
    SUBRESOURCE_KINDS,
    SUBRESOURCE_VERBS,
    ResourceCatalog,
    ResourceType,
)
from devapi.types import JSONObject

KUBERNETES_MAJOR = "1"
KUBERNETES_MINOR = "33"
GIT_VERSION = f"v{KUBERNETES_MAJOR}.{KUBERNETES_MINOR}.0-tenantgate-dev"


def version_info() -> JSONObject:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    return {
        "major": KUBERNETES_MAJOR,
        "minor": KUBERNETES_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": f"linux/{arch}",
    }


def core_versions(server_address: str) -> JSONObject:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(group: str, versions: tuple[str, ...]) -> JSONObject:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def group_list(catalog: ResourceCatalog) -> JSONObject:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, vs) for g, vs in catalog.group_versions()],
    }


def group(catalog: ResourceCatalog, name: str) -> JSONObject | None:
    for g, versions in catalog.group_versions():
        if g == name:
            body = _group(g, versions)
            body.update({"kind": "APIGroup", "apiVersion": "v1"})
            return body
    return None


def resource_list(catalog: ResourceCatalog, group_name: str, version: str) -> JSONObject | None:
    types = [rt for rt in catalog.all() if rt.group == group_name and version in rt.versions]
    if not types:
        return None
    resources: list[JSONObject] = []
    for rt in types:
        entry: JSONObject = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        entry["storageVersionHash"] = _hash(f"{rt.group}/{rt.storage_version}/{rt.kind}")[:12]
        resources.append(entry)
        for sub in sorted(rt.subresources):
            sub_entry: JSONObject = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": SUBRESOURCE_KINDS.get(sub, ("", "", rt.kind))[2],
                "verbs": list(SUBRESOURCE_VERBS[sub]),
            }
            sub_group, sub_version, _ = SUBRESOURCE_KINDS.get(sub, ("", "", ""))
            if sub_group:  # another group's kind (autoscaling/v1 Scale), as the real list says
                sub_entry["group"], sub_entry["version"] = sub_group, sub_version
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": resources,
    }


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- OpenAPI v3 --------------------------------------------------------------------------------


def openapi_paths(catalog: ResourceCatalog) -> JSONObject:
    """The ``/openapi/v3`` index: one document per group-version, addressed by content hash."""
    paths: JSONObject = {}
    gvs = [("", "v1")] + [(g, v) for g, vs in catalog.group_versions() for v in vs]
    for group_name, version in gvs:
        key = f"apis/{group_name}/{version}" if group_name else f"api/{version}"
        document = openapi_document(catalog, group_name, version)
        digest = hashlib.sha512(orjson.dumps(document)).hexdigest().upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def openapi_document(catalog: ResourceCatalog, group_name: str, version: str) -> JSONObject:
    paths: JSONObject = {}
    schemas: JSONObject = {}
    for rt in catalog.all():
        if rt.group != group_name or version not in rt.versions:
            continue
        gvk = {"group": rt.group, "version": version, "kind": rt.kind}
        schema_name = _schema_name(rt, version)
        schemas[schema_name] = {
            "description": f"{rt.kind} is served by the tenantgate test API server.",
            "type": "object",
            "x-kubernetes-group-version-kind": [gvk],
        }
        ref = {"$ref": f"#/components/schemas/{schema_name}"}
        prefix = f"/apis/{rt.group}/{version}" if rt.group else f"/api/{version}"
        scope = f"{prefix}/namespaces/{{namespace}}" if rt.namespaced else prefix
        paths[f"{scope}/{rt.plural}"] = {
            "get": _operation(f"list{rt.kind}", gvk, "list", ref),
            "post": _operation(f"create{rt.kind}", gvk, "post", ref, body=("application/json",)),
        }
        item = {
            "get": _operation(f"read{rt.kind}", gvk, "get", ref),
            "put": _operation(f"replace{rt.kind}", gvk, "put", ref, body=("application/json",)),
            "patch": _operation(
                f"patch{rt.kind}",
                gvk,
                "patch",
                ref,
                body=(
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                ),
            ),
            "delete": _operation(f"delete{rt.kind}", gvk, "delete", ref),
        }
        paths[f"{scope}/{rt.plural}/{{name}}"] = item
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _schema_name(rt: ResourceType, version: str) -> str:
    group = rt.group or "core"
    return f"io.tenantgate.dev.{group}.{version}.{rt.kind}"


_QUERY_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _operation(
    operation_id: str,
    gvk: JSONObject,
    action: str,
    ref: JSONObject,
    *,
    body: tuple[str, ...] = (),
) -> JSONObject:
    operation: JSONObject = {
        "operationId": operation_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
        },
    }
    if action in ("put", "patch", "post"):
        operation["parameters"] = [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in _QUERY_PARAMETERS
        ]
    if body:
        operation["requestBody"] = {"content": {ct: {"schema": ref} for ct in body}}
    return operation
