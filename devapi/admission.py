"""The admission chain: in-tree plugins, mutating webhooks with reinvocation, validating webhooks.

Follows ``k8s.io/apiserver/pkg/admission/plugin/webhook/{mutating,validating}/dispatcher.go``:
mutating webhooks are called one after another (configurations sorted by name, webhooks in
order), each JSONPatch applied, the patched pod decoded into the typed Pod (:mod:`devapi.typed`)
and defaults filled again; when a webhook changed the object (semantic equality, not dict
equality), the in-tree plugins and the ``reinvocationPolicy: IfNeeded`` webhooks invoked before
that change run once more. Validating webhooks are called concurrently; the first failure to
arrive wins. Each webhook gets the first AdmissionReview version it lists that the server
speaks. Call failures obey ``failurePolicy``; denials carry the webhook's status and the real
text.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from devapi import errors, typed
from devapi.caller import CallError, WebhookCaller, new_request_uid, review_version
from devapi.errors import APIError
from devapi.store import clone
from devapi.types import JSONObject
from devapi.webhooks import Invocation, RequestAttributes, Webhook, should_call

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UserInfo:
    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # sorted by key

    def as_json(self) -> JSONObject:
        body: JSONObject = {"username": self.username}
        if self.uid:
            body["uid"] = self.uid
        if self.groups:
            body["groups"] = list(self.groups)
        if self.extra:
            body["extra"] = {key: list(values) for key, values in self.extra}
        return body


@dataclass
class AdmissionRequest:
    """One request going through admission; ``object`` is replaced as webhooks mutate it."""

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
    dry_run: bool
    options: JSONObject | None
    user: UserInfo
    warnings: list[str] = field(default_factory=list)

    def attributes(self) -> RequestAttributes:
        return RequestAttributes(
            operation=self.operation,
            group=self.group,
            version=self.version,
            plural=self.plural,
            kind=self.kind,
            subresource=self.subresource,
            namespace=self.namespace,
            name=self.name,
            object=self.object,
            old_object=self.old_object,
        )


InTreePlugin = Callable[[AdmissionRequest], None]
Defaulter = Callable[[JSONObject], None]
Equivalents = Callable[[AdmissionRequest], Sequence[tuple[str, str, str, str]]]


@dataclass
class _Reinvocation:
    """The bookkeeping of ``webhookReinvokeContext``."""

    previously_invoked: set[str] = field(default_factory=set)
    reinvoke: set[str] = field(default_factory=set)
    last_output: JSONObject | None = None
    should_reinvoke: bool = False

    def require_reinvoking_previous(self) -> None:
        self.reinvoke |= self.previously_invoked
        self.previously_invoked = set()


class AdmissionChain:
    """Runs admission for one request against the currently registered webhooks."""

    def __init__(
        self,
        *,
        webhooks: Callable[[], tuple[list[Webhook], list[Webhook]]],
        namespace_labels: Callable[[str], Mapping[str, str] | None],
        equivalents: Equivalents,
        caller: WebhookCaller,
        in_tree: Sequence[InTreePlugin] = (),
        in_tree_validators: Sequence[InTreePlugin] = (),
    ) -> None:
        self._webhooks = webhooks
        self._namespace_labels = namespace_labels
        self._equivalents = equivalents
        self._caller = caller
        self._in_tree = tuple(in_tree)
        self._in_tree_validators = tuple(in_tree_validators)

    async def mutate(self, request: AdmissionRequest, *, defaulter: Defaulter) -> None:
        """Run the mutating phase; ``request.object`` ends as the admitted object."""
        mutating, _ = self._webhooks()
        state = _Reinvocation()
        for plugin in self._in_tree:
            plugin(request)
        await self._mutating_round(request, mutating, state, reinvoke=False, defaulter=defaulter)
        if state.should_reinvoke:
            for plugin in self._in_tree:
                plugin(request)
            await self._mutating_round(request, mutating, state, reinvoke=True, defaulter=defaulter)

    async def _mutating_round(
        self,
        request: AdmissionRequest,
        hooks: list[Webhook],
        state: _Reinvocation,
        *,
        reinvoke: bool,
        defaulter: Defaulter,
    ) -> None:
        if reinvoke and not _same_object(request, request.object, state.last_output):
            # In-tree plugins changed the object on reinvocation: every eligible webhook reruns.
            state.require_reinvoking_previous()
        try:
            for hook in hooks:
                invocation = self._should_call(hook, request)
                if invocation is None:
                    continue
                if reinvoke and hook.uid not in state.reinvoke:
                    continue
                changed, failure = await self._call_mutating(invocation, request, defaulter)
                if changed:
                    state.require_reinvoking_previous()
                    state.should_reinvoke = True
                if hook.reinvocation_policy == "IfNeeded":
                    state.previously_invoked.add(hook.uid)
                if failure is None:
                    continue
                if isinstance(failure, CallError):
                    if hook.failure_policy == "Ignore":
                        logger.warning(
                            "Failed calling webhook, failing open %s: %s", hook.name, failure
                        )
                        continue
                    logger.warning(
                        "Failed calling webhook, failing closed %s: %s", hook.name, failure
                    )
                    raise errors.internal_error(f'failed calling webhook "{hook.name}": {failure}')
                raise failure
        finally:
            state.last_output = clone(request.object) if request.object is not None else None

    async def _call_mutating(
        self, invocation: Invocation, request: AdmissionRequest, defaulter: Defaulter
    ) -> tuple[bool, CallError | APIError | None]:
        hook = invocation.webhook
        try:
            self._check_dry_run(hook, request)
        except APIError as err:
            return False, err
        try:
            review = self._review(invocation, request)
            response = await self._caller.call(hook, review)
        except CallError as err:
            return False, err
        request.warnings.extend(_warnings(response))
        if not response.get("allowed"):
            return False, _denial(hook, response)
        patch = response.get("patch")
        if not patch:
            return False, None
        patch_type = response.get("patchType")
        if patch_type != "JSONPatch":
            return False, CallError(f'unsupported patch type "{patch_type}"')
        try:
            operations: Any = jsonpatch.JsonPatch.from_string(
                base64.b64decode(str(patch), validate=True).decode("utf-8")
            )
        except (binascii.Error, ValueError, jsonpatch.InvalidJsonPatch) as err:
            return False, CallError(f"received undecodable patch in webhook response: {err}")
        if not list(operations):
            return False, None
        if request.object is None:
            return False, errors.internal_error(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not '
                "supported for this operation"
            )
        versioned = _as_version(request.object, invocation, request)
        try:
            patched = operations.apply(versioned)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
            return False, errors.internal_error(str(err))
        if not isinstance(patched, dict):
            return False, errors.internal_error("the patched object is not a JSON object")
        type_name = _typed_kind(request)
        if type_name is not None:
            # callAttrMutatingHook: the patched JSON is decoded into the typed kind; a decoding
            # error is NewInternalError(err), unknown fields are gone.
            try:
                patched = typed.decode(type_name, patched)
            except typed.DecodeError as err:
                return False, errors.internal_error(str(err))
        changed = not _same_object(request, versioned, patched)
        patched = _from_version(patched, request)
        defaulter(patched)
        request.object = patched
        return changed, None

    async def validate(self, request: AdmissionRequest) -> None:
        """Run the validating webhooks concurrently; raise the first failure to arrive.

        ``validating/dispatcher.go`` (``Dispatch``) calls every webhook in its own goroutine
        and returns the first error read from the shared channel: whichever failed first,
        not the first in webhook order. The calls still running are not cancelled.
        """
        # The in-tree validating plugins come first, in plugin order (plugins.go).
        for plugin in self._in_tree_validators:
            plugin(request)
        _, validating = self._webhooks()
        invocations = [inv for hook in validating if (inv := self._should_call(hook, request))]
        if not invocations:
            return
        tasks = [asyncio.ensure_future(self._call_validating(inv, request)) for inv in invocations]
        try:
            for finished in asyncio.as_completed(tasks):
                failure = await finished
                if failure is not None:
                    raise failure
        finally:
            # The response waits for every call, as the dispatcher's WaitGroup does.
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _call_validating(
        self, invocation: Invocation, request: AdmissionRequest
    ) -> APIError | None:
        hook = invocation.webhook
        try:
            self._check_dry_run(hook, request)
            response = await self._caller.call(hook, self._review(invocation, request))
        except CallError as err:
            if hook.failure_policy == "Ignore":
                logger.warning("Failed calling webhook, failing open %s: %s", hook.name, err)
                return None
            logger.warning("Failed calling webhook, failing closed %s: %s", hook.name, err)
            return errors.internal_error(f'failed calling webhook "{hook.name}": {err}')
        except APIError as err:
            return err
        request.warnings.extend(_warnings(response))
        if response.get("allowed"):
            return None
        return _denial(hook, response)

    def _should_call(self, hook: Webhook, request: AdmissionRequest) -> Invocation | None:
        namespaced = bool(request.namespace) and not (
            request.group == "" and request.plural == "namespaces"
        )
        labels = self._namespace_labels(request.namespace) if namespaced else None
        if namespaced and labels is None:
            labels = {}
        return should_call(
            hook,
            request.attributes(),
            namespace_labels=labels,
            equivalents=self._equivalents(request),
        )

    @staticmethod
    def _check_dry_run(hook: Webhook, request: AdmissionRequest) -> None:
        if request.dry_run and hook.side_effects not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')

    def _review(self, invocation: Invocation, request: AdmissionRequest) -> JSONObject:
        body: JSONObject = {
            "uid": new_request_uid(),
            "kind": {
                "group": invocation.group,
                "version": invocation.version,
                "kind": invocation.kind,
            },
            "resource": {
                "group": invocation.group,
                "version": invocation.version,
                "resource": invocation.plural,
            },
        }
        if request.subresource:
            body["subResource"] = request.subresource
        body["requestKind"] = {
            "group": request.group,
            "version": request.version,
            "kind": request.kind,
        }
        body["requestResource"] = {
            "group": request.group,
            "version": request.version,
            "resource": request.plural,
        }
        if request.subresource:
            body["requestSubResource"] = request.subresource
        if request.name:
            body["name"] = request.name
        if request.namespace:
            body["namespace"] = request.namespace
        body["operation"] = request.operation
        body["userInfo"] = request.user.as_json()
        body["object"] = (
            _as_version(request.object, invocation, request) if request.object is not None else None
        )
        body["oldObject"] = (
            _as_version(request.old_object, invocation, request)
            if request.old_object is not None
            else None
        )
        body["dryRun"] = request.dry_run
        body["options"] = request.options
        version = review_version(invocation.webhook)
        return {
            "apiVersion": f"admission.k8s.io/{version}",
            "kind": "AdmissionReview",
            "request": body,
        }


def _as_version(obj: JSONObject, invocation: Invocation, request: AdmissionRequest) -> JSONObject:
    """The object as the webhook asked for it (an equivalent version under matchPolicy)."""
    if invocation.version == request.version or "apiVersion" not in obj:
        return obj
    converted = clone(obj)
    converted["apiVersion"] = (
        f"{invocation.group}/{invocation.version}" if invocation.group else invocation.version
    )
    return converted


def _from_version(obj: JSONObject, request: AdmissionRequest) -> JSONObject:
    if "apiVersion" in obj:
        obj["apiVersion"] = (
            f"{request.group}/{request.version}" if request.group else request.version
        )
    return obj


def _typed_kind(request: AdmissionRequest) -> str | None:
    """The typed schema a request's object decodes into (Pods; other kinds stay JSON)."""
    if (request.group, request.plural, request.kind) == ("", "pods", "Pod"):
        return typed.POD
    return None


