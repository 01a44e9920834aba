"""The classifier's configuration: priority classes, profiles and rules, as pydantic models.

These models are the wire format of the ``profiles``, ``rules`` and ``priorityClasses`` sections
of the tenantgate config file (camelCase keys, as in Kubernetes YAML). They validate shape only;
cross-references (a rule naming an unknown profile, a profile naming an unknown priority class)
are checked when the config is compiled (``classifier.plan.compile_classifier``), which reports
every problem with its field path so the config loader can add file and line. This module
imports nothing of the compiled classifier: the models come first.

``set_priority_class`` lives here because both the profile code and the tenants package write a
class together with the ``priority`` and ``preemptionPolicy`` it resolves to.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from classifier.types import JSONObject

logger = logging.getLogger(__name__)

API_VERSION: Final = "tenantgate.io/v1alpha1"
KIND: Final = "TenantgateConfig"
PROFILE_LABEL = "tenantgate.io/profile"
"""Opt-in label on a pod naming the profile it wants; also the annotation the plan writes."""
CLASSIFIED_BY_ANNOTATION = "tenantgate.io/classified-by"
RESERVED_PREFIX = "tenantgate.io/"

# Kubernetes validation (apimachinery/pkg/util/validation): qualified names and label values.
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED_NAME_RE = re.compile(rf"^({_DNS_SUBDOMAIN}/)?{_NAME_PART}$")
_LABEL_VALUE_RE = re.compile(rf"^({_NAME_PART})?$")
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_SUBDOMAIN}$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Built-in classes the API server creates; any other class name may not start with "system-".
BUILTIN_PRIORITY_CLASSES: Mapping[str, int] = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000

EnforceableField = Literal[
    "schedulerName",
    "priorityClassName",
    "nodeSelector",
    "affinity",
    "topologySpreadConstraints",
    "labels",
    "annotations",
]


def is_qualified_name(text: str) -> bool:
    """A valid label or annotation key: ``[prefix/]name``, name at most 63 characters."""
    if not _QUALIFIED_NAME_RE.match(text):
        return False
    prefix, _, name = text.rpartition("/")
    return len(name) <= 63 and len(prefix) <= 253


def is_label_value(text: str) -> bool:
    return len(text) <= 63 and _LABEL_VALUE_RE.match(text) is not None


def _check_label_map(value: Mapping[str, str], *, what: str) -> Mapping[str, str]:
    for key, item in value.items():
        if not is_qualified_name(key):
            raise ValueError(f"{what} key {key!r} is not a valid qualified name")
        if key.startswith(RESERVED_PREFIX):
            raise ValueError(f"{what} key {key!r}: the {RESERVED_PREFIX} prefix is reserved")
        if what == "label" and not is_label_value(item):
            raise ValueError(f"label {key!r}: value {item!r} is not a valid label value")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


# --------------------------------------------------------------------------- priority classes


class PriorityClassSpec(_Model):
    """A PriorityClass as the webhook needs it: the value and preemption policy it resolves to."""

    value: int = Field(ge=-2_147_483_648, le=BUILTIN_PRIORITY_CLASSES["system-node-critical"])
    preemptionPolicy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    description: str = ""
    # The cluster's default class: the Priority admission plugin writes it into every pod that
    # names none, so a pod carrying it asked for nothing.
    globalDefault: bool = False


# --------------------------------------------------------------------------- conditions


class KeyMatchSpec(_Model):
    """A test on one label or annotation: one of value, values, glob, contains, exists, absent.

    ``key`` may itself be a glob (``training.kubeflow.org/*``): the test then holds when any key
    matching it passes (for ``absent``: when no key matching it is present). ``contains`` holds
    when the value has one of the texts in it, ignoring case.
    """

    key: str = Field(min_length=1)
    value: str | None = None
    values: list[str] | None = Field(default=None, min_length=1)
    glob: Strings | None = None
    contains: Strings | None = None
    exists: Literal[True] | None = None
    absent: Literal[True] | None = None

    @model_validator(mode="after")
    def _one_test(self) -> Self:
        set_ = [
            name
            for name in ("value", "values", "glob", "contains", "exists", "absent")
            if getattr(self, name) is not None
        ]
        if len(set_) != 1:
            raise ValueError(
                "set exactly one of value, values, glob, contains, exists, absent"
                + (f" (got {', '.join(set_)})" if set_ else "")
            )
        return self


_RESOURCE_EXPRESSION_RE = re.compile(r"^\s*(\S+?)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")


def parse_resource_expression(text: str) -> tuple[str, str, str]:
    """Split ``NAME OP QUANTITY`` (``nvidia.com/gpu > 0``) into its parts; ValueError if not."""
    found = _RESOURCE_EXPRESSION_RE.match(text)
    if found is None:
        raise ValueError(
            f"{text!r} is not a resource comparison: write NAME OP QUANTITY, "
            "e.g. 'nvidia.com/gpu > 0' (OP is one of > >= < <= == !=)"
        )
    return found.group(1), found.group(2), found.group(3)


def _resource_expression(text: str) -> str:
    parse_resource_expression(text)
    return text


def _as_list(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


_NOT_EMPTY = Field(min_length=1)


def _one_or_many(item_schema: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [item_schema, {"type": "array", "items": item_schema}]})


# Lists of alternatives ("any of"); a single value is accepted for the one-element list.
Strings = Annotated[
    list[str], BeforeValidator(_as_list), _NOT_EMPTY, _one_or_many({"type": "string"})
]
Ports = Annotated[
    list[int | str],
    BeforeValidator(_as_list),
    _NOT_EMPTY,
    _one_or_many({"anyOf": [{"type": "integer"}, {"type": "string"}]}),
]
ResourceExpressions = Annotated[
    list[Annotated[str, AfterValidator(_resource_expression)]],
    BeforeValidator(_as_list),
    _NOT_EMPTY,
    _one_or_many({"type": "string", "description": "NAME OP QUANTITY, e.g. nvidia.com/gpu > 0"}),
]
RestartPolicy = Literal["Always", "OnFailure", "Never"]
RestartPolicies = Annotated[
    list[RestartPolicy],
    BeforeValidator(_as_list),
    _NOT_EMPTY,
    _one_or_many({"enum": ["Always", "OnFailure", "Never"], "type": "string"}),
]


class ImageMatchSpec(_Model):
    """Images by glob on the repository path, or by a text anywhere in it (ignoring case).

    Both may be set: either one matching is enough. The plain list form of ``image`` is
    ``glob``.
    """

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    glob: Strings | None = None
    contains: Strings | None = None

    @model_validator(mode="after")
    def _some(self) -> Self:
        if self.glob is None and self.contains is None:
            raise ValueError("set glob, contains, or both")
        for text in self.contains or []:
            if not text:
                raise ValueError("a contains text must not be empty")
        return self


class ContainerConditionSpec(_Model):
    """A test on each init and app container on its own: it holds when one container passes.

    ``resource`` compares that container's requests (as stored: a limit stands in for a
    missing request), not the pod's sum.
    """

    resource: ResourceExpressions


VolumeClaim = Literal["any", "template"]


class ConditionSpec(_Model):
    """One node of a rule's condition tree.

    Set at least one key; when several are set, all of them must hold. Lists mean "any of".
    """

    all_: list[ConditionSpec] | None = Field(default=None, alias="all")
    any_: list[ConditionSpec] | None = Field(default=None, alias="any")
    not_: ConditionSpec | None = Field(default=None, alias="not")
    label: KeyMatchSpec | None = None
    annotation: KeyMatchSpec | None = None
    namespace: Strings | None = None
    ownerKind: Strings | None = None
    image: Strings | ImageMatchSpec | None = None
    port: Ports | None = None
    resource: ResourceExpressions | None = None
    container: ContainerConditionSpec | None = None
    volumeClaim: VolumeClaim | None = None
    restartPolicy: RestartPolicies | None = None
    hostNetwork: bool | None = None
    privileged: bool | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError(
                "a condition needs at least one of all, any, not, label, annotation, namespace, "
                "ownerKind, image, port, resource, container, volumeClaim, restartPolicy, "
                "hostNetwork, privileged"
            )
        return self

    @field_validator("port")
    @classmethod
    def _ports(
        cls, value: int | str | list[int | str] | None
    ) -> int | str | list[int | str] | None:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and not 1 <= item <= 65535:
                raise ValueError(f"port {item} is not in 1-65535")
            if isinstance(item, str) and not item:
                raise ValueError("a port name must not be empty")
        return value


class RuleSpec(_Model):
    """Ordered rule: the first whose ``match`` holds picks ``profile``. No match: every pod."""

    name: str = Field(
        min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
    )
    profile: str = Field(min_length=1)
    match: ConditionSpec | None = None
    description: str = ""


# --------------------------------------------------------------------------- profile parts


class TolerationSpec(_Model):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> Self:
        # Same checks as validateTolerations in pkg/apis/core/validation.
        if not self.key and self.operator != "Exists":
            raise ValueError("operator must be Exists when key is empty")
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise ValueError("effect must be NoExecute when tolerationSeconds is set")
        if self.key and not is_qualified_name(self.key):
            raise ValueError(f"key {self.key!r} is not a valid qualified name")
        return self


class LabelSelectorRequirementSpec(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values must be non-empty with operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values must be empty with operator {self.operator}")
        return self


class LabelSelectorSpec(_Model):
    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirementSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not self.matchLabels and not self.matchExpressions:
            raise ValueError(
                "an empty selector selects every pod; set matchLabels or matchExpressions"
            )
        return self


class NodeSelectorRequirementSpec(_Model):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values must be non-empty with operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values must be empty with operator {self.operator}")
        if self.operator in ("Gt", "Lt") and (
            len(self.values) != 1 or not re.fullmatch(r"-?[0-9]+", self.values[0])
        ):
            raise ValueError(f"operator {self.operator} needs exactly one integer value")
        return self


class NodeSelectorTermSpec(_Model):
    matchExpressions: list[NodeSelectorRequirementSpec] = Field(default_factory=list)
    matchFields: list[NodeSelectorRequirementSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not self.matchExpressions and not self.matchFields:
            raise ValueError("a node selector term needs matchExpressions or matchFields")
        return self


class NodeSelectorSpec(_Model):
    nodeSelectorTerms: list[NodeSelectorTermSpec] = Field(min_length=1)


class PreferredSchedulingTermSpec(_Model):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTermSpec


class NodeAffinitySpec(_Model):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelectorSpec | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredSchedulingTermSpec] = Field(
        default_factory=list
    )


class PodAffinityTermSpec(_Model):
    """A pod (anti-)affinity term. Without ``labelSelector`` it selects the pod's own siblings."""

    topologyKey: str = Field(min_length=1)
    labelSelector: LabelSelectorSpec | None = None
    namespaces: list[str] = Field(default_factory=list)
    namespaceSelector: LabelSelectorSpec | None = None


class WeightedPodAffinityTermSpec(_Model):
    weight: int = Field(ge=1, le=100)
    podAffinityTerm: PodAffinityTermSpec


class PodAffinitySpec(_Model):
    requiredDuringSchedulingIgnoredDuringExecution: list[PodAffinityTermSpec] = Field(
        default_factory=list
    )
    preferredDuringSchedulingIgnoredDuringExecution: list[WeightedPodAffinityTermSpec] = Field(
        default_factory=list
    )


class AffinitySpec(_Model):
    nodeAffinity: NodeAffinitySpec | None = None
    podAffinity: PodAffinitySpec | None = None
    podAntiAffinity: PodAffinitySpec | None = None


class SpreadConstraintSpec(_Model):
    """A topology spread constraint; its label selector is always derived from the pod."""

    maxSkew: int = Field(default=1, ge=1)
    topologyKey: str = Field(min_length=1)
    whenUnsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "ScheduleAnyway"
    minDomains: int | None = Field(default=None, ge=1)
    nodeAffinityPolicy: Literal["Honor", "Ignore"] | None = None
    nodeTaintsPolicy: Literal["Honor", "Ignore"] | None = None
    matchLabelKeys: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _min_domains(self) -> Self:
        if self.minDomains is not None and self.whenUnsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains can only be set with whenUnsatisfiable: DoNotSchedule")
        return self


# --------------------------------------------------------------------------- pod groups

_FIELD_PATH_RE = re.compile(r"^[A-Za-z0-9_*-]+(\.[A-Za-z0-9_*-]+)*$")


def _field_path(text: str) -> str:
    if not _FIELD_PATH_RE.match(text):
        raise ValueError(
            f"{text!r} is not a field path: write dotted keys, * for every key or item "
            "(spec.pytorchReplicaSpecs.*.replicas)"
        )
    return text


def _key(text: str) -> str:
    if not is_qualified_name(text):
        raise ValueError(f"{text!r} is not a valid label or annotation key")
    return text


FieldPath = Annotated[str, AfterValidator(_field_path)]
FieldPaths = Annotated[
    list[FieldPath], BeforeValidator(_as_list), _NOT_EMPTY, _one_or_many({"type": "string"})
]
LabelKey = Annotated[str, AfterValidator(_key)]


class OwnerKindSpec(_Model):
    """A kind of controlling owner: ``kind`` in API group ``apiGroup`` (any version)."""

    kind: str = Field(min_length=1)
    apiGroup: str = ""


class GroupSizeFieldsSpec(_Model):
    """Integer fields of an object whose sum is the group's size (``*``: every key or item);
    each is multiplied by the ``factors`` read in the object holding it (missing: 1).
    ``default``: what an item without the field counts (the operator's default)."""

    fields: FieldPaths
    factors: list[FieldPath] = Field(default_factory=list)
    default: int | None = Field(default=None, ge=0)


class GroupObjectSpec(GroupSizeFieldsSpec):
    """The object of this kind, in the pod's namespace, named by the group's identity."""

    apiVersion: str = Field(min_length=1)
    kind: str = Field(min_length=1)


class GroupSizeSpec(_Model):
    """Where a group's size is written: exactly one of label, annotation, owner, object."""

    label: LabelKey | None = None
    annotation: LabelKey | None = None
    owner: GroupSizeFieldsSpec | None = None
    object_: GroupObjectSpec | None = Field(default=None, alias="object")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        set_ = [
            name
            for name, value in (
                ("label", self.label),
                ("annotation", self.annotation),
                ("owner", self.owner),
                ("object", self.object_),
            )
            if value is not None
        ]
        if len(set_) != 1:
            raise ValueError(
                "set exactly one of label, annotation, owner, object"
                + (f" (got {', '.join(set_)})" if set_ else "")
            )
        return self


class PodGroupSpec(_Model):
    """A way to find pod groups: pods with the same value of label ``label`` form one group.

    ``matchLabels`` and ``owners`` narrow which pods the rule reads (every label given, and a
    controlling owner of one of the kinds given); ``size`` says where the group's size is.
    """

    name: str = Field(
        min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
    )
    label: LabelKey
    matchLabels: dict[str, str] = Field(default_factory=dict)
    owners: list[OwnerKindSpec] = Field(default_factory=list)
    size: GroupSizeSpec
    description: str = ""

    @field_validator("matchLabels")
    @classmethod
    def _match_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not is_qualified_name(key):
                raise ValueError(f"label key {key!r} is not a valid qualified name")
            if not is_label_value(item):
                raise ValueError(f"label {key!r}: value {item!r} is not a valid label value")
        return value


# --------------------------------------------------------------------------- profiles


def _check_enforce(value: list[EnforceableField] | None) -> list[EnforceableField] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("enforce lists a field twice")
    return value


class ProfileSpec(_Model):
    """Scheduling intent applied to every pod classified into this profile.

    Every field is a default: it never overrides what the pod set itself, unless the field is
    listed in ``enforce``. Tolerations are always merged as a set.
    """

    description: str = ""
    schedulerName: str | None = None
    priorityClassName: str | None = None
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    topologySpreadConstraints: list[SpreadConstraintSpec] = Field(default_factory=list)
    affinity: AffinitySpec | None = None
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    enforce: list[EnforceableField] = Field(default_factory=list)
    # Read for every pod, whatever its profile: the members of one group (an MPIJob's
    # launcher and its GPU workers) may be classified apart.
    podGroup: list[PodGroupSpec] = Field(default_factory=list)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        _check_label_map(value, what="label")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        _check_label_map(value, what="annotation")
        return value

    @field_validator("enforce")
    @classmethod
    def _enforce(cls, value: list[EnforceableField]) -> list[EnforceableField]:
        _check_enforce(value)
        return value

    @field_validator("topologySpreadConstraints")
    @classmethod
    def _spread(cls, value: list[SpreadConstraintSpec]) -> list[SpreadConstraintSpec]:
        keys = [item.topologyKey for item in value]
        if len(set(keys)) != len(keys):
            raise ValueError("two spread constraints on the same topologyKey")
        return value


class ProfileOverrideSpec(_Model):
    """A partial profile (per tenant): every field it sets replaces the base profile's field."""

    description: str | None = None
    schedulerName: str | None = None
    priorityClassName: str | None = None
    tolerations: list[TolerationSpec] | None = None
    topologySpreadConstraints: list[SpreadConstraintSpec] | None = None
    affinity: AffinitySpec | None = None
    nodeSelector: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    enforce: list[EnforceableField] | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            _check_label_map(value, what="label")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            _check_label_map(value, what="annotation")
        return value

    @field_validator("enforce")
    @classmethod
    def _enforce(cls, value: list[EnforceableField] | None) -> list[EnforceableField] | None:
        return _check_enforce(value)

    def apply_to(self, base: ProfileSpec) -> ProfileSpec:
        """``base`` with every field this override sets replaced (validated again)."""
        data = base.model_dump(by_alias=True, exclude_none=True)
        data.update(self.model_dump(by_alias=True, include=self.model_fields_set))
        return ProfileSpec.model_validate({k: v for k, v in data.items() if v is not None})


# --------------------------------------------------------------------------- the whole section


class EvidenceSpec(_Model):
    """How pods no rule matches are judged: by weighed evidence (docs/configuration.md).

    ``builtin`` keeps the weights tenantgate ships for its built-in profile names (only for
    the profiles the config declares); ``weights`` sets, per profile, the weight of a signal
    (``KIND:VALUE``), replacing a built-in one (0 removes it) or adding one for any profile.
    The profile with the highest total wins when it reaches ``threshold``.
    """

    builtin: bool = True
    threshold: int = Field(default=4, ge=1, le=1000)
    weights: dict[str, dict[str, Annotated[int, Field(ge=-100, le=100)]]] = Field(
        default_factory=dict
    )


class ClassifierConfig(_Model):
    """The classifier's part of the config file; ``TenantgateConfig`` extends it."""

    apiVersion: Literal["tenantgate.io/v1alpha1"] = API_VERSION
    kind: Literal["TenantgateConfig"] = KIND
    priorityClasses: dict[str, PriorityClassSpec] = Field(default_factory=dict)
    profiles: dict[str, ProfileSpec] = Field(default_factory=dict)
    rules: list[RuleSpec] = Field(default_factory=list)
    evidence: EvidenceSpec = Field(default_factory=EvidenceSpec)
    defaultProfile: str = "general"

    @field_validator("priorityClasses")
    @classmethod
    def _priority_classes(cls, value: dict[str, PriorityClassSpec]) -> dict[str, PriorityClassSpec]:
        for name, spec in value.items():
            if not _DNS_SUBDOMAIN_RE.match(name) or len(name) > 253:
                raise ValueError(f"priority class name {name!r} is not a DNS subdomain")
            builtin = BUILTIN_PRIORITY_CLASSES.get(name)
            if builtin is not None:
                if spec.value != builtin:
                    raise ValueError(f"built-in priority class {name} has value {builtin}")
            elif name.startswith("system-"):
                raise ValueError(f"priority class {name!r}: the system- prefix is reserved")
            elif spec.value > HIGHEST_USER_DEFINABLE_PRIORITY:
                raise ValueError(
                    f"priority class {name}: value {spec.value} is above the highest "
                    f"user-definable priority {HIGHEST_USER_DEFINABLE_PRIORITY}"
                )
        return value

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, value: dict[str, ProfileSpec]) -> dict[str, ProfileSpec]:
        for name in value:
            # The name travels in a label (opt-in) and an annotation.
            if not name or not is_label_value(name):
                raise ValueError(f"profile name {name!r} is not a valid label value")
        return value


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ClassifierProblem:
    """One semantic problem, with the dotted field path it concerns (``rules[3].match.image``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ClassifierConfigError(ValueError):
    """The config is well-formed but does not compile; carries every problem found."""

    def __init__(self, problems: list[ClassifierProblem] | tuple[ClassifierProblem, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


# --------------------------------------------------------------------------- helpers


def set_priority_class(pod: JSONObject, *, name: str, spec: PriorityClassSpec) -> bool:
    """Write ``priorityClassName`` with the ``priority`` and ``preemptionPolicy`` it resolves to.

    The built-in Priority admission plugin has already resolved the class when a webhook runs,
    so changing the name alone would leave a stale ``spec.priority``. Writes into ``pod`` (the
    caller's copy) but replaces ``pod["spec"]`` with a shallow copy first, so a spec shared with
    another object is never modified. Returns whether anything changed.
    """
    current = pod.get("spec")
    spec_obj: JSONObject = dict(current) if isinstance(current, dict) else {}
    wanted = {
        "priorityClassName": name,
        "priority": spec.value,
        "preemptionPolicy": spec.preemptionPolicy,
    }
    if isinstance(current, dict) and all(current.get(k) == v for k, v in wanted.items()):
        return False
    spec_obj.update(wanted)
    pod["spec"] = spec_obj
    return True
