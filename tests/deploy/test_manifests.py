"""The kustomize base in deploy/webhooks: Kubernetes schema validity and webhook invariants.

The base is read the way kustomize builds it (the ``resources`` files plus the generated
ConfigMap); when ``kubectl`` is installed, its own ``kubectl kustomize`` render must equal that.
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import math
import os
import re
import subprocess
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from admission.settings import Settings
from tests.deploy.kustomize import render

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "webhooks"
KUSTOMIZATION = BASE / "kustomization.yaml"
README = BASE / "README.md"
EXAMPLE_CONFIG = REPO / "examples" / "tenantgate.yaml"
CONFIG_COPY = BASE / "tenantgate.yaml"
REFRESH_COMMAND = "make manifests (cp examples/tenantgate.yaml deploy/webhooks/tenantgate.yaml)"

NAMESPACE = "tenantgate-system"
NAME = "tenantgate"
IMAGE = "ghcr.io/tenantgate/tenantgate:0.1.0"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
OPT_OUT_LABEL = "tenantgate.io/ignore"
CA_PLACEHOLDER_HINT = "tenantgate certs ca-bundle"
CERT_DIR = "/etc/tenantgate/certs"
CONFIG_DIR = "/etc/tenantgate/config"
SERVE_ARGS = [
    "serve",
    "--config",
    f"{CONFIG_DIR}/tenantgate.yaml",
    "--cert-dir",
    CERT_DIR,
    "--log-format",
    "json",
]
TLS_SECRET = "tenantgate-tls"
TLS_SECRET_KEYS = {"ca.crt", "tls.crt", "tls.key"}
CONFIG_MAP = "tenantgate-config"
WEBHOOK_PRIORITY_CLASS = "tenantgate-webhook"
WEBHOOK_PRIORITY = (1_000_000, "PreemptLowerPriority")
GUARANTEED_CLASS = "tenant-guaranteed"
BURST_CLASS = "tenant-burst"
# Classes the API server creates itself; shipping one is forbidden.
BUILTIN_PRIORITY_CLASS_PREFIX = "system-"
MAX_WEBHOOK_TIMEOUT_SECONDS = 10

CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
# Exactly what the code reads through its watches, and what queue mode writes (the patch that
# releases a pod, its events) and reads (a pod after a release whose answer was lost); anything
# more is a finding. tests/integration/test_installation.py holds the code to it on a cluster.
LEAST_PRIVILEGE = {
    ("", "pods", "patch"),
    ("", "events", "create"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "namespaces", "get"),  # one the watch has not shown yet (tenants/kube/namespaces.py)
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
    ("scheduling.k8s.io", "priorityclasses", "list"),
    ("scheduling.k8s.io", "priorityclasses", "watch"),
    ("batch", "jobs", "get"),  # the size of an Indexed Job's pod group
    # Coscheduling PodGroups, watched where their CRD is installed (tenants/kube/podgroupwatch).
    ("scheduling.x-k8s.io", "podgroups", "list"),
    ("scheduling.x-k8s.io", "podgroups", "watch"),
    # What the shipped podGroup rules read a group's size from (examples/tenantgate.yaml).
    ("kubeflow.org", "pytorchjobs", "get"),
    ("kubeflow.org", "mpijobs", "get"),
    ("jobset.x-k8s.io", "jobsets", "get"),
    ("ray.io", "rayclusters", "get"),
}
POD_RULE_TARGET = ("", "v1", "pods", "Namespaced")
MUTATING_RULES = {("CREATE", "pods")}
VALIDATING_RULES = {("CREATE", "pods"), ("UPDATE", "pods"), ("UPDATE", "pods/resize")}

Obj = dict[str, Any]


@dataclass(frozen=True)
class Manifest:
    """One object of the base and where it comes from (a file or the ConfigMap generator)."""

    source: str
    obj: Obj

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.obj.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str | None:
        value = self.obj.get("metadata", {}).get("namespace")
        return None if value is None else str(value)

    @property
    def ref(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name} ({self.source})"


# --------------------------------------------------------------------------- loading


def _kustomization() -> Obj:
    data = yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        pytest.fail(f"{KUSTOMIZATION.relative_to(REPO)} is not a YAML mapping")
    return data


def _documents(path: Path) -> list[Obj]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]
    for doc in docs:
        if not isinstance(doc, dict):
            pytest.fail(f"{path.relative_to(REPO)}: a document is not a mapping: {doc!r}")
    return docs


def _generated_config_maps(kustomization: Mapping[str, Any]) -> list[Manifest]:
    """What ``configMapGenerator`` produces: one ConfigMap per entry, a key per file."""
    generated = []
    for index, generator in enumerate(kustomization.get("configMapGenerator", [])):
        options = generator.get("options", {})
        data: dict[str, str] = {}
        for entry in generator.get("files", []):
            key, _, file = entry.rpartition("=")
            data[key or Path(file).name] = (BASE / file).read_text(encoding="utf-8")
        metadata: Obj = {"name": generator["name"]}
        if "namespace" in generator:
            metadata["namespace"] = generator["namespace"]
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        if options.get("annotations"):
            metadata["annotations"] = dict(options["annotations"])
        obj: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        generated.append(Manifest(source=f"configMapGenerator[{index}]", obj=obj))
    return generated


@functools.cache
def _load_base() -> tuple[Manifest, ...]:
    kustomization = _kustomization()
    manifests: list[Manifest] = []
    for resource in kustomization.get("resources", []):
        path = BASE / resource
        if not path.is_file():
            pytest.fail(f"kustomization.yaml lists {resource!r}, which is not a file in {BASE}")
        manifests.extend(Manifest(source=resource, obj=doc) for doc in _documents(path))
    manifests.extend(_generated_config_maps(kustomization))
    return tuple(manifests)


@pytest.fixture
def base() -> tuple[Manifest, ...]:
    # Deep copies: a test that edits an object must not leak into another test.
    return tuple(Manifest(m.source, copy.deepcopy(m.obj)) for m in _load_base())


def find(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    matches = [m for m in manifests if m.kind == kind and (name is None or m.name == name)]
    if len(matches) != 1:
        wanted = f"{kind} {name}" if name else kind
        found = ", ".join(m.ref for m in matches) or "none"
        pytest.fail(f"expected exactly one {wanted} in the base, found: {found}")
    return matches[0]


def only_webhook(config: Manifest) -> Obj:
    webhooks = config.obj.get("webhooks") or []
    if len(webhooks) != 1:
        pytest.fail(f"{config.ref}: expected exactly one webhook, found {len(webhooks)}")
    webhook: Obj = webhooks[0]
    return webhook


def pod_spec(deployment: Manifest) -> Obj:
    spec: Obj = deployment.obj["spec"]["template"]["spec"]
    return spec


def main_container(deployment: Manifest) -> Obj:
    containers = pod_spec(deployment).get("containers", [])
    named = [c for c in containers if c.get("name") == NAME]
    if len(named) != 1:
        pytest.fail(f"{deployment.ref}: expected one container named {NAME!r}")
    container: Obj = named[0]
    return container


def all_containers(deployment: Manifest) -> Iterator[tuple[str, Obj]]:
    spec = pod_spec(deployment)
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield f"{field}/{container.get('name')}", container


# --------------------------------------------------------------------------- semantics helpers


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics; an empty selector selects everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator = requirement["key"], requirement["operator"]
        values = requirement.get("values") or []
        if operator == "In":
            matched = key in labels and labels[key] in values
        elif operator == "NotIn":
            matched = key not in labels or labels[key] not in values
        elif operator == "Exists":
            matched = key in labels
        elif operator == "DoesNotExist":
            matched = key not in labels
        else:
            raise ValueError(f"unknown label selector operator {operator!r}")
        if not matched:
            return False
    return True


def arg_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag value`` or ``--flag=value``; None when the flag is absent."""
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(f"{flag}="):
            return arg.partition("=")[2]
    return None