def _same_object(request: AdmissionRequest, a: JSONObject | None, b: JSONObject | None) -> bool:
    """``equality.Semantic.DeepEqual`` for typed kinds, plain equality for the others."""
    type_name = _typed_kind(request)
    if type_name is None or a is None or b is None:
        return a == b
    try:
        return typed.semantic_equal(
            type_name, typed.decode(type_name, a), typed.decode(type_name, b)
        )
    except typed.DecodeError:
        return a == b


def _warnings(response: JSONObject) -> list[str]:
    warnings = response.get("warnings")
    if not isinstance(warnings, list):
        return []
    return [w for w in warnings if isinstance(w, str) and w]


def _denial(hook: Webhook, response: JSONObject) -> APIError:
    """``webhookerrors.ToStatusErr``: the webhook's status, its message prefixed."""
    result = response.get("status")
    status: JSONObject = dict(result) if isinstance(result, dict) else {}
    denied_by = f'admission webhook "{hook.name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    code = status.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or code < 400:
        # webhook/errors/statuserror.go (ToStatusErr): a rejection never carries a code below
        # 400 (a missing code is 0), so such codes become 400 Bad Request.
        code = 400
    details = status.get("details")
    return APIError(
        code,
        str(status.get("reason") or ""),
        message,
        details=details if isinstance(details, dict) else None,
    )
