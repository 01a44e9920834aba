"""The whole config file (``TenantgateConfig``) and the :class:`Policy` compiled from it.

The pydantic models are the wire format: they check shape and parse every quantity, so a bad
value is reported with its field path. :func:`compile_policy` then checks what spans fields
(unknown profiles or priority classes, a namespace claimed twice) and builds the frozen
:class:`Policy` the admission path reads: a namespace -> tenant index, parsed quotas and
ceilings, and compiled classifiers. Nothing is parsed per request.

A policy is self-sufficient: it keeps what it needs to be compiled again with the cluster's
priority class values (:meth:`Policy.with_priority_classes`), not the validated config, which
is ~9 times its size (47 MiB against 5 MiB at 10,000 tenants).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Final, Literal, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from classifier.config import (
    ClassifierConfig,
    ClassifierConfigError,
    ClassifierProblem,
    LabelSelectorRequirementSpec,
    PriorityClassSpec,
    ProfileOverrideSpec,
    is_label_value,
    is_qualified_name,
)
from classifier.plan import Classifier, compile_classifier
from classifier.podgroups import GroupRule
from classifier.quantities import Quantity, QuantityError
from tenants.bounds import Bounds, BoundsLevel
from tenants.cohorts.borrowing import most_held
from tenants.cohorts.tree import Cohort, CohortTree, Membership, build_cohorts
from tenants.quota import Quota, build_quota
from tenants.resourcenames import ledger_keys
from tenants.schedulers import SchedulerSpec, check_names

logger = logging.getLogger(__name__)

T = TypeVar("T")

TENANT_LABEL: Final = "tenantgate.io/tenant"
TIER_LABEL: Final = "tenantgate.io/tier"
RESERVATION_ANNOTATION: Final = "tenantgate.io/reservation"
# The scheduling gate a queued pod waits behind, and the tier label it carries meanwhile.
QUOTA_GATE: Final = "tenantgate.io/quota"
QUEUED_TIER: Final = "queued"
# On a pod admitted on room borrowed from its cohort: the cohort (the tier label stays burst).
BORROWED_ANNOTATION: Final = "tenantgate.io/borrowed-from"
# The tier a dry-run's /mutate chose, for its /validate (set on dry-runs only).
DRY_RUN_TIER_ANNOTATION: Final = "tenantgate.io/dry-run-tier"

_MISSING: Final = object()
_DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SIMPLE_KEY_RE: Final = re.compile(r"^[A-Za-z0-9_-]+$")
# The quantity grammar as the Kubernetes OpenAPI schema publishes it, for editors.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def field_path(*parts: str | int) -> str:
    """``tenants.team-a.quota.guaranteed[nvidia.com/gpu]``: the notation every problem uses."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _SIMPLE_KEY_RE.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part}]"
    return text


def _quantity(value: Any) -> Quantity:
    if isinstance(value, Quantity):
        return value
    try:
        return Quantity.from_json(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc


QuantityValue = Annotated[
    Quantity,
    PlainValidator(_quantity),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "pattern": QUANTITY_PATTERN}, {"type": "number"}],
            "description": "a Kubernetes quantity, e.g. 500m, 4, 8Gi",
        }
    ),
]


def _resource_names(value: dict[str, Quantity]) -> dict[str, Quantity]:
    """Container resource names (``cpu``, ``nvidia.com/gpu``): no ``requests.``/``limits.``."""
    for name, amount in value.items():
        head, dot, rest = name.partition(".")
        if dot and head in ("requests", "limits"):
            raise ValueError(
                f'resource "{name}": write the plain resource name "{rest}" '
                "(this is a container resource, not a quota name)"
            )
        if not is_qualified_name(name):
            raise ValueError(f'resource name "{name}" is not a valid resource name')
        if amount.nanos < 0:
            raise ValueError(f"{name}: quantity {amount} must not be negative")
    return value


def _quota_names(value: dict[str, Quantity]) -> dict[str, Quantity]:
    """Quota names as ResourceQuota writes them (``requests.cpu``, ``limits.memory``, ``cpu``),
    keyed by what the ledger counts (``tenants.resourcenames``)."""
    keyed = ledger_keys(value)
    for name, amount in value.items():
        if amount.nanos < 0:
            raise ValueError(f"{name}: quantity {amount} must not be negative")
    return keyed