def listening_port(container: Mapping[str, Any], *, flag: str, setting: str) -> int:
    """The port ``tenantgate serve`` listens on: its flag, else the Settings default."""
    value = arg_value(container.get("args") or [], flag)
    if value is not None:
        return int(value)
    default = Settings.model_fields[setting].default
    return int(default)


def container_port(container: Mapping[str, Any], port: int | str) -> int:
    """Resolve a probe or Service target port (number or port name) to a container port."""
    if isinstance(port, int):
        return port
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    pytest.fail(f"container {container.get('name')!r} declares no port named {port!r}")


def service_target(service: Manifest, deployment: Manifest, *, port: int) -> int:
    """The container port a Service port forwards to."""
    for declared in service.obj["spec"].get("ports", []):
        if declared.get("port") == port:
            target = declared.get("targetPort", port)
            return container_port(main_container(deployment), target)
    pytest.fail(f"{service.ref} has no port {port}")


def scaled(value: int | str, *, total: int) -> int:
    """IntOrString as PodDisruptionBudget reads it: percentages round up."""
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def render_with_kubectl(directory: Path) -> list[Obj]:
    return render(directory)


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    metadata = obj.get("metadata", {})
    return (obj["apiVersion"], obj["kind"], metadata.get("namespace", ""), metadata["name"])


# --------------------------------------------------------------------------- layout


def test_kustomization_lists_every_manifest_and_only_existing_files() -> None:
    listed = set(_kustomization().get("resources", []))
    generated = {
        Path(entry.rpartition("=")[2]).name
        for generator in _kustomization().get("configMapGenerator", [])
        for entry in generator.get("files", [])
    }
    on_disk = {path.name for path in BASE.glob("*.yaml")} - {KUSTOMIZATION.name}
    unlisted = sorted(on_disk - generated - listed)
    assert unlisted == [], f"kustomization.yaml does not list {unlisted}"
    absent = sorted(listed - on_disk)
    assert absent == [], f"kustomization.yaml lists files that do not exist: {absent}"


def test_one_object_per_file() -> None:
    for resource in _kustomization().get("resources", []):
        count = len(_documents(BASE / resource))
        assert count == 1, f"{resource} holds {count} objects; keep one object per file"


