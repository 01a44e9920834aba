"""The HTTP edge of the test API server: routing, request decoding, responses, warnings.

All wiring is in :func:`create_app`. Kubernetes API paths are parsed into a resource, a
namespace, a name and a subresource, checked against the armed faults, and handed to the
:class:`~devapi.registry.Registry`. Errors become ``Status`` bodies; admission
warnings become ``Warning: 299 - "..."`` headers, which ``kubectl`` prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from devapi import discovery, errors, impersonation, tables
from devapi.admission import UserInfo
from devapi.errors import APIError
from devapi.events import EVENTS, EVENTS_V1
from devapi.eventsv1 import (
    convert_field_selector,
    from_v1,
    require_event_time,
    to_v1,
)
from devapi.faults import Faults, RequestInfo
from devapi.patching import (
    APPLY_PATCH,
    GENERIC_PATCH_META,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    apply_patch,
)
from devapi.registry import DeleteOptions, ListOptions, Registry, RequestContext
from devapi.resources import ResourceCatalog, ResourceType
from devapi.selectors import SelectorError, parse_field_selector, parse_label_selector
from devapi.types import JSONObject
from devapi.warningheaders import warning_headers
from devapi.watch import ERROR, StreamingBody, WatchOptions, event_line
from devapi.workloads.scale import serve_scale

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 3 * 1024 * 1024  # the real server's default --max-request-body-bytes
_BODY_TYPES = ("application/json", "", "application/yaml", "application/x-yaml", "text/yaml", "*/*")
DEFAULT_USER = UserInfo(
    username="kubernetes-admin", groups=("system:masters", "system:authenticated")
)


@dataclass(frozen=True)
class AppConfig:
    server_address: str
    bookmark_interval: float
    watch_timeout: float
    user: UserInfo = DEFAULT_USER


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    version: str
    namespace: str | None
    name: str
    subresource: str
    watch_path: bool


def create_app(
    *,
    registry: Registry,
    catalog: ResourceCatalog,
    faults: Faults,
    config: AppConfig,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> Starlette:
    api = _API(registry, catalog, faults, config)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        controllers = asyncio.create_task(registry.run_controllers())
        try:
            yield
        finally:
            controllers.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await controllers
            registry.store.close_watches()
            if on_shutdown is not None:
                await on_shutdown()

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    routes = [
        Route("/version", api.version, methods=["GET"]),
        Route("/healthz", api.ok, methods=["GET"]),
        Route("/livez", api.ok, methods=["GET"]),
        Route("/readyz", api.ok, methods=["GET"]),
        Route("/api", api.core_versions, methods=["GET"]),
        Route("/api/v1", api.core_resources, methods=["GET"]),
        Route("/api/v1/{rest:path}", api.resource, methods=methods),
        Route("/apis", api.groups, methods=["GET"]),
        Route("/apis/{group}", api.group, methods=["GET"]),
        Route("/apis/{group}/{version}", api.group_resources, methods=["GET"]),
        Route("/apis/{group}/{version}/{rest:path}", api.resource, methods=methods),
        Route("/openapi/v3", api.openapi_index, methods=["GET"]),
        Route("/openapi/v3/{path:path}", api.openapi_document, methods=["GET"]),
        Route("/__dev/faults", api.faults, methods=["GET", "DELETE"]),
        Route("/__dev/faults/{action}", api.fault_action, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def json_response(
    body: Any,
    *,
    status: int = 200,
    warnings: Iterable[str] = (),
    headers: dict[str, str] | None = None,
) -> Response:
    response = Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )
    for value in warning_headers(warnings):
        response.raw_headers.append((b"warning", value.encode("utf-8")))
    return response


def status_response(err: APIError, warnings: Iterable[str] = ()) -> Response:
    return json_response(
        err.status(), status=err.code, warnings=warnings, headers=err.headers or None
    )


class LatencyFault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(ge=0)
    verb: str | None = None
    resource: str | None = None
    path: str | None = None
    count: int | None = Field(default=None, ge=1)


class ErrorFault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: int = Field(ge=400, le=599)
    count: int = Field(default=1, ge=1)
    verb: str | None = None
    resource: str | None = None
    path: str | None = None
    reason: str | None = None
    message: str | None = None


class ConflictStorm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource: str = Field(min_length=1)
    count: int = Field(ge=1)


class _API:
    """The endpoints; one instance per app, holding what they share."""

    def __init__(
        self, registry: Registry, catalog: ResourceCatalog, faults: Faults, config: AppConfig
    ) -> None:
        self.registry = registry
        self.catalog = catalog
        self.fault_state = faults
        self.config = config

    # --- discovery ---------------------------------------------------------------------------

    async def version(self, request: Request) -> Response:
        return json_response(discovery.version_info())

    async def ok(self, request: Request) -> Response:
        return Response(b"ok", media_type="text/plain")

    async def core_versions(self, request: Request) -> Response:
        return json_response(discovery.core_versions(self.config.server_address))

    async def core_resources(self, request: Request) -> Response:
        return json_response(discovery.resource_list(self.catalog, "", "v1"))

    async def groups(self, request: Request) -> Response:
        return json_response(discovery.group_list(self.catalog))

    async def group(self, request: Request) -> Response:
        body = discovery.group(self.catalog, request.path_params["group"])
        if body is None:
            return status_response(errors.path_not_found())
        return json_response(body)

    async def group_resources(self, request: Request) -> Response:
        body = discovery.resource_list(
            self.catalog, request.path_params["group"], request.path_params["version"]
        )
        if body is None:
            return status_response(errors.path_not_found())
        return json_response(body)

    async def openapi_index(self, request: Request) -> Response:
        return json_response(discovery.openapi_paths(self.catalog))

    async def openapi_document(self, request: Request) -> Response:
        parts = request.path_params["path"].strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) == 2:
            group_name, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group_name, version = parts[1], parts[2]
        else:
            return status_response(errors.path_not_found())
        if discovery.resource_list(self.catalog, group_name, version) is None:
            return status_response(errors.path_not_found())
        return json_response(discovery.openapi_document(self.catalog, group_name, version))

    # --- faults ------------------------------------------------------------------------------

    async def faults(self, request: Request) -> Response:
        """GET: the armed faults; DELETE: disarm them all."""
        if request.method == "DELETE":
            self.fault_state.clear()
        return json_response(self.fault_state.snapshot())

    async def fault_action(self, request: Request) -> Response:
        action = request.path_params["action"]
        try:
            raw = await request.body()
            data: Any = orjson.loads(raw) if raw.strip() else {}
            if action == "latency":
                latency = LatencyFault.model_validate(data)
                self.fault_state.add_latency(
                    latency.seconds,
                    verb=latency.verb,
                    resource=latency.resource,
                    path=latency.path,
                    count=latency.count,
                )
            elif action == "errors":
                fault = ErrorFault.model_validate(data)
                self.fault_state.add_errors(
                    fault.status,
                    count=fault.count,
                    verb=fault.verb,
                    resource=fault.resource,
                    path=fault.path,
                    reason=fault.reason,
                    message=fault.message,
                )
            elif action == "conflicts":
                storm = ConflictStorm.model_validate(data)
                self.fault_state.conflict_storm(storm.resource, count=storm.count)
            elif action == "drop-watches":
                return json_response({"dropped": self.fault_state.drop_watches()})
            elif action == "compact":
                return json_response({"resourceVersion": str(self.fault_state.compact_history())})
            else:
                return status_response(errors.path_not_found())
        except orjson.JSONDecodeError as err:
            return status_response(errors.bad_request(f"invalid JSON: {err}"))
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors()
            )
            return status_response(errors.bad_request(f"invalid {action} fault: {problems}"))
        return json_response(self.fault_state.snapshot())

    # --- resources ---------------------------------------------------------------------------

    async def resource(self, request: Request) -> Response:
        if not request.path_params["rest"].strip("/") and request.method == "GET":
            # Clients ask for /api/v1/ (with the slash) as well.
            group = request.path_params.get("group", "")
            body = discovery.resource_list(
                self.catalog, group, request.path_params.get("version", "v1")
            )
            return json_response(body) if body else status_response(errors.path_not_found())
        ctx: RequestContext | None = None
        try:
            target = self._target(request)
            verb = _verb(request, target)
            info = RequestInfo(request.url.path, verb, target.rt.group, target.rt.plural)
            delay = self.fault_state.latency_for(info)
            if delay > 0:
                await asyncio.sleep(delay)
            injected = self.fault_state.error_for(info)
            if injected is not None:
                raise injected
            ctx = self._context(request, verb)
            return await self._dispatch(request, target, verb, ctx)
        except APIError as err:
            return status_response(err, ctx.warnings if ctx else ())

    def _target(self, request: Request) -> Target:
        group = request.path_params.get("group", "")
        version = request.path_params.get("version", "v1")
        segments = [s for s in request.path_params["rest"].split("/") if s]
        watch_path = bool(segments) and segments[0] == "watch"
        if watch_path:
            segments = segments[1:]
        namespace: str | None = None
        namespace_subresource = (
            group == "" and len(segments) == 3 and segments[2] in ("status", "finalize")
        )
        if len(segments) >= 3 and segments[0] == "namespaces" and not namespace_subresource:
            namespace, segments = segments[1], segments[2:]
        if not segments or len(segments) > 3:
            raise errors.path_not_found()
        rt = self.catalog.resolve(group, version, segments[0])
        if rt is None or (namespace is not None and not rt.namespaced):
            raise errors.path_not_found()
        name = segments[1] if len(segments) > 1 else ""
        subresource = segments[2] if len(segments) > 2 else ""
        if subresource and subresource not in rt.subresources:
            raise errors.path_not_found()
        if rt.namespaced and namespace is None and name:
            raise errors.path_not_found()
        return Target(rt, version, namespace, name, subresource, watch_path)

    def _context(self, request: Request, verb: str) -> RequestContext:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            if name.startswith("impersonate-"):
                headers.setdefault(name, []).append(value)
        user = impersonation.impersonated(self.config.user, headers)
        dry_run_values = request.query_params.getlist("dryRun")
        for value in dry_run_values:
            if value != "All":
                options_kind = {
                    "create": "CreateOptions",
                    "delete": "DeleteOptions",
                    "deletecollection": "DeleteOptions",
                }.get(verb, "UpdateOptions")
                raise errors.invalid_object(
                    "meta.k8s.io",
                    options_kind,
                    "",
                    [errors.not_supported("dryRun", value, ("All",))],
                )
        validation = request.query_params.get("fieldValidation")
        if validation is not None and validation not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{validation}": supported values: '
                '"Ignore", "Strict", "Warn"'
            )
        return RequestContext(
            user=user,
            dry_run=bool(dry_run_values),
            field_manager=request.query_params.get("fieldManager"),
            field_validation=validation,
        )

    async def _dispatch(
        self, request: Request, target: Target, verb: str, ctx: RequestContext
    ) -> Response:
        rt, version = target.rt, target.version
        namespace = target.namespace or ""
        shape = tables.representation(request.headers.get("accept", ""))
        table = shape == tables.TABLE
        include = request.query_params.get("includeObject", "Metadata")
        if rt.key == EVENTS_V1.key and shape is None and verb != "watch":
            return await self._events_v1(request, target, verb, ctx)
        if rt.key == EVENTS_V1.key and verb != "watch":
            # Tables and metadata are the same for both APIs' events.
            rt = EVENTS
        if target.subresource == "scale":
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            body = await _body(request, allow_list=True) if verb in ("patch", "update") else None
            result = await serve_scale(
                self.registry,
                rt,
                version,
                namespace,
                target.name,
                verb=verb,
                body=body,
                content_type=content_type,
                ctx=ctx,
            )
            return json_response(result, warnings=ctx.warnings)
        if verb == "get":
            obj = self.registry.get(rt, version, namespace, target.name)
            if shape == tables.PARTIAL:
                return json_response(tables.partial(obj))
            if table:
                return json_response(
                    tables.table(
                        rt,
                        [obj],
                        list_metadata={"resourceVersion": obj["metadata"]["resourceVersion"]},
                        include=include,
                    )
                )
            return json_response(obj)
        if verb == "list":
            listing = self.registry.list(
                rt, version, target.namespace, self._list_options(request, target.rt)
            )
            if shape == tables.PARTIAL:
                return json_response(tables.partial_list(listing))
            if table:
                return json_response(
                    tables.table(
                        rt, listing["items"], list_metadata=listing["metadata"], include=include
                    )
                )
            return json_response(listing)
        if verb == "watch":
            return self._watch(request, target, shape=shape, include=include)
        if verb == "create":
            body = await _body(request)
            if target.subresource == "binding":
                result = await self.registry.bind(version, namespace, target.name, body, ctx)
            else:
                result = await self.registry.create(rt, version, namespace, body, ctx)
            return json_response(result, status=201, warnings=ctx.warnings)
        if verb == "update":
            body = await _body(request)
            result = await self.registry.update(
                rt, version, namespace, target.name, body, ctx, subresource=target.subresource
            )
            return json_response(result, warnings=ctx.warnings)
        if verb == "patch":
            content_type = request.headers.get("content-type", "").split(";")[0].strip()
            if content_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH):
                # Server-side apply (APPLY_PATCH) is not implemented; say what is accepted.
                accepted = [JSON_PATCH, MERGE_PATCH]
                if self.registry.strategy(rt).patch_meta is not None:
                    accepted.append(STRATEGIC_MERGE_PATCH)
                raise errors.unsupported_media_type(content_type or APPLY_PATCH, accepted)
            patch = await _body(request, allow_list=True)
            result = await self.registry.patch(
                rt,
                version,
                namespace,
                target.name,
                content_type,
                patch,
                ctx,
                subresource=target.subresource,
            )
            return json_response(result, warnings=ctx.warnings)
        if verb == "delete":
            options, body_dry_run = await self._delete_options(request)
            ctx.dry_run = ctx.dry_run or body_dry_run
            result = await self.registry.delete(rt, version, namespace, target.name, options, ctx)
            return json_response(result, warnings=ctx.warnings)
        if verb == "deletecollection":
            options, body_dry_run = await self._delete_options(request)
            ctx.dry_run = ctx.dry_run or body_dry_run
            result = await self.registry.delete_collection(
                rt, version, target.namespace, self._list_options(request, target.rt), options, ctx
            )
            return json_response(result, warnings=ctx.warnings)
        raise errors.method_not_allowed()

    def _list_options(self, request: Request, rt: ResourceType) -> ListOptions:
        query = request.query_params
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(
                query.get("fieldSelector", ""),
                supported=frozenset({"metadata.name", "metadata.namespace"}) | rt.field_labels,
            )
        except SelectorError as err:
            raise errors.bad_request(str(err)) from err
        limit = _int_param(query.get("limit"), "limit")
        match = query.get("resourceVersionMatch", "")
        if match not in ("", "Exact", "NotOlderThan"):
            raise errors.bad_request(
                f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
                '"Exact", "NotOlderThan"'
            )
        rv = query.get("resourceVersion", "")
        if match and not rv and query.get("sendInitialEvents") != "true":
            raise errors.bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if match == "Exact" and rv == "0":
            raise errors.bad_request(
                'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
            )
        if rt.key == EVENTS_V1.key:
            fields = convert_field_selector(fields)
        return ListOptions(labels, fields, limit or 0, query.get("continue", ""), rv, match)

    async def _events_v1(
        self, request: Request, target: Target, verb: str, ctx: RequestContext
    ) -> Response:
        """``events.k8s.io/v1``: the stored ``v1`` Events, converted both ways."""
        namespace, name = target.namespace or "", target.name
        if verb == "get":
            return json_response(to_v1(self.registry.get(EVENTS, "v1", namespace, name)))
        if verb == "list":
            listing = self.registry.list(
                EVENTS, "v1", target.namespace, self._list_options(request, EVENTS_V1)
            )
            listing.update({"apiVersion": EVENTS_V1.api_version(), "kind": "EventList"})
            listing["items"] = [to_v1(item) for item in listing["items"]]
            return json_response(listing)
        if verb == "create":
            body = from_v1(await _body(request))
            require_event_time(body, str((body.get("metadata") or {}).get("name") or ""))
            created = await self.registry.create(EVENTS, "v1", namespace, body, ctx)
            return json_response(to_v1(created), status=201, warnings=ctx.warnings)
        if verb in ("update", "patch"):
            if verb == "update":
                body = from_v1(await _body(request))
            else:
                content_type = request.headers.get("content-type", "").split(";")[0].strip()
                if content_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH):
                    raise errors.unsupported_media_type(
                        content_type or APPLY_PATCH, (JSON_PATCH, MERGE_PATCH)
                    )
                current = to_v1(self.registry.get(EVENTS, "v1", namespace, name))
                patched = apply_patch(
                    content_type,
                    current,
                    await _body(request, allow_list=True),
                    meta=GENERIC_PATCH_META,
                )
                body = from_v1(patched)
            updated = await self.registry.update(EVENTS, "v1", namespace, name, body, ctx)
            return json_response(to_v1(updated), warnings=ctx.warnings)
        if verb == "delete":
            options, body_dry_run = await self._delete_options(request)
            ctx.dry_run = ctx.dry_run or body_dry_run
            deleted = await self.registry.delete(EVENTS, "v1", namespace, name, options, ctx)
            return json_response(to_v1(deleted), warnings=ctx.warnings)
        if verb == "deletecollection":
            options, body_dry_run = await self._delete_options(request)
            ctx.dry_run = ctx.dry_run or body_dry_run
            result = await self.registry.delete_collection(
                EVENTS,
                "v1",
                target.namespace,
                self._list_options(request, EVENTS_V1),
                options,
                ctx,
            )
            result.update({"apiVersion": EVENTS_V1.api_version(), "kind": "EventList"})
            result["items"] = [to_v1(item) for item in result["items"]]
            return json_response(result, warnings=ctx.warnings)
        raise errors.method_not_allowed()

    def _watch(
        self, request: Request, target: Target, *, shape: str | None, include: str
    ) -> Response:
        query = request.query_params
        options = self._list_options(request, target.rt)
        send_initial = query.get("sendInitialEvents") == "true"
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        if send_initial and (options.resource_version_match != "NotOlderThan" or not bookmarks):
            raise errors.invalid_object(
                "meta.k8s.io",
                "ListOptions",
                "",
                [
                    errors.forbidden(
                        "sendInitialEvents",
                        "sendInitialEvents requires setting resourceVersionMatch to "
                        "NotOlderThan and allowWatchBookmarks to true",
                    )
                ],
            )
        timeout = _int_param(query.get("timeoutSeconds"), "timeoutSeconds")
        watch_options = WatchOptions(
            bookmarks=bookmarks,
            bookmark_interval=self.config.bookmark_interval,
            timeout=float(timeout) if timeout else self.config.watch_timeout,
            initial_events_end=send_initial,
        )
        events_v1 = target.rt.key == EVENTS_V1.key
        rt = EVENTS if events_v1 else target.rt

        def render(event_type: str, obj: JSONObject) -> JSONObject:
            if shape == tables.PARTIAL:
                return tables.partial(obj)
            if shape != tables.TABLE:
                return to_v1(obj) if events_v1 else obj
            return tables.table(
                rt,
                [obj],
                list_metadata={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                include=include,
            )

        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-cache, private")]
        try:
            stream = self.registry.watch(
                rt,
                "v1" if events_v1 else target.version,
                target.namespace,
                options,
                watch_options,
                send_initial_events=send_initial,
                render=render,
            )
        except APIError as err:
            if err.code != 410:
                raise
            # As the real server does, an expired resourceVersion is an ERROR event in a
            # successful watch response, not an HTTP error.
            expired_line = event_line(ERROR, err.status())

            async def expired() -> AsyncIterator[bytes]:
                yield expired_line

            return _StreamResponse(StreamingBody(expired(), headers=headers, on_close=lambda: None))
        return _StreamResponse(
            StreamingBody(stream.lines(), headers=headers, on_close=stream.close)
        )

    async def _delete_options(self, request: Request) -> tuple[DeleteOptions, bool]:
        """The options of a DELETE (query parameters, then the body's DeleteOptions), and
        whether the body asked for a dry run."""
        query = request.query_params
        grace = _int_param(query.get("gracePeriodSeconds"), "gracePeriodSeconds")
        policy = query.get("propagationPolicy")
        uid = rv = None
        dry_run = False
        raw = await request.body()
        if raw.strip():
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as err:
                raise errors.bad_request(f"invalid DeleteOptions: {err}") from err
            if isinstance(body, dict):
                if isinstance(body.get("gracePeriodSeconds"), int):
                    grace = body["gracePeriodSeconds"]
                if isinstance(body.get("propagationPolicy"), str):
                    policy = body["propagationPolicy"]
                preconditions = body.get("preconditions")
                if isinstance(preconditions, dict):
                    uid = preconditions.get("uid")
                    rv = preconditions.get("resourceVersion")
                dry_run = body.get("dryRun") == ["All"]
        if grace is not None and grace < 0:
            raise errors.invalid_object(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                [errors.invalid("gracePeriodSeconds", grace, "must be greater than or equal to 0")],
            )
        return DeleteOptions(grace, policy, uid, rv), dry_run


class _StreamResponse(Response):
    """A Starlette response wrapping the raw ASGI watch body."""

    def __init__(self, body: StreamingBody) -> None:
        super().__init__()
        self._body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._body(scope, receive, send)


def _verb(request: Request, target: Target) -> str:
    method = request.method
    has_name = bool(target.name)
    if method == "GET":
        if has_name:
            return "get"
        if target.watch_path or request.query_params.get("watch") in ("true", "1"):
            return "watch"
        return "list"
    if method == "POST":
        if target.subresource == "binding" and has_name:
            return "create"
        if has_name or (target.rt.namespaced and target.namespace is None):
            raise errors.method_not_allowed()
        return "create"
    if method == "PUT" and has_name:
        if target.subresource == "binding":
            raise errors.method_not_allowed()
        return "update"
    if method == "PATCH" and has_name:
        if target.subresource == "binding":
            raise errors.method_not_allowed()
        return "patch"
    if method == "DELETE":
        if target.subresource:
            raise errors.method_not_allowed()
        if has_name:
            return "delete"
        if "deletecollection" not in target.rt.verbs or (
            target.rt.namespaced and target.namespace is None
        ):
            raise errors.method_not_allowed()
        return "deletecollection"
    raise errors.method_not_allowed()


def _int_param(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as err:
        raise errors.bad_request(f'invalid value for {name}: "{value}"') from err


async def _body(request: Request, *, allow_list: bool = False) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise APIError(413, "RequestEntityTooLarge", "the request is too large", details={})
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise APIError(413, "RequestEntityTooLarge", "the request is too large", details={})
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if not allow_list and content_type not in _BODY_TYPES:
        # Protobuf (kubectl's typed clients: `kubectl create namespace`, `kubectl create
        # deployment`) and CBOR are not decoded here; JSON and YAML are.
        raise errors.unsupported_media_type(content_type, ("application/json", "application/yaml"))
    try:
        if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
            data = yaml.safe_load(raw)
        else:
            data = orjson.loads(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as err:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {err}") from err
    if isinstance(data, dict) or (allow_list and isinstance(data, list)):
        return data
    raise errors.bad_request("the body of the request must be a JSON object")