ResourceQuantities = Annotated[dict[str, QuantityValue], Field(default_factory=dict)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NamespaceSelectorSpec(_Model):
    """A label selector over namespace labels (matchLabels AND matchExpressions)."""

    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirementSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not self.matchLabels and not self.matchExpressions:
            raise ValueError(
                "an empty selector selects every namespace; set matchLabels or matchExpressions"
            )
        for key, value in self.matchLabels.items():
            if not is_qualified_name(key) or not is_label_value(value):
                raise ValueError(f'matchLabels {key}="{value}" is not a valid label')
        return self


class BurstSpec(_Model):
    """Capacity above the guarantee: ``ratio`` of guaranteed and/or an absolute ``max``."""

    ratio: Decimal | None = Field(
        default=None, gt=0, description="ceiling = ratio x guaranteed, per guaranteed resource"
    )
    max: ResourceQuantities

    @field_validator("max")
    @classmethod
    def _max(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        return _quota_names(value)


class QuotaSpec(_Model):
    guaranteed: ResourceQuantities
    burst: BurstSpec | None = None

    @field_validator("guaranteed")
    @classmethod
    def _guaranteed(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        return _quota_names(value)


class TenantPriorityClassesSpec(_Model):
    guaranteed: str = Field(
        default="tenant-guaranteed", description="class of pods admitted on the guarantee"
    )
    allowed: list[str] = Field(
        default_factory=list, description="classes a pod of this tenant may ask for explicitly"
    )


class TenantProfilesSpec(_Model):
    allowed: list[str] | None = Field(
        default=None, description="profiles this tenant may use; every profile when unset"
    )
    overrides: dict[str, ProfileOverrideSpec] = Field(default_factory=dict)


class ContainerDefaultsSpec(_Model):
    """What a container gets when it sets no request (or no limit) for a resource."""

    requests: ResourceQuantities
    limits: ResourceQuantities

    @field_validator("requests", "limits")
    @classmethod
    def _names(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        return _resource_names(value)


class AgingSpec(_Model):
    """Every ``intervalSeconds`` a pod waits adds ``step`` to its effective priority, up to
    ``maxBoost``: low classes cannot starve."""

    intervalSeconds: int = Field(default=60, gt=0, description="seconds waited per aging step")
    step: int = Field(default=100, ge=0, description="priority added per interval waited")
    maxBoost: int = Field(
        default=1000,
        ge=0,
        description="the largest boost; a pod that reached it is no longer bypassed",
    )


class QueueSpec(_Model):
    """How over-quota pods of a tenant in ``overQuota: queue`` wait."""

    tier: Literal["guaranteed", "burst"] = Field(
        default="guaranteed",
        description="the room a queued pod waits for; it gets that tier's priority class",
    )
    maxPending: int = Field(
        default=1000, ge=1, description="pods that may wait at once; beyond it pods are rejected"
    )
    ordering: Literal["BestEffortFIFO", "StrictFIFO"] = Field(
        default="BestEffortFIFO",
        description="BestEffortFIFO: a head that does not fit is skipped for smaller pods "
        "behind it; StrictFIFO: pods behind it wait",
    )
    aging: AgingSpec | None = Field(
        default=None, description="effective priority grows with the time waited; none when unset"
    )


class PodGroupsSpec(_Model):
    """How the members of a pod group wait until the whole group exists and fits."""

    tier: Literal["guaranteed", "burst"] | None = Field(
        default=None,
        description="the room a group waits for; its members get that tier's priority class "
        "(default: the top-level podGroups.tier, guaranteed)",
    )
    timeoutSeconds: int | None = Field(
        default=None,
        gt=0,
        description="an incomplete group is reported (event, metric) after this long "
        "(default: the top-level podGroups.timeoutSeconds, 300)",
    )


class BoundsLevelSpec(_Model):
    """Per container or per pod: the smallest and largest request/limit, and the largest
    limit-to-request ratio, per resource (LimitRange's ``min``, ``max``,
    ``maxLimitRequestRatio``)."""

    min: ResourceQuantities
    max: ResourceQuantities
    maxLimitRequestRatio: ResourceQuantities

    @field_validator("min", "max", "maxLimitRequestRatio")
    @classmethod
    def _names(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        return _resource_names(value)


class BoundsSpec(_Model):
    """What one container, and one pod, of the tenant may ask for."""

    container: BoundsLevelSpec | None = None
    pod: BoundsLevelSpec | None = None


class FairSharingSpec(_Model):
    weight: Decimal = Field(
        default=Decimal(1), gt=0, description="the tenant's weight in its cohort's fair sharing"
    )


class CohortSpec(_Model):
    """Tenants that lend each other unused guarantees; cohorts may nest."""

    description: str = ""
    parent: str | None = Field(default=None, description="the cohort this one belongs to")
    quota: ResourceQuantities = Field(
        description="capacity the cohort owns itself, shared by every member below it"
    )

    @field_validator("quota")
    @classmethod
    def _quota(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        return _quota_names(value)


class TenantSpec(_Model):
    """A named group of namespaces sharing one quota."""

    description: str = ""
    namespaces: list[str] = Field(default_factory=list)
    namespaceSelector: NamespaceSelectorSpec | None = None
    quota: QuotaSpec
    priorityClasses: TenantPriorityClassesSpec = Field(default_factory=TenantPriorityClassesSpec)
    profiles: TenantProfilesSpec = Field(default_factory=TenantProfilesSpec)
    overQuota: Literal["reject", "queue"] = "reject"
    queue: QueueSpec | None = Field(
        default=None, description="how pods wait with overQuota: queue (defaults when unset)"
    )
    containerDefaults: ContainerDefaultsSpec | None = None
    bounds: BoundsSpec | None = None
    podGroups: PodGroupsSpec | None = Field(
        default=None, description="this tenant's pod groups (the top-level podGroups when unset)"
    )
    cohort: str | None = Field(
        default=None, description="the cohort this tenant lends to and borrows from"
    )
    lendingLimit: ResourceQuantities = Field(
        description="per resource, the most of its unused guarantee others may borrow "
        "(all of it when unset)"
    )
    borrowingLimit: ResourceQuantities = Field(
        description="per resource, how far past its guarantee it may go on borrowed room "
        "(unlimited within the cohort when unset)"
    )
    fairSharing: FairSharingSpec | None = None

    @field_validator("lendingLimit", "borrowingLimit")
    @classmethod
    def _limits(cls, value: dict[str, Quantity]) -> dict[str, Quantity]:
        return _quota_names(value)

    @model_validator(mode="after")
    def _cohort_terms_need_a_cohort(self) -> Self:
        if self.cohort is None and (
            self.lendingLimit or self.borrowingLimit or self.fairSharing is not None
        ):
            raise ValueError(
                "lendingLimit, borrowingLimit and fairSharing apply to cohort members; set cohort"
            )
        return self

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            if not _DNS_LABEL_RE.match(name) or len(name) > 63:
                raise ValueError(f'namespace "{name}" is not a valid namespace name')
            if name in seen:
                raise ValueError(f'namespace "{name}" is listed twice')
            seen.add(name)
        return value

    @model_validator(mode="after")
    def _queue_needs_queue_mode(self) -> Self:
        if self.queue is not None and self.overQuota != "queue":
            raise ValueError("queue is set but overQuota is reject; set overQuota: queue")
        return self


class LedgerSpec(_Model):
    """Where the ledger lives: this process's memory (one replica), or TenantLedger objects in
    the Kubernetes API that several replicas share (``deploy/webhooks/overlays/ha``)."""

    backend: Literal["memory", "kubernetes"] = "memory"


class TenantgateConfig(ClassifierConfig):
    """The whole config file: priority classes, profiles, rules, tenants and quota settings."""

    tenants: dict[str, TenantSpec] = Field(default_factory=dict)
    burstPriorityClass: str = Field(
        default="tenant-burst", description="class every burst-tier pod gets"
    )
    cohorts: dict[str, CohortSpec] = Field(
        default_factory=dict, description="groups of tenants that lend each other guarantees"
    )
    overShareBurstPriorityClass: str = Field(
        default="tenant-burst-over-share",
        description="class of a pod borrowing while its tenant is above its fair share "
        "(lower than burstPriorityClass: preempted first); only used with cohorts",
    )
    unclaimedNamespaces: Literal["allow", "deny"] = Field(
        default="allow", description="pods of namespaces no tenant claims: untouched, or denied"
    )
    reservationTTLSeconds: int = Field(
        default=120, gt=0, description="a reservation not seen stored by then is released"
    )
    holdTTLSeconds: int = Field(
        default=15,
        gt=0,
        description="a /mutate booking not validated by then is released (webhook timeouts "
        "plus margin)",
    )
    ledger: LedgerSpec = Field(default_factory=LedgerSpec)
    podGroups: PodGroupsSpec = Field(
        default_factory=PodGroupsSpec,
        description="every tenant's pod groups, unless the tenant sets its own",
    )
    schedulers: dict[str, SchedulerSpec] = Field(
        default_factory=dict,
        description="the scheduling policy of each scheduler name profiles use "
        "(`tenantgate scheduler-config` renders it)",
    )

    @field_validator("schedulers")
    @classmethod
    def _scheduler_names(cls, value: dict[str, SchedulerSpec]) -> dict[str, SchedulerSpec]:
        check_names(value)
        return value

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, value: dict[str, TenantSpec]) -> dict[str, TenantSpec]:
        for name in value:
            # The name travels in the tenantgate.io/tenant label and names a ledger object.
            if not _DNS_LABEL_RE.match(name) or len(name) > 63:
                raise ValueError(f'tenant name "{name}" is not a DNS label (a-z, 0-9, -)')
        return value


# --------------------------------------------------------------------------- compiled policy


def global_default_class(classes: Mapping[str, PriorityClassSpec]) -> str | None:
    """The class the Priority admission plugin gives pods that name none; None: no default.

    As ``getDefaultPriorityClass`` in ``plugin/pkg/admission/priority/admission.go``: of the
    classes marked ``globalDefault`` (several can exist after a race), the lowest value.
    """
    marked = [(spec.value, name) for name, spec in classes.items() if spec.globalDefault]
    return min(marked)[1] if marked else None


# A compile problem has the classifier's shape: the field path it concerns and a message.
PolicyProblem = ClassifierProblem


class PolicyError(ClassifierConfigError):
    """The config does not compile; carries every problem found (classifier's and tenants')."""


@dataclass(frozen=True, slots=True)
class NamespaceSelector:
    """A compiled namespace label selector."""

    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[tuple[str, str, frozenset[str]], ...]

    @classmethod
    def from_spec(cls, spec: NamespaceSelectorSpec) -> NamespaceSelector:
        return cls(
            tuple(spec.matchLabels.items()),
            tuple((e.key, e.operator, frozenset(e.values)) for e in spec.matchExpressions),
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In":
                if not present or labels[key] not in values:
                    return False
            elif operator == "NotIn":
                # As in Kubernetes: a namespace without the label is "not in" the set.
                if present and labels[key] in values:
                    return False
            elif operator == "Exists":
                if not present:
                    return False
            elif present:  # DoesNotExist
                return False
        return True


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A tenant's queue mode, compiled: see :class:`QueueSpec`.

    ``aging_interval`` is 0 when aging is off; ``max_boost`` then never applies.
    """

    tier: Literal["guaranteed", "burst"] = "guaranteed"
    max_pending: int = 1000
    ordering: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    aging_interval: float = 0.0
    aging_step: int = 0
    max_boost: int = 0

    @classmethod
    def from_spec(cls, spec: QueueSpec) -> QueuePolicy:
        aging = spec.aging
        return cls(
            tier=spec.tier,
            max_pending=spec.maxPending,
            ordering=spec.ordering,
            aging_interval=float(aging.intervalSeconds) if aging is not None else 0.0,
            aging_step=aging.step if aging is not None else 0,
            max_boost=aging.maxBoost if aging is not None else 0,
        )

    @property
    def aging(self) -> bool:
        return self.aging_interval > 0 and self.aging_step > 0

    def boost(self, waited: float) -> int:
        """The priority added after ``waited`` seconds: ``step`` per whole interval, capped."""
        if not self.aging or waited <= 0:
            return 0
        return min(self.max_boost, self.aging_step * int(waited // self.aging_interval))

    def at_max_boost(self, waited: float) -> bool:
        """Whether a pod that waited ``waited`` seconds has reached ``max_boost`` (never
        bypassed any more under BestEffortFIFO)."""
        return self.aging and self.boost(waited) >= self.max_boost


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """A tenant's pod groups, compiled: see :class:`PodGroupsSpec`."""

    tier: Literal["guaranteed", "burst"] = "guaranteed"
    timeout: float = 300.0

    @classmethod
    def from_specs(cls, tenant: PodGroupsSpec | None, top: PodGroupsSpec) -> GroupPolicy:
        default = cls()
        tier = (tenant.tier if tenant is not None else None) or top.tier or default.tier
        timeout = (
            (tenant.timeoutSeconds if tenant is not None else None)
            or top.timeoutSeconds
            or default.timeout
        )
        return cls(tier=tier, timeout=float(timeout))


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """One tenant, compiled: what the admission path reads for a pod of this tenant."""

    name: str
    quota: Quota
    namespaces: tuple[str, ...]
    selector: NamespaceSelector | None
    guaranteed_class: str
    allowed_classes: frozenset[str]
    allowed_profiles: frozenset[str] | None
    classifier: Classifier
    container_defaults: Mapping[str, Quantity]
    queue: QueuePolicy | None = None  # None: over-quota pods are rejected
    # A cohort member queueing for borrowed room: the most it could ever hold per resource
    # (tenants.cohorts.borrowing.most_held), what a queued pod must fit; None otherwise.
    queue_room: Mapping[str, Quantity] | None = None

    def queue_class(self, burst_class: str) -> str:
        """The class a queued pod gets when it asks for none: its queue tier's."""
        if self.queue is not None and self.queue.tier == "burst":
            return burst_class
        return self.guaranteed_class

    # Default limits (containerDefaults.limits) and bounds; empty / None when not configured.
    container_default_limits: Mapping[str, Quantity] = field(default_factory=dict)
    bounds: Bounds | None = None
    groups: GroupPolicy = field(default_factory=GroupPolicy)

    def group_queue(self) -> QueuePolicy:
        """The queue a pod group of this tenant waits in: the tenant's queue settings where
        set (queue mode's defaults otherwise), for the room of the groups' tier."""
        base = self.queue if self.queue is not None else QueuePolicy()
        return base if base.tier == self.groups.tier else replace(base, tier=self.groups.tier)


@dataclass(frozen=True, slots=True)
class ClassifierVariant:
    """A tenant classifier compiled with profile overrides, and what it was compiled from."""

    classifier: Classifier
    overrides: Mapping[str, ProfileOverrideSpec]
    path: str  # where the overrides are, for problems: tenants.NAME.profiles.overrides


@dataclass(frozen=True, slots=True)
class Policy:
    """Everything compiled from one config; immutable, swapped as a whole on reload.

    ``classifier.config`` is the classifier's part of the config (priority classes, profiles,
    rules); ``variants`` the tenants' classifiers with profile overrides. With the compiled
    tenants, they are all :meth:`with_priority_classes` needs.
    """

    classifier: Classifier
    tenants: Mapping[str, TenantPolicy]
    priority_classes: Mapping[str, PriorityClassSpec]
    burst_class: str
    unclaimed: Literal["allow", "deny"]
    reservation_ttl: float
    ledger_backend: Literal["memory", "kubernetes"]
    by_namespace: Mapping[str, TenantPolicy]
    selector_tenants: tuple[TenantPolicy, ...]
    variants: tuple[ClassifierVariant, ...] = ()
    # How long a /mutate booking waits for /validate (a hold), and the PriorityClass the
    # Priority plugin writes into pods naming none (the cluster's, else the config's).
    hold_ttl: float = 15.0
    global_default: str | None = None
    # Cohorts (empty: none), and the class of pods borrowing above their fair share.
    cohorts: CohortTree = field(default_factory=CohortTree)
    over_share_class: str = ""
    _selector_cache: dict[tuple[str, frozenset[tuple[str, str]]], Any] = field(
        default_factory=dict, repr=False, compare=False
    )

    def with_priority_classes(self, classes: Mapping[str, PriorityClassSpec]) -> Policy:
        """This policy with other values for its priority classes (the cluster's).

        ``classes`` must name exactly the classes the policy declares: only their values (and
        preemption policies) change, so only the classifiers, which write them into pods, are
        compiled again. Raises :class:`PolicyError` if they do not compile.
        """
        if set(classes) != set(self.priority_classes):
            raise ValueError("with_priority_classes: the priority class names must not change")
        declared = dict(classes)
        source = self.classifier.config.model_copy(update={"priorityClasses": declared})
        try:
            base = compile_classifier(source)
            variants = tuple(
                ClassifierVariant(
                    compile_classifier(
                        source, profile_overrides=variant.overrides, overrides_path=variant.path
                    ),
                    variant.overrides,
                    variant.path,
                )
                for variant in self.variants
            )
        except ClassifierConfigError as exc:
            raise PolicyError(exc.problems) from exc
        compiled = {id(self.classifier): base}
        compiled.update(
            (id(old.classifier), new.classifier)
            for old, new in zip(self.variants, variants, strict=True)
        )
        tenants = {
            name: replace(tenant, classifier=compiled[id(tenant.classifier)])
            for name, tenant in self.tenants.items()
        }
        return Policy(
            classifier=base,
            tenants=tenants,
            priority_classes=declared,
            burst_class=self.burst_class,
            unclaimed=self.unclaimed,
            reservation_ttl=self.reservation_ttl,
            ledger_backend=self.ledger_backend,
            by_namespace={ns: tenants[t.name] for ns, t in self.by_namespace.items()},
            selector_tenants=tuple(tenants[t.name] for t in self.selector_tenants),
            variants=variants,
            hold_ttl=self.hold_ttl,
            global_default=self.global_default,
            cohorts=self.cohorts,
            over_share_class=self.over_share_class,
        )

    @property
    def burst_classes(self) -> frozenset[str]:
        """The classes of burst-tier pods: the burst class, and with cohorts the over-share
        class."""
        if not self.cohorts:
            return frozenset((self.burst_class,))
        return frozenset((self.burst_class, self.over_share_class))

    def group_rules(self, tenant: TenantPolicy, profile: str | None) -> Sequence[GroupRule]:
        """The configured ways to find the pod group of a pod of ``tenant`` classified as
        ``profile`` (:func:`classifier.podgroups.claim_group` tries them after the labels):
        every profile's ``podGroup`` rules, whatever ``profile`` is, since the members of one
        group may be classified apart (classifier/grouprules.py)."""
        return tenant.classifier.group_rules

    def group_policy(self, tenant: TenantPolicy, profile: str | None) -> GroupPolicy:
        """How a group of ``tenant``'s pods of ``profile`` waits (its tier and timeout)."""
        return tenant.groups

    def over_share_class_for(self, tenant: str) -> str | None:
        """The over-share class when ``tenant`` is a cohort member, else None."""
        return self.over_share_class if tenant in self.cohorts.members else None

    def with_global_default(self, name: str | None) -> Policy:
        """This policy with another global default PriorityClass (the cluster's)."""
        if name == self.global_default:
            return self
        return replace(self, global_default=name)

    def tenant_for(
        self, namespace: str, labels: Mapping[str, str] | None = None
    ) -> TenantPolicy | None:
        """The tenant claiming ``namespace``: its explicit list first, then label selectors.

        Selectors need the namespace's labels; without them (offline) only explicit lists
        count. Among selector tenants the first in config order wins.
        """
        tenant = self.by_namespace.get(namespace)
        if tenant is not None or labels is None or not self.selector_tenants:
            return tenant
        key = (namespace, frozenset(labels.items()))
        cache = self._selector_cache
        cached = cache.get(key, _MISSING)
        if cached is not _MISSING:
            return cast("TenantPolicy | None", cached)
        found = next(
            (t for t in self.selector_tenants if t.selector and t.selector.matches(labels)), None
        )
        if len(cache) >= 4096:
            cache.clear()
        cache[key] = found
        return found


def _override_key(overrides: Mapping[str, ProfileOverrideSpec]) -> str:
    return "\n".join(f"{name}={overrides[name].model_dump_json()}" for name in sorted(overrides))


def _amounts_key(amounts: Mapping[str, Quantity]) -> tuple[tuple[str, int, str], ...]:
    """Equal keys for amounts that are equal *and written alike* (messages show the format)."""
    return tuple(sorted((name, q.nanos, q.format) for name, q in amounts.items()))


class _Sharing:
    """One instance of each distinct immutable value a compile builds per tenant.

    Tenants usually come in a few sizes and share their priority classes: at 10,000 tenants,
    a copy each of equal quotas, class sets and defaults is most of the compiled policy.
    """

    def __init__(self) -> None:
        self._values: dict[Any, Any] = {}

    def __call__(self, key: Any, value: T) -> T:
        """The first value given for ``key`` (``value`` itself the first time)."""
        return cast("T", self._values.setdefault(key, value))


def _classifier_part(config: TenantgateConfig) -> ClassifierConfig:
    """The classifier's fields of ``config`` (the same validated values), without the tenants.

    The compiled classifiers keep the config they were compiled from: given the whole config,
    they would keep every tenant's validated spec alive with it.
    """
    return ClassifierConfig.model_construct(
        {name for name in config.model_fields_set if name in ClassifierConfig.model_fields},
        **{name: getattr(config, name) for name in ClassifierConfig.model_fields},
    )


def _bounds_level(spec: BoundsLevelSpec | None) -> BoundsLevel | None:
    if spec is None:
        return None
    level = BoundsLevel(
        min=dict(spec.min), max=dict(spec.max), ratio=dict(spec.maxLimitRequestRatio)
    )
    return level if level else None


def _bounds(spec: BoundsSpec | None) -> Bounds | None:
    if spec is None:
        return None
    container, pod = _bounds_level(spec.container), _bounds_level(spec.pod)
    return Bounds(container, pod) if container is not None or pod is not None else None


def compile_policy(config: TenantgateConfig) -> Policy:
    """Check every cross-reference and compile; :class:`PolicyError` lists every problem.

    The policy does not keep ``config``: a server holds only what it compiled.
    """
    problems: list[PolicyProblem] = []
    classes = config.priorityClasses
    profiles = config.profiles
    source = _classifier_part(config)

    try:
        base = compile_classifier(source)
    except ClassifierConfigError as exc:
        problems.extend(exc.problems)
        base = None

    if config.burstPriorityClass not in classes:
        problems.append(
            PolicyProblem(
                "burstPriorityClass",
                f'unknown priority class "{config.burstPriorityClass}" '
                "(declare it under priorityClasses)",
            )
        )

    tenants: dict[str, TenantPolicy] = {}
    by_namespace: dict[str, TenantPolicy] = {}
    memberships: dict[str, Membership] = {}
    shared = _Sharing()
    claimed_by: dict[str, str] = {}
    selector_tenants: list[TenantPolicy] = []
    classifiers: dict[str, Classifier] = {}
    variants: list[ClassifierVariant] = []
    for name, spec in config.tenants.items():
        where = ("tenants", name)
        tenant_problems = len(problems)
        pcs = spec.priorityClasses
        if pcs.guaranteed not in classes:
            problems.append(
                PolicyProblem(
                    field_path(*where, "priorityClasses", "guaranteed"),
                    f'unknown priority class "{pcs.guaranteed}" (declare it under priorityClasses)',
                )
            )
        for index, allowed_class in enumerate(pcs.allowed):
            if allowed_class not in classes:
                problems.append(
                    PolicyProblem(
                        field_path(*where, "priorityClasses", "allowed", index),
                        f'unknown priority class "{allowed_class}" '
                        "(declare it under priorityClasses)",
                    )
                )
        allowed_profiles = spec.profiles.allowed
        for index, profile in enumerate(allowed_profiles or ()):
            if profile not in profiles:
                problems.append(
                    PolicyProblem(
                        field_path(*where, "profiles", "allowed", index),
                        f'unknown profile "{profile}"',
                    )
                )
        overrides = spec.profiles.overrides
        for profile in overrides:
            if profile not in profiles:
                problems.append(
                    PolicyProblem(
                        field_path(*where, "profiles", "overrides", profile),
                        f'unknown profile "{profile}"',
                    )
                )
        for index, namespace in enumerate(spec.namespaces):
            owner = claimed_by.get(namespace)
            if owner is not None:
                problems.append(
                    PolicyProblem(
                        field_path(*where, "namespaces", index),
                        f'namespace "{namespace}" is already claimed by tenant "{owner}"',
                    )
                )
            else:
                claimed_by[namespace] = name
        classifier = base
        if overrides and base is not None and len(problems) == tenant_problems:
            key = _override_key(overrides)
            classifier = classifiers.get(key)
            if classifier is None:
                path = field_path(*where, "profiles", "overrides")
                try:
                    classifier = compile_classifier(
                        source, profile_overrides=overrides, overrides_path=path
                    )
                except ClassifierConfigError as exc:
                    problems.extend(exc.problems)
                    classifier = None
                else:
                    classifiers[key] = classifier
                    variants.append(ClassifierVariant(classifier, overrides, path))
        if classifier is None or len(problems) != tenant_problems:
            continue
        quota_spec = spec.quota
        burst = quota_spec.burst
        ratio = Fraction(burst.ratio) if burst is not None and burst.ratio is not None else None
        maximum = burst.max if burst is not None else None
        quota = shared(
            ("quota", _amounts_key(quota_spec.guaranteed), ratio, _amounts_key(maximum or {})),
            build_quota(quota_spec.guaranteed, ratio=ratio, maximum=maximum),
        )
        # The burst classes are never an escalation: they are the lowest a tenant pod gets.
        burst_classes: tuple[str, ...] = (config.burstPriorityClass,)
        if spec.cohort is not None:
            burst_classes += (config.overShareBurstPriorityClass,)
            memberships[name] = _membership(name, spec, quota)
        classes_allowed = frozenset((pcs.guaranteed, *pcs.allowed, *burst_classes))
        profiles_allowed = frozenset(allowed_profiles) if allowed_profiles is not None else None
        defaults = spec.containerDefaults.requests if spec.containerDefaults is not None else {}
        default_limits = spec.containerDefaults.limits if spec.containerDefaults is not None else {}
        tenant = TenantPolicy(
            name=name,
            quota=quota,
            namespaces=tuple(spec.namespaces),
            selector=(
                NamespaceSelector.from_spec(spec.namespaceSelector)
                if spec.namespaceSelector is not None
                else None
            ),
            guaranteed_class=pcs.guaranteed,
            allowed_classes=shared(classes_allowed, classes_allowed),
            allowed_profiles=shared(profiles_allowed, profiles_allowed),
            classifier=classifier,
            container_defaults=shared(("defaults", _amounts_key(defaults)), dict(defaults)),
            queue=(
                shared(("queue", spec.queue), QueuePolicy.from_spec(spec.queue or QueueSpec()))
                if spec.overQuota == "queue"
                else None
            ),
            container_default_limits=shared(
                ("default limits", _amounts_key(default_limits)), dict(default_limits)
            ),
            bounds=shared(("bounds", repr(spec.bounds)), _bounds(spec.bounds)),
            groups=shared(
                ("groups", repr(spec.podGroups), repr(config.podGroups)),
                GroupPolicy.from_specs(spec.podGroups, config.podGroups),
            ),
        )
        tenants[name] = tenant
        for namespace in spec.namespaces:
            by_namespace.setdefault(namespace, tenant)
        if tenant.selector is not None:
            selector_tenants.append(tenant)

    cohorts, cohort_problems = build_cohorts(
        {
            name: Cohort(name, parent=c.parent, quota=dict(c.quota), description=c.description)
            for name, c in config.cohorts.items()
        },
        memberships,
    )
    problems.extend(PolicyProblem(p.path, p.message) for p in cohort_problems)
    problems.extend(_cohort_support_problems(config))
    if not problems:
        _with_queue_rooms(cohorts, tenants, by_namespace, selector_tenants)

    if problems or base is None:
        raise PolicyError(problems)
    return Policy(
        classifier=base,
        tenants=tenants,
        priority_classes=dict(classes),
        burst_class=config.burstPriorityClass,
        unclaimed=config.unclaimedNamespaces,
        reservation_ttl=float(config.reservationTTLSeconds),
        ledger_backend=config.ledger.backend,
        by_namespace=by_namespace,
        selector_tenants=tuple(selector_tenants),
        variants=tuple(variants),
        # A hold never outlives the reservation it becomes.
        hold_ttl=float(min(config.holdTTLSeconds, config.reservationTTLSeconds)),
        global_default=global_default_class(classes),
        cohorts=cohorts,
        over_share_class=config.overShareBurstPriorityClass,
    )


def _with_queue_rooms(
    cohorts: CohortTree,
    tenants: dict[str, TenantPolicy],
    by_namespace: dict[str, TenantPolicy],
    selector_tenants: list[TenantPolicy],
) -> None:
    """Give each cohort member that queues for the burst tier its :attr:`queue_room`."""
    for name in cohorts.members:
        old = tenants[name]
        if old.queue is None or old.queue.tier != "burst":
            continue
        new = replace(old, queue_room=most_held(cohorts, name, old.quota.ceiling))
        tenants[name] = new
        for namespace, owner in by_namespace.items():
            if owner is old:
                by_namespace[namespace] = new
        selector_tenants[:] = [new if t is old else t for t in selector_tenants]


def _membership(name: str, spec: TenantSpec, quota: Quota) -> Membership:
    weight = spec.fairSharing.weight if spec.fairSharing is not None else Decimal(1)
    return Membership(
        tenant=name,
        cohort=spec.cohort or "",
        guaranteed=quota.guaranteed,
        lending_limit=dict(spec.lendingLimit),
        borrowing_limit=dict(spec.borrowingLimit),
        ceiling=quota.ceiling if spec.quota.burst is not None else None,
        weight=Fraction(weight),
    )


def _cohort_support_problems(config: TenantgateConfig) -> list[PolicyProblem]:
    """What cohorts need, and the combinations that are not supported yet (refused, so that
    nothing is ever lent twice)."""
    if not config.cohorts and not any(t.cohort for t in config.tenants.values()):
        return []
    problems: list[PolicyProblem] = []
    if config.overShareBurstPriorityClass not in config.priorityClasses:
        problems.append(
            PolicyProblem(
                "overShareBurstPriorityClass",
                f'unknown priority class "{config.overShareBurstPriorityClass}" '
                "(declare it under priorityClasses: cohorts need it)",
            )
        )
    for name, spec in config.tenants.items():
        groups = GroupPolicy.from_specs(spec.podGroups, config.podGroups)
        if spec.cohort is not None and groups.tier == "burst":
            problems.append(
                PolicyProblem(
                    field_path("tenants", name, "podGroups", "tier"),
                    "a cohort member's pod groups cannot wait for borrowed room (a group is "
                    "booked on its tenant's own room); use podGroups.tier: guaranteed",
                )
            )
    return problems