def test_object_identities_are_unique(base: tuple[Manifest, ...]) -> None:
    seen: dict[tuple[str, str, str, str], str] = {}
    for manifest in base:
        key = identity(manifest.obj)
        assert key not in seen, f"{manifest.ref} duplicates {seen[key]}"
        seen[key] = manifest.ref


def test_no_secret_is_shipped(base: tuple[Manifest, ...]) -> None:
    # TLS keys are created per cluster (tenantgate certs init) and never live in git.
    secrets = [m.ref for m in base if m.kind == "Secret"]
    assert secrets == [], f"the base must not contain Secrets: {secrets}"


def test_config_copy_matches_the_example_config() -> None:
    if not EXAMPLE_CONFIG.is_file():
        pytest.fail(f"{EXAMPLE_CONFIG.relative_to(REPO)} is missing; it is the source of the copy")
    assert CONFIG_COPY.read_bytes() == EXAMPLE_CONFIG.read_bytes(), (
        f"{CONFIG_COPY.relative_to(REPO)} differs from {EXAMPLE_CONFIG.relative_to(REPO)}; "
        f"refresh it with: {REFRESH_COMMAND}"
    )


# --------------------------------------------------------------------------- schema


def _validation_failure(manifest: Manifest, version: str) -> str | None:
    try:
        kubernetes_validate.validate(manifest.obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.path) or "(root)"
        return f"{manifest.ref} fails the Kubernetes {version} schema at {path}: {error.message}"
    except kubernetes_validate.SchemaNotFoundError as error:
        return f"{manifest.ref}: {error.message}"
    return None


@pytest.mark.parametrize("manifest", _load_base(), ids=lambda m: f"{m.kind}-{m.name}")
def test_object_validates_against_the_kubernetes_schema(manifest: Manifest) -> None:
    version = kubernetes_validate.latest_version()
    failure = _validation_failure(manifest, version)
    assert failure is None, failure


def test_strict_schema_rejects_unknown_fields(base: tuple[Manifest, ...]) -> None:
    # Guards the test above: a misspelt field must fail, not be ignored.
    deployment = find(base, "Deployment", NAME)
    main_container(deployment)["securityContext"]["readOnlyRootFileSystem"] = True
    failure = _validation_failure(deployment, kubernetes_validate.latest_version())
    assert failure is not None
    assert "readOnlyRootFileSystem" in failure


def test_kubectl_kustomize_renders_exactly_the_base(base: tuple[Manifest, ...]) -> None:
    rendered = {identity(obj): obj for obj in render_with_kubectl(BASE)}
    expected = {identity(m.obj): m.obj for m in base}
    assert sorted(rendered) == sorted(expected), "kustomize renders a different set of objects"
    for key, obj in expected.items():
        assert rendered[key] == obj, f"kustomize changes {key}"


# --------------------------------------------------------------------------- namespace


def test_namespaced_objects_live_in_the_webhook_namespace(base: tuple[Manifest, ...]) -> None:
    find(base, "Namespace", NAMESPACE)
    for manifest in base:
        if manifest.kind in CLUSTER_SCOPED_KINDS:
            assert manifest.namespace is None, f"{manifest.ref} is cluster-scoped"
        else:
            assert manifest.namespace == NAMESPACE, f"{manifest.ref} is not in {NAMESPACE}"


def test_webhook_namespace_enforces_restricted_pod_security(base: tuple[Manifest, ...]) -> None:
    labels = find(base, "Namespace", NAMESPACE).obj["metadata"].get("labels", {})
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", (
        f"namespace {NAMESPACE} must enforce the restricted Pod Security Standard"
    )


# --------------------------------------------------------------------------- webhooks


def _webhook_configs(base: Sequence[Manifest]) -> list[tuple[Manifest, Obj]]:
    mutating = find(base, "MutatingWebhookConfiguration", NAME)
    validating = find(base, "ValidatingWebhookConfiguration", NAME)
    return [(mutating, only_webhook(mutating)), (validating, only_webhook(validating))]


def _rules(config: Manifest, webhook: Obj) -> set[tuple[str, str]]:
    """(operation, resource) pairs, after checking group, version and scope of every rule."""
    pairs: set[tuple[str, str]] = set()
    for rule in webhook.get("rules", []):
        for group in rule.get("apiGroups", []):
            for version in rule.get("apiVersions", []):
                for resource in rule.get("resources", []):
                    scope = rule.get("scope", "*")
                    where = (group, version, resource.partition("/")[0], scope)
                    assert where == POD_RULE_TARGET, (
                        f"{config.ref}: rule {rule} must name core/v1 pods, scope Namespaced"
                    )
                    pairs.update((op, resource) for op in rule.get("operations", []))
    return pairs


def _common_webhook_settings(config: Manifest, webhook: Obj) -> None:
    where = f"{config.ref} webhook {webhook.get('name')!r}"
    assert webhook.get("admissionReviewVersions") == ["v1"], f"{where}: admissionReviewVersions"
    assert webhook.get("matchPolicy") == "Equivalent", f"{where}: matchPolicy must be Equivalent"
    # Booking quota is a side effect, skipped on dry-run (DESIGN.md).
    assert webhook.get("sideEffects") == "NoneOnDryRun", f"{where}: sideEffects"
    timeout = webhook.get("timeoutSeconds")
    assert isinstance(timeout, int), f"{where}: set timeoutSeconds explicitly"
    assert 1 <= timeout <= MAX_WEBHOOK_TIMEOUT_SECONDS, (
        f"{where}: timeoutSeconds {timeout} is outside 1..{MAX_WEBHOOK_TIMEOUT_SECONDS}"
    )


