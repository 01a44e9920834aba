"""What each kind does on create, update, status update and delete (the registry strategies).

Defaulting, server-set fields, validation and graceful deletion follow the real API server's
strategies for pods, namespaces, priority classes, CRDs, webhook configurations and custom
resources, as far as tenantgate and ``kubectl`` can observe them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from classifier.quantities import Quantity, QuantityError
from devapi import errors, gates, meta
from devapi.errors import FieldError
from devapi.jsonvalues import obj as _obj
from devapi.jsonvalues import objects as _objects
from devapi.limitranger import default_limit_range, validate_limit_range
from devapi.patching import (
    GENERIC_PATCH_META,
    NAMESPACE_PATCH_META,
    POD_PATCH_META,
    WEBHOOK_CONFIGURATION_PATCH_META,
    PatchMeta,
)
from devapi.poddefaults import canonical_quantity, default_pod_resources
from devapi.resources import (
    CRDS,
    LIMIT_RANGES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    RUNTIME_CLASSES,
    VALIDATING_WEBHOOKS,
    ResourceType,
)
from devapi.runtimeclass import validate_runtime_class, validate_runtime_class_update
from devapi.store import clone
from devapi.types import JSONObject
from devapi.webhooks import default_webhooks, validate_configuration

# apimachinery/pkg/api/resource/quantity.go: ErrFormatWrong, the text a decoder reports for a
# malformed quantity.
QUANTITY_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
POD_RESIZE_FORBIDDEN = "only cpu and memory resources are mutable"
SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}
HIGHEST_USER_PRIORITY = 1_000_000_000
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Strategy:
    """Generic behaviour; kinds override what differs."""

    rt: ResourceType

    @property
    def patch_meta(self) -> PatchMeta | None:
        return GENERIC_PATCH_META

    def check_decodable(self, obj: JSONObject) -> None:
        """Raise 400 for what the real server fails to decode (before any admission)."""

    def default(self, obj: JSONObject) -> None:
        """Fill defaults, as decoding does on the real server (and after every webhook patch)."""

    def check_name(self, name: str) -> str | None:
        return meta.check_dns1123_subdomain(name)

    def prepare_for_create(self, obj: JSONObject) -> None:
        if self.rt.tracks_generation:
            meta.metadata(obj)["generation"] = 1
        if self.rt.has_status():
            # Status is written through the status subresource, never by a create.
            obj.pop("status", None)

    def validate(self, obj: JSONObject) -> list[FieldError]:
        return meta.validate_metadata(
            obj, namespaced=self.rt.namespaced, check_name=self.check_name
        )

    def prepare_for_update(self, new: JSONObject, old: JSONObject) -> None:
        if self.rt.has_status():
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        generation = (old.get("metadata") or {}).get("generation")
        if self.rt.tracks_generation:
            bumped = self.spec_changed(new, old)
            meta.metadata(new)["generation"] = (generation or 0) + (1 if bumped else 0)
        elif generation is not None:
            meta.metadata(new)["generation"] = generation

    def spec_changed(self, new: JSONObject, old: JSONObject) -> bool:
        skip = {"metadata", "status"}
        return {k: v for k, v in new.items() if k not in skip} != {
            k: v for k, v in old.items() if k not in skip
        }

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        return self.validate(new)

    def prepare_for_status_update(self, new: JSONObject, old: JSONObject) -> JSONObject:
        """The stored object after a status update: the old one with the new status."""
        result = clone(old)
        if "status" in new:
            result["status"] = clone(new["status"])
        else:
            result.pop("status", None)
        result["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get(
            "resourceVersion", ""
        )
        return result

    def field_value(self, obj: JSONObject, field: str) -> str:
        metadata = _obj(obj.get("metadata"))
        if field == "metadata.name":
            return str(metadata.get("name") or "")
        if field == "metadata.namespace":
            return str(metadata.get("namespace") or "")
        value: Any = obj
        for part in field.split("."):
            value = _obj(value).get(part)
        if isinstance(value, bool):
            return "true" if value else "false"
        return "" if value is None else str(value)

    def grace_period(self, obj: JSONObject, requested: int | None) -> int:
        """Seconds before a deleted object goes away; 0 deletes at once (unless finalizers)."""
        return 0


class PodStrategy(Strategy):
    @property
    def patch_meta(self) -> PatchMeta | None:
        return POD_PATCH_META

    def check_decodable(self, obj: JSONObject) -> None:
        for path, value in _pod_quantities(obj):
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise errors.bad_request(
                    'Pod in version "v1" cannot be handled as a Pod: '
                    f"{path}: quantities must be strings or numbers"
                )
            try:
                Quantity.parse(value)
            except QuantityError as err:
                raise errors.bad_request(
                    f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_FORMAT_WRONG}'
                ) from err

    def default(self, obj: JSONObject) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("enableServiceLinks", True)
        for field in ("containers", "initContainers"):
            for container in _objects(spec.get(field)):
                _default_container(container)
        default_pod_resources(obj)

    def prepare_for_create(self, obj: JSONObject) -> None:
        super().prepare_for_create(obj)
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj)}
        gates.apply_gated_condition(obj)

    def validate(self, obj: JSONObject) -> list[FieldError]:
        return self._validate_pod(obj) + gates.create_errors(obj)

    def _validate_pod(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [*problems, errors.required("spec")]
        containers = list(_objects(spec.get("containers")))
        if not containers:
            problems.append(errors.required("spec.containers"))
        seen: set[str] = set()
        for field in ("initContainers", "containers"):
            for i, container in enumerate(_objects(spec.get(field))):
                problems += _validate_container(container, f"spec.{field}[{i}]", seen)
        policy = spec.get("restartPolicy")
        if policy not in ("Always", "OnFailure", "Never"):
            problems.append(
                errors.not_supported("spec.restartPolicy", policy, ("Always", "OnFailure", "Never"))
            )
        return problems + gates.spec_errors(obj)

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        problems = self._validate_pod(new)
        if problems:
            return problems
        added_gates = gates.update_errors(new, old)
        if added_gates:
            return added_gates
        return _pod_update_errors(new, old)

    def spec_changed(self, new: JSONObject, old: JSONObject) -> bool:
        return new.get("spec") != old.get("spec")

    def prepare_for_status_update(self, new: JSONObject, old: JSONObject) -> JSONObject:
        result = super().prepare_for_status_update(new, old)
        status = result.get("status")
        if isinstance(status, dict):
            # The QoS class is computed from the spec; a status write cannot change it.
            status["qosClass"] = _obj(old.get("status")).get("qosClass", qos_class(old))
        return result

    def grace_period(self, obj: JSONObject, requested: int | None) -> int:
        spec = _obj(obj.get("spec"))
        period = requested
        if period is None:
            configured = spec.get("terminationGracePeriodSeconds")
            period = configured if isinstance(configured, int) else 30
        if not spec.get("nodeName"):
            return 0  # never scheduled: no kubelet has to stop anything
        if _obj(obj.get("status")).get("phase") in TERMINAL_PHASES:
            return 0
        return 1 if period < 0 else period


def _default_container(container: JSONObject) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = container.get("image")
    if isinstance(image, str) and "imagePullPolicy" not in container:
        container["imagePullPolicy"] = "Always" if _latest(image) else "IfNotPresent"
    for port in _objects(container.get("ports")):
        port.setdefault("protocol", "TCP")


def _latest(image: str) -> bool:
    if "@" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    return ":" not in last or last.endswith(":latest")


def _pod_quantities(obj: JSONObject) -> Iterator[tuple[str, Any]]:
    spec = _obj(obj.get("spec"))
    for field in ("containers", "initContainers"):
        for i, container in enumerate(_objects(spec.get(field))):
            resources = _obj(container.get("resources"))
            for kind in ("requests", "limits"):
                for name, value in _obj(resources.get(kind)).items():
                    yield f"spec.{field}[{i}].resources.{kind}[{name}]", value
    for kind in ("requests", "limits"):
        for name, value in _obj(_obj(spec.get("resources")).get(kind)).items():
            yield f"spec.resources.{kind}[{name}]", value
    for name, value in _obj(spec.get("overhead")).items():
        yield f"spec.overhead[{name}]", value


def _validate_container(container: JSONObject, path: str, seen: set[str]) -> list[FieldError]:
    problems: list[FieldError] = []
    name = container.get("name")
    if not isinstance(name, str) or not name:
        problems.append(errors.required(f"{path}.name"))
    else:
        why = meta.check_dns1123_label(name)
        if why:
            problems.append(errors.invalid(f"{path}.name", name, why))
        elif name in seen:
            problems.append(errors.duplicate(f"{path}.name", name))
        seen.add(name)
    if not isinstance(container.get("image"), str) or not container.get("image"):
        problems.append(errors.required(f"{path}.image"))
    resources = _obj(container.get("resources"))
    requests = _obj(resources.get("requests"))
    limits = _obj(resources.get("limits"))
    for kind, values in (("requests", requests), ("limits", limits)):
        for resource, value in sorted(values.items()):
            if Quantity.parse(value).sign() < 0:
                problems.append(
                    errors.invalid(
                        f"{path}.resources.{kind}[{resource}]",
                        str(value),
                        "must be greater than or equal to 0",
                    )
                )
    for resource, value in sorted(requests.items()):
        if resource in limits and Quantity.parse(value) > Quantity.parse(limits[resource]):
            problems.append(
                errors.invalid(
                    f"{path}.resources.requests",
                    str(value),
                    f"must be less than or equal to {resource} limit of {limits[resource]}",
                )
            )
    return problems


def qos_class(pod: JSONObject) -> str:
    """The pod's QoS class, computed as the real server does when it stores a pod."""
    spec = _obj(pod.get("spec"))
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    containers = [*_objects(spec.get("containers")), *_objects(spec.get("initContainers"))]
    for container in containers:
        resources = _obj(container.get("resources"))
        container_limits: set[str] = set()
        for name, value in _obj(resources.get("requests")).items():
            if name in ("cpu", "memory") and not Quantity.parse(value).is_zero():
                requests[name] = requests.get(name, Quantity.zero()) + Quantity.parse(value)
        for name, value in _obj(resources.get("limits")).items():
            if name in ("cpu", "memory") and not Quantity.parse(value).is_zero():
                container_limits.add(name)
                limits[name] = limits.get(name, Quantity.zero()) + Quantity.parse(value)
        if container_limits != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(requests.get(name) == limits.get(name) for name in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


def _pod_update_errors(new: JSONObject, old: JSONObject) -> list[FieldError]:
    new_spec = _obj(new.get("spec"))
    old_spec = clone(_obj(old.get("spec")))
    old_gates = gates.gate_names(old)
    comparable = clone(old_spec)
    for field in ("containers", "initContainers"):
        old_list = list(_objects(comparable.get(field)))
        new_list = list(_objects(new_spec.get(field)))
        if len(old_list) == len(new_list):
            for before, after in zip(old_list, new_list, strict=True):
                if "image" in after:
                    before["image"] = after["image"]
    for field in ("activeDeadlineSeconds", "schedulingGates"):
        if field in new_spec:
            comparable[field] = new_spec[field]
        else:
            comparable.pop(field, None)
    old_tolerations = list(_objects(old_spec.get("tolerations")))
    new_tolerations = list(_objects(new_spec.get("tolerations")))
    if new_tolerations and all(t in new_tolerations for t in old_tolerations):
        comparable["tolerations"] = new_tolerations
    grace = old_spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0 and new_spec.get("terminationGracePeriodSeconds") == 1:
        comparable["terminationGracePeriodSeconds"] = 1
    if old_gates:
        # Scheduling directives may still be added while a pod is gated.
        for field in ("nodeSelector", "affinity"):
            if field in new_spec:
                comparable[field] = new_spec[field]
    if comparable != new_spec:
        return [errors.forbidden("spec", POD_UPDATE_FORBIDDEN)]
    return []


def resized_pod(new: JSONObject, old: JSONObject) -> tuple[JSONObject, list[FieldError]]:
    """The stored pod after a ``resize``: only the cpu and memory (and resize policy) of
    containers and of sidecars (restartable init containers).

    ``pkg/registry/core/pod/strategy.go`` (``dropNonResizeUpdates``) keeps the resources of
    containers and init containers; ``validation.go`` (``ValidatePodResize``) refuses a change
    to a non-sidecar init container's resources.
    """
    result = clone(old)
    candidate = clone(_obj(new.get("spec")))
    pairs: list[tuple[str, int, JSONObject, JSONObject]] = []
    for field in ("containers", "initContainers"):
        old_containers = list(_objects(_obj(result.get("spec")).get(field)))
        new_containers = list(_objects(_obj(new.get("spec")).get(field)))
        if len(old_containers) != len(new_containers):
            return result, [errors.forbidden("spec", POD_RESIZE_FORBIDDEN)]
        for i, (before, after) in enumerate(zip(old_containers, new_containers, strict=True)):
            path = f"spec.{field}[{i}]"
            if after.get("name") != before.get("name"):
                return result, [
                    errors.forbidden(
                        f"{path}.name", "containers may not be renamed or reordered on resize"
                    )
                ]
            if field == "initContainers" and before.get("restartPolicy") != "Always":
                if _obj(before.get("resources")) != _obj(after.get("resources")):
                    return result, [
                        errors.forbidden(
                            f"{path}.resources",
                            "resources for non-sidecar init containers are immutable",
                        )
                    ]
                continue
            problems = _resize_resource_errors(
                _obj(before.get("resources")), _obj(after.get("resources")), path
            )
            if problems:
                return result, problems
            mirrored = list(_objects(candidate.get(field)))[i]
            for key in ("resources", "resizePolicy"):
                if key in before:
                    mirrored[key] = clone(before[key])
                else:
                    mirrored.pop(key, None)
            pairs.append((field, i, before, after))
    PodStrategy(PODS).default({"spec": candidate})
    if candidate != _obj(old.get("spec")):
        return result, [errors.forbidden("spec", POD_RESIZE_FORBIDDEN)]
    for _, _, before, after in pairs:
        for key in ("resources", "resizePolicy"):
            if key in after:
                before[key] = clone(after[key])
            else:
                before.pop(key, None)
    old_qos = _obj(old.get("status")).get("qosClass") or qos_class(old)
    if qos_class(result) != old_qos:
        return result, [
            errors.invalid(
                "status.qosClass", old_qos, "Pod QOS Class may not change as a result of resizing"
            )
        ]
    result["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion", "")
    return result, []


def _resize_resource_errors(before: JSONObject, after: JSONObject, path: str) -> list[FieldError]:
    for kind, noun in (("requests", "requests"), ("limits", "limits")):
        old_values = _obj(before.get(kind))
        new_values = _obj(after.get(kind))
        for name in sorted(set(old_values) | set(new_values)):
            if name not in ("cpu", "memory"):
                if old_values.get(name) != new_values.get(name):
                    return [errors.forbidden("spec", POD_RESIZE_FORBIDDEN)]
            elif name in old_values and name not in new_values:
                return [
                    errors.forbidden(
                        f"{path}.resources.{kind}[{name}]", f"resource {noun} cannot be removed"
                    )
                ]
    return []


class NamespaceStrategy(Strategy):
    @property
    def patch_meta(self) -> PatchMeta | None:
        return NAMESPACE_PATCH_META

    def check_name(self, name: str) -> str | None:
        return meta.check_dns1123_label(name)

    def default(self, obj: JSONObject) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str) and name:
            labels = meta.metadata(obj).get("labels")
            if not isinstance(labels, dict):
                labels = {}
                meta.metadata(obj)["labels"] = labels
            labels[NAMESPACE_NAME_LABEL] = name

    def prepare_for_create(self, obj: JSONObject) -> None:
        super().prepare_for_create(obj)
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}

    def prepare_for_update(self, new: JSONObject, old: JSONObject) -> None:
        super().prepare_for_update(new, old)
        if "spec" in old:
            new["spec"] = clone(old["spec"])

    def field_value(self, obj: JSONObject, field: str) -> str:
        if field == "status.phase":
            return str(_obj(obj.get("status")).get("phase") or "")
        return super().field_value(obj, field)


