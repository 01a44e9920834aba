"""Builds ``devapi/schemas/kubernetes.json``, the compact typed schema the test API server decodes
with, from the OpenAPI definitions ``kubernetes-validate`` ships for the targeted version.

Run ``make devapi-schema`` (``python -m devapi.schemabuild``) after raising the targeted version;
``tests/devapi/test_schema.py`` fails while the committed file differs from what this builds.
Only the types reachable from :data:`ROOTS` are kept, and of each only what decoding needs:
the Go type name (for the decoder's error texts) and each field's type, written as
``string`` (``string:<Go type>`` for a named string type), ``bytes``, ``bool``, ``int32``,
``int64``, ``float64``, ``quantity``, ``intstr``, ``time``, ``any``, ``[]T``, ``map[string]T`` or
the name of another kept type.

It runs at build time only (``kubernetes-validate`` is a test dependency); the server reads the
JSON file it writes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from pathlib import Path
from typing import Any

KUBERNETES_VERSION = "1.37.0"
ROOTS = ("io.k8s.api.core.v1.Pod",)
OUTPUT = Path(__file__).parent / "schemas" / "kubernetes.json"

# Fields whose Go type is a named string type (k8s.io/api/core/v1/types.go,
# apimachinery/pkg/apis/meta/v1/types.go): the OpenAPI definitions say only "string", while
# the decoder's error text names the Go type. Written as ``string:<Go type>``.
NAMED_STRINGS = {
    "io.k8s.api.core.v1.PodSpec": {
        "dnsPolicy": "v1.DNSPolicy",
        "preemptionPolicy": "v1.PreemptionPolicy",
        "restartPolicy": "v1.RestartPolicy",
    },
    "io.k8s.api.core.v1.Container": {
        "imagePullPolicy": "v1.PullPolicy",
        "restartPolicy": "v1.ContainerRestartPolicy",
        "terminationMessagePolicy": "v1.TerminationMessagePolicy",
    },
    "io.k8s.api.core.v1.Toleration": {
        "effect": "v1.TaintEffect",
        "operator": "v1.TolerationOperator",
    },
    "io.k8s.api.core.v1.TopologySpreadConstraint": {
        "nodeAffinityPolicy": "v1.NodeInclusionPolicy",
        "nodeTaintsPolicy": "v1.NodeInclusionPolicy",
        "whenUnsatisfiable": "v1.UnsatisfiableConstraintAction",
    },
    "io.k8s.api.core.v1.ContainerPort": {"protocol": "v1.Protocol"},
    "io.k8s.api.core.v1.NodeSelectorRequirement": {"operator": "v1.NodeSelectorOperator"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement": {
        "operator": "v1.LabelSelectorOperator"
    },
    "io.k8s.api.core.v1.PodStatus": {"phase": "v1.PodPhase", "qosClass": "v1.PodQOSClass"},
    "io.k8s.api.core.v1.PodCondition": {
        "status": "v1.ConditionStatus",
        "type": "v1.PodConditionType",
    },
    "io.k8s.api.core.v1.ContainerResizePolicy": {
        "resourceName": "v1.ResourceName",
        "restartPolicy": "v1.ResourceResizeRestartPolicy",
    },
    "io.k8s.api.core.v1.PodOS": {"name": "v1.OSName"},
}

_SPECIAL = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "any",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "any",
}


def _definitions(version: str) -> dict[str, Any]:
    import kubernetes_validate  # build-time only

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = base / f"v{version}-local" / "_definitions.json"
    loaded: dict[str, Any] = json.loads(path.read_text())["$defs"]
    return loaded


def _types(schema: dict[str, Any]) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, list):
        return {t for t in declared if t != "null"}
    return {declared} if isinstance(declared, str) else set()


def _field_type(schema: dict[str, Any], pending: list[str]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in _SPECIAL:
            return _SPECIAL[name]
        pending.append(name)
        return name
    kinds = _types(schema)
    if kinds == {"array"}:
        return "[]" + _field_type(schema.get("items") or {}, pending)
    if kinds == {"object"}:
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            return "map[string]" + _field_type(values, pending)
        return "any"
    if kinds == {"string"}:
        return "bytes" if schema.get("format") == "byte" else "string"
    if kinds == {"boolean"}:
        return "bool"
    if kinds == {"integer"}:
        return "int32" if schema.get("format") == "int32" else "int64"
    if kinds == {"number"}:
        return "float64"
    return "any"


def build(version: str = KUBERNETES_VERSION) -> dict[str, Any]:
    """The compact schema of :data:`ROOTS` and every type they reach."""
    definitions = _definitions(version)
    types: dict[str, Any] = {}
    pending = list(ROOTS)
    while pending:
        name = pending.pop()
        if name in types:
            continue
        definition = definitions[name]
        fields = {
            field: _field_type(schema, pending)
            for field, schema in sorted((definition.get("properties") or {}).items())
        }
        for field, go_name in NAMED_STRINGS.get(name, {}).items():
            if fields.get(field) == "string":
                fields[field] = f"string:{go_name}"
        entry: dict[str, Any] = {"go": name.rsplit(".", 1)[-1], "fields": fields}
        required = sorted(definition.get("required") or [])
        if required:
            # Required fields have no omitempty: an empty list or map of theirs is written.
            entry["required"] = required
        types[name] = entry
    return {
        "kubernetes": version,
        "source": f"kubernetes-validate {importlib.metadata.version('kubernetes-validate')}",
        "roots": list(ROOTS),
        "types": dict(sorted(types.items())),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", default=KUBERNETES_VERSION)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(build(args.version)))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