def test_mutating_webhook_fails_open_and_is_reinvoked(base: tuple[Manifest, ...]) -> None:
    config = find(base, "MutatingWebhookConfiguration", NAME)
    webhook = only_webhook(config)
    assert webhook.get("name") == "mutate.tenantgate.io", f"{config.ref}: webhook name"
    _common_webhook_settings(config, webhook)
    assert webhook.get("failurePolicy") == "Ignore", "classification must fail open"
    assert webhook.get("reinvocationPolicy") == "IfNeeded", (
        "mutate must run again when a later webhook changed the pod"
    )
    assert webhook["clientConfig"]["service"].get("path") == "/mutate", f"{config.ref}: path"
    assert _rules(config, webhook) == MUTATING_RULES, f"{config.ref}: pods CREATE only"


def test_validating_webhook_fails_closed(base: tuple[Manifest, ...]) -> None:
    config = find(base, "ValidatingWebhookConfiguration", NAME)
    webhook = only_webhook(config)
    assert webhook.get("name") == "validate.tenantgate.io", f"{config.ref}: webhook name"
    _common_webhook_settings(config, webhook)
    assert webhook.get("failurePolicy") == "Fail", "quota must fail closed"
    assert webhook["clientConfig"]["service"].get("path") == "/validate", f"{config.ref}: path"
    assert _rules(config, webhook) == VALIDATING_RULES, (
        f"{config.ref}: pods CREATE and UPDATE, pods/resize UPDATE"
    )


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
@pytest.mark.parametrize("namespace", ["kube-system", NAMESPACE])
def test_webhook_never_intercepts_protected_namespaces(
    base: tuple[Manifest, ...], kind: str, namespace: str
) -> None:
    config = find(base, kind, NAME)
    selector = only_webhook(config).get("namespaceSelector") or {}
    # Extra labels must not bring a protected namespace back in.
    labels = {NAMESPACE_NAME_LABEL: namespace, "team": "a", "tenantgate.io/tenant": "team-a"}
    assert not selects(selector, labels), f"{config.ref} intercepts pods in {namespace}"


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
@pytest.mark.parametrize("namespace", ["default", "team-a", "ml"])
def test_webhook_intercepts_tenant_namespaces(
    base: tuple[Manifest, ...], kind: str, namespace: str
) -> None:
    config = find(base, kind, NAME)
    selector = only_webhook(config).get("namespaceSelector") or {}
    labels = {NAMESPACE_NAME_LABEL: namespace}
    assert selects(selector, labels), f"{config.ref} skips pods in {namespace}"


def test_mutating_webhook_honours_the_opt_out_label(base: tuple[Manifest, ...]) -> None:
    config = find(base, "MutatingWebhookConfiguration", NAME)
    selector = only_webhook(config).get("objectSelector") or {}
    assert not selects(selector, {OPT_OUT_LABEL: "true", "app": "web"}), (
        f"{config.ref}: a pod labelled {OPT_OUT_LABEL} must skip mutation"
    )
    assert selects(selector, {"app": "web"}), f"{config.ref} skips ordinary pods"
    assert selects(selector, {}), f"{config.ref} skips pods without labels"


def test_validating_webhook_cannot_be_skipped_by_pod_labels(base: tuple[Manifest, ...]) -> None:
    # A pod's author picks its labels: any objectSelector would be a way around quota.
    config = find(base, "ValidatingWebhookConfiguration", NAME)
    selector = only_webhook(config).get("objectSelector") or {}
    for labels in ({}, {OPT_OUT_LABEL: "true"}, {"app": "web", OPT_OUT_LABEL: ""}):
        assert selects(selector, labels), f"{config.ref} lets pods labelled {labels} skip quota"


def test_webhooks_call_the_service_port_the_server_listens_on(base: tuple[Manifest, ...]) -> None:
    service = find(base, "Service", NAME)
    deployment = find(base, "Deployment", NAME)
    serving_port = listening_port(main_container(deployment), flag="--port", setting="port")
    for config, webhook in _webhook_configs(base):
        client = webhook["clientConfig"]
        assert "url" not in client, f"{config.ref}: call the in-cluster Service, not a URL"
        target = client["service"]
        assert (target.get("name"), target.get("namespace")) == (service.name, service.namespace), (
            f"{config.ref} calls a Service that is not {service.ref}"
        )
        port = target.get("port", 443)
        forwarded = service_target(service, deployment, port=port)
        assert forwarded == serving_port, (
            f"{config.ref} calls {service.name}:{port}, which forwards to container port "
            f"{forwarded}, but tenantgate serves HTTPS on {serving_port}"
        )