class PriorityClassStrategy(Strategy):
    def default(self, obj: JSONObject) -> None:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        name = (obj.get("metadata") or {}).get("name") or ""
        value = obj.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(errors.required("value"))
        elif name in SYSTEM_PRIORITY_CLASSES:
            if value != SYSTEM_PRIORITY_CLASSES[name]:
                problems.append(
                    errors.forbidden(
                        "value", f"value of {name} must be {SYSTEM_PRIORITY_CLASSES[name]}"
                    )
                )
        elif value > HIGHEST_USER_PRIORITY:
            problems.append(
                errors.forbidden(
                    "value",
                    f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}",
                )
            )
        if (
            isinstance(name, str)
            and name.startswith("system-")
            and name not in SYSTEM_PRIORITY_CLASSES
        ):
            problems.append(
                errors.invalid(
                    "metadata.name", name, "priority class names with 'system-' prefix are reserved"
                )
            )
        policy = obj.get("preemptionPolicy")
        if policy not in ("PreemptLowerPriority", "Never"):
            problems.append(
                errors.not_supported("preemptionPolicy", policy, ("Never", "PreemptLowerPriority"))
            )
        return problems

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        problems = self.validate(new)
        if new.get("value") != old.get("value"):
            problems.append(errors.forbidden("value", "may not be changed in an update."))
        if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
            problems.append(
                errors.invalid(
                    "preemptionPolicy", new.get("preemptionPolicy"), "field is immutable"
                )
            )
        return problems


