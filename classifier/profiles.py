"""Profiles: compiling a ``ProfileSpec`` once and applying its scheduling intent to a pod.

Every field is a default that leaves what the pod set alone unless the profile enforces it;
tolerations are merged as a set. Spread constraints and sibling (anti-)affinity terms get a
label selector built from the pod's own app labels, so it selects the pod's siblings (and
``matchLabelKeys: [pod-template-hash]`` for Deployment pods, so a rollout only counts its own
revision); with no usable label the constraint is skipped with a note, never emitted with a
selector that selects nothing.

Copy discipline: ``apply_profile`` receives a pod whose top level, ``metadata`` and ``spec``
are the caller's own shallow copies. It only ever replaces values under those (with new
objects); it never modifies a nested object in place, so every other subtree can be shared
with the original pod.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from classifier import podview
from classifier.config import (
    ClassifierProblem,
    PodAffinitySpec,
    PodAffinityTermSpec,
    PriorityClassSpec,
    ProfileSpec,
    SpreadConstraintSpec,
    TolerationSpec,
    set_priority_class,
)
from classifier.podview import clone
from classifier.types import JSONObject

logger = logging.getLogger(__name__)

DEFAULT_SCHEDULER = "default-scheduler"
POD_TEMPLATE_HASH = "pod-template-hash"
# Labels that name a workload (shared by all its pods, never unique per pod), most specific
# kinds first; a selector uses every one the pod carries.
APP_LABEL_KEYS: tuple[str, ...] = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app",
    "k8s-app",
    "name",
    "component",
    "tier",
    "role",
    "release",
    "run",
)

TolerationKey = tuple[str, str, str, str, int | None]


def render(model: BaseModel) -> JSONObject:
    """A config model as pod JSON: no nulls and no empty lists or maps (Kubernetes omits
    them), so what the profile adds compares equal to what a pod already carries."""
    pruned = _prune(model.model_dump(by_alias=True, exclude_none=True))
    return pruned if isinstance(pruned, dict) else {}


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: p for k, v in value.items() if (p := _prune(v)) not in ({}, [])}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


# --------------------------------------------------------------------------- tolerations


def toleration_key(toleration: Mapping[str, Any]) -> TolerationKey:
    """A toleration with Kubernetes defaulting applied: operator Equal, empty strings."""
    seconds = toleration.get("tolerationSeconds")
    return (
        podview.string(toleration.get("key")) or "",
        podview.string(toleration.get("operator")) or "Equal",
        podview.string(toleration.get("value")) or "",
        podview.string(toleration.get("effect")) or "",
        seconds if isinstance(seconds, int) and not isinstance(seconds, bool) else None,
    )


def toleration_covers(existing: TolerationKey, wanted: TolerationKey) -> bool:
    """Whether ``existing`` tolerates every taint ``wanted`` does, for at least as long."""
    e_key, e_op, e_value, e_effect, e_seconds = existing
    w_key, w_op, w_value, w_effect, w_seconds = wanted
    if e_key:
        if e_key != w_key:
            return False
        if e_op != "Exists" and (w_op == "Exists" or e_value != w_value):
            return False
    elif e_op != "Exists":
        return False
    if e_effect and e_effect != w_effect:
        return False
    if e_seconds is None:
        return True
    return w_seconds is not None and e_seconds >= w_seconds


def describe_toleration(key: TolerationKey) -> str:
    """As ``kubectl describe`` shows it: ``nvidia.com/gpu:NoSchedule op=Exists``."""
    name, op, value, effect, seconds = key
    text = name + (f"={value}" if value else "") + (f":{effect}" if effect else "")
    if op == "Exists":
        text += " op=Exists" if text else "op=Exists"
    if seconds is not None:
        text += f" for {seconds}s"
    return text


def _toleration_json(spec: TolerationSpec) -> JSONObject:
    return render(spec)


# --------------------------------------------------------------------------- selectors


def sibling_selector(labels: Mapping[str, str]) -> dict[str, str]:
    """The pod's app labels: a selector every pod of the same workload matches."""
    return {key: labels[key] for key in APP_LABEL_KEYS if labels.get(key)}


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels + matchExpressions) selects ``labels``."""
    for key, value in podview.obj(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in podview.objects(selector.get("matchExpressions")):
        key = podview.string(expression.get("key")) or ""
        op = expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


# --------------------------------------------------------------------------- compiled profile


@dataclass(frozen=True, slots=True)
class CompiledPodAffinity:
    """A profile's pod (anti-)affinity, each term next to its JSON rendered once."""

    required: tuple[tuple[PodAffinityTermSpec, JSONObject], ...]
    preferred: tuple[tuple[int, PodAffinityTermSpec, JSONObject], ...]  # weight, term, JSON