def test_ca_bundle_is_the_documented_placeholder(base: tuple[Manifest, ...]) -> None:
    bundles = {
        config.ref: webhook["clientConfig"].get("caBundle")
        for config, webhook in _webhook_configs(base)
    }
    assert len(set(bundles.values())) == 1, f"both webhooks must trust the same CA: {bundles}"
    bundle = next(iter(bundles.values()))
    try:
        decoded = base64.b64decode(bundle, validate=True).decode()
    except (binascii.Error, TypeError, UnicodeDecodeError) as error:
        pytest.fail(f"caBundle placeholder is not base64 text: {error}")
    assert CA_PLACEHOLDER_HINT in decoded, "the placeholder must say how to replace it"
    assert CA_PLACEHOLDER_HINT in README.read_text(encoding="utf-8")


def _readme_block(readme: str, *, start: str) -> str:
    """The body of the heredoc in README.md that begins with ``start``."""
    match = re.search(rf"^( *){re.escape(start)}\n(.*?)^\1EOF$", readme, re.MULTILINE | re.DOTALL)
    if match is None:
        pytest.fail(f"README.md has no heredoc starting with {start!r}")
    return textwrap.dedent(match.group(2))


def test_documented_ca_bundle_overlay_fills_both_webhooks(
    base: tuple[Manifest, ...], tmp_path: Path
) -> None:
    readme = README.read_text(encoding="utf-8")
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    kustomization = _readme_block(readme, start="cat > my-cluster/kustomization.yaml <<'EOF'")
    # The README's overlay sits next to deploy/ in the repository root.
    relative_base = os.path.relpath(BASE, overlay)
    assert "../deploy/webhooks" in kustomization
    (overlay / "kustomization.yaml").write_text(
        kustomization.replace("../deploy/webhooks", relative_base), encoding="utf-8"
    )
    ca_bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\ntest\n").decode()
    patch = _readme_block(readme, start="cat > my-cluster/ca-bundle.yaml <<EOF")
    assert "${CA_BUNDLE}" in patch
    (overlay / "ca-bundle.yaml").write_text(patch.replace("${CA_BUNDLE}", ca_bundle), "utf-8")

    rendered = {identity(obj): obj for obj in render_with_kubectl(overlay)}

    expected = {identity(m.obj): m.obj for m in base}
    for config, webhook in _webhook_configs(base):
        webhook["clientConfig"]["caBundle"] = ca_bundle
        expected[identity(config.obj)] = config.obj
    assert rendered == expected, "the overlay must change the two caBundles and nothing else"


# --------------------------------------------------------------------------- deployment


