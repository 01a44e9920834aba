"""The request pipeline for every resource: create, read, update, patch, delete, watch.

Like the real server's generic registry (``k8s.io/apiserver/pkg/registry/generic/registry``):
decode and default, mutating admission, server-set fields (generated name and uid come *after*
the mutating webhooks), validation, validating admission, then an optimistic-concurrency write.
Dry-run requests go through every step and persist nothing. Graceful deletion, finalizers,
namespace termination and CRD registration live here as well.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from classifier.quantities import Quantity
from devapi import errors, gates, meta
from devapi.admission import AdmissionChain, AdmissionRequest, UserInfo
from devapi.errors import APIError
from devapi.kubelet import needs_sync, sync_pod
from devapi.patching import apply_patch
from devapi.plugins import PodPlugins
from devapi.resources import (
    CRDS,
    LIMIT_RANGES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    RUNTIME_CLASSES,
    SUBRESOURCE_KINDS,
    VALIDATING_WEBHOOKS,
    WEBHOOK_CONFIGURATION_KEYS,
    PrinterColumn,
    ResourceCatalog,
    ResourceKey,
    ResourceType,
    by_priority,
)
from devapi.selectors import FieldSelector, LabelSelector
from devapi.store import Store, clone, resource_version
from devapi.strategies import Strategy, resized_pod, strategy_for
from devapi.types import JSONObject
from devapi.watch import WatchOptions, WatchStream
from devapi.webhooks import Webhook, parse_configuration

logger = logging.getLogger(__name__)

MAX_UPDATE_ATTEMPTS = 10
FINALIZE_INTERVAL = 0.1
NAMESPACE_MISMATCH = (
    "the namespace of the provided object does not match the namespace sent on the request"
)


@dataclass
class RequestContext:
    """Who asks, and how: dry-run, options, and the warnings to send back."""

    user: UserInfo
    dry_run: bool = False
    field_manager: str | None = None
    field_validation: str | None = None
    warnings: list[str] = field(default_factory=list)

    def options(self, kind: str, extra: Mapping[str, Any] | None = None) -> JSONObject:
        body: JSONObject = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if self.dry_run:
            body["dryRun"] = ["All"]
        if self.field_manager and kind != "DeleteOptions":
            body["fieldManager"] = self.field_manager
        if self.field_validation and kind != "DeleteOptions":
            body["fieldValidation"] = self.field_validation
        body.update(extra or {})
        return body


@dataclass(frozen=True)
class ListOptions:
    label_selector: LabelSelector
    field_selector: FieldSelector
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""


@dataclass(frozen=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None

    def as_json(self) -> JSONObject:
        body: JSONObject = {}
        if self.grace_period_seconds is not None:
            body["gracePeriodSeconds"] = self.grace_period_seconds
        if self.propagation_policy:
            body["propagationPolicy"] = self.propagation_policy
        preconditions: JSONObject = {}
        if self.precondition_uid:
            preconditions["uid"] = self.precondition_uid
        if self.precondition_rv:
            preconditions["resourceVersion"] = self.precondition_rv
        if preconditions:
            body["preconditions"] = preconditions
        return body


ConflictCheck = Callable[[ResourceType], bool]
# The parsed webhooks, and the (name, resourceVersion) of the configurations they came from.
_ParsedWebhooks = tuple[tuple[tuple[str, str], ...], tuple[list[Webhook], list[Webhook]]]


class Registry:
    """Serves every resource type of a catalog from one store through one admission chain."""

    def __init__(
        self,
        *,
        store: Store,
        catalog: ResourceCatalog,
        chain_factory: Callable[[Registry], AdmissionChain],
        conflict_check: ConflictCheck,
        kubelet: bool = True,
        node_allocatable: Mapping[str, Quantity] | None = None,
        strategies: Mapping[ResourceKey, Callable[[ResourceType], Strategy]] | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self._conflict_check = conflict_check
        self._kubelet = kubelet
        # The simulated kubelet's node (None: large enough for any pod), and the pods whose
        # status it has to write next (found when they are written, not by scanning them all).
        self._node_allocatable = node_allocatable
        self._kubelet_pending: set[tuple[str, str]] = set()
        # Tests hold the kubelet back to see a pod between its resize and its actuation.
        self.kubelet_paused = False
        self._strategies: dict[ResourceKey, Strategy] = {}
        self._strategy_factories = dict(strategies or {})
        # More background loops (the simulated controllers), run next to run_controllers'.
        self.background: list[Callable[[], Awaitable[None]]] = []
        # The finalizers a deletion's propagation policy gives an object (garbage collector).
        self.deletion_finalizers: (
            Callable[[ResourceType, DeleteOptions, list[str]], list[str]] | None
        ) = None
        self._webhooks: _ParsedWebhooks | None = None
        self.chain = chain_factory(self)

    # --- helpers -----------------------------------------------------------------------------

    def strategy(self, rt: ResourceType) -> Strategy:
        cached = self._strategies.get(rt.key)
        if cached is None or cached.rt != rt:
            factory = self._strategy_factories.get(rt.key)
            cached = factory(rt) if factory is not None and not rt.custom else strategy_for(rt)
            self._strategies[rt.key] = cached
        return cached

    def webhooks(self) -> tuple[list[Webhook], list[Webhook]]:
        """Registered webhooks, configurations sorted by name, webhooks in order."""
        versions = tuple(
            (str(obj["metadata"]["name"]), str(obj["metadata"]["resourceVersion"]))
            for key in (MUTATING_WEBHOOKS.key, VALIDATING_WEBHOOKS.key)
            for obj in self.store.scan(key, lambda _: True, copy=False)
        )
        if self._webhooks is not None and self._webhooks[0] == versions:
            return self._webhooks[1]
        parsed: list[list[Webhook]] = []
        for key in (MUTATING_WEBHOOKS.key, VALIDATING_WEBHOOKS.key):
            items, _ = self.store.list_objects(key, None)
            hooks: list[Webhook] = []
            for configuration in sorted(items, key=lambda c: c["metadata"]["name"]):
                hooks += parse_configuration(configuration, mutating=key == MUTATING_WEBHOOKS.key)
            parsed.append(hooks)
        for hook in parsed[0] + parsed[1]:
            if hook.match_conditions:
                logger.warning(
                    "webhook %s has matchConditions; the test API server does not evaluate CEL "
                    "and calls it for every request its rules and selectors match",
                    hook.name,
                )
        self._webhooks = (versions, (parsed[0], parsed[1]))
        return parsed[0], parsed[1]

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        ns = self.store.get(NAMESPACES.key, "", namespace)
        return meta.labels(ns) if ns is not None else None

    def equivalents(self, request: AdmissionRequest) -> list[tuple[str, str, str, str]]:
        rt = self.catalog.get((request.group, request.plural))
        if rt is None:
            return []
        kind = SUBRESOURCE_KINDS.get(request.subresource, (rt.group, "", rt.kind))[2]
        return [(rt.group, v, rt.plural, kind) for v in rt.versions]

    def pod_plugins(self) -> PodPlugins:
        """The in-tree admission plugins, reading what they need from this registry."""
        return PodPlugins(
            priority_class=self._priority_class,
            default_priority_class=self._default_priority_class,
            limit_ranges=lambda namespace: self.store.list_objects(LIMIT_RANGES.key, namespace)[0],
            runtime_class=lambda name: self.store.get(RUNTIME_CLASSES.key, "", name),
        )

    def _priority_class(self, name: str) -> JSONObject | None:
        return self.store.get(PRIORITY_CLASSES.key, "", name)

    def _default_priority_class(self) -> JSONObject | None:
        items, _ = self.store.list_objects(PRIORITY_CLASSES.key, None)
        defaults = [pc for pc in items if pc.get("globalDefault") is True]
        if not defaults:
            return None
        # Several defaults can exist transiently; the real plugin takes the lowest value.
        return min(defaults, key=lambda pc: int(pc.get("value") or 0))

    @staticmethod
    def present(obj: JSONObject, rt: ResourceType, version: str) -> JSONObject:
        """The object as served at ``version`` (conversion strategy None: apiVersion only)."""
        obj["apiVersion"] = rt.api_version(version)
        obj["kind"] = rt.kind
        return obj

    # --- reads -------------------------------------------------------------------------------

    def _selects(self, rt: ResourceType, options: ListOptions) -> Callable[[JSONObject], bool]:
        strategy = self.strategy(rt)

        def selects(obj: JSONObject) -> bool:
            def field_value(name: str) -> str:
                return strategy.field_value(obj, name)

            return options.label_selector.matches(
                meta.labels(obj)
            ) and options.field_selector.matches(field_value)

        return selects

    def get(self, rt: ResourceType, version: str, namespace: str, name: str) -> JSONObject:
        obj = self.store.get(rt.key, namespace, name)
        if obj is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return self.present(obj, rt, version)

    def list(
        self, rt: ResourceType, version: str, namespace: str | None, options: ListOptions
    ) -> JSONObject:
        at_rv: int | None = None
        start = ""
        if options.continue_token:
            at_rv, start = _decode_continue(options.continue_token)
        elif options.resource_version_match == "Exact":
            at_rv = _parse_rv(options.resource_version)
        items, rv = self.store.list_objects(rt.key, namespace, at_rv=at_rv)
        selects = self._selects(rt, options)
        selected = [obj for obj in items if _object_id_key(obj) > start and selects(obj)]
        metadata: JSONObject = {"resourceVersion": str(rv)}
        if options.limit > 0 and len(selected) > options.limit:
            page = selected[: options.limit]
            metadata["continue"] = _encode_continue(rv, _object_id_key(page[-1]))
            metadata["remainingItemCount"] = len(selected) - options.limit
            selected = page
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version(version),
            "metadata": metadata,
            "items": [self.present(obj, rt, version) for obj in selected],
        }

    def watch(
        self,
        rt: ResourceType,
        version: str,
        namespace: str | None,
        options: ListOptions,
        watch_options: WatchOptions,
        *,
        send_initial_events: bool,
        render: Callable[[str, JSONObject], JSONObject] | None = None,
    ) -> WatchStream:
        since: int | None
        if send_initial_events or options.resource_version in ("", "0"):
            since = None
        else:
            since = _parse_rv(options.resource_version)
        subscription, initial = self.store.watch(rt.key, namespace, since=since)
        matches = self._selects(rt, options)

        def present(event_type: str, obj: JSONObject) -> JSONObject:
            shown = self.present(clone(obj), rt, version)
            return render(event_type, shown) if render is not None else shown

        def bookmark(rv: int, initial_end: bool) -> JSONObject:
            metadata: JSONObject = {"resourceVersion": str(rv)}
            if initial_end:
                metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
            return {"kind": rt.kind, "apiVersion": rt.api_version(version), "metadata": metadata}

        return WatchStream(
            subscription, initial, watch_options, matches=matches, render=present, bookmark=bookmark
        )

    # --- create ------------------------------------------------------------------------------

    async def create(
        self, rt: ResourceType, version: str, namespace: str, body: JSONObject, ctx: RequestContext
    ) -> JSONObject:
        strategy = self.strategy(rt)
        obj = self._decode(rt, version, body, namespace, strategy)
        self._check_namespace(rt, namespace, obj)
        request = self._request(
            "CREATE",
            rt,
            version,
            namespace,
            obj,
            None,
            ctx,
            name=_name(obj),
            options=ctx.options("CreateOptions"),
        )
        await self.chain.mutate(request, defaulter=strategy.default)
        obj = self._after_mutation(rt, request, namespace)
        metadata = meta.metadata(obj)
        if metadata.get("resourceVersion"):
            raise errors.internal_error(
                "resourceVersion should not be set on objects to be created"
            )
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = self._generate_name(rt, namespace, str(metadata["generateName"]))
        metadata["uid"] = meta.new_uid()
        metadata["creationTimestamp"] = meta.now_timestamp()
        for server_set in (
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ):
            metadata.pop(server_set, None)
        strategy.prepare_for_create(obj)
        problems = strategy.validate(obj)
        if problems:
            raise errors.invalid_object(rt.group, rt.kind, _name(obj), problems)
        validating = self._request(
            "CREATE",
            rt,
            version,
            namespace,
            obj,
            None,
            ctx,
            name=_name(obj),
            options=ctx.options("CreateOptions"),
        )
        await self.chain.validate(validating)
        if ctx.dry_run:
            if self.store.get(rt.key, _namespace_of(rt, namespace), _name(obj)) is not None:
                raise errors.already_exists(rt.group, rt.plural, _name(obj))
            return self.present(obj, rt, version)
        stored = self.store.create(rt.key, _to_storage(rt, obj))
        self._after_write(rt, stored)
        return self.present(stored, rt, version)

    def bootstrap(self, obj: JSONObject) -> JSONObject:
        """Store an object without admission (server defaults and manifests loaded at start)."""
        api_version = str(obj.get("apiVersion") or "")
        group, _, version = api_version.rpartition("/")
        rt = self.catalog.by_kind(group, version, str(obj.get("kind") or ""))
        if rt is None:
            raise errors.bad_request(f"no kind {obj.get('kind')!r} is served in {api_version!r}")
        strategy = self.strategy(rt)
        namespace = str(
            (obj.get("metadata") or {}).get("namespace") or ("default" if rt.namespaced else "")
        )
        decoded = self._decode(rt, version, obj, namespace, strategy)
        self._check_namespace(rt, namespace, decoded)
        metadata = meta.metadata(decoded)
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = self._generate_name(rt, namespace, str(metadata["generateName"]))
        metadata.pop("resourceVersion", None)
        metadata["uid"] = meta.new_uid()
        metadata["creationTimestamp"] = meta.now_timestamp()
        strategy.prepare_for_create(decoded)
        problems = strategy.validate(decoded)
        if rt.key in WEBHOOK_CONFIGURATION_KEYS:
            # Files may declare sideEffects Some/Unknown (refused by the v1 API) to exercise
            # the dry-run refusal; they are loaded with a warning.
            lenient = [
                p
                for p in problems
                if p.field.endswith(".sideEffects") and p.type == errors.NOT_SUPPORTED
            ]
            for problem in lenient:
                logger.warning(
                    "%s %s: %s (accepted from a file, refused through the API)",
                    rt.kind,
                    _name(decoded),
                    problem,
                )
            problems = [p for p in problems if p not in lenient]
        if problems:
            raise errors.invalid_object(rt.group, rt.kind, _name(decoded), problems)
        existing = self.store.get(rt.key, _namespace_of(rt, namespace), _name(decoded))
        if existing is not None:
            decoded["metadata"]["uid"] = existing["metadata"]["uid"]
            decoded["metadata"]["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
            stored = self.store.update(
                rt.key, _to_storage(rt, decoded), expected_rv=resource_version(existing)
            )
        else:
            stored = self.store.create(rt.key, _to_storage(rt, decoded))
        self._after_write(rt, stored)
        return stored

    # --- update and patch --------------------------------------------------------------------

    async def update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: JSONObject,
        ctx: RequestContext,
        *,
        subresource: str = "",
    ) -> JSONObject:
        strategy = self.strategy(rt)
        decoded = self._decode(rt, version, body, namespace, strategy)
        body_name = (decoded.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        meta.metadata(decoded)["name"] = name

        def updated(existing: JSONObject) -> tuple[JSONObject, bool]:
            new = clone(decoded)
            return new, bool(resource_version(new))

        return await self._guaranteed_update(
            rt, version, namespace, name, updated, ctx, subresource
        )

    async def patch(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        ctx: RequestContext,
        *,
        subresource: str = "",
    ) -> JSONObject:
        strategy = self.strategy(rt)

        def updated(existing: JSONObject) -> tuple[JSONObject, bool]:
            current = self.present(clone(existing), rt, version)
            patched = apply_patch(content_type, current, patch, meta=strategy.patch_meta)
            patched_meta = meta.metadata(patched)
            if patched_meta.get("name") != name:
                raise errors.bad_request(
                    f"the name of the object ({patched_meta.get('name')}) does not match the "
                    f"name on the URL ({name})"
                )
            decoded = self._decode(rt, version, patched, namespace, strategy)
            explicit = resource_version(decoded) != resource_version(existing)
            return decoded, explicit

        return await self._guaranteed_update(
            rt, version, namespace, name, updated, ctx, subresource
        )

    async def _guaranteed_update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        updated: Callable[[JSONObject], tuple[JSONObject, bool]],
        ctx: RequestContext,
        subresource: str,
    ) -> JSONObject:
        strategy = self.strategy(rt)
        storage_ns = _namespace_of(rt, namespace)
        for _ in range(MAX_UPDATE_ATTEMPTS):
            existing = self.store.get(rt.key, storage_ns, name)
            if existing is None:
                raise errors.not_found(rt.group, rt.plural, name)
            new, explicit_rv = updated(existing)
            if rt.namespaced:
                meta.metadata(new)["namespace"] = namespace
            old = self.present(clone(existing), rt, version)
            request = self._request(
                "UPDATE",
                rt,
                version,
                namespace,
                new,
                old,
                ctx,
                name=name,
                subresource=subresource,
                options=ctx.options("UpdateOptions"),
            )
            await self.chain.mutate(request, defaulter=strategy.default)
            new = self._after_mutation(rt, request, namespace)
            wanted_rv = resource_version(new)
            if wanted_rv and wanted_rv != resource_version(existing):
                raise errors.conflict(rt.group, rt.plural, name)
            new = self._prepare_update(rt, strategy, new, existing, subresource)
            validate_request = self._request(
                "UPDATE",
                rt,
                version,
                namespace,
                new,
                old,
                ctx,
                name=name,
                subresource=subresource,
                options=ctx.options("UpdateOptions"),
            )
            await self.chain.validate(validate_request)
            if _same(new, existing):
                return self.present(existing, rt, version)
            if self._conflict_check(rt):
                raise errors.conflict(rt.group, rt.plural, name)
            if ctx.dry_run:
                return self.present(new, rt, version)
            try:
                stored = self.store.update(
                    rt.key, _to_storage(rt, new), expected_rv=resource_version(existing)
                )
            except APIError as err:
                if err.code == 409 and not explicit_rv:
                    continue  # someone else won the race: re-read and apply again
                raise
            if _deletable_now(stored):
                stored = self.store.delete(rt.key, storage_ns, name)
                self._after_delete(rt, stored)
                return self.present(stored, rt, version)
            self._after_write(rt, stored)
            return self.present(stored, rt, version)
        raise errors.conflict(rt.group, rt.plural, name)

    def _prepare_update(
        self,
        rt: ResourceType,
        strategy: Strategy,
        new: JSONObject,
        existing: JSONObject,
        subresource: str,
    ) -> JSONObject:
        name = _name(existing)
        new_meta = meta.metadata(new)
        old_meta = existing["metadata"]
        uid = new_meta.get("uid")
        if uid and uid != old_meta.get("uid"):
            raise errors.invalid_object(
                rt.group, rt.kind, name, [errors.invalid("metadata.uid", uid, "field is immutable")]
            )
        new_meta["resourceVersion"] = old_meta.get("resourceVersion")
        if subresource == "status":
            result = strategy.prepare_for_status_update(new, existing)
            problems = meta.validate_metadata(
                result, namespaced=rt.namespaced, check_name=strategy.check_name
            )
        elif subresource == "resize":
            result, problems = resized_pod(new, existing)
        elif subresource == "finalize":
            # What the namespace controller uses to remove its finalizer from spec.finalizers.
            result = clone(existing)
            result["spec"] = dict(result.get("spec") or {})
            result["spec"]["finalizers"] = list((new.get("spec") or {}).get("finalizers") or [])
            problems = []
        elif subresource:
            raise errors.method_not_allowed()
        else:
            for server_set in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ):
                if server_set in old_meta:
                    new_meta[server_set] = old_meta[server_set]
                else:
                    new_meta.pop(server_set, None)
            strategy.prepare_for_update(new, existing)
            problems = strategy.validate_update(new, existing)
            if old_meta.get("deletionTimestamp"):
                added = [
                    f
                    for f in new_meta.get("finalizers") or []
                    if f not in (old_meta.get("finalizers") or [])
                ]
                if added:
                    problems.append(
                        errors.forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted, "
                            f"found new finalizers {_go_strings(added)}",
                        )
                    )
            result = new
        if problems:
            raise errors.invalid_object(rt.group, rt.kind, name, problems)
        return result

    # --- subresources ------------------------------------------------------------------------

    async def bind(
        self, version: str, namespace: str, name: str, body: JSONObject, ctx: RequestContext
    ) -> JSONObject:
        target = body.get("target") if isinstance(body, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not isinstance(node, str) or not node:
            raise errors.invalid_object("", "Binding", name, [errors.required("target.name")])
        binding = clone(body)
        binding.setdefault("apiVersion", "v1")
        binding.setdefault("kind", "Binding")
        meta.metadata(binding).setdefault("name", name)
        meta.metadata(binding)["namespace"] = namespace
        self._check_namespace(PODS, namespace, binding)
        request = AdmissionRequest(
            operation="CREATE",
            group="",
            version=version,
            plural="pods",
            kind="Binding",
            subresource="binding",
            namespace=namespace,
            name=name,
            object=binding,
            old_object=None,
            dry_run=ctx.dry_run,
            options=ctx.options("CreateOptions"),
            user=ctx.user,
            warnings=ctx.warnings,
        )
        await self.chain.mutate(request, defaulter=lambda _: None)
        await self.chain.validate(request)
        for _ in range(MAX_UPDATE_ATTEMPTS):
            pod = self.store.get(PODS.key, namespace, name)
            if pod is None:
                raise errors.not_found("", "pods", name)
            spec = pod.setdefault("spec", {})
            if pod["metadata"].get("deletionTimestamp"):
                raise errors.conflict(
                    "",
                    "pods/binding",
                    name,
                    f"pod {name} is being deleted, cannot be assigned to a host",
                )
            if spec.get("nodeName"):
                raise errors.conflict(
                    "",
                    "pods/binding",
                    name,
                    f'pod {name} is already assigned to node "{spec["nodeName"]}"',
                )
            gates.check_bindable(pod, name)
            spec["nodeName"] = node
            annotations = (request.object or {}).get("metadata", {}).get("annotations")
            if isinstance(annotations, dict) and annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            status = pod.setdefault("status", {})
            conditions = [
                c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": meta.now_timestamp(),
                }
            )
            status["conditions"] = conditions
            if ctx.dry_run:
                break
            try:
                stored = self.store.update(PODS.key, pod, expected_rv=resource_version(pod))
            except APIError as err:
                if err.code == 409:
                    continue
                raise
            self._after_write(PODS, stored)
            break
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # --- delete ------------------------------------------------------------------------------

    async def delete(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        options: DeleteOptions,
        ctx: RequestContext,
    ) -> JSONObject:
        storage_ns = _namespace_of(rt, namespace)
        existing = self.store.get(rt.key, storage_ns, name)
        if existing is None:
            raise errors.not_found(rt.group, rt.plural, name)
        _check_preconditions(rt, existing, options)
        old = self.present(clone(existing), rt, version)
        request = self._request(
            "DELETE",
            rt,
            version,
            namespace,
            None,
            old,
            ctx,
            name=name,
            options=ctx.options("DeleteOptions", options.as_json()),
        )
        await self.chain.mutate(request, defaulter=lambda _: None)
        await self.chain.validate(request)
        return self.present(
            self._delete_now(rt, existing, options, dry_run=ctx.dry_run), rt, version
        )

    def _delete_now(
        self, rt: ResourceType, existing: JSONObject, options: DeleteOptions, *, dry_run: bool
    ) -> JSONObject:
        strategy = self.strategy(rt)
        metadata = existing["metadata"]
        namespace, name = str(metadata.get("namespace") or ""), str(metadata["name"])
        if self.deletion_finalizers is not None and not metadata.get("deletionTimestamp"):
            # The garbage collector's orphan / foregroundDeletion finalizers for the policy.
            current = list(metadata.get("finalizers") or [])
            wanted = self.deletion_finalizers(rt, options, current)
            if wanted != current:
                existing = clone(existing)
                existing["metadata"]["finalizers"] = wanted
                metadata = existing["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        if rt.key == NAMESPACES.key:
            finalizers += list((existing.get("spec") or {}).get("finalizers") or [])
        grace = strategy.grace_period(existing, options.grace_period_seconds)
        now = time.time()
        if metadata.get("deletionTimestamp"):
            deadline = meta.parse_timestamp(metadata["deletionTimestamp"])
            remaining = deadline.timestamp() - now if deadline else 0
            if grace == 0 and not finalizers:
                return existing if dry_run else self._remove(rt, namespace, name)
            if grace > 0 and grace < remaining:
                updated = clone(existing)
                updated["metadata"]["deletionTimestamp"] = meta.now_timestamp(now + grace)
                updated["metadata"]["deletionGracePeriodSeconds"] = grace
                return updated if dry_run else self._write(rt, updated, existing)
            return existing
        if grace > 0 or finalizers:
            updated = clone(existing)
            updated["metadata"]["deletionTimestamp"] = meta.now_timestamp(now + grace)
            updated["metadata"]["deletionGracePeriodSeconds"] = grace
            if rt.key == NAMESPACES.key:
                updated.setdefault("status", {})["phase"] = "Terminating"
            return updated if dry_run else self._write(rt, updated, existing)
        return existing if dry_run else self._remove(rt, namespace, name)

    def _write(self, rt: ResourceType, updated: JSONObject, existing: JSONObject) -> JSONObject:
        stored = self.store.update(rt.key, updated, expected_rv=resource_version(existing))
        self._after_write(rt, stored)
        return stored

    def _remove(self, rt: ResourceType, namespace: str, name: str) -> JSONObject:
        final = self.store.delete(rt.key, namespace, name)
        self._after_delete(rt, final)
        return final

    async def delete_collection(
        self,
        rt: ResourceType,
        version: str,
        namespace: str | None,
        list_options: ListOptions,
        options: DeleteOptions,
        ctx: RequestContext,
    ) -> JSONObject:
        listing = self.list(
            rt,
            version,
            namespace,
            ListOptions(list_options.label_selector, list_options.field_selector),
        )
        deleted: list[JSONObject] = []
        for obj in listing["items"]:
            metadata = obj["metadata"]
            try:
                deleted.append(
                    await self.delete(
                        rt,
                        version,
                        str(metadata.get("namespace") or ""),
                        metadata["name"],
                        options,
                        ctx,
                    )
                )
            except APIError as err:
                if err.code != 404:
                    raise
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version(version),
            "metadata": {"resourceVersion": str(self.store.current_rv())},
            "items": deleted,
        }

    # --- lifecycle ---------------------------------------------------------------------------

    def _after_write(self, rt: ResourceType, stored: JSONObject) -> None:
        if self._kubelet and rt.key == PODS.key and needs_sync(stored):
            metadata = stored["metadata"]
            self._kubelet_pending.add((str(metadata.get("namespace") or ""), metadata["name"]))
        if rt.key == CRDS.key and not (stored.get("metadata") or {}).get("deletionTimestamp"):
            custom = crd_resource_type(stored)
            if custom is not None:
                self.catalog.add(custom)

    def _after_delete(self, rt: ResourceType, final: JSONObject) -> None:
        if rt.key == CRDS.key:
            custom = crd_resource_type(final)
            if custom is not None:
                for obj in self.store.list_objects(custom.key, None)[0]:
                    self.store.delete(
                        custom.key,
                        str(obj["metadata"].get("namespace") or ""),
                        obj["metadata"]["name"],
                    )
                self.catalog.remove(custom.key)
                self.store.close_watches(key=custom.key)

    def reconcile(self) -> None:
        """Background controllers: the kubelet's final pod deletion, namespace termination."""
        now = time.time()
        if self._kubelet:
            self._sync_pods()
            for pod in self.store.scan(PODS.key, _terminating):
                deadline = meta.parse_timestamp(pod["metadata"].get("deletionTimestamp"))
                if (
                    deadline is not None
                    and deadline.timestamp() <= now
                    and not pod["metadata"].get("finalizers")
                ):
                    self._force_delete(PODS, pod)
        for ns in self.store.scan(NAMESPACES.key, _terminating):
            self._finalize_namespace(ns)

    def _sync_pods(self) -> None:
        """The kubelet writes the status of the pods bound to its node (devapi.kubelet)."""
        if self.kubelet_paused:
            return
        pending, self._kubelet_pending = self._kubelet_pending, set()
        for namespace, name in sorted(pending):
            pod = self.store.get(PODS.key, namespace, name)
            if pod is None:
                continue
            synced = sync_pod(pod, allocatable=self._node_allocatable)
            if synced is not None:
                self._write_ignoring_races(PODS, synced, pod)

    def _finalize_namespace(self, ns: JSONObject) -> None:
        name = ns["metadata"]["name"]
        remaining = 0
        for rt in self.catalog.all():
            if not rt.namespaced:
                continue
            for obj in self.store.list_objects(rt.key, name)[0]:
                if obj["metadata"].get("finalizers"):
                    remaining += 1
                    if not obj["metadata"].get("deletionTimestamp"):
                        marked = clone(obj)
                        marked["metadata"]["deletionTimestamp"] = meta.now_timestamp()
                        marked["metadata"]["deletionGracePeriodSeconds"] = 0
                        self._write_ignoring_races(rt, marked, obj)
                else:
                    self._force_delete(rt, obj)
        if remaining == 0 and not ns["metadata"].get("finalizers"):
            self._try(lambda: self._remove(NAMESPACES, "", name))

    def _write_ignoring_races(
        self, rt: ResourceType, updated: JSONObject, existing: JSONObject
    ) -> None:
        self._try(lambda: self._write(rt, updated, existing))

    def _force_delete(self, rt: ResourceType, obj: JSONObject) -> None:
        metadata = obj["metadata"]
        self._try(lambda: self._remove(rt, str(metadata.get("namespace") or ""), metadata["name"]))

    @staticmethod
    def _try(action: Callable[[], object]) -> None:
        try:
            action()
        except APIError as err:
            if err.code not in (404, 409):
                raise

    async def run_controllers(self) -> None:
        await asyncio.gather(
            self._reconcile_loop(), *(self._logged(loop) for loop in self.background)
        )

    @staticmethod
    async def _logged(loop: Callable[[], Awaitable[None]]) -> None:
        """A background loop that fails is logged; the others go on."""
        try:
            await loop()
        except Exception:
            logger.exception("background loop %s stopped", getattr(loop, "__qualname__", loop))

    async def _reconcile_loop(self) -> None:
        while True:
            try:
                self.reconcile()
            except Exception:  # a controller must never die; log and go on
                logger.exception("background reconcile failed")
            await asyncio.sleep(FINALIZE_INTERVAL)

    # --- internals ---------------------------------------------------------------------------

    def _decode(
        self,
        rt: ResourceType,
        version: str,
        body: JSONObject,
        namespace: str,
        strategy: Strategy,
    ) -> JSONObject:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj = clone(body)
        api_version = obj.get("apiVersion")
        expected = rt.api_version(version)
        if api_version is None:
            obj["apiVersion"] = expected
        elif api_version != expected:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({expected})"
            )
        kind = obj.get("kind")
        if kind is None:
            obj["kind"] = rt.kind
        elif kind != rt.kind:
            raise errors.bad_request(
                f'{kind} in version "{version}" cannot be handled as a {rt.kind}: the kind in the '
                f"data ({kind}) does not match the expected kind ({rt.kind})"
            )
        metadata = obj.get("metadata")
        if metadata is None:
            obj["metadata"] = metadata = {}
        if not isinstance(metadata, dict):
            raise errors.bad_request(
                f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: '
                "metadata must be an object"
            )
        body_ns = metadata.get("namespace")
        if rt.namespaced:
            if body_ns and body_ns != namespace:
                raise errors.bad_request(NAMESPACE_MISMATCH)
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        strategy.check_decodable(obj)
        strategy.default(obj)
        return obj

    def _check_namespace(self, rt: ResourceType, namespace: str, obj: JSONObject) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get(NAMESPACES.key, "", namespace)
        if ns is None:
            raise errors.not_found("", "namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            subject = str(
                (obj.get("metadata") or {}).get("name")
                or (obj.get("metadata") or {}).get("generateName")
                or "Unknown"
            )
            raise errors.forbidden_request(
                rt.group,
                rt.plural,
                subject,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
            )

    def _request(
        self,
        operation: str,
        rt: ResourceType,
        version: str,
        namespace: str,
        obj: JSONObject | None,
        old: JSONObject | None,
        ctx: RequestContext,
        *,
        name: str,
        subresource: str = "",
        options: JSONObject | None = None,
    ) -> AdmissionRequest:
        kind = SUBRESOURCE_KINDS.get(subresource, (rt.group, version, rt.kind))[2]
        return AdmissionRequest(
            operation=operation,
            group=rt.group,
            version=version,
            plural=rt.plural,
            kind=kind,
            subresource=subresource,
            # For namespace objects, the namespace of the request is the namespace itself.
            namespace=namespace if rt.namespaced else (name if rt.key == NAMESPACES.key else ""),
            name=name,
            object=obj,
            old_object=old,
            dry_run=ctx.dry_run,
            options=options,
            user=ctx.user,
            warnings=ctx.warnings,
        )

    def _after_mutation(
        self, rt: ResourceType, request: AdmissionRequest, namespace: str
    ) -> JSONObject:
        obj = request.object
        if obj is None:  # pragma: no cover - create and update always carry an object
            raise errors.internal_error("admission removed the object")
        metadata = meta.metadata(obj)
        if rt.namespaced and metadata.get("namespace") != namespace:
            raise errors.bad_request(NAMESPACE_MISMATCH)
        return obj

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        for _ in range(8):
            candidate = meta.generate_name(prefix)
            if self.store.get(rt.key, _namespace_of(rt, namespace), candidate) is None:
                return candidate
        raise errors.already_exists(rt.group, rt.plural, prefix)