class CustomResourceStrategy(Strategy):
    """Objects of a CRD's kind: free-form, with the generation and status rules of CRs."""

    @property
    def patch_meta(self) -> PatchMeta | None:
        return None  # custom resources do not support strategic merge patch

    def check_name(self, name: str) -> str | None:
        return meta.check_path_segment(name)

    def spec_changed(self, new: JSONObject, old: JSONObject) -> bool:
        skip = {"metadata", "status"} if self.rt.has_status() else {"metadata"}
        return {k: v for k, v in new.items() if k not in skip} != {
            k: v for k, v in old.items() if k not in skip
        }


class CRDStrategy(Strategy):
    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [*problems, errors.required("spec")]
        group = spec.get("group")
        names = _obj(spec.get("names"))
        plural = names.get("plural")
        if not isinstance(group, str) or not group:
            problems.append(errors.required("spec.group"))
        elif "." not in group:
            problems.append(
                errors.invalid("spec.group", group, "should be a domain with at least one dot")
            )
        if not isinstance(plural, str) or not plural:
            problems.append(errors.required("spec.names.plural"))
        elif meta.check_dns1123_label(plural):
            problems.append(
                errors.invalid("spec.names.plural", plural, meta.check_dns1123_label(plural) or "")
            )
        if not isinstance(names.get("kind"), str) or not names.get("kind"):
            problems.append(errors.required("spec.names.kind"))
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(group, str) and isinstance(plural, str) and name != f"{plural}.{group}":
            problems.append(
                errors.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
            )
        scope = spec.get("scope")
        if scope not in ("Cluster", "Namespaced"):
            problems.append(errors.not_supported("spec.scope", scope, ("Cluster", "Namespaced")))
        versions = list(_objects(spec.get("versions")))
        if not versions:
            problems.append(
                errors.required(
                    "spec.versions", "must have exactly one version marked as storage version"
                )
            )
        elif sum(1 for v in versions if v.get("storage") is True) != 1:
            problems.append(
                errors.invalid(
                    "spec.versions", "", "must have exactly one version marked as storage version"
                )
            )
        for i, version in enumerate(versions):
            vname = version.get("name")
            if not isinstance(vname, str) or not meta.DNS1035_LABEL.fullmatch(vname):
                problems.append(
                    errors.invalid(f"spec.versions[{i}].name", vname, "must be a DNS-1035 label")
                )
            if not isinstance(version.get("served"), bool):
                problems.append(errors.required(f"spec.versions[{i}].served"))
            if not isinstance(version.get("storage"), bool):
                problems.append(errors.required(f"spec.versions[{i}].storage"))
        return problems

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        problems = self.validate(new)
        new_spec, old_spec = _obj(new.get("spec")), _obj(old.get("spec"))
        for field in ("group", "scope"):
            if new_spec.get(field) != old_spec.get(field):
                problems.append(
                    errors.invalid(f"spec.{field}", new_spec.get(field), "field is immutable")
                )
        if _obj(new_spec.get("names")).get("plural") != _obj(old_spec.get("names")).get("plural"):
            problems.append(
                errors.invalid(
                    "spec.names.plural",
                    _obj(new_spec.get("names")).get("plural"),
                    "field is immutable",
                )
            )
        return problems

    def prepare_for_create(self, obj: JSONObject) -> None:
        super().prepare_for_create(obj)
        obj["status"] = crd_status(obj)

    def prepare_for_update(self, new: JSONObject, old: JSONObject) -> None:
        super().prepare_for_update(new, old)
        status = crd_status(new)
        previous = _obj(old.get("status"))
        if previous.get("acceptedNames") == status["acceptedNames"]:
            # Nothing the conditions describe changed: keep them (and their timestamps).
            status["conditions"] = previous.get("conditions") or status["conditions"]
        stored = list(previous.get("storedVersions") or [])
        # storedVersions only grows: objects may still be stored in an older version.
        status["storedVersions"] = stored + [v for v in status["storedVersions"] if v not in stored]
        new["status"] = status