def test_deployment_runs_one_replica_of_the_pinned_image(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    # The base's in-memory ledger is exact only within one process.
    assert deployment.obj["spec"].get("replicas") == 1, "the base runs exactly one replica"
    container = main_container(deployment)
    assert container.get("image") == IMAGE, "keep the pinned image; overlays override it"
    assert container.get("command") == ["tenantgate"], "the container runs the tenantgate CLI"
    assert container.get("args") == SERVE_ARGS, f"serve arguments differ from {SERVE_ARGS}"


def test_deployment_selector_selects_its_pods(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    labels = deployment.obj["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment.obj["spec"]["selector"], labels), (
        f"{deployment.ref}: spec.selector does not select its own pod template"
    )
    for kind in ("Service", "PodDisruptionBudget"):
        manifest = find(base, kind, NAME)
        selector = manifest.obj["spec"]["selector"]
        # A Service selector is a bare label map; a PDB's is a LabelSelector.
        label_selector = selector if "matchLabels" in selector else {"matchLabels": selector}
        assert selects(label_selector, labels), f"{manifest.ref} does not select the webhook pods"


@pytest.mark.parametrize(
    "container_name", [name for name, _ in all_containers(find(_load_base(), "Deployment", NAME))]
)
def test_container_is_hardened(base: tuple[Manifest, ...], container_name: str) -> None:
    deployment = find(base, "Deployment", NAME)
    container = dict(all_containers(deployment))[container_name]
    spec = pod_spec(deployment)
    pod_context = spec.get("securityContext", {})
    context = container.get("securityContext", {})
    where = f"container {container_name}"

    def effective(field: str) -> Any:
        return context.get(field, pod_context.get(field))

    assert effective("runAsNonRoot") is True, f"{where}: runAsNonRoot must be true"
    assert effective("runAsUser") not in (None, 0), f"{where}: runAsUser must be a non-root uid"
    assert context.get("allowPrivilegeEscalation") is False, (
        f"{where}: allowPrivilegeEscalation must be false"
    )
    assert context.get("readOnlyRootFilesystem") is True, (
        f"{where}: readOnlyRootFilesystem must be true"
    )
    assert context.get("privileged") in (None, False), f"{where}: must not be privileged"
    capabilities = context.get("capabilities", {})
    assert capabilities.get("drop") == ["ALL"], f"{where}: capabilities.drop must be [ALL]"
    assert not capabilities.get("add"), f"{where}: must not add capabilities"
    assert (effective("seccompProfile") or {}).get("type") == "RuntimeDefault", (
        f"{where}: seccompProfile must be RuntimeDefault"
    )
    resources = container.get("resources", {})
    for bound in ("requests", "limits"):
        missing = {"cpu", "memory"} - set(resources.get(bound, {}))
        assert not missing, f"{where}: resources.{bound} lacks {sorted(missing)}"


def test_pod_shares_nothing_with_the_node(base: tuple[Manifest, ...]) -> None:
    spec = pod_spec(find(base, "Deployment", NAME))
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(field), f"pod spec sets {field}"
    host_paths = [v["name"] for v in spec.get("volumes", []) if "hostPath" in v]
    assert host_paths == [], f"hostPath volumes: {host_paths}"
    pod_seccomp = spec.get("securityContext", {}).get("seccompProfile", {})
    assert pod_seccomp.get("type") == "RuntimeDefault", "pod seccompProfile must be RuntimeDefault"


@pytest.mark.parametrize(
    ("probe", "path"),
    [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")],
)
def test_probe_hits_the_plain_http_health_port(
    base: tuple[Manifest, ...], probe: str, path: str
) -> None:
    container = main_container(find(base, "Deployment", NAME))
    health_port = listening_port(container, flag="--metrics-port", setting="metrics_port")
    http_get = container.get(probe, {}).get("httpGet")
    assert http_get is not None, f"{probe} must be an httpGet probe"
    assert http_get.get("path") == path, f"{probe} must GET {path}"
    assert http_get.get("scheme", "HTTP") == "HTTP", f"{probe}: the health port is plain HTTP"
    port = container_port(container, http_get["port"])
    assert port == health_port, f"{probe} probes port {port}, health is served on {health_port}"


def test_service_exposes_metrics_on_the_health_port(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    health_port = listening_port(
        main_container(deployment), flag="--metrics-port", setting="metrics_port"
    )
    service = find(base, "Service", NAME)
    assert service_target(service, deployment, port=8080) == health_port


def test_port_names_are_valid_service_names(base: tuple[Manifest, ...]) -> None:
    # IANA_SVC_NAME, as the API server validates port names (the schema does not).
    pattern = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    deployment = find(base, "Deployment", NAME)
    service = find(base, "Service", NAME)
    ports = [*main_container(deployment).get("ports", []), *service.obj["spec"]["ports"]]
    for port in ports:
        name = port.get("name", "")
        assert pattern.match(name), f"port name {name!r} is not a valid IANA service name"
        assert len(name) <= 15, f"port name {name!r} is longer than 15 characters"
        assert "--" not in name, f"port name {name!r} contains '--'"
        assert re.search("[a-z]", name), f"port name {name!r} has no letter"


def _mount(container: Obj, volume: str) -> Obj:
    mounts = [m for m in container.get("volumeMounts", []) if m.get("name") == volume]
    if len(mounts) != 1:
        pytest.fail(f"container {container.get('name')!r} must mount volume {volume!r} once")
    mount: Obj = mounts[0]
    return mount


def _volume(spec: Obj, predicate_key: str, name: str) -> Obj:
    for volume in spec.get("volumes", []):
        source = volume.get(predicate_key) or {}
        if source.get("secretName", source.get("name")) == name:
            found: Obj = volume
            return found
    pytest.fail(f"the pod has no {predicate_key} volume for {name!r}")


def test_certificates_come_read_only_from_the_tls_secret(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    container = main_container(deployment)
    volume = _volume(pod_spec(deployment), "secret", TLS_SECRET)
    items = volume["secret"].get("items", [])
    assert {item["key"] for item in items} == TLS_SECRET_KEYS, (
        f"mount exactly the keys {sorted(TLS_SECRET_KEYS)} of Secret {TLS_SECRET}"
    )
    assert all(item["key"] == item["path"] for item in items), "keep the Secret's key names"
    mount = _mount(container, volume["name"])
    assert mount.get("readOnly") is True, "the certificate mount must be read-only"
    # subPath mounts are never updated by the kubelet: rotation would need a restart.
    assert "subPath" not in mount, "mount the Secret as a directory so rotation reaches the pod"
    assert mount["mountPath"] == CERT_DIR
    assert arg_value(container["args"], "--cert-dir") == mount["mountPath"]


def test_config_comes_read_only_from_the_generated_config_map(
    base: tuple[Manifest, ...],
) -> None:
    deployment = find(base, "Deployment", NAME)
    container = main_container(deployment)
    config_map = find(base, "ConfigMap", CONFIG_MAP)
    generator_options = _kustomization()["configMapGenerator"][0].get("options", {})
    assert generator_options.get("disableNameSuffixHash") is True, (
        "a hashed name would roll the pods on every config edit instead of hot reload"
    )
    volume = _volume(pod_spec(deployment), "configMap", CONFIG_MAP)
    mount = _mount(container, volume["name"])
    assert mount.get("readOnly") is True, "the config mount must be read-only"
    assert "subPath" not in mount, "mount the ConfigMap as a directory so edits reach the pod"
    config_path = arg_value(container["args"], "--config")
    assert config_path is not None
    directory, _, key = config_path.rpartition("/")
    assert directory == mount["mountPath"] == CONFIG_DIR
    assert key in config_map.obj["data"], f"ConfigMap {CONFIG_MAP} has no key {key!r}"


def test_tmp_is_a_writable_empty_dir(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    mounts = {m["mountPath"]: m for m in main_container(deployment).get("volumeMounts", [])}
    assert "/tmp" in mounts, "the root filesystem is read-only: mount an emptyDir at /tmp"
    assert not mounts["/tmp"].get("readOnly")
    volumes = {v["name"]: v for v in pod_spec(deployment).get("volumes", [])}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


def test_replicas_prefer_different_nodes(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    labels = deployment.obj["spec"]["template"]["metadata"]["labels"]
    anti = pod_spec(deployment).get("affinity", {}).get("podAntiAffinity", {})
    terms = [
        *anti.get("requiredDuringSchedulingIgnoredDuringExecution", []),
        *(
            w["podAffinityTerm"]
            for w in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
        ),
    ]
    spread = [
        term
        for term in terms
        if term.get("topologyKey") == "kubernetes.io/hostname"
        and selects(term.get("labelSelector", {}), labels)
    ]
    assert spread, "podAntiAffinity must keep replicas on different hostnames"


def test_shutdown_fits_in_the_termination_grace_period(base: tuple[Manifest, ...]) -> None:
    deployment = find(base, "Deployment", NAME)
    container = main_container(deployment)
    grace = pod_spec(deployment).get("terminationGracePeriodSeconds", 30)
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
    server_grace = Settings.model_fields["shutdown_grace_seconds"].default
    server_delay = Settings.model_fields["shutdown_delay_seconds"].default
    needed = pre_stop.get("seconds", 0) + server_delay + server_grace
    assert grace >= needed, (
        f"terminationGracePeriodSeconds {grace} < preStop sleep + server shutdown delay "
        f"+ shutdown grace {needed}"
    )


def test_disruption_budget_never_blocks_a_drain_at_the_base_replica_count(
    base: tuple[Manifest, ...],
) -> None:
    replicas = find(base, "Deployment", NAME).obj["spec"]["replicas"]
    budget = find(base, "PodDisruptionBudget", NAME).obj["spec"]
    if "maxUnavailable" in budget:
        allowed = scaled(budget["maxUnavailable"], total=replicas)
    else:
        allowed = replicas - scaled(budget.get("minAvailable", 0), total=replicas)
    assert allowed >= 1, f"with {replicas} replica(s) the PodDisruptionBudget allows no eviction"


# --------------------------------------------------------------------------- RBAC


def test_rbac_grants_exactly_the_least_privilege_set(base: tuple[Manifest, ...]) -> None:
    role = find(base, "ClusterRole", NAME)
    granted: set[tuple[str, str, str]] = set()
    for rule in role.obj.get("rules", []):
        assert not rule.get("resourceNames"), f"{role.ref}: unexpected resourceNames"
        assert not rule.get("nonResourceURLs"), f"{role.ref}: unexpected nonResourceURLs"
        granted.update(
            (group, resource, verb)
            for group in rule.get("apiGroups", [])
            for resource in rule.get("resources", [])
            for verb in rule.get("verbs", [])
        )
    assert granted - LEAST_PRIVILEGE == set(), f"{role.ref} grants more than the code uses"
    assert LEAST_PRIVILEGE - granted == set(), f"{role.ref} lacks what the watches need"
    extra = [
        m.ref for m in base if m.kind in {"Role", "RoleBinding", "ClusterRole"} and m is not role
    ]
    assert extra == [], f"the base grants nothing else: {extra}"


def test_rbac_is_bound_to_the_webhook_service_account(base: tuple[Manifest, ...]) -> None:
    account = find(base, "ServiceAccount", NAME)
    binding = find(base, "ClusterRoleBinding", NAME).obj
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account.name, "namespace": account.namespace}
    ]
    spec = pod_spec(find(base, "Deployment", NAME))
    assert spec.get("serviceAccountName") == account.name
    assert spec.get("automountServiceAccountToken") is not False, "the watches need a token"


# --------------------------------------------------------------------------- priority classes


def _priority_classes(manifests: Sequence[Manifest]) -> dict[str, Obj]:
    return {m.name: m.obj for m in manifests if m.kind == "PriorityClass"}


@pytest.mark.parametrize("name", sorted(_priority_classes(_load_base())))
def test_priority_class_is_explicit_and_never_a_global_default(
    base: tuple[Manifest, ...], name: str
) -> None:
    spec = find(base, "PriorityClass", name).obj
    assert not name.startswith(BUILTIN_PRIORITY_CLASS_PREFIX), f"{name}: system- is reserved"
    # A global default would silently reprioritise every pod in the cluster.
    assert spec.get("globalDefault") is False, f"PriorityClass {name} must not be globalDefault"
    assert spec.get("preemptionPolicy"), f"PriorityClass {name}: state preemptionPolicy"
    assert spec.get("description"), f"PriorityClass {name} needs a description"


def test_tier_classes_are_shipped_and_burst_is_preempted_first(
    base: tuple[Manifest, ...],
) -> None:
    guaranteed = find(base, "PriorityClass", GUARANTEED_CLASS).obj
    burst = find(base, "PriorityClass", BURST_CLASS).obj
    assert burst["value"] < guaranteed["value"], (
        f"{BURST_CLASS} ({burst['value']}) must rank below {GUARANTEED_CLASS} "
        f"({guaranteed['value']}) so the scheduler preempts burst pods first"
    )
    assert "preemptible burst capacity" in burst.get("description", ""), (
        f"PriorityClass {BURST_CLASS}: the description must say it is preemptible burst capacity"
    )


def test_webhook_pods_cannot_be_preempted_by_pods_they_admit(
    base: tuple[Manifest, ...],
) -> None:
    spec = pod_spec(find(base, "Deployment", NAME))
    assert spec.get("priorityClassName") == WEBHOOK_PRIORITY_CLASS
    classes = _priority_classes(base)
    webhook = classes.pop(WEBHOOK_PRIORITY_CLASS)
    assert (webhook["value"], webhook["preemptionPolicy"]) == WEBHOOK_PRIORITY
    # Preemption needs a strictly lower victim: an equal value is enough.
    outranking = sorted(name for name, obj in classes.items() if obj["value"] > webhook["value"])
    assert outranking == [], f"pods of {outranking} could preempt the webhook"


def _config() -> Obj:
    config = yaml.safe_load(CONFIG_COPY.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        pytest.fail(f"{CONFIG_COPY.relative_to(REPO)} is not a YAML mapping")
    return config


def _classes_config_refers_to(config: Mapping[str, Any]) -> dict[str, str]:
    """Every priority class name the config assigns, with where it is named."""
    named: dict[str, str] = {}
    if config.get("burstPriorityClass"):
        named[config["burstPriorityClass"]] = "burstPriorityClass"
    for profile, spec in (config.get("profiles") or {}).items():
        if spec and spec.get("priorityClassName"):
            named[spec["priorityClassName"]] = f"profiles.{profile}.priorityClassName"
    for tenant, spec in (config.get("tenants") or {}).items():
        classes = (spec or {}).get("priorityClasses") or {}
        if classes.get("guaranteed"):
            named[classes["guaranteed"]] = f"tenants.{tenant}.priorityClasses.guaranteed"
        for name in classes.get("allowed") or []:
            named[name] = f"tenants.{tenant}.priorityClasses.allowed"
    return named


def test_priority_classes_match_the_config_table(base: tuple[Manifest, ...]) -> None:
    table = {
        name: (spec.get("value"), spec.get("preemptionPolicy", "PreemptLowerPriority"))
        for name, spec in (_config().get("priorityClasses") or {}).items()
        if not name.startswith(BUILTIN_PRIORITY_CLASS_PREFIX)
    }
    shipped = {
        name: (obj.get("value"), obj.get("preemptionPolicy", "PreemptLowerPriority"))
        for name, obj in _priority_classes(base).items()
        if name != WEBHOOK_PRIORITY_CLASS
    }
    missing = sorted(set(table) - set(shipped))
    assert missing == [], f"the config declares priority classes the base does not ship: {missing}"
    unused = sorted(set(shipped) - set(table))
    assert unused == [], f"the base ships priority classes the config does not declare: {unused}"
    for name, declared in table.items():
        assert shipped[name] == declared, (
            f"PriorityClass {name}: manifest has (value, preemptionPolicy) {shipped[name]}, "
            f"the config table says {declared}; the webhook writes the table's values into pods"
        )


def test_every_priority_class_the_config_assigns_is_shipped(base: tuple[Manifest, ...]) -> None:
    shipped = _priority_classes(base)
    for name, where in sorted(_classes_config_refers_to(_config()).items()):
        if name.startswith(BUILTIN_PRIORITY_CLASS_PREFIX):
            continue
        assert name in shipped, f"{CONFIG_COPY.name} {where} names {name}, which the base lacks"


def test_config_uses_the_shipped_burst_class(base: tuple[Manifest, ...]) -> None:
    burst = _config().get("burstPriorityClass")
    assert burst == BURST_CLASS, f"burstPriorityClass is {burst!r}; the base ships {BURST_CLASS}"


# --------------------------------------------------------------------------- what stays out of git


def test_the_readme_keeps_the_ca_key_out_of_the_repository() -> None:
    readme = README.read_text(encoding="utf-8")
    assert "--dir ./" not in readme, "certs go outside the repository, not in ./"
    assert 'CERT_DIR="$HOME/tenantgate-certs"' in readme
    assert "never be committed" in readme
    ignored = subprocess.run(
        [
            "git",
            "check-ignore",
            "--no-index",
            "my-cluster/kustomization.yaml",
            "tenantgate-certs/ca.key",
            "elsewhere/ca.key",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ignored.stdout.split() == [
        "my-cluster/kustomization.yaml",
        "tenantgate-certs/ca.key",
        "elsewhere/ca.key",
    ]


def test_the_over_share_class_is_shipped_below_burst_and_never_preempts(
    base: tuple[Manifest, ...],
) -> None:
    burst = find(base, "PriorityClass", BURST_CLASS).obj
    over = find(base, "PriorityClass", "tenant-burst-over-share").obj
    assert over["value"] < burst["value"], "over-share borrowers must be preempted first"
    assert over["preemptionPolicy"] == "Never"
    assert _config().get("overShareBurstPriorityClass", "tenant-burst-over-share") == (
        "tenant-burst-over-share"
    )
