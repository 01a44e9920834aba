"""Admission webhook configurations: defaults, validation, and which requests a webhook gets.

Mirrors ``admissionregistration.k8s.io/v1`` and the matchers of the real API server
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/predicates``): rules (operations,
apiGroups, apiVersions, resources with subresources, scope), ``namespaceSelector``,
``objectSelector`` and ``matchPolicy``.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from devapi import errors
from devapi.errors import FieldError
from devapi.selectors import (
    EVERYTHING,
    LabelSelector,
    SelectorError,
    label_selector_from_object,
)
from devapi.types import JSONObject

logger = logging.getLogger(__name__)

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT", "*")
SIDE_EFFECTS_V1 = ("None", "NoneOnDryRun")
SIDE_EFFECTS_ALL = ("Unknown", "None", "Some", "NoneOnDryRun")
DEFAULT_TIMEOUT_SECONDS = 10
# Webhooks never see requests on webhook configurations: a broken webhook could otherwise
# lock everyone out of fixing it (rules.IsExemptAdmissionConfigurationResource).
EXEMPT_RESOURCES = frozenset(
    {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    }
)
_WEBHOOK_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){2,}")


@dataclass(frozen=True)
class Rule:
    operations: tuple[str, ...]
    api_groups: tuple[str, ...]
    api_versions: tuple[str, ...]
    resources: tuple[str, ...]
    scope: str

    def matches(self, request: RequestAttributes, *, group: str, version: str, plural: str) -> bool:
        if "*" not in self.operations and request.operation not in self.operations:
            return False
        if "*" not in self.api_groups and group not in self.api_groups:
            return False
        if "*" not in self.api_versions and version not in self.api_versions:
            return False
        if not self._resource_matches(plural, request.subresource):
            return False
        return self._scope_matches(request, group=group, plural=plural)

    def _resource_matches(self, plural: str, subresource: str) -> bool:
        for entry in self.resources:
            resource, _, sub = entry.partition("/")
            if (resource in ("*", plural)) and (sub == "*" or sub == subresource):
                return True
        return False

    def _scope_matches(self, request: RequestAttributes, *, group: str, plural: str) -> bool:
        if self.scope == "*":
            return True
        is_namespace = group == "" and plural == "namespaces"
        if self.scope == "Namespaced":
            return not is_namespace and request.namespace != ""
        return is_namespace or request.namespace == ""


@dataclass(frozen=True)
class ServiceReference:
    namespace: str
    name: str
    path: str
    port: int


@dataclass(frozen=True)
class Webhook:
    """One webhook of a configuration, with every default applied."""

    configuration: str
    index: int
    name: str
    mutating: bool
    url: str | None
    service: ServiceReference | None
    ca_bundle: bytes
    rules: tuple[Rule, ...]
    failure_policy: str
    match_policy: str
    namespace_selector: LabelSelector
    object_selector: LabelSelector
    side_effects: str
    timeout_seconds: int
    admission_review_versions: tuple[str, ...]
    reinvocation_policy: str
    match_conditions: int

    @property
    def uid(self) -> str:
        """How the reinvocation bookkeeping names this webhook (as the real server does)."""
        return f"{self.configuration}/{self.name}/{self.index}"


@dataclass(frozen=True)
class RequestAttributes:
    """What the matchers look at in a request."""

    operation: str
    group: str
    version: str
    plural: str
    kind: str
    subresource: str
    namespace: str
    name: str
    object: JSONObject | None
    old_object: JSONObject | None


def default_webhooks(configuration: JSONObject, *, mutating: bool) -> None:
    """Fill the v1 defaults in place (failurePolicy Fail, matchPolicy Equivalent, ...)."""
    for webhook in configuration.get("webhooks") or []:
        if not isinstance(webhook, dict):
            continue
        webhook.setdefault("failurePolicy", "Fail")
        webhook.setdefault("matchPolicy", "Equivalent")
        webhook.setdefault("namespaceSelector", {})
        webhook.setdefault("objectSelector", {})
        webhook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
        if mutating:
            webhook.setdefault("reinvocationPolicy", "Never")
        client = webhook.get("clientConfig")
        if isinstance(client, dict) and isinstance(client.get("service"), dict):
            client["service"].setdefault("port", 443)
        for rule in webhook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def validate_configuration(
    configuration: JSONObject, *, mutating: bool, strict_side_effects: bool = True
) -> list[FieldError]:
    problems: list[FieldError] = []
    webhooks = configuration.get("webhooks")
    if webhooks is None:
        return problems
    if not isinstance(webhooks, list):
        return [errors.invalid("webhooks", str(webhooks), "must be a list")]
    seen: set[str] = set()
    for i, webhook in enumerate(webhooks):
        path = f"webhooks[{i}]"
        if not isinstance(webhook, dict):
            problems.append(errors.invalid(path, str(webhook), "must be an object"))
            continue
        name = webhook.get("name")
        if not isinstance(name, str) or not name:
            problems.append(errors.required(f"{path}.name"))
        elif not _WEBHOOK_NAME.fullmatch(name):
            problems.append(
                errors.invalid(
                    f"{path}.name",
                    name,
                    "should be a domain with at least three segments separated by dots",
                )
            )
        elif name in seen:
            problems.append(errors.duplicate(f"{path}.name", name))
        if isinstance(name, str):
            seen.add(name)
        problems += _validate_webhook(webhook, path, mutating=mutating, strict=strict_side_effects)
    return problems


def _validate_webhook(
    webhook: JSONObject, path: str, *, mutating: bool, strict: bool
) -> list[FieldError]:
    problems: list[FieldError] = []
    versions = webhook.get("admissionReviewVersions")
    if not isinstance(versions, list) or not versions:
        problems.append(
            errors.required(f"{path}.admissionReviewVersions", "must specify one of v1, v1beta1")
        )
    elif not any(v in ("v1", "v1beta1") for v in versions):
        problems.append(
            errors.invalid(
                f"{path}.admissionReviewVersions",
                str(versions),
                "must include at least one of v1, v1beta1",
            )
        )
    side_effects = webhook.get("sideEffects")
    allowed = SIDE_EFFECTS_V1 if strict else SIDE_EFFECTS_ALL
    if side_effects is None:
        problems.append(errors.required(f"{path}.sideEffects"))
    elif side_effects not in allowed:
        problems.append(errors.not_supported(f"{path}.sideEffects", side_effects, allowed))
    for field, values in (
        ("failurePolicy", ("Fail", "Ignore")),
        ("matchPolicy", ("Equivalent", "Exact")),
    ):
        if webhook.get(field) not in values:
            problems.append(errors.not_supported(f"{path}.{field}", webhook.get(field), values))
    if mutating and webhook.get("reinvocationPolicy") not in ("IfNeeded", "Never"):
        problems.append(
            errors.not_supported(
                f"{path}.reinvocationPolicy",
                webhook.get("reinvocationPolicy"),
                ("IfNeeded", "Never"),
            )
        )
    timeout = webhook.get("timeoutSeconds")
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
        problems.append(
            errors.invalid(
                f"{path}.timeoutSeconds",
                timeout,
                "the timeout value must be between 1 and 30 seconds",
            )
        )
    problems += _validate_client_config(webhook.get("clientConfig"), f"{path}.clientConfig")
    for field in ("namespaceSelector", "objectSelector"):
        try:
            label_selector_from_object(webhook.get(field), where=f"{path}.{field}")
        except SelectorError as err:
            problems.append(errors.invalid(f"{path}.{field}", "", str(err)))
    rules = webhook.get("rules")
    if rules is not None and not isinstance(rules, list):
        problems.append(errors.invalid(f"{path}.rules", str(rules), "must be a list"))
    for j, rule in enumerate(rules or []):
        problems += _validate_rule(rule, f"{path}.rules[{j}]")
    return problems


def _validate_client_config(client: Any, path: str) -> list[FieldError]:
    if not isinstance(client, dict):
        return [errors.required(path)]
    url, service = client.get("url"), client.get("service")
    if (url is None) == (service is None):
        return [errors.required(path, "exactly one of url or service is required")]
    problems: list[FieldError] = []
    if url is not None:
        parts = urlsplit(str(url))
        if parts.scheme != "https":
            problems.append(
                errors.invalid(f"{path}.url", url, "'https' is the only allowed URL scheme")
            )
        if not parts.hostname:
            problems.append(errors.invalid(f"{path}.url", url, "host must be specified"))
        if parts.fragment or parts.query:
            problems.append(
                errors.invalid(
                    f"{path}.url", url, "fragments and query parameters are not permitted"
                )
            )
    elif isinstance(service, dict):
        for field in ("namespace", "name"):
            if not isinstance(service.get(field), str) or not service.get(field):
                problems.append(errors.required(f"{path}.service.{field}"))
        port = service.get("port", 443)
        if not isinstance(port, int) or not 1 <= port <= 65535:
            problems.append(errors.invalid(f"{path}.service.port", port, "port is not valid"))
        svc_path = service.get("path")
        if svc_path is not None and (not isinstance(svc_path, str) or not svc_path.startswith("/")):
            problems.append(
                errors.invalid(f"{path}.service.path", svc_path, "must start with a '/'")
            )
    else:
        problems.append(errors.invalid(f"{path}.service", str(service), "must be an object"))
    bundle = client.get("caBundle")
    if bundle is not None and (not isinstance(bundle, str) or _decode_bundle(bundle) is None):
        problems.append(errors.invalid(f"{path}.caBundle", "", "must be base64 encoded"))
    return problems


def _validate_rule(rule: Any, path: str) -> list[FieldError]:
    if not isinstance(rule, dict):
        return [errors.invalid(path, str(rule), "must be an object")]
    problems: list[FieldError] = []
    for field in ("operations", "apiGroups", "apiVersions", "resources"):
        values = rule.get(field)
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) for v in values)
        ):
            problems.append(errors.required(f"{path}.{field}"))
    for op in rule.get("operations") or []:
        if op not in OPERATIONS:
            problems.append(errors.not_supported(f"{path}.operations", op, OPERATIONS))
    if rule.get("scope", "*") not in ("Cluster", "Namespaced", "*"):
        problems.append(
            errors.not_supported(f"{path}.scope", rule.get("scope"), ("Cluster", "Namespaced", "*"))
        )
    return problems


def _decode_bundle(bundle: str) -> bytes | None:
    try:
        return base64.b64decode(bundle, validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_configuration(configuration: JSONObject, *, mutating: bool) -> list[Webhook]:
    """The webhooks of a stored (defaulted and validated) configuration."""
    name = str((configuration.get("metadata") or {}).get("name") or "")
    result: list[Webhook] = []
    for index, hook in enumerate(configuration.get("webhooks") or []):
        client = hook.get("clientConfig") or {}
        service = client.get("service")
        rules = tuple(
            Rule(
                operations=tuple(r.get("operations") or ()),
                api_groups=tuple(r.get("apiGroups") or ()),
                api_versions=tuple(r.get("apiVersions") or ()),
                resources=tuple(r.get("resources") or ()),
                scope=str(r.get("scope") or "*"),
            )
            for r in hook.get("rules") or []
        )
        result.append(
            Webhook(
                configuration=name,
                index=index,
                name=str(hook.get("name")),
                mutating=mutating,
                url=client.get("url"),
                service=ServiceReference(
                    namespace=str(service.get("namespace")),
                    name=str(service.get("name")),
                    path=str(service.get("path") or "/"),
                    port=int(service.get("port") or 443),
                )
                if isinstance(service, dict)
                else None,
                ca_bundle=_decode_bundle(str(client.get("caBundle") or "")) or b"",
                rules=rules,
                failure_policy=str(hook.get("failurePolicy") or "Fail"),
                match_policy=str(hook.get("matchPolicy") or "Equivalent"),
                namespace_selector=_selector(hook.get("namespaceSelector")),
                object_selector=_selector(hook.get("objectSelector")),
                side_effects=str(hook.get("sideEffects") or "Unknown"),
                timeout_seconds=int(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS),
                admission_review_versions=tuple(hook.get("admissionReviewVersions") or ()),
                reinvocation_policy=str(hook.get("reinvocationPolicy") or "Never"),
                match_conditions=len(hook.get("matchConditions") or []),
            )
        )
    return result


def _selector(value: Any) -> LabelSelector:
    try:
        return label_selector_from_object(value, where="selector")
    except SelectorError:  # pragma: no cover - validated before it was stored
        return EVERYTHING


@dataclass(frozen=True)
class Invocation:
    """A webhook to call and the resource/kind it asked for (an equivalent one under
    ``matchPolicy: Equivalent``)."""

    webhook: Webhook
    group: str
    version: str
    plural: str
    kind: str


def should_call(
    webhook: Webhook,
    request: RequestAttributes,
    *,
    namespace_labels: Mapping[str, str] | None,
    equivalents: Sequence[tuple[str, str, str, str]],
) -> Invocation | None:
    """The invocation if ``webhook`` applies to ``request``, else None.

    ``namespace_labels`` are the labels of the request's namespace (None for cluster-scoped
    requests); ``equivalents`` lists (group, version, plural, kind) of the same resource in
    other served versions, for ``matchPolicy: Equivalent``.
    """
    if (request.group, request.plural) in EXEMPT_RESOURCES:
        return None
    if not _namespace_matches(webhook, request, namespace_labels):
        return None
    if not _object_matches(webhook, request):
        return None
    for rule in webhook.rules:
        if rule.matches(
            request, group=request.group, version=request.version, plural=request.plural
        ):
            return Invocation(webhook, request.group, request.version, request.plural, request.kind)
    if webhook.match_policy == "Equivalent":
        for rule in webhook.rules:
            for group, version, plural, kind in equivalents:
                if (group, version, plural) == (request.group, request.version, request.plural):
                    continue
                if rule.matches(request, group=group, version=version, plural=plural):
                    return Invocation(webhook, group, version, plural, kind)
    return None


def _namespace_matches(
    webhook: Webhook, request: RequestAttributes, namespace_labels: Mapping[str, str] | None
) -> bool:
    selector = webhook.namespace_selector
    if selector.empty:
        return True
    if request.group == "" and request.plural == "namespaces" and request.subresource == "":
        # A namespace's own labels decide for requests on namespace objects.
        obj = request.object if request.object is not None else request.old_object
        return selector.matches(_labels(obj))
    if namespace_labels is None:
        return True  # cluster-scoped: the namespace selector never excludes
    return selector.matches(namespace_labels)


def _object_matches(webhook: Webhook, request: RequestAttributes) -> bool:
    selector = webhook.object_selector
    if selector.empty:
        return True
    for obj in (request.object, request.old_object):
        if obj is not None and selector.matches(_labels(obj)):
            return True
    return False


def _labels(obj: JSONObject | None) -> dict[str, str]:
    if not obj:
        return {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (
        {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {}
    )