@dataclass(frozen=True, slots=True)
class CompiledProfile:
    """A profile ready to apply. Pre-rendered JSON sits next to the model it was rendered from
    (each use takes a copy), so a compiled profile survives pickling unchanged."""

    name: str
    spec: ProfileSpec
    priority: tuple[str, PriorityClassSpec] | None
    tolerations: tuple[tuple[TolerationKey, JSONObject], ...]
    spread: tuple[tuple[SpreadConstraintSpec, JSONObject], ...]
    # "podAffinity" and "podAntiAffinity", for those the profile sets.
    pod_affinities: Mapping[str, CompiledPodAffinity]
    node_affinity: JSONObject | None
    enforce: frozenset[str]


def compile_profile(
    name: str,
    spec: ProfileSpec,
    *,
    priority_classes: Mapping[str, PriorityClassSpec],
    path: str,
    problems: list[ClassifierProblem],
) -> CompiledProfile:
    """Resolve the priority class and pre-render the JSON the profile adds."""
    priority = None
    if spec.priorityClassName is not None:
        resolved = priority_classes.get(spec.priorityClassName)
        if resolved is None:
            known = ", ".join(sorted(priority_classes)) or "none defined"
            problems.append(
                ClassifierProblem(
                    f"{path}.priorityClassName",
                    f'unknown priority class "{spec.priorityClassName}" (known: {known})',
                )
            )
        else:
            priority = (spec.priorityClassName, resolved)
    for field_name in spec.enforce:
        if _is_unset(getattr(spec, field_name)):
            problems.append(
                ClassifierProblem(
                    f"{path}.enforce", f"enforces {field_name}, but the profile does not set it"
                )
            )
    tolerations: list[tuple[TolerationKey, JSONObject]] = []
    for toleration in spec.tolerations:
        rendered = _toleration_json(toleration)
        key = toleration_key(rendered)
        if all(key != have for have, _ in tolerations):
            tolerations.append((key, rendered))
    node_affinity = None
    if spec.affinity is not None and spec.affinity.nodeAffinity is not None:
        node_affinity = render(spec.affinity.nodeAffinity)
    return CompiledProfile(
        name=name,
        spec=spec,
        priority=priority,
        tolerations=tuple(tolerations),
        spread=tuple((model, render(model)) for model in spec.topologySpreadConstraints),
        pod_affinities=_compile_pod_affinities(spec),
        node_affinity=node_affinity or None,
        enforce=frozenset(spec.enforce),
    )


def _compile_pod_affinities(spec: ProfileSpec) -> dict[str, CompiledPodAffinity]:
    if spec.affinity is None:
        return {}
    compiled = {}
    for what in ("podAffinity", "podAntiAffinity"):
        pod_affinity: PodAffinitySpec | None = getattr(spec.affinity, what)
        if pod_affinity is not None:
            compiled[what] = CompiledPodAffinity(
                required=tuple(
                    (term, render(term))
                    for term in pod_affinity.requiredDuringSchedulingIgnoredDuringExecution
                ),
                preferred=tuple(
                    (weighted.weight, weighted.podAffinityTerm, render(weighted.podAffinityTerm))
                    for weighted in pod_affinity.preferredDuringSchedulingIgnoredDuringExecution
                ),
            )
    return compiled


def _is_unset(value: Any) -> bool:
    return value is None or value == {} or value == []


# --------------------------------------------------------------------------- applying


def apply_profile(pod: JSONObject, profile: CompiledProfile, *, notes: list[str] | None) -> bool:
    """Apply ``profile`` to ``pod`` (see the module docstring for what may be written).

    Returns whether anything changed; appends a plain-words line to ``notes`` for every
    decision a user may wonder about (with ``notes`` None, as on the admission path, where
    nothing reads them, the lines are not written).
    """
    spec_obj: JSONObject = pod["spec"]
    meta: JSONObject = pod["metadata"]
    changed = False
    changed |= _apply_map(meta, "labels", profile, notes=notes)
    changed |= _apply_map(meta, "annotations", profile, notes=notes)
    changed |= _apply_scheduler(spec_obj, profile, notes=notes)
    changed |= _apply_priority(pod, profile, notes=notes)
    spec_obj = pod["spec"]  # set_priority_class may have replaced it with its own copy
    changed |= _apply_node_selector(spec_obj, profile, notes=notes)
    changed |= _apply_tolerations(spec_obj, profile, notes=notes)
    if profile.spread or profile.spec.affinity is not None:
        # Only spread and affinity select the pod's siblings by its labels.
        labels = podview.labels(pod)
        changed |= _apply_spread(spec_obj, profile, labels=labels, notes=notes)
        changed |= _apply_affinity(spec_obj, profile, labels=labels, notes=notes)
    return changed


