"""The kustomize components in deploy/webhooks/components: each renders next to the base with
``kubectl kustomize`` and validates, built-in kinds against the Kubernetes schema and custom
resources against the CRDs their projects publish (tests/fixtures/crds, see SOURCES.md).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from tests.deploy.kustomize import render_cluster

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "webhooks"
COMPONENTS = BASE / "components"
CRDS = REPO / "tests" / "fixtures" / "crds"
NAMESPACE = "tenantgate-system"
POD_LABELS = {"app.kubernetes.io/name": "tenantgate", "app.kubernetes.io/component": "webhook"}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
OPT_IN_LABEL = ("tenantgate.io/enabled", "true")

Obj = dict[str, Any]


def render(tmp_path: Path, *components: str) -> list[Obj]:
    """``kubectl kustomize`` of a cluster kustomization: the base plus ``components``."""
    return render_cluster(tmp_path / "cluster", [COMPONENTS / name for name in components])


@functools.cache
def crd_schemas() -> dict[tuple[str, str, str], Obj]:
    """(group, version, kind) -> openAPIV3Schema, from the CRDs kept as test data."""
    schemas: dict[tuple[str, str, str], Obj] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                key = (spec["group"], version["name"], spec["names"]["kind"])
                schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused, as the API server prunes-and-warns them."""
    if isinstance(schema, dict):
        strict = {key: _strict(value) for key, value in schema.items()}
        open_object = schema.get("x-kubernetes-preserve-unknown-fields")
        if strict.get("type") == "object" and "properties" in strict and not open_object:
            strict.setdefault("additionalProperties", False)
        return strict
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def validate(obj: Mapping[str, Any]) -> str | None:
    """Why ``obj`` is invalid, or None."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    name = f"{obj['kind']} {obj['metadata'].get('name')}"
    schema = crd_schemas().get((group, version, str(obj["kind"])))
    if schema is not None:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        properties = {k: v for k, v in schema["properties"].items() if k not in ("metadata",)}
        checked = _strict({**schema, "properties": properties})
        checked["properties"].pop("apiVersion", None)
        checked["properties"].pop("kind", None)
        # Not checked against the metaschema: the CRDs hold Go regular expressions (RE2).
        try:
            jsonschema.Draft7Validator(checked).validate(body)
        except jsonschema.ValidationError as error:
            where = ".".join(str(part) for part in error.absolute_path) or "(root)"
            return f"{name} fails the {group}/{version} CRD schema at {where}: {error.message}"
        return None
    try:
        kubernetes_validate.validate(dict(obj), kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(part) for part in error.path) or "(root)"
        return f"{name} fails the Kubernetes schema at {where}: {error.message}"
    return None


def component_names() -> list[str]:
    return sorted(path.parent.name for path in COMPONENTS.glob("*/kustomization.yaml"))


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


# --------------------------------------------------------------------------- every component


def test_the_components_are_the_documented_ones() -> None:
    assert component_names() == [
        "cert-manager",
        "monitoring",
        "network-policy",
        "opt-in",
        "schedulers",
    ]
    readme = (BASE / "README.md").read_text()
    for name in component_names():
        assert f"components/{name}" in readme, f"deploy/webhooks/README.md omits {name}"


@pytest.mark.parametrize("component", component_names())
def test_component_renders_with_the_base_and_validates(component: str, tmp_path: Path) -> None:
    objects = render(tmp_path, component)

    failures = [failure for obj in objects if (failure := validate(obj)) is not None]
    assert failures == []


def test_all_components_render_together(tmp_path: Path) -> None:
    objects = render(tmp_path, *component_names())

    assert [failure for obj in objects if (failure := validate(obj)) is not None] == []


def test_the_crd_schemas_catch_a_misspelt_field() -> None:
    certificate = yaml.safe_load(
        (COMPONENTS / "cert-manager" / "certificate-serving.yaml").read_text()
    )
    assert validate(certificate) is None
    certificate["spec"]["dnsName"] = certificate["spec"].pop("dnsNames")
    failure = validate(certificate)
    assert failure is not None
    assert "dnsName" in failure


# --------------------------------------------------------------------------- cert-manager


def test_cert_manager_issues_the_secret_the_deployment_mounts(tmp_path: Path) -> None:
    objects = render(tmp_path, "cert-manager")
    deployment = find(objects, "Deployment", "tenantgate")
    (volume,) = [
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "certs"
    ]
    serving = find(objects, "Certificate", "tenantgate-serving")
    assert serving["spec"]["secretName"] == volume["secret"]["secretName"]
    # cert-manager's CA issuer writes ca.crt next to tls.crt and tls.key.
    assert {item["key"] for item in volume["secret"]["items"]} == {"ca.crt", "tls.crt", "tls.key"}
    assert serving["spec"]["issuerRef"]["name"] == "tenantgate-ca"
    ca_issuer = find(objects, "Issuer", "tenantgate-ca")
    ca = find(objects, "Certificate", "tenantgate-ca")
    assert ca["spec"]["isCA"] is True
    assert ca_issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    assert ca["spec"]["issuerRef"]["name"] == "tenantgate-selfsigned"

    service = find(objects, "Service", "tenantgate")
    name = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert name in serving["spec"]["dnsNames"], "the API server calls the Service by this name"
    for kind in WEBHOOK_KINDS:
        config = find(objects, kind, "tenantgate")
        annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{NAMESPACE}/tenantgate-serving"
        for webhook in config["webhooks"]:
            assert webhook["clientConfig"]["service"]["name"] == service["metadata"]["name"]


# --------------------------------------------------------------------------- network policy


def test_network_policy_admits_the_webhook_and_metrics_ports_of_the_webhook_pods(
    tmp_path: Path,
) -> None:
    objects = render(tmp_path, "network-policy")
    policy = find(objects, "NetworkPolicy", "tenantgate")
    assert policy["spec"]["podSelector"]["matchLabels"] == POD_LABELS
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress to the API server stays open"
    deployment = find(objects, "Deployment", "tenantgate")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    declared = {port["name"] for port in container["ports"]}
    webhook_rule, metrics_rule = policy["spec"]["ingress"]
    assert "from" not in webhook_rule, "the API server's addresses match no selector"
    assert [p["port"] for p in webhook_rule["ports"]] == ["https-webhook"]
    assert [p["port"] for p in metrics_rule["ports"]] == ["http-metrics"]
    assert {"https-webhook", "http-metrics"} <= declared


def test_the_metrics_port_and_the_status_page_on_it_stay_inside_the_cluster(
    tmp_path: Path,
) -> None:
    """The status page, /status and /queue share the metrics port: with the policy only
    Prometheus reaches it, and the Service never publishes it outside the cluster."""
    objects = render(tmp_path, "network-policy")
    policy = find(objects, "NetworkPolicy", "tenantgate")
    metrics_rules = [
        rule
        for rule in policy["spec"]["ingress"]
        if any(port["port"] in ("http-metrics", 8080) for port in rule["ports"])
    ]
    assert len(metrics_rules) == 1
    assert metrics_rules[0]["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    assert all("port" in port for rule in policy["spec"]["ingress"] for port in rule["ports"]), (
        "a rule without ports would admit every port, the metrics port included"
    )
    service = find(objects, "Service", "tenantgate")
    assert service["spec"]["type"] == "ClusterIP"
    assert not any("nodePort" in port for port in service["spec"]["ports"])


# --------------------------------------------------------------------------- opt-in


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for requirement in selector.get("matchExpressions") or []:
        key, operator, values = requirement["key"], requirement["operator"], requirement["values"]
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def test_opt_in_selects_only_labelled_namespaces_and_never_the_system_ones(
    tmp_path: Path,
) -> None:
    objects = render(tmp_path, "opt-in")
    key, value = OPT_IN_LABEL
    for kind in WEBHOOK_KINDS:
        (webhook,) = find(objects, kind, "tenantgate")["webhooks"]
        selector = webhook["namespaceSelector"]
        team = {"kubernetes.io/metadata.name": "team-a"}
        assert not selects(selector, team)
        assert selects(selector, {**team, key: value})
        system = {"kubernetes.io/metadata.name": "kube-system", key: value}
        assert not selects(selector, system)
