"""Which pod group a pod belongs to, and where the group's size is written.

A pod group is a set of pods that only work together (distributed training, an Indexed Job):
tenantgate admits it all or nothing. :func:`claim_group` reads one pod and answers with a
:class:`GroupClaim`: the group's identity and either its size, when the pod carries it, or a
:class:`SizeRef` naming the object and fields that hold it (an owner Job, a coscheduling
``PodGroup``), which the caller reads from the cluster. The sources, checked in this order:

1. ``tenantgate.io/pod-group`` and ``tenantgate.io/pod-group-size`` (labels or annotations;
   a label wins over an annotation of the same key);
2. the coscheduling label ``scheduling.x-k8s.io/pod-group``: the ``PodGroup`` of that name in
   the pod's namespace gives ``spec.minMember``;
3. the ``rules`` given (a profile's ``podGroup`` rule), first match wins;
4. an Indexed Job's pod (the Job controller's ``batch.kubernetes.io/job-completion-index``
   annotation and a controlling Job owner): the Job, sized by its ``spec.parallelism``.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from classifier import podview
from classifier.records import record

GROUP_KEY = "tenantgate.io/pod-group"
GROUP_SIZE_KEY = "tenantgate.io/pod-group-size"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
# pkg/controller/job/indexed_job_utils.go: the index of an Indexed Job's pod.
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The largest group tenantgate accepts: a size past it is a mistake, not a group.
MAX_GROUP_SIZE = 100_000


class GroupClaimError(ValueError):
    """The pod names a group in a way that cannot be honoured (a size that is not a count)."""


@dataclass(frozen=True, slots=True)
class SizeRef:
    """The object whose fields give a group's size: the sum of the integers at ``fields``.

    A field is a dotted path; ``*`` stands for every key of an object or every item of a list,
    so ``spec.pytorchReplicaSpecs.*.replicas`` adds the replicas of every replica type.
    ``factors`` multiply each integer found by the integers at these paths, read in the object
    that holds it (a missing factor counts 1): a JobSet's pods are, per replicated job,
    ``replicas`` x ``template.spec.parallelism``. ``default``, when set, is what an object
    reached by a field's path counts when it lacks the field's last key (the operator's
    default: a JobSet's replicated job without ``replicas`` has one).
    """

    api_version: str
    kind: str
    namespace: str
    name: str
    fields: tuple[str, ...]
    factors: tuple[str, ...] = ()
    default: int | None = None

    def size_of(self, document: Mapping[str, Any]) -> int | None:
        """The size ``document`` gives, or None when none of the fields holds an integer."""
        total = 0
        found = False
        for field in self.fields:
            *parent_path, last = field.split(".")
            for holder in _values(document, parent_path):
                values = list(_values(holder, [last]))
                if not values and self.default is not None and isinstance(holder, dict):
                    values = [self.default]
                for value in values:
                    if _is_count(value):
                        total += value * self._factor(holder)
                        found = True
        return total if found else None

    def _factor(self, holder: Any) -> int:
        product = 1
        for factor in self.factors:
            value = next((v for v in _values(holder, factor.split(".")) if _is_count(v)), 1)
            product *= value
        return product

    def describe(self) -> str:
        fields = ", ".join(
            f"{field} x {' x '.join(self.factors)}" if self.factors else field
            for field in self.fields
        )
        return f"{self.kind} {self.namespace}/{self.name} ({fields})"


@record
class GroupClaim:
    """A pod's group: ``key`` is unique within a namespace, ``name`` is what people read.

    Exactly one of ``size`` (known from the pod) and ``size_from`` (to be read) is set.
    ``source`` says which rule of the module docstring found it: ``labels``, ``coscheduling``,
    ``indexed-job`` or ``rule:<name>``.
    """

    key: str
    name: str
    source: str
    size: int | None = None
    size_from: SizeRef | None = None


class GroupRule(Protocol):
    """A configured way to find groups (a profile's ``podGroup``); first match wins.

    ``labels`` are the pod's labels as :func:`classifier.podview.labels` reads them: every rule
    is asked about the same pod, which reads them once.
    """

    def claim(self, pod: Mapping[str, Any], labels: Mapping[str, str]) -> GroupClaim | None: ...


def claim_group(pod: Mapping[str, Any], rules: Sequence[GroupRule] = ()) -> GroupClaim | None:
    """The group ``pod`` belongs to, or None. Raises :class:`GroupClaimError` for a
    ``tenantgate.io/pod-group`` pod whose size is missing or not a positive count."""
    labels = podview.labels(pod)
    namespace = podview.namespace(pod) or ""
    name = labels.get(GROUP_KEY) or podview.annotation(pod, GROUP_KEY)
    if name:
        raw = labels.get(GROUP_SIZE_KEY) or podview.annotation(pod, GROUP_SIZE_KEY)
        return GroupClaim(
            key=f"labels/{name}", name=name, source="labels", size=parse_size(raw, GROUP_SIZE_KEY)
        )
    coscheduled = labels.get(COSCHEDULING_LABEL)
    if coscheduled:
        ref = SizeRef(
            COSCHEDULING_API_VERSION, "PodGroup", namespace, coscheduled, ("spec.minMember",)
        )
        return GroupClaim(
            key=f"coscheduling/{coscheduled}",
            name=coscheduled,
            source="coscheduling",
            size_from=ref,
        )
    for rule in rules:
        claim = rule.claim(pod, labels)
        if claim is not None:
            return claim
    if podview.annotation(pod, JOB_COMPLETION_INDEX) is not None or JOB_COMPLETION_INDEX in labels:
        job = controlling_owner(podview.owner_references(pod), kind="Job", api_group="batch")
        if job is not None:
            ref = SizeRef("batch/v1", "Job", namespace, job, ("spec.parallelism",))
            return GroupClaim(key=f"job/{job}", name=job, source="indexed-job", size_from=ref)
    return None


def parse_size(raw: str | None, field: str) -> int:
    """A group size written as text: a positive count up to :data:`MAX_GROUP_SIZE`."""
    if raw is None:
        raise GroupClaimError(f"{GROUP_KEY} needs {field}: the number of pods in the group")
    text = raw.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_GROUP_SIZE:
        raise GroupClaimError(
            f"{field}={raw!r} is not a group size: write a whole number from 1 to {MAX_GROUP_SIZE}"
        )
    return int(text)


def controlling_owner(
    references: Iterable[Mapping[str, Any]], *, kind: str, api_group: str
) -> str | None:
    """The name of the controlling owner of ``kind`` in ``api_group`` (any version), if any."""
    for reference in references:
        api_version = podview.string(reference.get("apiVersion")) or ""
        group = api_version.rpartition("/")[0]
        if (
            reference.get("controller") is True
            and reference.get("kind") == kind
            and group == api_group
        ):
            return podview.string(reference.get("name"))
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _values(value: Any, path: list[str]) -> Iterable[Any]:
    if not path:
        yield value
        return
    head, rest = path[0], path[1:]
    if head == "*":
        children: Iterable[Any] = (
            value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        )
        for child in children:
            yield from _values(child, rest)
    elif isinstance(value, dict) and head in value:
        yield from _values(value[head], rest)