def _apply_map(
    meta: JSONObject, field_name: str, profile: CompiledProfile, *, notes: list[str] | None
) -> bool:
    wanted: Mapping[str, str] = getattr(profile.spec, field_name)
    if not wanted:
        return False
    current = meta.get(field_name)
    have: Mapping[str, Any] = current if isinstance(current, dict) else {}
    enforce = field_name in profile.enforce
    updated: dict[str, Any] | None = None
    for key, value in wanted.items():
        if key not in have or (enforce and have[key] != value):
            if updated is None:
                updated = dict(have)
            updated[key] = value
        elif notes is not None and have[key] != value:
            notes.append(
                f"kept {field_name[:-1]} {key}={have[key]} set by the pod (profile: {value})"
            )
    if updated is None:
        return False
    meta[field_name] = updated
    if notes is not None:
        added = ", ".join(f"{k}={v}" for k, v in updated.items() if have.get(k) != v)
        notes.append(f"{field_name} set: {added}")
    return True


def _apply_scheduler(
    spec_obj: JSONObject, profile: CompiledProfile, *, notes: list[str] | None
) -> bool:
    wanted = profile.spec.schedulerName
    if wanted is None:
        return False
    current = podview.string(spec_obj.get("schedulerName"))
    if current == wanted:
        return False
    # The API server defaults an empty schedulerName to default-scheduler before admission,
    # so that value cannot be told apart from "not set" and is treated as not set.
    if current not in (None, "", DEFAULT_SCHEDULER) and "schedulerName" not in profile.enforce:
        if notes is not None:
            notes.append(f"kept schedulerName {current} set by the pod (profile: {wanted})")
        return False
    spec_obj["schedulerName"] = wanted
    if notes is not None:
        notes.append(f"schedulerName set to {wanted}")
    return True


def _apply_priority(pod: JSONObject, profile: CompiledProfile, *, notes: list[str] | None) -> bool:
    if profile.priority is None:
        return False
    name, resolved = profile.priority
    current = podview.string(podview.spec(pod).get("priorityClassName"))
    if current and current != name and "priorityClassName" not in profile.enforce:
        if notes is not None:
            notes.append(f"kept priorityClassName {current} set by the pod (profile: {name})")
        return False
    if not set_priority_class(pod, name=name, spec=resolved):
        return False
    if notes is not None:
        notes.append(
            f"priorityClassName set to {name} (priority {resolved.value}, "
            f"preemptionPolicy {resolved.preemptionPolicy})"
        )
    return True


def _apply_node_selector(
    spec_obj: JSONObject, profile: CompiledProfile, *, notes: list[str] | None
) -> bool:
    wanted = profile.spec.nodeSelector
    if not wanted:
        return False
    current = spec_obj.get("nodeSelector")
    have: Mapping[str, Any] = current if isinstance(current, dict) else {}
    if have and "nodeSelector" not in profile.enforce:
        if notes is not None and any(have.get(k) != v for k, v in wanted.items()):
            notes.append("kept the pod's own nodeSelector (profile nodeSelector not applied)")
        return False
    if all(have.get(k) == v for k, v in wanted.items()):
        return False
    spec_obj["nodeSelector"] = {**have, **wanted}
    if notes is not None:
        notes.append("nodeSelector set: " + ", ".join(f"{k}={v}" for k, v in wanted.items()))
    return True


def _apply_tolerations(
    spec_obj: JSONObject, profile: CompiledProfile, *, notes: list[str] | None
) -> bool:
    if not profile.tolerations:
        return False
    current = spec_obj.get("tolerations")
    existing = list(current) if isinstance(current, list) else []
    keys = [toleration_key(t) for t in existing if isinstance(t, dict)]
    added = []
    for key, rendered in profile.tolerations:
        if any(toleration_covers(have, key) for have in keys):
            continue
        existing.append(clone(rendered))
        keys.append(key)
        added.append(key)
    if not added:
        return False
    spec_obj["tolerations"] = existing
    if notes is not None:
        notes.append("tolerations added: " + ", ".join(describe_toleration(k) for k in added))
    return True