def crd_resource_type(crd: JSONObject) -> ResourceType | None:
    """The resource a stored CRD serves, or None if it serves no version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    served = [v for v in versions if v.get("served")]
    storage = next((v for v in versions if v.get("storage")), None)
    if not served or storage is None:
        return None
    ordered = by_priority([str(v["name"]) for v in served])
    status = any((v.get("subresources") or {}).get("status") is not None for v in served)
    columns = tuple(
        PrinterColumn(
            name=str(c.get("name")),
            type=str(c.get("type") or "string"),
            json_path=str(c.get("jsonPath") or ""),
            description=str(c.get("description") or ""),
            priority=int(c.get("priority") or 0),
            format=str(c.get("format") or ""),
        )
        for c in (storage.get("additionalPrinterColumns") or [])
        if isinstance(c, dict)
    )
    kind = str(names.get("kind"))
    return ResourceType(
        group=str(spec.get("group")),
        plural=str(names.get("plural")),
        singular=str(names.get("singular") or kind.lower()),
        kind=kind,
        namespaced=spec.get("scope") == "Namespaced",
        versions=tuple(ordered),
        storage_version=str(storage.get("name")),
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=frozenset({"status"}) if status else frozenset(),
        tracks_generation=True,
        printer_columns=columns,
        custom=True,
        list_kind_name=str(names.get("listKind") or f"{kind}List"),
    )


def _check_preconditions(rt: ResourceType, existing: JSONObject, options: DeleteOptions) -> None:
    metadata = existing["metadata"]
    name = str(metadata["name"])
    if options.precondition_uid and options.precondition_uid != metadata.get("uid"):
        raise errors.conflict(
            rt.group,
            rt.plural,
            name,
            f"Precondition failed: UID in precondition: {options.precondition_uid}, "
            f"UID in object meta: {metadata.get('uid')}",
        )
    if options.precondition_rv and options.precondition_rv != metadata.get("resourceVersion"):
        raise errors.conflict(
            rt.group,
            rt.plural,
            name,
            "Precondition failed: ResourceVersion in precondition: "
            f"{options.precondition_rv}, "
            f"ResourceVersion in object meta: {metadata.get('resourceVersion')}",
        )


def _terminating(obj: JSONObject) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _deletable_now(stored: JSONObject) -> bool:
    metadata = stored.get("metadata") or {}
    return bool(
        metadata.get("deletionTimestamp")
        and not metadata.get("finalizers")
        and not metadata.get("deletionGracePeriodSeconds")
        and not (
            (stored.get("spec") or {}).get("finalizers")
            if stored.get("kind") == "Namespace"
            else None
        )
    )


def _to_storage(rt: ResourceType, obj: JSONObject) -> JSONObject:
    obj["apiVersion"] = rt.api_version()
    obj["kind"] = rt.kind
    return obj


def _same(new: JSONObject, existing: JSONObject) -> bool:
    a = clone(new)
    b = clone(existing)
    for obj in (a, b):
        obj.get("metadata", {}).pop("resourceVersion", None)
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
    return a == b


def _name(obj: JSONObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace_of(rt: ResourceType, namespace: str) -> str:
    return namespace if rt.namespaced else ""


def _object_id_key(obj: JSONObject) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


def _go_strings(values: Sequence[str]) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values) + "}"


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError as err:
        raise errors.bad_request(f"invalid resource version: {text!r}") from err
    if value < 0:
        raise errors.bad_request(f"invalid resource version: {text!r}")
    return value


def _encode_continue(rv: int, start: str) -> str:
    token = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(token).decode("ascii").rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        rv, start = data["rv"], data["start"]
        if (
            not isinstance(rv, int)
            or not isinstance(start, str)
            or data.get("v") != "meta.k8s.io/v1"
        ):
            raise ValueError("unexpected token contents")
    except (binascii.Error, ValueError, KeyError, TypeError, orjson.JSONDecodeError) as err:
        raise errors.bad_request(f"continue key is not valid: {err}") from err
    return rv, start