def crd_status(crd: JSONObject) -> JSONObject:
    spec = _obj(crd.get("spec"))
    names = dict(_obj(spec.get("names")))
    kind = names.get("kind") or ""
    names.setdefault("singular", str(kind).lower())
    names.setdefault("listKind", f"{kind}List")
    now = meta.now_timestamp()
    storage = [v.get("name") for v in _objects(spec.get("versions")) if v.get("storage")]
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": storage,
    }


class WebhookConfigurationStrategy(Strategy):
    @property
    def patch_meta(self) -> PatchMeta | None:
        return WEBHOOK_CONFIGURATION_PATCH_META

    def default(self, obj: JSONObject) -> None:
        default_webhooks(obj, mutating=self.rt.key == MUTATING_WEBHOOKS.key)

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        return problems + validate_configuration(obj, mutating=self.rt.key == MUTATING_WEBHOOKS.key)


class LimitRangeStrategy(Strategy):
    def default(self, obj: JSONObject) -> None:
        default_limit_range(obj)
        for item in _objects(_obj(obj.get("spec")).get("limits")):
            for field in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                values = item.get(field)
                if isinstance(values, dict):
                    for name, value in values.items():
                        values[name] = canonical_quantity(value)

    def validate(self, obj: JSONObject) -> list[FieldError]:
        return super().validate(obj) + validate_limit_range(obj)


class RuntimeClassStrategy(Strategy):
    def validate(self, obj: JSONObject) -> list[FieldError]:
        return super().validate(obj) + validate_runtime_class(obj)

    def validate_update(self, new: JSONObject, old: JSONObject) -> list[FieldError]:
        return super().validate(new) + validate_runtime_class_update(new, old)


def strategy_for(rt: ResourceType) -> Strategy:
    if rt.custom:
        return CustomResourceStrategy(rt)
    kinds: dict[tuple[str, str], type[Strategy]] = {
        PODS.key: PodStrategy,
        LIMIT_RANGES.key: LimitRangeStrategy,
        RUNTIME_CLASSES.key: RuntimeClassStrategy,
        NAMESPACES.key: NamespaceStrategy,
        PRIORITY_CLASSES.key: PriorityClassStrategy,
        CRDS.key: CRDStrategy,
        MUTATING_WEBHOOKS.key: WebhookConfigurationStrategy,
        VALIDATING_WEBHOOKS.key: WebhookConfigurationStrategy,
    }
    return kinds.get(rt.key, Strategy)(rt)