def _spread_json(
    base: JSONObject, selector: Mapping[str, str], *, template_hash: bool
) -> JSONObject:
    rendered: JSONObject = clone(base)
    keys = [k for k in rendered.pop("matchLabelKeys", []) if k not in selector]
    if template_hash and POD_TEMPLATE_HASH not in keys:
        keys.append(POD_TEMPLATE_HASH)
    rendered["labelSelector"] = {"matchLabels": dict(selector)}
    if keys:
        rendered["matchLabelKeys"] = keys
    return rendered


def _no_selector_note(what: str) -> str:
    return (
        f"skipped {what}: the pod has none of the labels {', '.join(APP_LABEL_KEYS[:4])}, ... "
        "to select its siblings"
    )


def _apply_spread(
    spec_obj: JSONObject,
    profile: CompiledProfile,
    *,
    labels: Mapping[str, str],
    notes: list[str] | None,
) -> bool:
    if not profile.spread:
        return False
    selector = sibling_selector(labels)
    if not selector:
        if notes is not None:
            for constraint, _ in profile.spread:
                notes.append(_no_selector_note(f"spread over {constraint.topologyKey}"))
        return False
    template_hash = POD_TEMPLATE_HASH in labels
    current = spec_obj.get("topologySpreadConstraints")
    existing = list(current) if isinstance(current, list) else []
    enforce = "topologySpreadConstraints" in profile.enforce
    changed = False
    for constraint, constraint_json in profile.spread:
        rendered = _spread_json(constraint_json, selector, template_hash=template_hash)
        same_key = [
            i
            for i, item in enumerate(existing)
            if isinstance(item, dict) and item.get("topologyKey") == constraint.topologyKey
        ]
        if same_key and not enforce:
            if notes is not None and all(existing[i] != rendered for i in same_key):
                notes.append(
                    f"kept the pod's own spread over {constraint.topologyKey} "
                    "(profile constraint not applied)"
                )
            continue
        if [existing[i] for i in same_key] == [rendered]:
            continue
        existing = [item for i, item in enumerate(existing) if i not in same_key]
        existing.append(rendered)
        changed = True
        if notes is not None:
            notes.append(
                f"spread over {constraint.topologyKey} (maxSkew {constraint.maxSkew}, "
                f"{constraint.whenUnsatisfiable}) among pods with "
                + ", ".join(f"{k}={v}" for k, v in selector.items())
            )
    if changed:
        spec_obj["topologySpreadConstraints"] = existing
    return changed


def _term_json(
    term: PodAffinityTermSpec,
    term_json: JSONObject,
    *,
    selector: Mapping[str, str],
    template_hash: bool,
) -> JSONObject | None:
    rendered: JSONObject = clone(term_json)
    if term.labelSelector is not None:
        return rendered
    if not selector:
        return None
    rendered["labelSelector"] = {"matchLabels": dict(selector)}
    if template_hash:
        rendered["matchLabelKeys"] = [POD_TEMPLATE_HASH]
    return rendered


def _render_pod_affinity(
    compiled: CompiledPodAffinity,
    *,
    what: str,
    selector: Mapping[str, str],
    template_hash: bool,
    notes: list[str],
) -> JSONObject:
    required = []
    for term, term_json in compiled.required:
        rendered = _term_json(term, term_json, selector=selector, template_hash=template_hash)
        if rendered is None:
            notes.append(_no_selector_note(f"required {what} over {term.topologyKey}"))
        else:
            required.append(rendered)
    preferred = []
    for weight, term, term_json in compiled.preferred:
        rendered = _term_json(term, term_json, selector=selector, template_hash=template_hash)
        if rendered is None:
            notes.append(_no_selector_note(f"preferred {what} over {term.topologyKey}"))
        else:
            preferred.append({"weight": weight, "podAffinityTerm": rendered})
    result: JSONObject = {}
    if required:
        result["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if preferred:
        result["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return result


def _apply_affinity(
    spec_obj: JSONObject,
    profile: CompiledProfile,
    *,
    labels: Mapping[str, str],
    notes: list[str] | None,
) -> bool:
    affinity_spec = profile.spec.affinity
    if affinity_spec is None:
        return False
    current = spec_obj.get("affinity")
    have: Mapping[str, Any] = current if isinstance(current, dict) else {}
    enforce = "affinity" in profile.enforce
    selector = sibling_selector(labels)
    template_hash = POD_TEMPLATE_HASH in labels
    updated: dict[str, Any] | None = None
    for what in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        skipped: list[str] = []
        rendered: JSONObject | None
        if what == "nodeAffinity":
            rendered = profile.node_affinity
        else:
            pod_affinity = profile.pod_affinities.get(what)
            rendered = (
                None
                if pod_affinity is None
                else _render_pod_affinity(
                    pod_affinity,
                    what=what,
                    selector=selector,
                    template_hash=template_hash,
                    notes=skipped,
                )
            )
        existing = have.get(what)
        present = isinstance(existing, dict) and bool(existing)
        if present and not enforce:
            if notes is not None and rendered is not None and existing != rendered:
                notes.append(f"kept the pod's own {what} (profile {what} not applied)")
            continue
        if notes is not None:
            notes.extend(skipped)
        if not rendered:
            continue
        merged: Any
        if not present or not isinstance(existing, dict):
            merged = clone(rendered)
        elif what == "nodeAffinity":
            merged = _merge_node_affinity(existing, rendered)
        else:
            merged = _merge_terms(existing, rendered)
        if merged == existing:
            continue
        if updated is None:
            updated = dict(have)
        updated[what] = merged
        if notes is not None:
            notes.append(f"{what} set from profile {profile.name}")
    if updated is None:
        return False
    spec_obj["affinity"] = updated
    return True


def _merge_terms(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> JSONObject:
    """Append the profile's pod (anti-)affinity terms the pod does not have yet."""
    merged: JSONObject = dict(existing)
    for field_name, terms in wanted.items():
        have = existing.get(field_name)
        items = list(have) if isinstance(have, list) else []
        for term in terms:
            if term not in items:
                items.append(clone(term))
        merged[field_name] = items
    return merged


def _merge_node_affinity(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> JSONObject:
    """Enforced node affinity: AND the profile's requirement into the pod's, keep both.

    Node selector terms are ORed, so "pod's terms AND profile's terms" is every pair merged;
    a term that already contains one of the profile's terms is kept as is (idempotence).
    """
    merged: JSONObject = dict(existing)
    want_required = podview.obj(wanted.get("requiredDuringSchedulingIgnoredDuringExecution"))
    want_terms = list(podview.objects(want_required.get("nodeSelectorTerms")))
    if want_terms:
        have_required = podview.obj(existing.get("requiredDuringSchedulingIgnoredDuringExecution"))
        have_terms = list(podview.objects(have_required.get("nodeSelectorTerms")))
        if not have_terms:
            terms = [clone(t) for t in want_terms]
        else:
            terms = []
            for term in have_terms:
                if any(_term_contains(term, want) for want in want_terms):
                    terms.append(term)
                    continue
                for want in want_terms:
                    combined = _combine_terms(term, want)
                    if combined not in terms:
                        terms.append(combined)
        merged["requiredDuringSchedulingIgnoredDuringExecution"] = {
            **have_required,
            "nodeSelectorTerms": terms,
        }
    want_preferred = wanted.get("preferredDuringSchedulingIgnoredDuringExecution")
    if isinstance(want_preferred, list) and want_preferred:
        have_preferred = existing.get("preferredDuringSchedulingIgnoredDuringExecution")
        items = list(have_preferred) if isinstance(have_preferred, list) else []
        for item in want_preferred:
            if item not in items:
                items.append(clone(item))
        merged["preferredDuringSchedulingIgnoredDuringExecution"] = items
    return merged


def _term_contains(term: Mapping[str, Any], part: Mapping[str, Any]) -> bool:
    for field_name in ("matchExpressions", "matchFields"):
        have = term.get(field_name)
        have_items = have if isinstance(have, list) else []
        for requirement in podview.objects(part.get(field_name)):
            if requirement not in have_items:
                return False
    return True


def _combine_terms(term: Mapping[str, Any], part: Mapping[str, Any]) -> JSONObject:
    combined: JSONObject = dict(term)
    for field_name in ("matchExpressions", "matchFields"):
        add = [clone(r) for r in podview.objects(part.get(field_name))]
        if not add:
            continue
        have = term.get(field_name)
        items = list(have) if isinstance(have, list) else []
        combined[field_name] = items + [r for r in add if r not in items]
    return combined
